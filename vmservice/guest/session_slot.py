# -*- test-case-name: tests.guest.test_session_slot -*-
"""
The agent's one session slot, shared by the virtio-serial port and the
AF_VSOCK listener: one host session at a time, on whichever link it came
(:class:`SessionSlot`).  Diagram and theory: ``docs/state-machines/session-slot.dot``
and ``.md``.  Standard library only.

The serial port has always served one host at a time (QEMU's chardev takes one
connection); the vsock listener keeps that rule rather than adding a second
session beside it.  A link that finds the slot taken waits: a host on the
serial port is looked at again every poll interval, a vsock connection waits
in the listener's backlog, which is not read until the slot is free again.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

FREE, SERIAL, VSOCK = "Free", "Serial", "Vsock"
#: The links, as the events that name them.
SERIAL_LINK, VSOCK_LINK = "serial", "vsock"
#: ``(state, event) -> next state``; any other pair is a bug.  Events:
#: ``serial`` (a host is on the serial port), ``vsock`` (a vsock connection
#: is waiting to be accepted), ``ended`` (the session's link closed).
#: A link that finds the slot taken is told so and waits (the loops below).
TRANSITIONS = {
    (FREE, "serial"): SERIAL,
    (FREE, "vsock"): VSOCK,
    (SERIAL, "serial"): SERIAL,
    (SERIAL, "vsock"): SERIAL,
    (SERIAL, "ended"): FREE,
    (VSOCK, "vsock"): VSOCK,
    (VSOCK, "serial"): VSOCK,
    (VSOCK, "ended"): FREE,
}
#: The link each event names, for telling whether it got the slot.
_LINK = {SERIAL_LINK: SERIAL, VSOCK_LINK: VSOCK}


class SessionSlot:
    """
    Who holds the agent's one session: nobody, the serial port or a vsock connection.

    Links ask :meth:`take` before they start a session and call :meth:`release`
    when it ends; a link that was refused may ask to hear when the slot is free
    (:meth:`when_free`).
    """

    def __init__(self) -> None:
        self.state = FREE
        self._waiting: list[Callable[[], None]] = []

    def _move(self, event: str) -> None:
        self.state = TRANSITIONS[(self.state, event)]

    def take(self, link: str) -> bool:
        """
        ``link`` (``serial`` or ``vsock``) wants to start a session: whether it got the slot.
        """
        before = self.state
        self._move(link)
        return before == FREE and self.state == _LINK[link]

    def release(self) -> None:
        """
        The session ended: the slot is free, and the links that waited hear it.
        """
        self._move("ended")
        waiting, self._waiting = self._waiting, []
        for callback in waiting:
            callback()

    def when_free(self, callback: Callable[[], None]) -> None:
        """
        Call ``callback`` once, at the next :meth:`release`.
        """
        self._waiting.append(callback)


__all__ = ["FREE", "SERIAL", "SERIAL_LINK", "TRANSITIONS", "VSOCK", "VSOCK_LINK", "SessionSlot"]
