"""The contract's waiting, watching and entities: ``wait``, ``wait_for_completion``, ``events`` and the
live participants.

Mixed into :class:`~jobboard.board.JobBoard`; ``events`` is served by the board's hub, the rest is abstract.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping
from typing import Any

from jobboard.board_inputs import JobRef
from jobboard.events import DEFAULT_EVENT_BUFFER, EventHub, EventStream
from jobboard.job import Entity, Job, Outcome


class BoardWatching(abc.ABC):
    """Being told when the board changes, and who is taking part."""

    @abc.abstractmethod
    async def wait(self, *, names: Collection[str] | None = None) -> list[Job]:
        """Return the claimable jobs once at least one exists (board order).

        Event-driven, no timeout: bound it with ``anyio.fail_after``. Backends
        may return only the first jobs of a long board.

        :param names: only jobs with one of these names.
        """

    @abc.abstractmethod
    async def wait_for_completion(self, job: JobRef) -> Outcome:
        """Wait until the job is consumed or trashed and return how it ended."""

    hub: EventHub

    def events(self, maxlen: int = DEFAULT_EVENT_BUFFER) -> EventStream:
        """Subscribe now to the board's events (see :class:`~jobboard.events.EventStream`).

        :raises BoardClosed: the board is not open.
        """
        self._ensure_open()
        self._observed()
        return self.hub.subscribe(maxlen)

    def _observed(self) -> None:  # noqa: B027 (a hook: most backends need nothing)
        """For backends: someone subscribed to the events (a backend may then read more of them)."""

    @abc.abstractmethod
    def _ensure_open(self) -> None: ...

    # -- entities ----------------------------------------------------------

    @abc.abstractmethod
    async def register_entity(self, name: str, metadata: Mapping[str, Any] | None = None) -> None:
        """Announce a live participant; it disappears when this board closes or its session ends.

        :raises InvalidJob: empty name or metadata msgpack cannot encode.
        """

    @abc.abstractmethod
    async def unregister_entity(self, name: str) -> None:
        """Remove an entity this board registered (nothing happens if it did not)."""

    @abc.abstractmethod
    async def entities(self) -> list[Entity]:
        """The live participants registered on this board's storage, by name."""
