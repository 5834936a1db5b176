# -*- test-case-name: tests.wire.test_connection -*-
"""
Errors of the agent wire protocol, and the reset codes carried on the wire.

Like h11, the codec separates our own mistakes (:class:`LocalProtocolError`, raised by
:meth:`~vmservice.wire.connection.Connection.send`) from the peer's
(:class:`RemoteProtocolError`, raised by
:meth:`~vmservice.wire.connection.Connection.next_event`); either one leaves the
connection dead.  Stdlib only: the guest imports this module.
"""

from __future__ import annotations


class ResetCode:
    """
    The codes a RESET frame carries (u32 on the wire), as plain ints.

    Receivers must accept codes they do not know: they are not an error, only less
    specific.  ``PEER_RESTARTED`` is never sent; the codec reports it for streams it
    drops because the peer started a new session.  Not an :class:`enum.IntEnum`: the
    guest imports this module on its way to its first answer, and ``enum`` costs a
    cold guest under TCG more than the codes are worth (docs/performance.md, "The
    imports left"); :func:`reset_code_name` names a code.
    """

    #: The sender gave up on the stream (user abort, cancelled request).
    CANCEL = 0
    #: The stream was used against the protocol (e.g. data after half-close).
    PROTOCOL_ERROR = 1
    #: The OPEN header named an operation the receiver does not implement.
    UNKNOWN_OP = 2
    #: The OPEN header is not a JSON object or lacks a required field.
    BAD_HEADER = 3
    #: The receiver failed while serving the stream.
    INTERNAL_ERROR = 4
    #: Local only: the peer restarted, so every stream of its old session is gone.
    PEER_RESTARTED = 5
    #: The receiver will not serve another stream now (too many open, shutting down).
    REFUSED = 6


def reset_code_name(code: int) -> str:
    """
    The name of a reset code (``"CANCEL"``, ...), or the number as text if it is not
    one of :class:`ResetCode`'s.
    """
    for name, value in vars(ResetCode).items():
        if name.isupper() and value == code:
            return name
    return str(code)


class WireError(Exception):
    """
    Base class of every error of the agent wire protocol.
    """


class LocalProtocolError(WireError):
    """
    We tried to send something the protocol does not allow in the current state.

    Raised by :meth:`~vmservice.wire.connection.Connection.send` and
    :meth:`~vmservice.wire.connection.Connection.acknowledge_received_data`.  The
    event was not sent.  The connection is left unchanged unless it was already dead.
    """


class FlowControlError(LocalProtocolError):
    """
    We tried to send more DATA on a stream than the peer granted credit for.

    Wait for a :class:`~vmservice.wire.events.WindowUpdate` and send the rest then.
    """


class RemoteProtocolError(WireError):
    """
    The peer sent bytes that break the protocol.

    Raised by :meth:`~vmservice.wire.connection.Connection.next_event`; the
    connection is dead afterwards (every later call raises again), and the caller
    should drop the transport (host) or start a fresh
    :class:`~vmservice.wire.connection.Connection` (guest).
    """
