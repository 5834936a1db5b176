# -*- test-case-name: tests.agent.test_bulk -*-
"""
The lifecycle of an upload over the bulk port
(:class:`~vmservice.agent.bulkcopy.BulkUpload`) as one automat machine
(diagram: ``docs/state-machines/bulk-upload.dot``).

Theory of operation
-------------------

The body may come before the guest said how it takes it, so it is held (its
producer paused past :data:`HELD_HIGH_WATER`) until then, its end too:

- **Connecting**: the port's link is being connected.  A link → Offered (the
  ``cp-upload-bulk`` stream is opened with its token); none (the port busy or
  gone) → FallenBack.
- **Offered**: the guest has not answered.  Its head ``{"ok": true, "bulk":
  true}`` (``accepted``) → Bulk; a RESET before it, ``REFUSED`` (its port is
  busy) or ``UNKNOWN_OP`` (an older agent, and the port is not tried again)
  (``declined``) → FallenBack; any other failure → Failed.
- **Bulk**: the body goes on the link; its end → Finishing (the size and
  HALF_CLOSE on the stream).  The reply settles the result.
- **FallenBack**: the body goes on a ``cp-upload`` stream, whose result is the
  upload's.
- **Failed**: the result failed; nothing more.
- **Aborted**: the link is closed and the stream reset (or the fall-back's
  upload aborted); a reply still settles the result.

What was held goes first on entering Bulk or FallenBack, then the producer
is handed over and resumed, then the end if it came.  The producer's pausing
past the high water is back-pressure, a plain flag, not a state.

Body bytes are not an input: every transition sets, first, what a write
does in the state it enters (:attr:`BulkUploadCore.on_write`: held while
Connecting or Offered, the state the machine starts in; on the link while
Bulk or Finishing; to the ``cp-upload`` once FallenBack; dropped once
Failed or Aborted), and the upload calls that for every piece: an automat
input costs a few µs, a call much less.  Bytes written while a transition's
outputs run (the producer resumed on entering Bulk) go as the new state
sends them, after what was held.

Re-entrancy: a failure met in an output (the stream or the fall-back's
stream cannot be opened) is sent as ``failed``, which automat runs once the
output returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure

from ..errors import AgentError
from ..guestport.files import UploadRequest, UploadResult
from ..wire import ResetCode
from ..wire.bulk import encode_upload_end
from .bulk import BulkChannel, BulkLink
from .channel import Channel
from .copying import GuestUpload, settle, start_upload
from .stream import AgentStream

#: Bytes of body held while the guest has not said how it takes them.
HELD_HIGH_WATER = 1024 * 1024


class BulkUploadInputs(Protocol):
    """What can happen to an upload over the bulk port."""

    def link_connected(self, link: BulkLink) -> bool:
        """The port's link is connected: whether to open the stream (not once aborted)."""

    def no_link(self) -> None:
        """The port is busy or gone."""

    def accepted(self) -> None:
        """The guest holds the port."""

    def declined(self, supported: bool) -> None:
        """The guest reset the stream before its head, refusing the port (``supported``: it knows the op)."""

    def failed(self, error: AgentError) -> None:
        """The copy failed before the body went anywhere."""

    def replied(self, outcome: Any) -> None:
        """The guest's reply (an :class:`UploadResult` or a failure)."""

    def end(self) -> None:
        """The body is complete."""

    def register_producer(self, producer: IPushProducer) -> None:
        """A producer of the body."""

    def unregister_producer(self) -> None:
        """The producer is gone."""

    def abort(self) -> None:
        """Give up: the guest removes what it was writing."""


@dataclass
class BulkUploadCore:
    """
    What the upload's states share.

    :ivar agent: the channel, for the fall-back's stream.
    :ivar channel: the port, told when the guest does not serve it.
    :ivar request: the upload.
    :ivar result: fires with the guest's reply.
    :ivar held: the body held; ``held_end``: its end came too.
    :ivar link: the port's link, once connected.
    :ivar stream: the copy's stream, once open.
    :ivar fallback: the ``cp-upload`` stream's upload, once fallen back.
    :ivar producer: the body's producer, if one is registered.
    :ivar producer_paused: whether we paused it (too much held).
    :ivar sent: body bytes sent on the link.
    :ivar on_write: what body bytes do in the machine's state, set by its
        transitions: :meth:`hold`, :meth:`send`, :meth:`pass_on` or
        :meth:`drop`.
    """

    agent: Channel
    channel: BulkChannel
    request: UploadRequest
    result: Deferred[UploadResult] = field(default_factory=Deferred)
    held: list[bytes] = field(default_factory=list)
    held_size: int = 0
    held_end: bool = False
    link: Optional[BulkLink] = None
    stream: Optional[AgentStream] = None
    fallback: Optional[GuestUpload] = None
    producer: Optional[IPushProducer] = None
    producer_paused: bool = False
    sent: int = 0
    on_write: Callable[[bytes], None] = field(init=False)

    def __post_init__(self) -> None:
        self.on_write = self.hold  # Connecting

    def hold(self, data: bytes) -> None:
        """Body bytes before the guest said how it takes them: held, the producer paused past the high water."""
        self.held.append(data)
        self.held_size += len(data)
        if self.held_size > HELD_HIGH_WATER and self.producer is not None and not self.producer_paused:
            self.producer_paused = True
            self.producer.pauseProducing()

    def pass_on(self, data: bytes) -> None:
        """Body bytes once fallen back: to the ``cp-upload``."""
        if self.fallback is not None:
            self.fallback.write(data)

    def drop(self, data: bytes) -> None:
        """Body bytes once failed or aborted."""

    def settle(self, outcome: Any) -> None:
        """Fire the result with ``outcome`` (a failure fails it), unless it fired."""
        settle(self.result, outcome)

    def release(self, write: Callable[[bytes], None]) -> bool:
        """Write what was held; whether its end came too."""
        held, self.held, self.held_size = self.held, [], 0
        for chunk in held:
            write(chunk)
        return self.held_end

    def resume_producer(self) -> None:
        if self.producer is not None and self.producer_paused:
            self.producer_paused = False
            self.producer.resumeProducing()

    def send(self, data: bytes) -> None:
        """Body bytes on the link."""
        self.sent += len(data)
        assert self.link is not None
        self.link.write(data)

    def finish(self) -> None:
        """The body's size and HALF_CLOSE on the stream: the guest may commit it."""
        if self.stream is not None:
            self.stream.write(encode_upload_end(self.sent))
            self.stream.loseConnection()

    def close_link(self) -> None:
        if self.link is not None:
            self.link.close()


# The behaviours of the transitions, each named after what it does.


def _offer(inputs: BulkUploadInputs, core: BulkUploadCore, link: BulkLink) -> bool:
    core.link = link
    return True


def _refuse_link(inputs: BulkUploadInputs, core: BulkUploadCore, link: BulkLink) -> bool:
    link.close()
    return False


def _hold_end(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    core.held_end = True


def _keep_producer(inputs: BulkUploadInputs, core: BulkUploadCore, producer: IPushProducer) -> None:
    core.producer = producer


def _forget_producer(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    core.producer = None


def _go_bulk(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    core.on_write = core.send
    assert core.link is not None
    core.link.start()
    ended = core.release(core.send)
    if core.producer is not None:
        core.link.transport.registerProducer(core.producer, True)  # type: ignore[attr-defined]
        core.resume_producer()
    if ended:
        core.finish()


def _fall_back(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    core.on_write = core.pass_on
    try:
        upload = start_upload(core.agent, core.request)
    except AgentError as e:
        inputs.failed(e)
        return
    core.fallback = upload
    upload.result.addBoth(core.settle)
    ended = core.release(upload.write)
    if core.producer is not None:
        upload.register_producer(core.producer)
        core.resume_producer()
    if ended:
        upload.end()


def _declined(inputs: BulkUploadInputs, core: BulkUploadCore, supported: bool) -> None:
    core.close_link()
    if not supported:
        core.channel.supported = False
    _fall_back(inputs, core)


def _give_up(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    core.on_write = core.drop


def _fail(inputs: BulkUploadInputs, core: BulkUploadCore, error: AgentError) -> None:
    core.on_write = core.drop
    core.close_link()
    core.settle(Failure(error))


def _replied(inputs: BulkUploadInputs, core: BulkUploadCore, outcome: Any) -> None:
    core.close_link()
    core.settle(outcome)


def _finish(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    core.finish()


def _link_producer(inputs: BulkUploadInputs, core: BulkUploadCore, producer: IPushProducer) -> None:
    core.producer = producer
    assert core.link is not None
    core.link.transport.registerProducer(producer, True)  # type: ignore[attr-defined]


def _unlink_producer(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    if core.producer is not None:
        assert core.link is not None
        core.link.transport.unregisterProducer()  # type: ignore[attr-defined]
    core.producer = None


def _pass_end(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    if core.fallback is not None:
        core.fallback.end()


def _pass_producer(inputs: BulkUploadInputs, core: BulkUploadCore, producer: IPushProducer) -> None:
    core.producer = producer
    if core.fallback is not None:
        core.fallback.register_producer(producer)


def _unpass_producer(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    if core.fallback is not None:
        core.fallback.unregister_producer()
    core.producer = None


def _replied_early(inputs: BulkUploadInputs, core: BulkUploadCore, outcome: Any) -> None:
    core.on_write = core.drop
    _replied(inputs, core, outcome)


def _reset(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    core.on_write = core.drop
    core.close_link()
    if core.stream is not None:
        core.stream.abortConnection(ResetCode.CANCEL, "copy cancelled")


def _abort_fallback(inputs: BulkUploadInputs, core: BulkUploadCore) -> None:
    core.on_write = core.drop
    if core.fallback is not None:
        core.fallback.abort()


def _build() -> TypeMachine[BulkUploadInputs, BulkUploadCore]:
    """The machine: its states, what each input does in them, and what each state ignores."""
    builder = TypeMachineBuilder(BulkUploadInputs, BulkUploadCore)
    connecting, offered, bulk = builder.state("Connecting"), builder.state("Offered"), builder.state("Bulk")
    finishing, fallen, failed = builder.state("Finishing"), builder.state("FallenBack"), builder.state("Failed")
    aborted = builder.state("Aborted")
    I = BulkUploadInputs

    connecting.upon(I.link_connected).to(offered)(_offer)
    connecting.upon(I.no_link).to(fallen)(_fall_back)
    aborted.upon(I.link_connected).loop()(_refuse_link)
    aborted.upon(I.no_link).loop().returns(None)
    for state in (connecting, offered):
        state.upon(I.end).loop()(_hold_end)
        state.upon(I.register_producer).loop()(_keep_producer)
        state.upon(I.unregister_producer).loop()(_forget_producer)
    connecting.upon(I.abort).to(aborted)(_give_up)

    offered.upon(I.accepted).to(bulk)(_go_bulk)
    offered.upon(I.declined).to(fallen)(_declined)
    offered.upon(I.failed).to(failed)(_fail)
    offered.upon(I.abort).to(aborted)(_reset)

    for state in (bulk, finishing):
        state.upon(I.register_producer).loop()(_link_producer)
        state.upon(I.unregister_producer).loop()(_unlink_producer)
        state.upon(I.replied).loop()(_replied)
        state.upon(I.abort).to(aborted)(_reset)
    bulk.upon(I.end).to(finishing)(_finish)
    finishing.upon(I.end).loop().returns(None)

    fallen.upon(I.end).loop()(_pass_end)
    fallen.upon(I.register_producer).loop()(_pass_producer)
    fallen.upon(I.unregister_producer).loop()(_unpass_producer)
    fallen.upon(I.failed).to(failed)(_fail)
    fallen.upon(I.abort).to(aborted)(_abort_fallback)

    offered.upon(I.replied).to(failed)(_replied_early)
    for state in (aborted, failed):
        state.upon(I.replied).loop()(_replied)
        state.upon(I.register_producer).loop().returns(None)
        for each in (I.end, I.unregister_producer, I.abort, I.accepted):
            state.upon(each).loop().returns(None)
        # The link was closed on the way here.
        state.upon(I.declined).loop().returns(None)
        state.upon(I.failed).loop().returns(None)
    return builder.build()


#: The machine; calling it with a core gives one upload's inputs.
BULK_UPLOAD_MACHINE = _build()

__all__ = ["BULK_UPLOAD_MACHINE", "BulkUploadCore", "BulkUploadInputs", "HELD_HIGH_WATER"]
