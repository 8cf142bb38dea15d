"""``zookeeper://[user:password@]host1:2181,host2:2181/root/path?option=value``."""

from __future__ import annotations

from dataclasses import dataclass

from jobboard.board.inputs import DEFAULT_RESULT_TTL, DEFAULT_TRASH_TTL
from jobboard.board.url import non_negative_float, parse_options, parse_url, positive_float, positive_int
from jobboard.errors import InvalidURL

DEFAULT_ROOT = "/jobboard"
JUTE_MAXBUFFER = 1024 * 1024
RESERVED_BYTES = 4096
"""Room kept below jute.maxbuffer for the request's own framing and paths."""
REQUEST_FRAMING = 512
"""Room kept below jute.maxbuffer for a settle's framing (its operations are counted one by one)."""


@dataclass(frozen=True, slots=True)
class ZooKeeperOptions:
    """Typed options of a zookeeper:// board URL."""

    hosts: str
    root: str = DEFAULT_ROOT
    session_timeout: float = 10.0
    """Seconds without contact after which the server expires the session (and its claims)."""
    connect_timeout: float | None = None
    """Seconds an operation waits for a (re)connection before BackendUnavailable
    (default: the session timeout)."""
    ping_interval: float = 0.5
    ping_timeout: float = 1.0
    """A ping unanswered this long marks the connection dead (prompt detection)."""
    jute_maxbuffer: int = JUTE_MAXBUFFER
    """The servers' jute.maxbuffer: the largest node (and request) they accept."""
    max_attempts: int | None = None
    key_retention: float = 86400.0
    """Seconds a settled job's idempotency key keeps finding it."""
    result_ttl: float = DEFAULT_RESULT_TTL
    """Seconds a kept result stays (0: forever)."""
    trash_ttl: float = DEFAULT_TRASH_TTL
    """Seconds a trashed job stays in the trash (0: forever)."""
    partitions: int | None = None
    """Split jobs/, waiting/ and locks/ into this many partitions when the board is created
    (see :mod:`jobboard_zookeeper.partitions`); ``None``: the layout the board was created with."""
    username: str | None = None
    password: str | None = None

    @property
    def auth(self) -> tuple[str, str] | None:
        return (self.username, self.password or "") if self.username else None

    @property
    def max_posting_bytes(self) -> int:
        return self.jute_maxbuffer - RESERVED_BYTES

    @property
    def max_request_bytes(self) -> int:
        """The largest settle transaction: a posting fits with room for a trash record's extras."""
        return self.jute_maxbuffer - REQUEST_FRAMING


MAX_PARTITIONS = 1024


def partition_count(text: str) -> int:
    value = positive_int(text)
    if value > MAX_PARTITIONS:
        raise ValueError(f"at most {MAX_PARTITIONS} partitions")
    return value


CONVERTERS = {
    "session_timeout": positive_float, "connect_timeout": positive_float,
    "ping_interval": positive_float, "ping_timeout": positive_float,
    "jute_maxbuffer": positive_int, "max_attempts": positive_int, "key_retention": non_negative_float,
    "result_ttl": non_negative_float, "trash_ttl": non_negative_float, "partitions": partition_count,
}


def parse_zookeeper_url(url: str) -> ZooKeeperOptions:
    """:raises InvalidURL: no host, a host without a valid port, or an unknown option."""
    parsed = parse_url(url)
    if not parsed.hosts:
        raise InvalidURL(f"{url!r} names no ZooKeeper host (zookeeper://host:2181/path)")
    for host in parsed.hosts:
        _, _, port = host.rpartition(":")
        if ":" in host and not (port.isdigit() and 0 < int(port) < 65536):
            raise InvalidURL(f"bad port in host {host!r} of {url!r}")
    root = parsed.path.rstrip("/") or DEFAULT_ROOT
    options = parse_options(parsed, CONVERTERS)
    return ZooKeeperOptions(hosts=parsed.host_string, root=root, username=parsed.username,
                            password=parsed.password, **options)
