"""The mutants: each breaks one guarantee of ``memory://``, in its package or in the board's front
(``jobboard/board/contract.py``: the checks and encodings every backend shares); the first checks the run itself.
``FLOW_CONTROL`` breaks the guarantees of flow control (issue 27, :mod:`jobboard.board.limits`) one at a time.

Anchors are exact text; when the code moves, ``bash scripts/mutate --check`` names the mutants to update.
"""

from __future__ import annotations

from tests.mutation.mutating import Mutant

STORE = "backends/memory/jobboard_memory/store.py"
BOARD = "backends/memory/jobboard_memory/board.py"
KEEP = "backends/memory/jobboard_memory/keep.py"
FLOW = "backends/memory/jobboard_memory/flow.py"
FRONT = "jobboard/board/contract.py"
"""The board's front, shared by every backend: what it checks and encodes before a backend's hook."""
NONE = 'b"\\xc0"'
"""A result of ``None``, encoded (msgpack's nil: what the mutants below deliver instead of the real result)."""

SANITY = Mutant(
    "sanity-job-count-off-by-one", "job_count counts the jobs (proves the mutated copy is what ran)", BOARD,
    "return len(self._store.jobs)", "return len(self._store.jobs) + 1",
)


def _lost_wakeup(kind: str, guarantee: str) -> Mutant:
    """Waiters (wait, wait_for_completion, watch_claim) miss ``kind`` changes; events still go out."""
    return Mutant(
        f"wake-up-lost-on-{kind.lower()}", guarantee, BOARD,
        "            board.hub.publish(event)\n        self.notify()",
        f"            board.hub.publish(event)\n        if event.kind.name != {kind!r}:\n"
        "            self.notify()",
    )


def _event_dropped(kind: str) -> Mutant:
    """``kind`` events never reach a stream; waiters are still woken."""
    return Mutant(
        f"event-dropped-{kind.lower()}", f"every {kind.lower()} change is an event on every board's stream",
        BOARD,
        "        for board in self.boards:\n            board.hub.publish(event)",
        f"        for board in self.boards:\n            if event.kind.name != {kind!r}:\n"
        "                board.hub.publish(event)",
    )


SETTLING = [
    Mutant("settle-skips-generation", "a stale claim (released or claimed again since) cannot settle", STORE,
           "if entry is None or entry.owner is None or entry.generation != claim.generation:",
           "if entry is None or entry.owner is None:"),
    Mutant("attempt-counted-twice", "each claim counts exactly one attempt", STORE,
           "entry.posting = entry.posting.claimed()", "entry.posting = entry.posting.claimed().claimed()"),
    Mutant("claim-granted-twice", "a claimed job cannot be claimed by anyone else", STORE,
           "if entry.owner is not None:\n            raise AlreadyClaimed",
           "if entry.owner == owner:\n            raise AlreadyClaimed"),
    Mutant("max-attempts-off-by-one", "a job is never claimed more than max_attempts times", STORE,
           "entry.posting.attempts >= limit:", "entry.posting.attempts > limit:"),
    Mutant("unencodable-result-loses-claim", "a refused consume (unencodable result) keeps the claim", FRONT,
           "        encoded = self._encoded_result(claim, result)\n",
           "        try:\n            encoded = self._encoded_result(claim, result)\n"
           "        except InvalidJob:\n"
           "            await self.backend.settle(claim, Settle(SettleAction.CONSUME))\n"
           "            raise\n"),
    Mutant("oversized-result-accepted", "a result over max_posting_bytes is refused and keeps the claim",
           FRONT,
           "check_result_size(claim.job.id, encoded, self.backend.max_posting_bytes)",
           "check_result_size(claim.job.id, encoded, self.backend.max_posting_bytes * 1000)"),
    Mutant("result-not-kept", "keep_result keeps the consumed job's result for wait_for_completion", STORE,
           "self.kept_results[entry.job_id] = raw", f"self.kept_results[entry.job_id] = {NONE}"),
    Mutant("abandon-drops-last-error", "abandon keeps the error it is given as the job's last error", BOARD,
           "        entry.posting = entry.posting.failed(settle.error)\n",
           "        if settle.action is SettleAction.TRASH:\n"
           "            entry.posting = entry.posting.failed(settle.error)\n"),
    Mutant("retry-after-ignored", "abandon(retry_after=s) keeps the job unclaimable for s seconds", BOARD,
           "not_before = wall_clock() + settle.retry_after if settle.retry_after else None", "not_before = None"),
    Mutant("close-keeps-claims", "closing a board releases its claims", BOARD,
           "for entry in shared.store.held_by(self):", "for entry in shared.store.held_by(object()):"),
    Mutant("settle-by-non-owner", "only the claim's owner can settle it (NotOwner)", STORE,
           "        if entry.owner != claim.owner:\n            raise NotOwner",
           "        if entry.owner is None:\n            raise NotOwner"),
    Mutant("claim-next-takes-stale-items", "claim_next offers only unclaimed jobs", STORE,
           "if entry is None or entry.state() is not JobState.UNCLAIMED:", "if entry is None:"),
    Mutant("abandoned-job-not-offered", "an abandoned job is offered by claim_next again", STORE,
           "            self.flow.released(entry)\n        self._make_ready(entry)\n",
           "            self.flow.released(entry)\n"),
    Mutant("trash-drops-last-error", "trash keeps the error it is given with the trashed job", BOARD,
           "        entry.posting = entry.posting.failed(settle.error)\n",
           "        if settle.action is SettleAction.ABANDON:\n"
           "            entry.posting = entry.posting.failed(settle.error)\n"),
    Mutant("watch-misses-release", "watch_claim returns when the claim is released", STORE,
           "return \"released\" if entry.owner is None else None", "return None"),
]

DEPENDENCIES = [
    Mutant("dependent-released-on-claim", "a dependent waits until its dependency is consumed (not claimed)",
           STORE,
           "        entry.generation += 1\n",
           "        entry.generation += 1\n        for dependent_id in entry.dependents:\n"
           "            if dependent_id in self.jobs:\n"
           f"                self._deliver(self.jobs[dependent_id], job_id, {NONE})\n"),
    Mutant("dependent-released-by-one-dependency", "a dependent waits until every dependency is consumed",
           STORE,
           "dependent.waiting_on.discard(dep_id)", "dependent.waiting_on.clear()"),
    Mutant("dependent-posted-ready", "a dependent posted on unconsumed jobs waits", STORE,
           "waiting_on=set(posting.depends_on))", "waiting_on=set())"),
    Mutant("result-not-delivered", "a dependent's claim carries each dependency's result", STORE,
           "dependent.results[dep_id] = raw", f"dependent.results[dep_id] = {NONE}"),
    Mutant("results-out-of-order", "dependency results come in depends_on order", STORE,
           "for dep in entry.posting.depends_on)", "for dep in reversed(entry.posting.depends_on))"),
    Mutant("trash-not-cascading", "trashing a job trashes its dependents, recursively", STORE,
           "                self.move_to_trash(dependent, cause, now)", "                continue"),
    Mutant("missing-dependency-accepted", "a post naming a job not on the board is refused, writing nothing",
           STORE, "missing = [dep for dep in posting.depends_on if dep not in self.jobs]",
           "missing: list[str] = []"),
]

WAKE_UPS = [
    _lost_wakeup("POSTED", "wait() wakes when another board posts"),
    _lost_wakeup("RELEASED", "wait() wakes when a job is abandoned or its owner's board closes"),
    _lost_wakeup("CONSUMED", "wait_for_completion() wakes when the job is consumed"),
    _lost_wakeup("TRASHED", "wait_for_completion() and watch_claim() wake when the job is trashed"),
    Mutant("wake-up-only-first-waiter", "a change wakes every waiter, not one", BOARD,
           "for waiter in waiters:\n            waiter.set()",
           "for waiter in waiters[:1]:\n            waiter.set()"),
    Mutant("wake-up-lost-on-close", "waiters on a board see it close (BoardClosed)", BOARD,
           "        self._open = False\n        shared.notify()", "        self._open = False"),
    Mutant("event-streams-never-end", "a board's event streams end when it closes", BOARD,
           "        self.hub.close()\n", ""),
    Mutant("wake-up-lost-when-delay-ends", "wait() wakes when a delayed job becomes due", BOARD,
           "move_on_after(self._store.next_wakeup(now) or float(\"inf\"))", "move_on_after(float(\"inf\"))"),
]

ORDER = [
    Mutant("priorities-reversed", "higher priority first, everywhere", STORE,
           "return (self.posting.priority.rank, self.sequence)",
           "return (-self.posting.priority.rank, self.sequence)"),
    Mutant("age-reversed", "within a priority, the oldest first", STORE,
           "return (self.posting.priority.rank, self.sequence)",
           "return (self.posting.priority.rank, -self.sequence)"),
    Mutant("claim-next-ignores-priority", "claim_next takes the highest priority first", STORE,
           "heapq.heappush(self._ready, (*entry.sort_key(), entry.job_id))",
           "heapq.heappush(self._ready, (0, entry.sequence, entry.job_id))"),
    Mutant("listing-ignores-priority", "listings are in claim order: priority, then age", STORE,
           "return sorted(self.jobs.values(), key=Entry.sort_key)",
           "return sorted(self.jobs.values(), key=lambda entry: entry.sequence)"),
]

SELECTION = [
    Mutant("delayed-job-offered", "a delayed job is not offered (wait, claim_next) before it is due", STORE,
           "    return entry.posting.not_before is not None and entry.posting.not_before > now",
           "    return False"),
    Mutant("delayed-job-claimable", "claim() refuses a job before it is due", STORE,
           "entry.posting.not_before > now:\n            raise NotClaimable",
           "entry.posting.not_before > now + 3600:\n            raise NotClaimable"),
    Mutant("claim-next-ignores-names", "claim_next(names=...) takes only those names", STORE,
           "if _delayed(entry, now) or not wanted(entry.posting.name, names):", "if _delayed(entry, now):"),
    Mutant("wait-ignores-names", "wait(names=...) returns only those names", BOARD,
           "jobs = self._store.claimable(now, names)", "jobs = self._store.claimable(now, None)"),
]

RECORDS = [
    Mutant("malformed-not-reported", "a malformed entry is reported by a MALFORMED event", BOARD,
           "            self.report_malformed(job_id)\n", "            pass\n"),
    _event_dropped("CONSUMED"),
    _event_dropped("CLAIMED"),
    Mutant("entities-outlive-their-board", "a board's entities go when it closes", BOARD,
           "if board is self]:", "if board is None]:"),
    Mutant("keys-never-expire", "a settled job's key finds it only for key_retention seconds", STORE,
           "if now - settled_at < retention:", "if True:"),
    Mutant("trashed-state-complete", "a trashed job's state is TRASHED", STORE,
           "return JobState.TRASHED if job_id in self.trash else JobState.COMPLETE",
           "return JobState.COMPLETE"),
    Mutant("only-unclaimed-lists-claimed", "iterjobs(only_unclaimed=True) leaves claimed jobs out", BOARD,
           "if not only_unclaimed or entry.state() is JobState.UNCLAIMED:\n                yield entry.job()",
           "if True:\n                yield entry.job()"),
    Mutant("requeued-job-not-offered", "a requeued job is offered by claim_next again", KEEP,
           "    store._make_ready(entry)\n", ""),
    Mutant("key-ignored", "a post with a key on the board returns that job, writing nothing", BOARD,
           "existing = store.keyed(prepared.posting.key, self.key_retention)",
           "existing = store.keyed(None, self.key_retention)"),
    Mutant("stale-progress-shown", "progress goes with the claim that reported it", STORE,
           "if self.progress is None or self.owner is None or self.progress[0] != self.generation:",
           "if self.progress is None or self.owner is None:"),
    Mutant("stale-progress-accepted", "progress from a stale claim is refused (ClaimLost)", KEEP,
           "    entry = store.current(claim)\n    entry.progress",
           "    entry = store.jobs[claim.job.id]\n    entry.progress"),
    Mutant("nothing-expires", "kept results and trash entries are gone after their time to live", KEEP,
           "return ttl > 0 and now - stored_at >= ttl", "return False"),
    Mutant("purge-ignores-age", "purge(older_than=s) keeps trash younger than s", KEEP,
           "if now - item.trashed_at >= older_than]", "if older_than >= 0]"),
    Mutant("requeue-keeps-attempts", "requeue(reset_attempts=True) counts attempts from 0", KEEP,
           "posting = posting.reset_attempts()", "posting = posting"),
    Mutant("never-posted-off-by-one", "never_posted is false for every id the board gave", BOARD,
           "int(job_id[4:]) > self._store.last_sequence", "int(job_id[4:]) >= self._store.last_sequence"),
    Mutant("never-posted-by-format-only", "never_posted is true for a well-formed id past the last one",
           BOARD,
           "return not self.could_be_job_id(job_id) or int(job_id[4:]) > self._store.last_sequence",
           "return not self.could_be_job_id(job_id)"),
]


def _permit_kept(by: str, anchor: str, indent: str, entry: str = "entry") -> Mutant:
    """The claim ends ``by`` this path but its group's permit is taken again at once (never returns)."""
    return Mutant(
        f"permit-kept-by-{by}", f"a permit returns when its claim ends by {by}", BOARD, anchor,
        f"{anchor}{indent}if {entry}.posting.group is not None:\n"
        f"{indent}    {'shared.' if by == 'close' else ''}store.flow.running[{entry}.posting.group] += 1\n",
    )


PERMITS = [
    Mutant("concurrency-off-by-one", "at most concurrency jobs of a group are claimed at once", FLOW,
           "if limit.concurrency is not None and running >= limit.concurrency:",
           "if limit.concurrency is not None and running > limit.concurrency:"),
    _permit_kept("abandon", '            store.release(entry, not_before, f"abandoned by {claim.owner}")\n',
                 "            "),
    _permit_kept("close", '            shared.store.release(entry, None, f"owner {entry.owner} closed its board")\n',
                 "            "),
    Mutant("permit-kept-by-cancel", "a permit returns when its claim ends by cancel", BOARD,
           "        self._store.cancel(job_id, reason, wall_clock())\n",
           "        entry = self._store.jobs.get(job_id)\n"
           "        held = entry is not None and entry.owner is not None\n"
           "        self._store.cancel(job_id, reason, wall_clock())\n"
           "        if entry is not None and held and entry.posting.group is not None:\n"
           "            self._store.flow.running[entry.posting.group] += 1\n"),
    Mutant("permit-kept-when-job-leaves", "a permit returns when its claim ends by consume or trash", FLOW,
           "        if entry.owner is not None:\n            self.running[group] -= 1\n",
           "        if entry.owner is not None:\n            self.running[group] -= 0\n"),
    Mutant("permit-return-leaves-jobs-parked", "a permit returned frees the group's other jobs at once", FLOW,
           '        self.running[group] -= 1\n        self._unpark(("group", group))\n\n    # -- claiming',
           "        self.running[group] -= 1\n\n    # -- claiming"),
    Mutant("claim-next-blocks-on-full-group", "claim_next takes another group's job when one group is full",
           STORE, "                        whys.add(why)\n                    continue",
           "                        whys.add(why)\n                    return None"),
    Mutant("limit-change-leaves-jobs-parked", "a raised limit lets claim_next take the group's jobs at once",
           FLOW, '        self.limits[limit.group] = limit\n        self._changed(("group", limit.group))',
           "        self.limits[limit.group] = limit\n        self._changed(None)"),
    Mutant("clear-limit-not-clearing", "clear_limit removes the group's limit", FLOW,
           "found = self.limits.pop(group, None) is not None", "found = self.limits.get(group) is not None"),
]

PAUSES = [
    Mutant("claim-ignores-pause", "claim(job) of a paused name raises HeldBack", STORE,
           "if self.flow.active and (held := self.flow.refusal(entry)) is not None:\n            raise held",
           'if self.flow.active and (held := self.flow.refusal(entry)) is not None and held.why != "paused":\n'
           "            raise held"),
    Mutant("pause-of-one-name-pauses-all", "a pause of one name holds back only that name", FLOW,
           "if self.paused_board or name in self.paused_names:", "if self.paused_board or self.paused_names:"),
    Mutant("board-pause-ignored-by-claim", "a pause of the whole board holds back every claim", FLOW,
           "if self.paused_board or name in self.paused_names:", "if name in self.paused_names:"),
    Mutant("name-pause-alone-ignored", "a pause of one name holds even with no limit set", FLOW,
           "self.active = bool(self.limits or self.paused_board or self.paused_names)",
           "self.active = bool(self.limits or self.paused_board)"),
    Mutant("resume-leaves-jobs-parked", "a resumed name's jobs are claimable at once", FLOW,
           'self._changed(None if name is None else ("name", name))', "self._changed(None)"),
    Mutant("wake-up-lost-on-resume", "wait() wakes when a pause is lifted", BOARD,
           "        self._store.flow.resume(name)\n        self._shared.notify()",
           "        self._store.flow.resume(name)"),
    Mutant("wake-up-lost-on-set-limit", "wait() wakes when a limit is raised", BOARD,
           "        self._store.flow.set_limit(limit)\n        self._shared.notify()",
           "        self._store.flow.set_limit(limit)"),
    Mutant("wake-up-lost-on-clear-limit", "wait() wakes when a limit is cleared", BOARD,
           "        found = self._store.flow.clear_limit(group)\n        self._shared.notify()",
           "        found = self._store.flow.clear_limit(group)"),
]

SEQUENCES = [
    Mutant("sequence-second-beside-first", "a sequence runs one job at a time (none beside a claimed head)",
           FLOW, "if limit.sequence and (running or next(iter(self.members[group])) != entry.job_id):",
           "if limit.sequence and next(e.job_id for e in self.members[group].values() if e.owner is None)"
           " != entry.job_id:"),
    Mutant("sequence-ignores-order", "a sequence runs in posting order, whatever the priorities", FLOW,
           "if limit.sequence and (running or next(iter(self.members[group])) != entry.job_id):",
           "if limit.sequence and running:"),
    Mutant("trashed-job-stops-sequence", "a trashed job does not stop its sequence", STORE,
           "            self.flow.left(entry)\n        self._settled(entry)\n        entry.progress = None",
           "            self.flow.left(entry)\n"
           "            self.flow.members.setdefault(entry.posting.group, {})[entry.job_id] = entry\n"
           "        self._settled(entry)\n        entry.progress = None"),
]

RATES = [
    Mutant("rate-burst-of-twice-the-count", "no window of period seconds holds more than count claims", FLOW,
           "return window[0] + rate.period - now if len(window) >= rate.count else None",
           "return window[0] + rate.period - now if len(window) >= 2 * rate.count else None"),
    Mutant("rate-window-not-sliding", "the window slides: a grant leaves it period seconds after it was made",
           FLOW, "        while window and window[0] <= now - rate.period:\n            window.popleft()",
           "        if window and window[0] <= now - rate.period:\n            window.clear()"),
    Mutant("rate-grants-not-counted", "every claim of a rated group counts in its window", FLOW,
           "            self._windows.setdefault(group, deque()).append(time.monotonic())",
           "            self._windows.setdefault(group, deque())"),
    Mutant("retry-after-wrong", "HeldBack.retry_after says when the next rate permit is due", FLOW,
           'why="rate", retry_after=due)', 'why="rate", retry_after=2 * due)'),
    Mutant("rate-parked-jobs-never-unparked", "claim_next takes a rated group's job once its permit is due",
           STORE, "            flow.unpark_due()\n", "            pass\n"),
    Mutant("wake-up-lost-when-rate-permit-due", "wait() wakes when the next rate permit is due", STORE,
           "            delays.append(permit)", "            delays.append(permit + 3600)"),
]

HELD_BACK = [
    Mutant("claim-next-skips-not-reported", "a claim_next that passed over held-back jobs counts in held_back",
           BOARD, "        if whys:\n            self.passed_over(whys)", "        pass"),
    Mutant("parked-jobs-not-counted", "jobs parked by an earlier claim still count as passed over", STORE,
           "            whys |= self.flow.parked_whys(", "            whys & self.flow.parked_whys("),
    Mutant("later-parked-jobs-counted", "only jobs better than the one taken count as passed over", FLOW,
           "if (before is None or item < before)", "if (before is None or item != before)"),
    Mutant("paused-board-skips-not-counted", "with the board paused, its claimable jobs count as paused", STORE,
           "                self._paused(now, names, whys)\n", ""),
]

FLOW_CONTROL = [*PERMITS, *PAUSES, *SEQUENCES, *RATES, *HELD_BACK]

MUTANTS: list[Mutant] = [SANITY, *SETTLING, *DEPENDENCIES, *WAKE_UPS, *ORDER, *SELECTION, *RECORDS, *FLOW_CONTROL]
