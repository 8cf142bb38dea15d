"""The ZooKeeper session: with :mod:`.zk_session` (its state changes) and its wire modules
(:mod:`.zk_protocol`, :mod:`.fastwire`), the only code touching aiozk (0.32); every other module uses
this class's public methods.

It sends every request itself, so aiozk's silent re-send of a write after a
lost reply never happens: a write whose reply is lost raises
:class:`OutcomeUnknown` and the caller reads back what happened. Reads are
retried after a reconnect. It also gives multi-transactions with per-operation
results, explicit versions (aiozk's stat cache is never used), a watchdog that
notices a dead connection within ``ping_timeout``, session events, and digest
authentication that is re-sent on every connection before anything else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import aiozk
from aiozk import exc, protocol
from aiozk.states import States

from jobboard.errors import BackendUnavailable
from jobboard_zookeeper.fastwire import MultiReadRequest, MultiRequest, encode_acl
from jobboard_zookeeper.ops import Create, Op, OutcomeUnknown, Stat, TxnResult, ZkError
from jobboard_zookeeper.zk_protocol import (
    ANY_WATCHER,
    PERSISTENT_RECURSIVE,
    REFUSED_FOR,
    AddWatchRequest,
    AllChildrenNumberRequest,
    RemoveWatchesRequest,
    digest_acl,
    hook_connections,
    stat_of,
)
from jobboard_zookeeper.zk_session import SessionListener, SessionStates

logger = logging.getLogger(__name__)


NO_NODE = -101
TRANSIENT = {"ConnectionLoss", "OperationTimeout", "SessionExpired", "SessionMoved", "ZKSystemError"}
"""Server error replies that say nothing about the request itself."""
TreeCallback = Callable[[int, str], None]
"""Called with the event type (CREATED, DELETED, DATA_CHANGED) and the node's path."""
CREATED = protocol.WatchEvent.CREATED
DELETED = protocol.WatchEvent.DELETED
CHANGED = protocol.WatchEvent.DATA_CHANGED


class ZooKeeper:
    """A ZooKeeper session; see the module docstring."""

    def __init__(
        self, hosts: str, *, session_timeout: float, connect_timeout: float,
        ping_interval: float = 0.5, ping_timeout: float = 1.0,
        auth: tuple[str, str] | None = None,
    ) -> None:
        self._client = aiozk.ZKClient(hosts, session_timeout=session_timeout, read_timeout=ping_timeout * 3)
        self._session = self._client.session
        self.connect_timeout = connect_timeout
        self._ping_interval = min(ping_interval, session_timeout / 3)  # it keeps the session alive
        self._ping_timeout = ping_timeout
        self._auth = auth
        self.acl = digest_acl(*auth) if auth else [protocol.UNRESTRICTED_ACCESS]
        self._acl_bytes = encode_acl(self.acl)
        self._closing = False
        self._watchdog: asyncio.Task[None] | None = None
        self._trees: dict[str, TreeCallback] = {}
        self.requests_sent = 0
        """Requests sent on this session (for benchmarks: requests per claim)."""
        self.events_received = 0
        """Watch notifications received (for benchmarks: notifications per job)."""
        self._states = SessionStates(self._session, self._send_auth if auth else None)
        self._hook_event_dispatch()
        self.connect_failures = hook_connections(self._session, ping_timeout, lambda: self._closing)
        # The watchdog is the only pinger: aiozk keys pending pings by one special xid, so a
        # second ping in flight (its heartbeat and ours) makes its read loop die on a KeyError.
        self._session.set_heartbeat = lambda: None

    # -- lifecycle ---------------------------------------------------------

    async def start(self) -> None:
        """Connect; :raises BackendUnavailable: no server answered within ``connect_timeout`` or, when it is
        the default (the session timeout), every server refused every connection for :data:`REFUSED_FOR` s."""
        patience = REFUSED_FOR if self.connect_timeout == self._session.timeout else None
        try:
            await self.connect_failures.connected(self._client.start(), self.connect_timeout, patience)
        except (TimeoutError, OSError, exc.ZKError) as error:
            await self.close()
            raise self.connect_failures.unreachable(self.connect_timeout, error) from error
        self.connect_failures.warn = False
        self._watchdog = asyncio.create_task(self._watch_connection())

    async def close(self) -> None:
        """End the session (ephemeral nodes go at once); bounded by ``ping_timeout``, 0 when disconnected."""
        self._closing = self._states.closing = True
        if self._watchdog:
            self._watchdog.cancel()
        try:
            await asyncio.wait_for(self._client.close(), self._ping_timeout * 2 if self.connected else 0)
        except (TimeoutError, exc.ZKError, OSError, AttributeError):
            logger.debug("closing the ZooKeeper session timed out; dropping the connection")
            self._abort_connection()

    @property
    def hosts(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self._session.hosts)

    @property
    def session_id(self) -> int | None:
        return self._states.session_id

    @property
    def connected(self) -> bool:
        return bool(self._session.state == States.CONNECTED)

    def add_session_listener(self, listener: SessionListener) -> None:
        self._states.listeners.append(listener)

    # -- session events ------------------------------------------------------

    def _hook_event_dispatch(self) -> None:
        original = self._session.event_dispatch

        def event_dispatch(event: Any) -> None:
            self.events_received += 1
            if event.type:
                for prefix, callback in self._trees.items():
                    if event.path.startswith(prefix):
                        callback(event.type, event.path)
                        return  # not aiozk's: its dispatch would add an empty callback entry per
                        # node, which grows forever and is re-sent as one SetWatches on reconnect
            original(event)

        self._session.event_dispatch = event_dispatch

    def _send_auth(self) -> None:
        assert self._auth is not None
        user, password = self._auth
        request = protocol.AuthRequest(type=0, scheme="digest", auth=f"{user}:{password}".encode())
        self._session.conn.send(request)

    async def _watch_connection(self) -> None:
        """Ping often; a ping unanswered within ``ping_timeout`` drops the connection."""
        while not self._closing:
            await asyncio.sleep(self._ping_interval)
            if self._session.state != States.CONNECTED:
                continue
            try:
                await asyncio.wait_for(self._session.conn.send(protocol.PingRequest()), self._ping_timeout)
                self._states.last_contact = asyncio.get_running_loop().time()
            except (TimeoutError, exc.ConnectError, ConnectionError):
                logger.warning("ZooKeeper ping unanswered for %.1fs: dropping the connection",
                               self._ping_timeout)
                self._abort_connection()

    def _abort_connection(self) -> None:
        conn = self._session.conn
        if conn is None:
            return
        conn.abort()
        writer = getattr(conn, "writer", None)
        if writer is not None:
            writer.transport.abort()
        if self._session.state == States.CONNECTED:
            self._session.state.transition_to(States.SUSPENDED)

    # -- sending ---------------------------------------------------------------

    async def _send(self, request: Any, *, retry: bool) -> tuple[int, Any]:
        """Send once per connection; reads (``retry``) are re-sent after a reconnect.

        :raises OutcomeUnknown: a write's connection broke before its reply.
        :raises BackendUnavailable: not connected again within ``connect_timeout``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        while True:
            await self._until_connected(deadline - loop.time())
            session = self._session
            session.xid = 1 if session.xid >= 0x7FFFFFFF else session.xid + 1
            self.requests_sent += 1
            try:
                zxid, response = await session.conn.send(request, xid=session.xid)
            except (exc.ConnectError, exc.TimeoutError, ConnectionError) as error:
                self._abort_connection()
                if not retry:
                    raise OutcomeUnknown(f"connection to ZooKeeper lost during a write: {error!r}") from error
                continue
            session.last_zxid = zxid
            self._states.last_contact = asyncio.get_running_loop().time()
            return zxid, response

    async def _until_connected(self, remaining: float) -> None:
        if self._closing:
            raise BackendUnavailable("the ZooKeeper client is closed")
        if self._session.state == States.CONNECTED:
            return
        try:
            await asyncio.wait_for(self._session.state.wait_for(States.CONNECTED), max(remaining, 0.0))
        except TimeoutError:
            raise BackendUnavailable(
                f"not connected to ZooKeeper ({self.hosts}) within {self.connect_timeout:.1f}s"
            ) from None

    async def _call(self, request: Any, *, retry: bool) -> tuple[int, Any]:
        try:
            return await self._send(request, retry=retry)
        except exc.ResponseError as error:
            code, path = type(error).__name__, getattr(request, "path", "?")
            if code in TRANSIENT:  # the server could not answer: as if the connection broke
                failure = BackendUnavailable if retry else OutcomeUnknown
                raise failure(f"ZooKeeper {code} on {path}") from error
            raise ZkError(code, path) from error

    # -- operations --------------------------------------------------------------

    async def _read(self, request: Any) -> tuple[int, Any] | None:
        """A read of one node (sent again after a lost connection): the zxid and the reply, or ``None`` if
        the node does not exist. :raises ZkError: any other error reply."""
        try:
            return await self._call(request, retry=True)
        except ZkError as error:
            if error.code == "NoNode":
                return None
            raise

    async def get(self, path: str, *, watch: bool = False) -> tuple[bytes, Stat] | None:
        """The node's data and stat, or ``None`` if it does not exist."""
        found = await self._read(protocol.GetDataRequest(path=path, watch=watch))
        return None if found is None else (found[1].data or b"", stat_of(found[1].stat))

    async def children(self, path: str, *, watch: bool = False) -> tuple[list[str], int] | None:
        """The node's children and the zxid of the read, or ``None`` if it does not exist."""
        found = await self._read(protocol.GetChildrenRequest(path=path, watch=watch))
        return None if found is None else (list(found[1].children), found[0])

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, Stat] | None]:
        """Several nodes' data and stat in one request (``multiRead``); ``None`` for a missing node."""
        _, response = await self._call(MultiReadRequest(paths), retry=True)
        for path, result in zip(paths, response.results, strict=True):
            if isinstance(result, int) and result != NO_NODE:
                raise ZkError(type(exc.get_response_error(result)).__name__, path)
        return [None if isinstance(result, int) else result for result in response.results]

    async def exists(self, path: str, *, watch: bool = False) -> Stat | None:
        found = await self._read(protocol.ExistsRequest(path=path, watch=watch))
        return None if found is None else stat_of(found[1].stat)

    async def sync(self, path: str) -> None:
        """Bring this server up to date with the leader, so that the next read sees every
        write applied before now (a lost write's reply is resolved after one)."""
        await self._call(protocol.SyncRequest(path=path), retry=True)

    async def bump(self, path: str) -> Stat:
        """Increment the node's data version (a server-side counter); returns its new stat
        (``version``, and ``mtime``: the server's clock now).

        A replay after a lost reply only skips a number, so this is retried.
        """
        request = protocol.SetDataRequest(path=path, data=b"", version=-1)
        _, response = await self._call(request, retry=True)
        return stat_of(response.stat)

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents as persistent nodes if missing."""
        parts = [part for part in path.split("/") if part]
        for index in range(1, len(parts) + 1):
            node = "/" + "/".join(parts[:index])
            if await self.exists(node) is None:
                await self.create_missing(node)

    async def create_missing(self, node: str) -> None:
        """Create the persistent ``node`` (its parent exists) unless it exists. :raises ZkError:"""
        failure = (await self.multi([Create(node)], retry_safe=True)).failure()
        if failure and failure[1] != "NodeExists":
            raise ZkError(failure[1], node)

    async def multi(self, ops: Sequence[Op], *, retry_safe: bool = False) -> TxnResult:
        """Run ``ops`` as one transaction: all apply or none do.

        :param retry_safe: re-send after a lost reply (only for idempotent multis).
        :raises OutcomeUnknown: the reply was lost (unless ``retry_safe``).
        """
        zxid, response = await self._call(MultiRequest(ops, self._acl_bytes, self.acl), retry=retry_safe)
        errors, versions, mtimes = [], [], []
        for item in response.responses:
            failed = isinstance(item, BaseException) or (isinstance(item, type) and issubclass(item, Exception))
            errors.append((item.__name__ if isinstance(item, type) else type(item).__name__) if failed else None)
            stat = None if failed else getattr(item, "stat", None)
            versions.append(int(stat.version) if stat is not None else None)
            mtimes.append(int(stat.modified) / 1000 if stat is not None else None)
        return TxnResult(tuple(ops), tuple(errors), tuple(versions), zxid, ok=errors.count(None) == len(errors),
                         mtimes=tuple(mtimes))

    # -- watches -----------------------------------------------------------------

    async def watch_tree(self, path: str, callback: TreeCallback) -> None:
        """Call ``callback(type, path)`` for every change under ``path``, in server order.

        A persistent recursive watch: one event per created, deleted or changed node, delivered before
        the reply to the write that caused it. The server forgets it when the connection drops: call
        this again after every reconnect (and resynchronise, since changes in between were missed).
        """
        self.route(path, callback)
        await self.add_watch(path)

    def route(self, prefix: str, callback: TreeCallback) -> None:
        """Deliver watch events under ``prefix`` to ``callback`` (without asking the server for any)."""
        self._trees[prefix.rstrip("/") + "/"] = callback

    async def add_watch(self, path: str) -> None:
        """A persistent recursive watch on ``path``; its events go where :meth:`route` says."""
        await self._call(AddWatchRequest(path=path, mode=PERSISTENT_RECURSIVE), retry=True)

    async def remove_watches(self, path: str) -> None:
        """Remove this session's watches on ``path`` (none there: nothing happens)."""
        try:
            await self._call(RemoveWatchesRequest(path=path, type=ANY_WATCHER), retry=True)
        except ZkError as error:
            if error.code not in ("NoWatcher", "NoNode"):
                raise

    async def descendants(self, path: str) -> int:
        """How many nodes are below ``path``, at any depth (one request, whatever their number)."""
        _, response = await self._call(AllChildrenNumberRequest(path=path), retry=True)
        return int(response.number)
