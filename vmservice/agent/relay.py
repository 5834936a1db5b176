# -*- test-case-name: tests.agent.test_relay -*-
"""
How the host relays a consumer's back-pressure to the guest as stream credit
(the stream's ``pauseProducing`` withholds credit, so the guest stops reading
its source; see :mod:`vmservice.agent.inbound`).

- :class:`GuestOutput`: a stream whose guest side produces (an exec's output, a
  shell's terminal, a log reading) as an ``IPushProducer``: pausing it withholds
  credit, resuming gives it again, stopping it resets the stream with
  ``CANCEL``; a producer of what the host sends on it is paused while the
  guest's credit is spent.
- :class:`CreditRelay`: the same for a stream whose content is handed to a
  consumer that may come later (a download's writer, a tunnel's peer): credit
  is also withheld while content is held for that consumer.  Whether content
  is held, and whether the stream is over, is the owner's lifecycle machine:
  its outputs (:func:`give`, :func:`withhold`, :func:`reset`, shared by the
  machines of :mod:`.download_state` and :mod:`.tunnel_state`) call
  :meth:`~CreditRelay.give_credit` from the states where the stream is open.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from ..wire import ResetCode
from .stream import AgentStream


@implementer(IPushProducer)
class GuestOutput:
    """
    A stream whose guest side produces, as a push producer (see the module's description).

    :param stream: the stream.
    :param cancel_reason: the reason of the ``CANCEL`` reset :meth:`cancel` sends.
    """

    def __init__(self, stream: AgentStream, cancel_reason: str) -> None:
        self._stream = stream
        self._cancel_reason = cancel_reason

    def register_input_producer(self, producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take what we send."""
        self._stream.registerProducer(producer, True)

    def unregister_input_producer(self) -> None:
        """Forget the producer of what we send."""
        self._stream.unregisterProducer()

    def pauseProducing(self) -> None:
        """The consumer is full: withhold credit (the guest stops reading its source)."""
        self._stream.pauseProducing()

    def resumeProducing(self) -> None:
        """The consumer has room again."""
        self._stream.resumeProducing()

    def stopProducing(self) -> None:
        """The consumer went away: :meth:`cancel`."""
        self.cancel()

    def cancel(self) -> None:
        """Reset the stream with ``CANCEL`` (the guest stops what it does for it)."""
        self._stream.abortConnection(ResetCode.CANCEL, self._cancel_reason)


@implementer(IPushProducer)
class CreditRelay:
    """
    The producer of a stream's content for a consumer that may come later (see
    the module's description); a subclass says what :meth:`_regulate` and
    :meth:`abort` do in its lifecycle.

    :ivar _stream: the stream, once open.
    :ivar _consumer_paused: whether the consumer paused us: back-pressure,
        which comes and goes in any state, so a plain flag, not a state.
    """

    def __init__(self) -> None:
        self._stream: Optional[AgentStream] = None
        self._consumer_paused = False

    def _regulate(self) -> None:
        """The consumer paused or resumed: give or withhold credit as the lifecycle's state says."""
        raise NotImplementedError

    def abort(self) -> None:
        """Reset the stream (the guest stops)."""
        raise NotImplementedError

    def withheld(self, holding: bool) -> bool:
        """Whether credit is withheld: while the consumer is paused or content is held for a consumer
        yet to come (``holding``)."""
        return self._consumer_paused or holding

    def give_credit(self, holding: bool) -> None:
        """Give credit, or withhold it (:meth:`withheld`)."""
        stream = self._stream
        if stream is None:
            return
        if self.withheld(holding):
            stream.pauseProducing()
        else:
            stream.resumeProducing()

    def pauseProducing(self) -> None:
        """The consumer is full: withhold credit (the guest stops reading)."""
        self._consumer_paused = True
        self._regulate()

    def resumeProducing(self) -> None:
        """The consumer has room again."""
        self._consumer_paused = False
        self._regulate()

    def stopProducing(self) -> None:
        """The consumer went away: abort."""
        self.abort()


class RelayCore(Protocol):
    """
    What the outputs below need of the core of a :class:`CreditRelay`'s lifecycle machine.

    :ivar relay: the relay.
    :ivar stream: its stream, once open.
    :ivar cancel_reason: the reason of the ``CANCEL`` reset that aborts it.
    """

    relay: CreditRelay
    stream: Optional[AgentStream]
    cancel_reason: str


# Outputs that every such machine has.


def withhold(inputs: Any, core: RelayCore) -> None:
    """Content is held for a consumer yet to come: withhold credit."""
    core.relay.give_credit(holding=True)


def give(inputs: Any, core: RelayCore) -> None:
    """Give credit unless the consumer is paused."""
    core.relay.give_credit(holding=False)


def reset(inputs: Any, core: RelayCore) -> None:
    """Abort: reset the stream with ``CANCEL``."""
    if core.stream is not None:
        core.stream.abortConnection(ResetCode.CANCEL, core.cancel_reason)


__all__ = ["CreditRelay", "GuestOutput", "RelayCore", "give", "reset", "withhold"]
