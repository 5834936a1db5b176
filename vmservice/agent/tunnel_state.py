# -*- test-case-name: tests.agent.test_forwarding -*-
"""
The lifecycle of a tunnel (:class:`~vmservice.agent.forwarding.GuestTunnel`)
as one automat machine (diagram: ``docs/state-machines/tunnel.dot``).

Theory of operation
-------------------

- **Opening**: the guest has not answered.  Its head ``ok`` → Held (the
  tunnel's ``opened`` fires); an error head or one that does not decode →
  Refused (``opened`` fails); the stream's end before a head → Over
  (``opened`` fails with what the end means).
- **Held**: the guest connected to the upstream, no peer yet: what it sends
  is held and credit withheld.  ``join`` → Joined: what was held goes first,
  then the peer's transport is the tunnel's consumer.
- **Joined**: bytes go to the peer, back-pressure both ways.  ``peer_gone``
  (the peer's connection ended, however: closed or dropped) → PeerGone.
- **PeerGone**: the peer's end is the tunnel's: the stream is half-closed
  (the guest delivers what the peer sent, then closes the upstream and ends
  the stream), what the guest still sends has no one to go to and is
  dropped, credit given.  A reset here would overtake the peer's last bytes
  on the stream's way to the upstream; the tunnel bounds the wait for the
  guest's end (:data:`~vmservice.agent.forwarding.PEER_GONE_GRACE`) with an
  ``abort``.
- **Refused**: the guest answered an error; its end → Over.
- **Over**: the stream ended: the peer (if any) is let go and ``done``
  fires.  A later ``join`` closes its peer at once; resets, half-closes and
  credit no longer matter.

The consumer's pausing is no state: it comes and goes in every state, so it
stays the flag of the :class:`~vmservice.agent.relay.CreditRelay`, and
``credit`` asks the state whether content is held for a peer to come.
``join`` before the tunnel is opened is a bug in the caller (no transition).

Re-entrancy: an abort resets the stream, whose end comes back as ``ended``
from the output; automat runs it once the abort's output returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure

from ..errors import AgentError, GuestErrorKind
from ..guestport.tunnel import ITunnel, ITunnelPeer
from .errors import AgentRequestFailed, stream_error
from .relay import CreditRelay, give, reset, withhold
from .stream import AgentStream


class TunnelInputs(Protocol):
    """What can happen to a tunnel."""

    def head_ok(self, rest: bytes) -> None:
        """The guest connected to the upstream; ``rest`` came after its head."""

    def refused(self, error: AgentError) -> None:
        """The guest's head is an error, or does not decode."""

    def content(self, data: bytes) -> None:
        """The guest sent ``data`` from the upstream."""

    def join(self, peer: ITunnelPeer) -> None:
        """The peer that takes what the guest sends."""

    def close(self) -> None:
        """The peer is done: half-close."""

    def abort(self) -> None:
        """Reset the tunnel now."""

    def credit(self) -> None:
        """The consumer paused or resumed."""

    def peer_gone(self) -> None:
        """The peer's connection ended (its transport stopped producing)."""

    def ended(self, reason: Failure) -> None:
        """The stream ended."""


@dataclass
class TunnelCore:
    """
    What the tunnel's states share.

    :ivar tunnel: the tunnel, as ``opened`` gives it.
    :ivar relay: the tunnel, as the producer of what the guest sends.
    :ivar upstream: what the guest connects to, for error messages.
    :ivar cancel_reason: the reason of the reset that aborts it.
    :ivar stream: the tunnel's stream, once open.
    :ivar opened: fires with the tunnel once the guest connected.
    :ivar done: fires once the tunnel is over.
    :ivar pending: what the guest sent before a peer joined.
    :ivar peer: the peer, once joined.
    """

    tunnel: ITunnel
    relay: CreditRelay
    opened: Deferred[ITunnel]
    stream: Optional[AgentStream] = None
    cancel_reason: str = "tunnel closed"
    done: Deferred[None] = field(default_factory=Deferred)
    pending: list[bytes] = field(default_factory=list)
    peer: Optional[ITunnelPeer] = None


# The behaviours of the transitions, each named after what it does.


def _opened(inputs: TunnelInputs, core: TunnelCore, rest: bytes) -> None:
    if rest:
        core.pending.append(rest)
    core.relay.give_credit(holding=True)
    core.opened.callback(core.tunnel)


def _refused(inputs: TunnelInputs, core: TunnelCore, error: AgentError) -> None:
    core.opened.errback(Failure(error))


def _hold(inputs: TunnelInputs, core: TunnelCore, data: bytes) -> None:
    core.pending.append(data)
    core.relay.give_credit(holding=True)


def _pass(inputs: TunnelInputs, core: TunnelCore, data: bytes) -> None:
    assert core.peer is not None
    core.peer.write(data)


def _join(inputs: TunnelInputs, core: TunnelCore, peer: ITunnelPeer) -> None:
    core.peer = peer
    peer.registerProducer(core.relay, True)
    pending, core.pending = core.pending, []
    for chunk in pending:
        peer.write(chunk)
    core.relay.give_credit(holding=False)


def _let_go(inputs: TunnelInputs, core: TunnelCore, peer: ITunnelPeer) -> None:
    peer.loseConnection()


def _half_close(inputs: TunnelInputs, core: TunnelCore) -> None:
    if core.stream is not None:
        core.stream.loseConnection()


def _ignore_data(inputs: TunnelInputs, core: TunnelCore, data: bytes) -> None:
    pass


def _peer_left(inputs: TunnelInputs, core: TunnelCore) -> None:
    core.peer = None  # its connection is gone: nothing more is written to it
    _half_close(inputs, core)
    core.relay.give_credit(holding=False)


def _lost_before_head(inputs: TunnelInputs, core: TunnelCore, reason: Failure) -> None:
    clean = reason.check(ConnectionDone) is not None
    error = (AgentRequestFailed("the guest ended the tunnel without a head", kind=GuestErrorKind.MALFORMED)
             if clean else stream_error(reason, "the tunnel"))
    core.opened.errback(Failure(error))
    core.done.callback(None)


def _over(inputs: TunnelInputs, core: TunnelCore, reason: Failure) -> None:
    peer, core.peer = core.peer, None
    if peer is not None:
        peer.unregisterProducer()
        peer.loseConnection()
    core.done.callback(None)


def _build() -> TypeMachine[TunnelInputs, TunnelCore]:
    """The machine: its states, what each input does in them, and what each state ignores."""
    builder = TypeMachineBuilder(TunnelInputs, TunnelCore)
    opening, held, joined = builder.state("Opening"), builder.state("Held"), builder.state("Joined")
    refused, over, peer_gone = builder.state("Refused"), builder.state("Over"), builder.state("PeerGone")

    opening.upon(TunnelInputs.head_ok).to(held)(_opened)
    opening.upon(TunnelInputs.refused).to(refused)(_refused)
    opening.upon(TunnelInputs.credit).loop()(give)
    opening.upon(TunnelInputs.ended).to(over)(_lost_before_head)

    held.upon(TunnelInputs.content).loop()(_hold)
    held.upon(TunnelInputs.join).to(joined)(_join)
    held.upon(TunnelInputs.credit).loop()(withhold)

    joined.upon(TunnelInputs.content).loop()(_pass)
    joined.upon(TunnelInputs.credit).loop()(give)
    joined.upon(TunnelInputs.peer_gone).to(peer_gone)(_peer_left)
    peer_gone.upon(TunnelInputs.content).loop()(_ignore_data)
    peer_gone.upon(TunnelInputs.credit).loop()(give)
    peer_gone.upon(TunnelInputs.abort).loop()(reset)
    peer_gone.upon(TunnelInputs.ended).to(over)(_over)
    peer_gone.upon(TunnelInputs.join).loop()(_let_go)
    for each in (TunnelInputs.close, TunnelInputs.peer_gone):
        peer_gone.upon(each).loop().returns(None)
    over.upon(TunnelInputs.peer_gone).loop().returns(None)
    for state in (opening, held, refused):
        state.upon(TunnelInputs.peer_gone).loop()(reset)

    refused.upon(TunnelInputs.content).loop()(_ignore_data)
    refused.upon(TunnelInputs.join).loop()(_let_go)
    refused.upon(TunnelInputs.credit).loop()(give)

    for state in (opening, held, joined, refused):
        state.upon(TunnelInputs.close).loop()(_half_close)
        state.upon(TunnelInputs.abort).loop()(reset)
    for state in (held, joined, refused):
        state.upon(TunnelInputs.ended).to(over)(_over)

    over.upon(TunnelInputs.join).loop()(_let_go)
    for each in (TunnelInputs.close, TunnelInputs.abort, TunnelInputs.credit):
        over.upon(each).loop().returns(None)
    return builder.build()


#: The machine; calling it with a core gives one tunnel's inputs.
TUNNEL_MACHINE = _build()

__all__ = ["TUNNEL_MACHINE", "TunnelCore", "TunnelInputs"]
