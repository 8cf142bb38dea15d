"""``redis://[user:password@]host:port/db/<board-root>?option=value`` (``rediss://`` for TLS);
``redis://host:port,host:port/0/<board-root>?cluster=1`` for a Redis Cluster (the hosts are seed nodes)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobboard.board.inputs import DEFAULT_RESULT_TTL, DEFAULT_TRASH_TTL
from jobboard.board.url import COMMON_OPTIONS, parse_options, parse_url, positive_float
from jobboard.errors import InvalidURL

logger = logging.getLogger(__name__)

DEFAULT_ROOT = "jobboard"
DEFAULT_PORT = 6379


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """Typed options of a redis:// board URL."""

    host: str
    port: int = DEFAULT_PORT
    db: int = 0
    root: str = DEFAULT_ROOT
    tls: bool = False
    session_timeout: float = 10.0
    """Seconds without an acknowledged heartbeat after which this board's claims are released."""
    connect_timeout: float | None = None
    """Seconds an operation keeps retrying a lost connection before BackendUnavailable
    (default: the session timeout)."""
    reply_timeout: float | None = None
    """Seconds a connection may leave a command unanswered before it is dropped and the command sent again
    (default: :attr:`reply_wait`)."""
    max_attempts: int | None = None
    key_retention: float = 86400.0
    result_ttl: float = DEFAULT_RESULT_TTL
    """Seconds a kept result stays (0: forever)."""
    trash_ttl: float = DEFAULT_TRASH_TTL
    """Seconds a trashed job stays in the trash (0: forever)."""
    max_posting_bytes: int = 1024 * 1024
    sentinels: tuple[tuple[str, int], ...] = ()
    """With ``sentinel=<service>``: the Sentinels (the URL's hosts) that name the primary."""
    sentinel: str | None = None
    durability: str = "default"
    """``strict``: refuse a server without ``appendfsync always``; wait for a replica (``WAIT``)."""
    cluster: bool = False
    """``cluster=1``: the hosts are seed nodes of a Redis Cluster; the board's slot's master is found and followed."""
    seeds: tuple[tuple[str, int], ...] = ()
    """With ``cluster=1``: the URL's hosts."""
    partitions: int = 1
    """With ``cluster=1``: the board spread over this many slots, one partition each (:mod:`.spread`)."""
    order: str = "home"
    """A spread board's claims: ``home`` (its home partition first) or ``exact`` (the best head on the board)."""
    linger: float = 0.0
    """Seconds a command waits for others to go in the same write (0: none; see :data:`MAX_LINGER`)."""
    username: str | None = None
    password: str | None = None

    @property
    def prefix(self) -> str:
        """Every key of the board starts with this; the braces make it one Cluster hash slot."""
        return f"jb:{{{self.root}}}:"

    @property
    def retry_window(self) -> float:
        return self.connect_timeout or self.session_timeout

    @property
    def reply_wait(self) -> float:
        """The reply timeout: the option, else a quarter of the session timeout, so that a frozen server (or
        Cluster master) is given up with time left to renew the session elsewhere; but 2 s at least (a loaded
        server is not given up for a frozen one), and never more than the session timeout."""
        return self.reply_timeout or max(self.session_timeout / 4, min(self.session_timeout, 2.0))

    @property
    def nonce_ms(self) -> int:
        """How long the server remembers an applied write: twice the retry window, plus 10 s."""
        return int((2 * self.retry_window + 10) * 1000)


def flag(text: str) -> bool:
    if text not in ("0", "1", "no", "yes", "false", "true"):
        raise ValueError("must be 1 or 0 (yes/no, true/false)")
    return text in ("1", "yes", "true")


def partitions(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise ValueError("must be a whole number from 1 to 64")
    return int(text)


def order(text: str) -> str:
    if text not in ("home", "exact"):
        raise ValueError("must be home or exact")
    return text


MIN_REPLY_TIMEOUT = 0.1
"""The shortest ``reply_timeout`` accepted: a shorter one drops every connection whose server takes longer."""


def seconds(text: str) -> float:
    """``text`` as a number of seconds; NaN when it is none (every range check then fails)."""
    try:
        return float(text)
    except ValueError:
        return float("nan")


def reply_timeout(text: str) -> float:
    value = seconds(text)
    if not value >= MIN_REPLY_TIMEOUT:  # (nan too)
        raise ValueError(f"must be a number of seconds, at least {MIN_REPLY_TIMEOUT:g} (a shorter one drops every "
                         f"connection whose server takes longer to answer)")
    return value


MAX_LINGER = 0.1
"""The longest ``linger`` accepted: every call waits up to it."""


def linger(text: str) -> float:
    value = seconds(text)
    if not 0 <= value <= MAX_LINGER:  # (nan too)
        raise ValueError(f"must be a number of seconds from 0 to {MAX_LINGER:g} (each call waits up to it)")
    return value


def durability(text: str) -> str:
    if text not in ("default", "strict", "relaxed"):
        raise ValueError("must be default, strict or relaxed")
    return text


CONVERTERS: dict[str, Callable[[str], Any]] = {
    "durability": durability, "sentinel": str, "cluster": flag, "partitions": partitions, "order": order,
    **COMMON_OPTIONS, "session_timeout": positive_float, "connect_timeout": positive_float,
    "reply_timeout": reply_timeout, "linger": linger,
}


def parse_redis_url(url: str) -> RedisOptions:
    """:raises InvalidURL: no host or several, a bad port or database, an unknown option, a bad value (e.g. a
        ``reply_timeout`` not a number, under 0.1 s or over ``session_timeout``)."""
    parsed = parse_url(url)
    if not parsed.hosts or (len(parsed.hosts) > 1 and not {"sentinel", "cluster"} & set(parsed.query)):
        raise InvalidURL(f"{url!r} must name one Redis host (redis://host:6379/0/board), Sentinels "
                         f"with ?sentinel=<service>, or Cluster nodes with ?cluster=1")
    hosts = tuple(_host_port(host, url) for host in parsed.hosts)
    host, port = hosts[0]
    db_text, _, root = parsed.path.strip("/").partition("/")
    if db_text and not db_text.isdigit():
        raise InvalidURL(f"bad database {db_text!r} in {url!r} (redis://host:port/<db>/<board-root>)")
    root = root.strip("/") or DEFAULT_ROOT
    if "{" in root or "}" in root:
        raise InvalidURL(f"board root {root!r} of {url!r} may not contain braces")
    options = parse_options(parsed, CONVERTERS)
    if "sentinel" in options:
        options["sentinels"] = hosts
    if options.get("cluster"):
        if "sentinel" in options or int(db_text or 0):
            raise InvalidURL(f"{url!r}: a Redis Cluster has no Sentinels and only database 0")
        options["seeds"] = hosts
    elif options.get("partitions", 1) > 1:
        raise InvalidURL(f"{url!r}: partitions spread a board over a Redis Cluster's shards: they need ?cluster=1")
    elif len(hosts) > 1 and "sentinel" not in options:
        raise InvalidURL(f"{url!r} names several hosts: Sentinels need ?sentinel=<service>, Cluster nodes ?cluster=1")
    typed = RedisOptions(host=host, port=port, db=int(db_text or 0), root=root,
                         tls=parsed.scheme == "rediss", username=parsed.username, password=parsed.password,
                         **options)
    _check_reply_timeout(typed)
    return typed


def _check_reply_timeout(typed: RedisOptions) -> None:
    """:raises InvalidURL: ``reply_timeout`` over ``session_timeout``; over 2/3 of it less 0.5 s: a warning
    (a heartbeat waiting that long for a frozen server or Cluster master may outlive the session)."""
    reply, session = typed.reply_timeout, typed.session_timeout
    if reply is not None and reply > session:
        raise InvalidURL(f"bad value for option reply_timeout={reply:g}: must be at most session_timeout "
                         f"({session:g}): a frozen server would cost the session first")
    if reply is not None and reply > 2 / 3 * session - 0.5:
        logger.warning("reply_timeout=%g is over 2/3 of session_timeout=%g less 0.5 s: a frozen server or Cluster "
                       "master may cost the sessions (docs/backends/redis.md, 'A frozen master')", reply, session)


def _host_port(text: str, url: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host:
        host, port = port, str(DEFAULT_PORT)
    if not port.isdigit():
        raise InvalidURL(f"bad port in {text!r} of {url!r}")
    return host, int(port)
