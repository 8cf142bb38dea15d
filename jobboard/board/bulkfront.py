"""``post_many``'s plain postings, checked and encoded a batch at a time (the bulk path's front).

A plain posting is a :class:`~jobboard.board.inputs.NewJob` with a name, details, a :class:`Priority`
member and a ``bool`` ``keep_result``, and nothing else: no dependencies, key, delay, due time, lifetimes,
group or ``max_attempts`` of its own (the board's default applies). It gets every check
:func:`~jobboard.board.codec.build_posting` makes (a name checked once per batch, the details one by
one) and exactly the bytes :func:`~jobboard.board.codec.encode_posting` makes (format ``"v": 1``): the
map's fixed parts are packed once per batch, name, priority and ``keep_result``; the details and the
token once per posting. Any other posting is not plain: the caller takes the general way. No I/O.
"""

from __future__ import annotations

import sys
from typing import Any

from jobboard.backend import Prepared
from jobboard.board.checks import TIMEOUT_KEY, check_details, check_name, check_size, flat_details
from jobboard.board.codec import FORMAT_VERSION, _packer, new_plain_posting, new_token
from jobboard.board.inputs import NewJob
from jobboard.board.propagation import OPENTELEMETRY_TRACE, with_trace_context
from jobboard.job import Priority

_TOKEN_LENGTH = 32
"""What :func:`new_token` makes: 32 hex digits (a msgpack ``str 8``)."""


class BulkFront:
    """One batch's plain postings: its time, the board's default ``max_attempts`` and size limit, and the
    fixed parts of the postings' encoding by name, priority and ``keep_result`` (owned by one call, in one thread)."""

    def __init__(self, now: float, max_attempts: int | None, limit: int) -> None:
        self.now, self.max_attempts, self.limit = now, max_attempts, limit
        self.usable = max_attempts is None or (type(max_attempts) is int and max_attempts >= 1)
        """A bad default goes the general way, which refuses it (as :func:`build_posting` does)."""
        self.parts: dict[tuple[str, Priority, bool], tuple[bytes, bytes, Priority, bool]] = {}
        self.last: dict[str, tuple[bytes, bytes, Priority, bool]] = {}
        self.traced = OPENTELEMETRY_TRACE in sys.modules  # else no span can be current: nothing to carry
        self.pack = pack = _packer().pack  # this thread's: the batch is prepared in one synchronous loop
        self.tail = pack("attempts") + pack(0) + pack("not_before") + pack(None) + pack("results") + pack({})

    def prepare(self, job: NewJob, connection: Any) -> Prepared | None:
        """``job``'s checked and encoded posting, or ``None`` when it is not plain (nothing checked then).

        :raises InvalidJob: a bad name or details, a posting over the size limit (as ``post`` words them).
        """
        name, priority, keep_result = job.name, job.priority, job.keep_result
        if (type(name) is not str or type(priority) is not Priority or type(keep_result) is not bool
                or job.depends_on or job.max_attempts is not None or job.key is not None or job.delay is not None
                or job.not_before is not None or job.result_ttl is not None or job.trash_ttl is not None
                or job.group is not None or not self.usable):
            return None
        parts = self.last.get(name)  # the name's parts for the priority and keep_result it came with last
        if parts is None or parts[2] is not priority or parts[3] is not keep_result:
            parts = self.last[name] = self._parts(name, priority, keep_result)
        details = job.details
        if type(details) is dict and flat_details(details) and TIMEOUT_KEY not in details:
            details = details.copy()  # check_details' common case, without its call
        else:
            details = check_details(name, details)
        try:
            packed = self.pack(details)
        except (TypeError, ValueError, OverflowError):
            return None  # checked details msgpack still refuses: the general way names the culprit
        token = new_token()
        raw = b"".join((parts[0], packed, parts[1], token.encode(), self.tail))
        if len(raw) > self.limit:
            check_size(name, raw, self.limit)
        posting = new_plain_posting(name, details, priority, self.now, self.max_attempts, keep_result, token)
        if self.traced:
            posting, raw = with_trace_context(posting, raw, self.limit)
        return Prepared(posting, raw, connection)

    def _parts(self, name: str, priority: Priority, keep_result: bool) -> tuple[bytes, bytes, Priority, bool]:
        """The encoding before the details and between them and the token's digits (the name checked once).

        :raises InvalidJob: a bad name.
        """
        known = self.parts.get((name, priority, keep_result))
        if known is None:
            check_name(name)
            known = self.parts[name, priority, keep_result] = (*self._packed(name, priority, keep_result),
                                                               priority, keep_result)
        return known

    def _packed(self, name: str, priority: Priority, keep_result: bool) -> tuple[bytes, bytes]:
        packer = _packer()
        pack = packer.pack
        head = (packer.pack_map_header(12) + pack("v") + pack(FORMAT_VERSION) + pack("name") + pack(name)
                + pack("details"))
        middle = (pack("priority") + pack(int(priority)) + pack("created_at") + pack(self.now) + pack("depends_on")
                  + pack([]) + pack("max_attempts") + pack(self.max_attempts) + pack("keep_result")
                  + pack(keep_result) + pack("token") + pack("0" * _TOKEN_LENGTH)[:-_TOKEN_LENGTH])
        return head, middle
