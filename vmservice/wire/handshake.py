# -*- test-case-name: tests.wire.test_connection -*-
"""
The HELLO exchange of one session of the agent channel.

*Sessions.*  A :class:`~vmservice.wire.connection.Connection` is one session
of one side, identified by a random nonce.  Both sides send a HELLO first (the
host as soon as it connects, the guest when its port opens).  A side answers
every HELLO that brings a nonce it has not seen (the peer started a session)
or that does not echo its own nonce (the peer has not heard of this session):
:attr:`Handshake.hello_wanted` says so.  The link is *established* once a
HELLO from the peer's current session echoes our nonce; only then may streams
be opened or pings sent, and stream frames received before that are dropped,
since they belong to an older session.  A HELLO with a new nonce after that
means the peer restarted: every stream is gone and the exchange starts over.
The exchange always ends: a side answers only a HELLO that does not show that
the peer knows both nonces, and its answer shows exactly that (two HELLOs each
way in the usual cases).

Stdlib only: the guest imports this module.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

from vmservice.wire.errors import LocalProtocolError, RemoteProtocolError
from vmservice.wire.events import NO_NONCE, NONCE_SIZE, PROTOCOL_VERSION, Hello


def _checked(nonce: bytes, what: str) -> bytes:
    if len(nonce) != NONCE_SIZE or nonce == NO_NONCE:
        raise ValueError(f"{what} must be {NONCE_SIZE} bytes, not all zero")
    return nonce


def new_nonce() -> bytes:
    """A random session nonce (never the all-zero one, which means "none")."""
    nonce = os.urandom(NONCE_SIZE)
    while nonce == NO_NONCE:
        nonce = os.urandom(NONCE_SIZE)
    return nonce


class Handshake:
    """
    Where one session's HELLO exchange stands.

    :param nonce: this session's nonce.
    :param peer_nonce: the nonce of the peer's session when this session
        replaces one of ours on a link whose peer is known (the guest after
        ``adopt``): our first HELLO echoes it.
    :ivar established: the peer's current session has acknowledged ours.
    :ivar hello_wanted: we owe the peer a HELLO.
    :ivar peer_hello: the latest HELLO the peer sent; ``None`` before the first.
    """

    def __init__(self, nonce: bytes, peer_nonce: Optional[bytes]) -> None:
        if peer_nonce is not None:
            _checked(peer_nonce, "peer_nonce")
        self.nonce = _checked(nonce, "nonce")
        self.peer_nonce = peer_nonce
        self.peer_hello: Optional[Hello] = None
        self.established = False
        self.hello_wanted = True

    def hello(self, agent_version: str) -> Hello:
        """The HELLO to send now: our nonce, echoing the peer's if we know it."""
        return Hello(self.nonce, self.peer_nonce or NO_NONCE, agent_version)

    def check_outgoing(self, hello: Hello) -> None:
        """Refuse a HELLO of ours that does not carry our nonce, echo the peer's, or speak our version."""
        expected = self.hello(hello.agent_version)
        if hello.nonce != expected.nonce or hello.echo != expected.echo:
            raise LocalProtocolError("HELLO must carry our nonce and echo the peer's")
        if hello.protocol_version != PROTOCOL_VERSION:
            raise LocalProtocolError(f"we speak protocol version {PROTOCOL_VERSION}")

    def sent(self) -> None:
        """Our HELLO went out: we owe none until the peer's next one asks."""
        self.hello_wanted = False

    def received(self, hello: Hello) -> bool:
        """
        The peer sent ``hello``: whether it started a new session (every
        stream of the old one is gone).

        :raises RemoteProtocolError: it speaks another protocol version.
        """
        if hello.protocol_version != PROTOCOL_VERSION:
            raise RemoteProtocolError(
                f"peer speaks protocol version {hello.protocol_version}, not {PROTOCOL_VERSION}"
            )
        restarted = hello.nonce != self.peer_nonce
        if restarted:
            self.peer_nonce = hello.nonce
            self.established = hello.echo == self.nonce
            self.hello_wanted = True
        elif hello.echo == self.nonce:
            self.established = True
        else:
            self.hello_wanted = True
        self.peer_hello = hello
        return restarted


__all__ = ["Handshake", "new_nonce"]
