# -*- test-case-name: tests.wire.test_connection -*-
"""
Two :class:`~vmservice.wire.connection.Connection` objects joined by a fake wire,
like h11's ``ConnectionPair``: what one sends, the other receives.
"""

from __future__ import annotations

from typing import Iterable

from vmservice.wire.connection import Connection, Role
from vmservice.wire.events import NEED_DATA, Event

HOST_NONCE = b"HOST-NCE"
GUEST_NONCE = b"GUESTNCE"


def drain(conn: Connection) -> list[Event]:
    """
    Every event ``conn`` can parse from what it has received.
    """
    events = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA:
            return events
        assert not isinstance(event, type(NEED_DATA))
        events.append(event)


class ConnectionPair:
    """
    A host and a guest connection with a lossless wire between them.

    :ivar host: the host side.
    :ivar guest: the guest side.
    """

    def __init__(self, host_nonce: bytes = HOST_NONCE, guest_nonce: bytes = GUEST_NONCE) -> None:
        self.host = Connection(Role.HOST, nonce=host_nonce)
        self.guest = Connection(Role.GUEST, nonce=guest_nonce)

    def other(self, conn: Connection) -> Connection:
        """
        The peer of ``conn``.
        """
        return self.guest if conn is self.host else self.host

    def send(self, conn: Connection, *events: Event) -> list[Event]:
        """
        Send ``events`` from ``conn`` and return what its peer receives.
        """
        return self.deliver(self.other(conn), [conn.send(event) for event in events])

    def deliver(self, conn: Connection, chunks: Iterable[bytes]) -> list[Event]:
        """
        Feed ``chunks`` to ``conn`` one at a time, parsing after each.
        """
        received: list[Event] = []
        for chunk in chunks:
            conn.receive_data(chunk)
            received.extend(drain(conn))
        return received

    def handshake(self) -> None:
        """
        Exchange HELLOs as real peers would until both are established: the host
        first, each side answering while :attr:`Connection.hello_wanted`.
        """
        to_host = [self.guest.send(self.guest.hello("guest-1"))]
        to_guest = [self.host.send(self.host.hello("host-1"))]
        while to_host or to_guest:
            self.deliver(self.guest, to_guest)
            self.deliver(self.host, to_host)
            to_guest = [self.host.send(self.host.hello("host-1"))] if self.host.hello_wanted else []
            to_host = [self.guest.send(self.guest.hello("guest-1"))] if self.guest.hello_wanted else []
        assert self.host.established and self.guest.established
