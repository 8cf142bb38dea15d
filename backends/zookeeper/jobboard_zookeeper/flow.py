"""Flow control on ``zookeeper://`` (issue 27; the rules: :mod:`jobboard.board.limits`): the gate of a claim.

::

    <root>/flow/state          limits and pauses (one map); its data version is checked by EVERY claim
    <root>/flow/p-<group>      a group's permits; its data version moves with every permit taken or returned
    <root>/flow/p-<group>/<id> ephemeral: the permit of the claim of job <id> (data: its owner)
    <root>/flow/r-<group>      a rated group's window: the earlier grant times as data, the latest its mtime

**One atomic step, a permit is a claim.** A claim's multi (:meth:`Settler.claim
<jobboard_zookeeper.settle.Settler.claim>`) carries the :class:`Gate`'s ops with its own: ``check(state,
version)`` (a limit or pause written since this board read it fails the claim, which reads it again and
retries), and for a job with a group ``create(p-<group>/<id>, ephemeral)`` + ``set_data(p-<group>)``: every
live claim of a group is a permit (a limit set later counts them). A group with a concurrency limit or a
sequence checks that ``set_data`` at the version its count was read at; every permit taken or returned
moves the parent's version, so two claimers that read the same count cannot both take the last permit,
and a count this board cached is checked by its grant's multi (:meth:`Flow._capped`); the permit is an ephemeral node of the claimer's session,
deleted by the same multi as the lock by every settle, cancel and release (:attr:`Held.permit
<jobboard_zookeeper.settle.Held>`), and by the server with the session: it returns with its claim, a dead
owner's within the session timeout. A stale holder's settle fails on the job's version (its claim's
fence) before its ``delete(permit)`` applies; the permit is named by the job, so it is never another job's.

**Sequence.** A job is the head of its group when no job of the group with a lower sequence number is in
``jobs/`` or ``waiting/`` (listed after the group's permits are read); a sequence's cap of one permit makes
the check and the claim atomic against other claims. A job of the group whose write lands after the
claim but whose id is lower (ids are allocated before the write: two posts racing), or one requeued
while the claim runs, can run after a later job: the order holds for posts that returned before.

**Rate.** A sliding window log in ``r-<group>``, updated with a version check in the claim's multi: grant
times are the server's clock (the node's mtime, set by the multi that grants); whether the window has
room is judged against this host's clock (``time.time()``), so a skew between the two moves a window's
edge by as much.

**Cost when unused.** The state is read at open and again only when its watch fires (a persistent
recursive watch on ``flow/``): a claim of a job no limit or pause concerns adds one ``check`` op to its
multi and no read (with a group, its permit's ``create``, and the settle its ``delete``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from jobboard.board.codec import MalformedEntry, Posting, decode_posting, decode_value, encode_value
from jobboard.board.limits import LimitSpec, Paused, Rate, limit_from, limit_record
from jobboard.errors import HeldBack
from jobboard_zookeeper.layout import Paths, is_job_id, sequence_of
from jobboard_zookeeper.ops import Check, Create, Delete, Op, SetData, Stat, TxnResult
from jobboard_zookeeper.reading import Session
from jobboard_zookeeper.zk import DELETED, ZooKeeper

logger = logging.getLogger(__name__)
NOT_PAUSED = Paused()


@dataclass(frozen=True, slots=True)
class FlowState:
    """The limits and pauses as stored in ``flow/state`` at ``version``."""

    version: int = -1
    limits: tuple[LimitSpec, ...] = ()
    paused: Paused = NOT_PAUSED

    @property
    def active(self) -> bool:
        """Whether any limit or pause exists."""
        return bool(self.limits or self.paused.board or self.paused.names)

    @property
    def used(self) -> bool:
        """Whether flow control was ever set on the board (the state was written)."""
        return self.version > 0

    def limit(self, group: str | None) -> LimitSpec | None:
        return None if group is None else next((each for each in self.limits if each.group == group), None)

    def encode(self) -> bytes:
        return encode_value({"limits": [limit_record(each) for each in self.limits], "board": self.paused.board,
                             "names": sorted(self.paused.names)}, what="flow state")

    @classmethod
    def decode(cls, data: bytes, version: int) -> FlowState:
        """:raises MalformedEntry: not a state map."""
        if not data:
            return cls(version)
        record = decode_value(data)
        try:
            limits = tuple(limit_from(each) for each in record["limits"])
            return cls(version, limits, Paused(bool(record["board"]), frozenset(map(str, record["names"]))))
        except (TypeError, KeyError, ValueError) as error:
            raise MalformedEntry(f"flow state is not readable: {error}") from None


@dataclass(frozen=True, slots=True)
class Gate:
    """What a granted claim adds to its multi, and its permit (deleted with its lock), if any."""

    ops: list[Op]
    permit: str | None = None
    granted: tuple[Callable[[TxnResult], None], ...] = ()
    """Told the claim's result once its multi applied (the permits' count, a rate's window, as written)."""


def returned(permit: str | None) -> list[Op]:
    """A claim's permit deleted, and its group's permits version moved (what a grant's check reads)."""
    return [] if permit is None else [Delete(permit), SetData(permit.rpartition("/")[0], b"", -1)]


def window_of(found: tuple[bytes, Stat] | None) -> list[float]:
    """A rate node's grant times, oldest first (earlier ones as data, the latest its mtime)."""
    if found is None or not found[0]:
        return []
    try:
        record = decode_value(found[0])
        return [*map(float, record["earlier"]), found[1].mtime] if record.get("granted") else []
    except (MalformedEntry, TypeError, KeyError, ValueError, AttributeError):
        return []


def window_data(earlier: list[float], *, granted: bool) -> bytes:
    return encode_value({"earlier": earlier, "granted": granted}, what="rate window")


class Flow:
    """The cached flow state of one board, kept by a watch, and the gate of its claims."""

    def __init__(self, session: Session, paths: Paths, notify: Callable[[], None]) -> None:
        self._session, self._paths, self._notify = session, paths, notify
        self.state = FlowState()
        self._stale = True
        self.groups: dict[str, str | None] = {}
        """Each job's group as read (a group never changes), for the sequences' heads and passing over held
        jobs unread (:meth:`Skips.passes_over_unread`)."""
        self._parents: set[str] = set()
        """Permits parents known to exist."""
        self._counts: dict[str, tuple[int, int]] = {}
        """Per permits parent: (data version, permits at most) as this board last wrote or read them."""
        self._dirty: set[str] = set()
        """Permits parents written since (by a watch event): their pair is read again unless the write was
        this board's own (its reply moves the pair)."""
        self._windows: dict[str, tuple[int, list[float]]] = {}
        """Per rated group's window node: (version, grant times) as this board last wrote it; a change
        reported by the watch drops it (this board's own write too: its reply sets it again)."""

    async def open(self, zk: ZooKeeper) -> None:
        """Create ``flow/state`` if missing, watch ``flow/`` and read the state (again after a reconnect)."""
        await zk.create_missing(self._paths.flow("state"))
        await zk.watch_tree(self._paths.dir("flow"), self._on_event)
        self.stale()  # (events may have been missed while disconnected)
        self._stale = False  # (an event while it is read sets it again)
        self._read(await zk.get(self._paths.flow("state")))

    def stale(self) -> None:
        """Read the state, the permits' counts and the rate windows again before their next use (a claim
        conflicted on them, or the state changed: a count is only checked against grants of its state)."""
        self._stale = True
        self._windows.clear()
        self._counts.clear()
        self._dirty.clear()

    def _on_event(self, kind: int, path: str) -> None:
        parent = path.rpartition("/")[0]
        if path == self._paths.flow("state"):
            self.stale()  # read again by the next gate (the claim's check catches any miss)
            self._notify()
        elif parent == self._paths.dir("flow"):  # a group's node: its permits or rate window written
            self._windows.pop(path, None)
            if path in self._counts:  # read again before its next use, unless it was this board's write
                self._dirty.add(path)
        elif kind == DELETED:  # a permit returned
            self._notify()

    async def refresh(self) -> FlowState:
        """The state, read again if it changed since it was last read."""
        if self._stale:
            self._stale = False
            self._read(await self._session().get(self._paths.flow("state")))
        return self.state

    def _read(self, found: tuple[bytes, Stat] | None) -> None:
        try:
            self.state = FlowState() if found is None else FlowState.decode(found[0], found[1].version)
        except MalformedEntry:
            assert found is not None
            logger.error("the flow-control state of %s is not readable: no limit or pause applies",
                         self._paths.root)
            self.state = FlowState(found[1].version)

    async def gate(self, job_id: str, posting: Posting, owner: str, skips: Skips | None = None) -> Gate | HeldBack:
        """The ops a claim of ``job_id`` adds to its multi, or why flow control holds it back now (a sequence's
        head, or its running, noted in ``skips`` for the rest of its pass)."""
        state = await self.refresh()
        ops: list[Op] = [Check(self._paths.flow("state"), state.version)]
        if state.active and state.paused.covers(posting.name):
            return HeldBack(f"job {job_id} ({posting.name}) is paused", why="paused")
        if posting.group is None:
            return Gate(ops)
        limit, permit = state.limit(posting.group), self._paths.permit(posting.group, job_id)
        granted: list[Callable[[TxnResult], None]] = []
        if limit is not None and (limit.sequence or limit.concurrency is not None):
            capped = await self._capped(job_id, posting.group, limit, owner, skips)
            if isinstance(capped, HeldBack):
                return capped
            ops += capped[0]
            granted.append(capped[1])
        else:  # every claim of a group is a permit, counted by a limit set later (nothing caps it now)
            await self._ensure_parent(posting.group)
            ops += [Create(permit, owner.encode(), ephemeral=True), SetData(self._paths.permits(posting.group), b"", -1)]
        if limit is not None and limit.rate is not None:
            rated = await self._rated(job_id, posting.group, limit.rate)
            if isinstance(rated, HeldBack):
                return rated
            ops.append(rated[0])
            granted.append(rated[1])
        return Gate(ops, permit, tuple(granted))

    def returned(self, permit: str, result: TxnResult) -> None:
        """A settle of this board that returned ``permit`` applied (``result``): its count follows."""
        parent = permit.rpartition("/")[0]
        written = next((version for op, version in zip(result.ops, result.versions, strict=True)
                        if isinstance(op, SetData) and op.path == parent), None)
        self._moved(parent, written, -1)

    def _moved(self, parent: str, written: int | None, delta: int) -> None:
        """This board's write moved ``parent`` to version ``written``: the cached pair follows if that write
        was the only one since it (the version says so), else it goes."""
        cached = self._counts.get(parent)
        if cached is not None and written is not None and written == cached[0] + 1:
            self._counts[parent] = (written, cached[1] + delta)
            self._dirty.discard(parent)  # (the watch's event of this very write)
        else:
            self._counts.pop(parent, None)

    async def _ensure_parent(self, group: str) -> None:
        """Create the group's permits parent unless this board knows it exists (it is never deleted)."""
        parent = self._paths.permits(group)
        if parent not in self._parents:
            await self._session().create_missing(parent)
            self._parents.add(parent)

    async def _capped(self, job_id: str, group: str, limit: LimitSpec, owner: str,
                      skips: Skips | None) -> tuple[list[Op], Callable[[TxnResult], None]] | HeldBack:
        """A permit's ops and what to remember once they applied, or why the group's permits hold ``job_id``
        back (its running count, or not a sequence's head).

        The (version, count) pair is this board's last (its last grant's or settle's, or read), read again
        when the watch reports another board's write of the parent. Every permit taken or returned moves the parent's version (a session's
        end only lowers the count), so the claim's ``set_data(parent, version)`` checks the pair: one behind
        makes the multi fail and the claim read again; a refusal is judged again on a fresh read."""
        parent = self._paths.permits(group)
        for fresh in (False, True):
            seen = None if fresh or parent in self._dirty else self._counts.get(parent)
            if seen is None:
                fresh, found = True, await self._session().get(parent)
                seen = None if found is None else (found[1].version, found[1].num_children)
                self._dirty.discard(parent)
                if seen is not None:
                    self._counts[parent] = seen
            held = await self._refusal(job_id, group, limit, seen, skips)
            if held is None or fresh:
                break
        if held is not None:
            return held
        assert seen is not None
        op = SetData(parent, b"", seen[0])

        def granted(result: TxnResult) -> None:
            self._moved(parent, result.versions[result.ops.index(op)], +1)

        return [op, Create(self._paths.permit(group, job_id), owner.encode(), ephemeral=True)], granted

    async def _refusal(self, job_id: str, group: str, limit: LimitSpec, seen: tuple[int, int] | None,
                       skips: Skips | None) -> HeldBack | None:
        running = 0 if seen is None else seen[1]
        if limit.sequence and (running or (head := await self._head(job_id, group)) != job_id):
            if skips is not None:
                if running:
                    skips.groups.add(group)
                else:
                    skips.heads[group] = head
            return HeldBack(f"job {job_id}: earlier jobs of sequence {group!r} are on the board", why="sequence")
        cap = 1 if limit.sequence and limit.concurrency is None else limit.concurrency
        assert cap is not None
        if running >= cap or seen is None:
            return HeldBack(f"job {job_id}: group {group!r} has {running} of its {cap} jobs running",
                            why="concurrency")
        return None

    async def _rated(self, job_id: str, group: str, rate: Rate) -> tuple[Op, Callable[[TxnResult], None]] | HeldBack:
        """The window's update and what to remember once it applied, or why the group's rate holds
        ``job_id`` back. The window is this board's last grant's if no other board wrote it since (its
        watch event drops it), else read: a window behind only makes the claim's multi fail and retry."""
        path = self._paths.rate(group)
        cached = self._windows.get(path)
        if cached is None:
            node = await self._session().get(path)
            cached = (-1 if node is None else node[1].version, window_of(node))
        version, times = cached
        recent = [at for at in times if at > time.time() - rate.period]
        if len(recent) >= rate.count:
            due = max(0.001, recent[-rate.count] + rate.period - time.time())
            return HeldBack(f"job {job_id}: group {group!r} used its rate of {rate}; next permit in {due:.3f}s",
                            why="rate", retry_after=due)
        earlier = recent[-(rate.count - 1):] if rate.count > 1 else []
        op = SetData(path, window_data(earlier, granted=True), version)

        def granted(result: TxnResult) -> None:
            index = result.ops.index(op)
            written, mtime = result.versions[index], result.mtimes[index] if result.mtimes else None
            if written is not None and mtime is not None:
                self._windows[path] = (written, [*earlier, mtime])

        return op, granted

    def remember(self, job_id: str, group: str | None) -> None:
        """Note ``job_id``'s group as read (:attr:`groups`, bounded: cleared past 100 000 jobs)."""
        if len(self.groups) > 100_000:
            self.groups.clear()
        self.groups[job_id] = group

    async def _head(self, job_id: str, group: str) -> str:
        """The first job of ``group`` on the board (listed now), ``job_id`` if none was posted before it."""
        zk, mine = self._session(), sequence_of(job_id)
        earlier: list[str] = []
        for directory in ("jobs", "waiting"):
            for path in self._paths.listed_dirs(directory):
                listed = await zk.children(path)
                earlier += [f"{path}/{name}" for name in (listed[0] if listed else [])
                            if is_job_id(name) and sequence_of(name) < mine]
        known = {name: self.groups[name] for path in earlier if (name := path.rsplit("/", 1)[1]) in self.groups}
        unknown = [path for path in earlier if path.rsplit("/", 1)[1] not in known]
        for path, node in zip(unknown, await zk.get_many(unknown) if unknown else [], strict=True):
            if node is not None:  # the cache may be cleared meanwhile: ``known`` keeps what this check read
                name = path.rsplit("/", 1)[1]
                known[name] = group_of(node[0])
                self.remember(name, known[name])
        ours = [name for name, its_group in known.items() if its_group == group]
        return min(ours, key=sequence_of) if ours else job_id


def group_of(raw: bytes) -> str | None:
    try:
        return decode_posting(raw).group
    except MalformedEntry:
        return None


class Skips:
    """What one pass over the candidates (a ``claim_next`` call, a round of ``wait``) learnt of flow control:
    the groups it holds back (at their concurrency or rate, or a sequence running), each sequence's head
    (its other jobs wait), and the next rate permit due. Judged once per group, not per job."""

    def __init__(self, flow: Flow) -> None:
        self._flow = flow
        self.groups: set[str] = set()
        self.heads: dict[str, str] = {}
        self.due: float | None = None
        """Seconds until the earliest rate permit a held-back job waits for."""
        self.whys: set[str] = set()
        """Why the jobs this pass was refused were held back (what a ``claim_next`` passed over)."""

    def passes_over(self, job_id: str, posting: Posting) -> bool:
        """Whether this pass already knows flow control holds ``job_id`` back (no I/O); its group is
        remembered (:meth:`passes_over_unread`)."""
        self._flow.remember(job_id, posting.group)
        return self._held(job_id, posting.group)

    def passes_over_unread(self, job_id: str) -> bool:
        """Whether this pass knows flow control holds ``job_id`` back without reading it: its group, once read,
        is known (a job's group never changes), so a rate-held group's jobs are not read one by one."""
        return self._held(job_id, self._flow.groups.get(job_id))

    def _held(self, job_id: str, group: str | None) -> bool:
        return group is not None and (group in self.groups or self.heads.get(group, job_id) != job_id)

    def note(self, group: str | None, refusal: HeldBack) -> None:
        """Remember a refusal of a job of ``group``."""
        self.whys.add(refusal.why)
        if refusal.retry_after is not None:
            self.due = refusal.retry_after if self.due is None else min(self.due, refusal.retry_after)
        if group is not None and refusal.why in ("concurrency", "rate"):
            self.groups.add(group)

    async def held(self, job_id: str, posting: Posting) -> bool:
        """Whether flow control holds ``job_id`` back now (read as a claim's gate is, without claiming)."""
        if self.passes_over(job_id, posting):
            return True
        gate = await self._flow.gate(job_id, posting, "", self)
        if not isinstance(gate, HeldBack):
            return False
        self.note(posting.group, gate)
        return True
