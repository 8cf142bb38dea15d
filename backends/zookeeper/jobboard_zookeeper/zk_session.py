"""The session's state as the board hears it: one :class:`~jobboard_zookeeper.ops.SessionEvent` per change.

aiozk's state machine says CONNECTED, SUSPENDED and LOST; this says what a board needs: a first
connection, a suspension, a reconnection to the same session, and an expiry, said once, also
when it is only presumed (no server for a whole session timeout: the server cannot be asked). Part
of :mod:`jobboard_zookeeper.zk`'s fence: with it and its wire modules, the only code touching aiozk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiozk.states import States

from jobboard_zookeeper.ops import SessionEvent

logger = logging.getLogger("jobboard_zookeeper.zk")  # the session's log, as before this module split off

SessionListener = Callable[[str], None]


class SessionStates:
    """Hooks an aiozk session's state machine; says each change once to the listeners."""

    def __init__(self, session: Any, on_connecting: Callable[[], None] | None) -> None:
        self._session = session
        self.listeners: list[SessionListener] = []
        self.session_id: int | None = None
        self.closing = False
        """Set by the owner when it closes the session: nothing is said from then on."""
        self.last_contact = 0.0
        """Loop time of the last reply from the server (a ping's included), set by the owner."""
        self._expiry_reported = False
        self._suspension: asyncio.TimerHandle | None = None
        self._hook(on_connecting)

    def _hook(self, on_connecting: Callable[[], None] | None) -> None:
        machine = self._session.state
        original = machine.transition_to

        def transition_to(state: str) -> None:
            before = machine.current_state
            if state == States.CONNECTED and on_connecting is not None:
                on_connecting()  # first on the new connection, before waiters wake
            original(state)
            self._on_transition(before, state)

        machine.transition_to = transition_to

    def _on_transition(self, before: str, after: str) -> None:
        if self.closing:
            return
        if after == States.SUSPENDED and before == States.CONNECTED:
            self._emit(SessionEvent.SUSPENDED)
            loop = asyncio.get_running_loop()
            silent_for = loop.time() - self.last_contact  # the server's clock started then
            self._suspension = loop.call_later(max(0.0, float(self._session.timeout) - silent_for),
                                               self._suspended_too_long)
        elif after == States.LOST and self.session_id is not None:
            self._report_expiry()
        elif after == States.CONNECTED:
            self._on_connected(self._session.session_id)

    def _suspended_too_long(self) -> None:
        """Disconnected for a whole session timeout: the server has presumably expired the session."""
        if self._session.state != States.CONNECTED:
            logger.warning("no ZooKeeper server for a session timeout: assuming the session expired")
            self._report_expiry("presumed expired (no server for a session timeout)")

    def _on_connected(self, session_id: int) -> None:
        self.last_contact = asyncio.get_running_loop().time()
        if self._suspension is not None:
            self._suspension.cancel()
        previous, self.session_id = self.session_id, session_id
        if previous is None:
            self._emit(SessionEvent.CONNECTED)
        elif previous == session_id:
            presumed, self._expiry_reported = self._expiry_reported, False  # the server did not expire it
            self._emit(SessionEvent.RECONNECTED, "reconnected: the session presumed expired survived" * presumed)
        else:
            self._report_expiry()
            self._expiry_reported = False
            self._emit(SessionEvent.CONNECTED)

    def _report_expiry(self, shown: str = "") -> None:
        if not self._expiry_reported:
            self._expiry_reported = True
            self._emit(SessionEvent.EXPIRED, shown)

    def _emit(self, event: str, shown: str = "") -> None:
        logger.info("ZooKeeper session %s: %s", hex(self.session_id or 0), shown or event)
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:
                logger.exception("session listener failed on %s", event)
