"""Flow control on a ``memory://`` board: limits per group, pauses, and the permits in use.

Owned by the board's :class:`~jobboard_memory.store.Store`, which tells it every claim that begins or ends
and every grouped job that joins or leaves the board; like the store's, its methods never await, so a
check and the claim that follows it are one atomic step on the event loop. A permit is a live claim:
``running`` counts claims, and the store's release, consume and trash end them, whoever triggers them
(a settle, a cancel, the holder's board closing). Rates keep the monotonic times of the last grants
(a sliding window log, see :mod:`jobboard.board.limits`).

``claim_next`` does not look at a held-back job again and again: :meth:`Flow.park` keeps its heap item
aside under what holds it back (its group, or its paused name), and the change that may free it (a
permit back, a job of the group gone, the limit changed, a resume, the next rate permit due) puts the
items back in the heap.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobboard.board.limits import GroupLimit, LimitSpec, Paused
from jobboard.errors import HeldBack
from jobboard.job import JobState

if TYPE_CHECKING:
    from jobboard_memory.store import Entry

Item = tuple[int, int, str]
"""A ready-heap item: priority rank, sequence, job id."""


class Flow:
    """The limits, pauses, permits and parked heap items of one memory board."""

    def __init__(self, ready: list[Item]) -> None:
        self.active = False
        """Whether any limit or pause exists: the claim paths consult the flow only then."""
        self.limits: dict[str, LimitSpec] = {}
        self.paused_board = False
        self.paused_names: set[str] = set()
        self.running: Counter[str] = Counter()
        """Live claims per group (every group, limited or not: a limit set later counts them at once)."""
        self.members: dict[str, dict[str, Entry]] = {}
        """The jobs of each group on the board, in posting order (a sequence's head first)."""
        self._windows: dict[str, deque[float]] = {}
        """Per rated group: the monotonic times of its grants within the last period."""
        self._ready = ready
        self._parked: dict[tuple[str, str], list[Item]] = {}
        self._best: dict[tuple[str, str], dict[tuple[str, str], Item]] = {}
        """Per parking key: the best item parked for each (job name, why), for :meth:`parked_whys`."""
        self._rate_due: dict[str, float] = {}
        """Groups parked by their rate, and when (monotonic) their next permit is due."""

    # -- what the board stores -----------------------------------------------

    def set_limit(self, limit: LimitSpec) -> None:
        self.limits[limit.group] = limit
        self._changed(("group", limit.group))

    def clear_limit(self, group: str) -> bool:
        found = self.limits.pop(group, None) is not None  # its grants stay counted, should it be set again
        self._changed(("group", group))
        return found

    def pause(self, name: str | None) -> None:
        if name is None:
            self.paused_board = True
        else:
            self.paused_names.add(name)
        self._changed(None)

    def resume(self, name: str | None) -> None:
        if name is None:
            self.paused_board = False
        else:
            self.paused_names.discard(name)
        self._changed(None if name is None else ("name", name))

    def paused(self) -> Paused:
        return Paused(self.paused_board, frozenset(self.paused_names))

    def listed(self) -> list[GroupLimit]:
        """Every limit by group, with its running and unclaimed jobs."""
        return [GroupLimit.of(limit, self.running[group], sum(
            1 for entry in self.members.get(group, {}).values() if entry.state() is JobState.UNCLAIMED))
            for group, limit in sorted(self.limits.items())]

    def _changed(self, key: tuple[str, str] | None) -> None:
        self.active = bool(self.limits or self.paused_board or self.paused_names)
        if key is not None:
            self._unpark(key)

    # -- what the store tells it (only of grouped jobs) ---------------------

    def joined(self, entry: Entry) -> None:
        """A job of a group is on the board (posted, or requeued at its old place)."""
        group = entry.posting.group
        assert group is not None
        members = self.members.setdefault(group, {})
        last = next(reversed(members.values()), None)
        members[entry.job_id] = entry
        if last is not None and last.sequence > entry.sequence:
            self.members[group] = dict(sorted(members.items(), key=lambda item: item[1].sequence))

    def left(self, entry: Entry) -> None:
        """A job of a group left the board (consumed or trashed), its claim with it if it had one."""
        group = entry.posting.group
        assert group is not None
        members = self.members.get(group, {})
        members.pop(entry.job_id, None)
        if not members:
            self.members.pop(group, None)
        if entry.owner is not None:
            self.running[group] -= 1
        self._unpark(("group", group))

    def claimed(self, entry: Entry) -> None:
        """A claim of a job of a group began: one permit taken, one grant counted."""
        group = entry.posting.group
        assert group is not None
        self.running[group] += 1
        limit = self.limits.get(group)
        if limit is not None and limit.rate is not None:
            self._windows.setdefault(group, deque()).append(time.monotonic())

    def released(self, entry: Entry) -> None:
        """A claim of a job of a group ended with the job back on the board: its permit returns."""
        group = entry.posting.group
        assert group is not None
        self.running[group] -= 1
        self._unpark(("group", group))

    # -- claiming ------------------------------------------------------------

    def refusal(self, entry: Entry) -> HeldBack | None:
        """Why flow control holds ``entry`` back now (an unclaimed, ready job), or ``None``."""
        name, group = entry.posting.name, entry.posting.group
        if self.paused_board or name in self.paused_names:
            return HeldBack(f"job {entry.job_id} ({name}) is paused", why="paused")
        limit = None if group is None else self.limits.get(group)
        if limit is None or group is None:
            return None
        running = self.running[group]
        if limit.sequence and (running or next(iter(self.members[group])) != entry.job_id):
            return HeldBack(f"job {entry.job_id}: earlier jobs of sequence {group!r} are on the board",
                            why="sequence")
        if limit.concurrency is not None and running >= limit.concurrency:
            return HeldBack(f"job {entry.job_id}: group {group!r} has {running} of its {limit.concurrency} "
                            "jobs running", why="concurrency")
        due = self.permit_due(group, limit, time.monotonic())
        if due is not None:
            return HeldBack(f"job {entry.job_id}: group {group!r} used its rate of {limit.rate}; next permit in "
                            f"{due:.3f}s", why="rate", retry_after=due)
        return None

    def permit_due(self, group: str, limit: LimitSpec, now: float) -> float | None:
        """Seconds until ``group``'s next rate permit, or ``None`` when one is free now (old grants dropped)."""
        window, rate = self._windows.get(group), limit.rate
        if window is None or rate is None:
            return None
        while window and window[0] <= now - rate.period:
            window.popleft()
        return window[0] + rate.period - now if len(window) >= rate.count else None

    def park(self, entry: Entry, item: Item) -> str | None:
        """Keep ``item`` aside if ``entry`` is held back (its ``why``); :meth:`_unpark` puts it back."""
        held = self.refusal(entry)
        if held is None:
            return None
        group = entry.posting.group
        key = ("name", entry.posting.name) if held.why == "paused" or group is None else ("group", group)
        self._parked.setdefault(key, []).append(item)
        best = self._best.setdefault(key, {})
        kind = (entry.posting.name, held.why)
        if kind not in best or item < best[kind]:
            best[kind] = item
        if held.retry_after is not None and group is not None:
            self._rate_due[group] = time.monotonic() + held.retry_after
        return held.why

    def parked_whys(self, before: Item | None, wanted: Callable[[str], bool], waiting: Callable[[str], bool]) -> set[str]:
        """Why parked jobs better than ``before`` (any: ``None``) with a ``wanted`` name, still ``waiting``
        (unclaimed, by id), are held back: what a claim that took ``before`` passed over. No change."""
        return {why for best in self._best.values() for (name, why), item in best.items()
                if (before is None or item < before) and wanted(name) and waiting(item[2])}

    def unpark_due(self) -> None:
        """Put back the items of groups whose next rate permit is due."""
        if self._rate_due:
            now = time.monotonic()
            for group in [group for group, due in self._rate_due.items() if due <= now]:
                self._unpark(("group", group))

    def _unpark(self, key: tuple[str, str]) -> None:
        if key[0] == "group":
            self._rate_due.pop(key[1], None)
        self._best.pop(key, None)
        for item in self._parked.pop(key, ()):
            heapq.heappush(self._ready, item)

    def next_permit(self) -> float | None:
        """Seconds until the earliest rate permit that an unclaimed job of its group waits for."""
        now = time.monotonic()
        dues = [due for group, limit in self.limits.items() if limit.rate is not None and any(
            entry.state() is JobState.UNCLAIMED for entry in self.members.get(group, {}).values())
            and (due := self.permit_due(group, limit, now)) is not None]
        return min(dues) if dues else None
