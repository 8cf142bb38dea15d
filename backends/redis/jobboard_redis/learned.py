"""What the board learns from the Redis server it talks to: asked again at every (re)connection.

A board may talk to several servers over its life (a restart, a Sentinel failover, a primary
demoted by ``SENTINEL FAILOVER``), and they need not agree: one may have a replica and the next
none, one ``appendfsync always`` and the next not. So nothing learned from one server is kept for
the next. Every new connection of the board's calls asks its server, in the same round trip as
``AUTH`` and ``SELECT``: ``INFO server``, ``INFO memory``, ``INFO persistence``, ``ROLE`` and, under
``durability=strict``, ``CONFIG GET append*``. :func:`judge` reads the replies: an unusable server
is refused with one line, a risky one is warned about, and the replicas a strict board waits for
are counted. (The board's Redis function is not learned: a call that finds the server without it
loads it there, whatever server that is.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobboard.errors import JobBoardError
from jobboard_redis.client_wire import Arg

MIN_VERSION = (7, 0)

__all__ = ["MIN_VERSION", "Learned", "check_version", "judge", "questions", "replicas_of"]


@dataclass(frozen=True, slots=True)
class Learned:
    """One server's answers: the replicas in sync with it (a primary's), and what to warn about."""

    replicas: int
    warnings: tuple[str, ...]


def questions(strict: bool) -> list[list[Arg]]:
    """The commands that ask a new connection's server what :func:`judge` reads."""
    asked: list[list[Arg]] = [["INFO", "server"], ["INFO", "memory"], ["INFO", "persistence"], ["ROLE"]]
    return [*asked, ["CONFIG", "GET", "append*"]] if strict else asked


def judge(replies: Sequence[Any], *, server: str, durability: str) -> Learned:
    """Read the replies to :func:`questions` (same order), for the board's ``durability`` option
    (``relaxed``: a server without appendonly is not warned of).

    :raises JobBoardError: Redis older than 7.0, evicting keys, or (``strict``) not fsyncing every write.
    """
    server_info, memory, persistence = (_info(reply) for reply in replies[:3])
    check_version(server_info.get("redis_version", "0.0"))
    policy = memory.get("maxmemory_policy", "unknown")
    if policy != "noeviction":
        raise JobBoardError(f"{server}: maxmemory-policy is {policy}: evicted job keys would be lost jobs; "
                            f"set maxmemory-policy noeviction")
    appendonly = persistence.get("aof_enabled") == "1"
    if durability == "strict":
        settings = _pairs(replies[4])
        if settings.get("appendonly") != "yes" or settings.get("appendfsync") != "always":
            raise JobBoardError(f"{server}: durability=strict needs appendonly yes and appendfsync always; the "
                                f"server has appendonly {settings.get('appendonly')}, appendfsync "
                                f"{settings.get('appendfsync')}")
        appendonly = True
    elif persistence.get("loading") == "1":  # INFO says aof_enabled:0 while an AOF loads at start-up
        appendonly = True
    off = f"{server} has appendonly off: acknowledged posts and settles since the last snapshot (if any) are lost"
    warnings = () if appendonly or durability == "relaxed" else (f"{off} if it stops",)
    return Learned(replicas=replicas_of(replies[3]), warnings=warnings)


def replicas_of(role: Any) -> int:
    """The replicas in sync with a primary, from its ``ROLE`` reply (0 for a replica or a Sentinel)."""
    if not isinstance(role, list) or not role or role[0] != b"master":
        return 0
    return len(role[2]) if len(role) > 2 and isinstance(role[2], list) else 0


def check_version(version_text: str) -> None:
    """:raises JobBoardError: the server's version is older than 7.0 (no Redis functions)."""
    try:
        version = tuple(int(part) for part in version_text.split(".")[:2])
    except ValueError:
        version = (0, 0)
    if version < MIN_VERSION:
        raise JobBoardError(f"Redis {version_text} is too old for redis:// boards: 7.0 or newer is needed")


def _info(reply: Any) -> dict[str, str]:
    lines = _text(reply).splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line and not line.startswith("#"))


def _pairs(reply: Any) -> dict[str, str]:
    items = reply if isinstance(reply, list) else []
    return {_text(key): _text(value) for key, value in zip(items[::2], items[1::2], strict=True)}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
