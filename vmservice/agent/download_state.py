# -*- test-case-name: tests.agent.test_copying,tests.agent.test_bulk -*-
"""
The lifecycle of a download (:class:`~vmservice.agent.copying.GuestDownload`,
and :class:`~vmservice.agent.bulkcopy.BulkDownload`, whose content may come
over the bulk port) as one automat machine (diagram:
``docs/state-machines/download.dot``).

Theory of operation
-------------------

- **Heading**: the guest has not answered.  A head that describes the
  source → Holding (``head`` fires); an error head, one that does not decode,
  or the stream's end → ``head`` fails (Refused while the stream is still
  open, else Over).
- **Holding**: the head came, no writer yet: content is held and credit
  withheld.  The writer (``deliver_to``) → Delivering, what was held first.
  A clean end with all the content the head declared → Arrived.
- **Delivering**: content goes to the writer, credit follows the consumer's
  pausing.  A clean end with all the content → Done (``done`` fires).
- **Arrived**: all content came before the writer: the writer gets it and
  ``done`` fires → Done.
- **Failed**: ``done`` failed with ``INTERRUPTED``: the stream was lost, or
  the content does not match the head (``cut``: more or fewer bytes than it
  declared, the bulk port closed early; the stream is reset).  A writer
  given now still gets what was held.
- **Refused**: ``head`` failed; the guest ends the stream (or an abort resets
  it) → Over.
- **Abandoned**: ``abort`` reset the stream (or it was not open yet: then it
  is not opened, ``may_open``); ``done`` never fires, nor ``head`` if it had
  not; the stream's end → Over.
- **Done**, **Over**: nothing more.

What the stream's end means (lost, finished, or cut short of the head's size)
is decided before it is told, from the byte counts, which are data, not
states.  The consumer's pausing is no state either: it is the flag of the
:class:`~vmservice.agent.relay.CreditRelay`, and ``credit`` asks the state
whether content is held.  A writer before the head, content before the head
(the protocol sends none) or after the stream's end are bugs in the caller
(no transition).

Re-entrancy: the ``head`` and ``done`` callbacks run from outputs and may
call back (``deliver_to``, ``pauseProducing``, ``abort``); a reset's end comes
back as ``lost``; automat runs such inputs once the output returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from ..errors import AgentError, GuestErrorKind
from ..guestport.files import DownloadHead
from .errors import AgentRequestFailed, stream_error
from .relay import CreditRelay, give, reset, withhold
from .stream import AgentStream


class DownloadInputs(Protocol):
    """What can happen to a download."""

    def may_open(self) -> bool:
        """The stream is about to be opened: whether it still should be (not once aborted)."""

    def refused(self, reason: Failure) -> None:
        """The head failed: an error head, one that does not decode, the stream not opened."""

    def head_ok(self, head: DownloadHead) -> None:
        """The head describes the source."""

    def content(self, data: bytes) -> None:
        """Content (within the head's size)."""

    def writer(self, write: Callable[[bytes], None]) -> None:
        """Where the content goes from now on."""

    def finished(self) -> None:
        """The stream ended cleanly, with all the content the head declared."""

    def lost(self, reason: Failure) -> None:
        """The stream ended otherwise (a reset, the channel lost, our abort)."""

    def cut(self, message: str, code: int, reason: str) -> None:
        """The content does not match the head: the copy fails, the stream is reset with ``code``."""

    def abort(self) -> None:
        """Give up: reset the stream (the guest stops)."""

    def credit(self) -> None:
        """The consumer paused or resumed."""


@dataclass
class DownloadCore:
    """
    What the download's states share.

    :ivar relay: the download, as the producer of its content.
    :ivar head: fires with the head, or fails.
    :ivar done: fires once all content was delivered, or fails (``INTERRUPTED``).
    :ivar cancel_reason: the reason of the reset that aborts it.
    :ivar stream: the stream, once open.
    :ivar write: the writer, once given.
    :ivar pending: content held for the writer.
    :ivar delivered: bytes given to the writer.
    """

    relay: CreditRelay
    head: Deferred[DownloadHead] = field(default_factory=Deferred)
    done: Deferred[None] = field(default_factory=Deferred)
    stream: Optional[AgentStream] = None
    cancel_reason: str = "copy cancelled"
    write: Optional[Callable[[bytes], None]] = None
    pending: list[bytes] = field(default_factory=list)
    delivered: int = 0

    def flush(self, write: Callable[[bytes], None]) -> None:
        """``write`` is the writer from now on: what was held goes first."""
        self.write = write
        pending, self.pending = self.pending, []
        for chunk in pending:
            self.delivered += len(chunk)
            write(chunk)


# The behaviours of the transitions, each named after what it does.


def _yes(inputs: DownloadInputs, core: DownloadCore) -> bool:
    return True


def _no(inputs: DownloadInputs, core: DownloadCore) -> bool:
    return False


def _refuse(inputs: DownloadInputs, core: DownloadCore, reason: Failure) -> None:
    core.head.errback(reason)


def _headed(inputs: DownloadInputs, core: DownloadCore, head: DownloadHead) -> None:
    core.head.callback(head)


def _hold(inputs: DownloadInputs, core: DownloadCore, data: bytes) -> None:
    core.pending.append(data)
    core.relay.give_credit(holding=True)


def _write(inputs: DownloadInputs, core: DownloadCore, data: bytes) -> None:
    assert core.write is not None
    core.delivered += len(data)
    core.write(data)


def _drop(inputs: DownloadInputs, core: DownloadCore, data: bytes) -> None:
    pass


def _deliver(inputs: DownloadInputs, core: DownloadCore, write: Callable[[bytes], None]) -> None:
    core.flush(write)
    core.relay.give_credit(holding=False)


def _deliver_all(inputs: DownloadInputs, core: DownloadCore, write: Callable[[bytes], None]) -> None:
    core.flush(write)
    core.done.callback(None)


def _deliver_late(inputs: DownloadInputs, core: DownloadCore, write: Callable[[bytes], None]) -> None:
    core.flush(write)


def _ignore_writer(inputs: DownloadInputs, core: DownloadCore, write: Callable[[bytes], None]) -> None:
    pass


def _done(inputs: DownloadInputs, core: DownloadCore) -> None:
    core.done.callback(None)


def _no_head(inputs: DownloadInputs, core: DownloadCore) -> None:
    if not core.head.called:
        core.head.errback(AgentRequestFailed("the guest ended the copy without a head", kind=GuestErrorKind.MALFORMED))


def _lost_head(inputs: DownloadInputs, core: DownloadCore, reason: Failure) -> None:
    if not core.head.called:
        core.head.errback(stream_error(reason, "the copy"))


def _interrupted(inputs: DownloadInputs, core: DownloadCore, reason: Failure) -> None:
    lost = stream_error(reason, "the copy")
    core.done.errback(AgentError(GuestErrorKind.INTERRUPTED, f"the copy was cut short: {lost}"))


def _cut(inputs: DownloadInputs, core: DownloadCore, message: str, code: int, reason: str) -> None:
    core.done.errback(AgentError(GuestErrorKind.INTERRUPTED, f"the copy was cut short: {message}"))
    if core.stream is not None:
        core.stream.abortConnection(code, reason)


def _build() -> TypeMachine[DownloadInputs, DownloadCore]:
    """The machine: its states, what each input does in them, and what each state ignores."""
    builder = TypeMachineBuilder(DownloadInputs, DownloadCore)
    heading, holding, delivering = builder.state("Heading"), builder.state("Holding"), builder.state("Delivering")
    arrived, failed, refused = builder.state("Arrived"), builder.state("Failed"), builder.state("Refused")
    abandoned, done, over = builder.state("Abandoned"), builder.state("Done"), builder.state("Over")
    I = DownloadInputs

    heading.upon(I.may_open).loop()(_yes)
    abandoned.upon(I.may_open).loop()(_no)
    heading.upon(I.refused).to(refused)(_refuse)
    heading.upon(I.head_ok).to(holding)(_headed)
    heading.upon(I.finished).to(over)(_no_head)
    heading.upon(I.lost).to(over)(_lost_head)
    heading.upon(I.credit).loop()(give)

    holding.upon(I.content).loop()(_hold)
    holding.upon(I.writer).to(delivering)(_deliver)
    holding.upon(I.finished).to(arrived).returns(None)
    holding.upon(I.credit).loop()(withhold)

    delivering.upon(I.content).loop()(_write)
    delivering.upon(I.writer).loop()(_deliver)
    delivering.upon(I.finished).to(done)(_done)
    delivering.upon(I.credit).loop()(give)

    for state in (holding, delivering):
        state.upon(I.lost).to(failed)(_interrupted)
        state.upon(I.cut).to(failed)(_cut)
    for state in (heading, holding, delivering, refused):
        state.upon(I.abort).to(abandoned)(reset)

    arrived.upon(I.writer).to(done)(_deliver_all)
    failed.upon(I.writer).loop()(_deliver_late)

    refused.upon(I.content).loop()(_drop)
    refused.upon(I.credit).loop()(give)
    refused.upon(I.finished).to(over).returns(None)
    refused.upon(I.lost).to(over).returns(None)

    abandoned.upon(I.finished).to(over)(_no_head)
    abandoned.upon(I.lost).to(over)(_lost_head)
    abandoned.upon(I.content).loop()(_drop)
    failed.upon(I.content).loop()(_drop)
    over.upon(I.content).loop()(_drop)

    # Nothing else can happen in a state, or it no longer matters.
    failed.upon(I.finished).loop().returns(None)
    failed.upon(I.lost).loop().returns(None)
    for state in (abandoned, refused, done, over):
        state.upon(I.writer).loop()(_ignore_writer)
    for state in (holding, delivering, arrived, failed, refused, abandoned, done, over):
        state.upon(I.refused).loop().returns(None)
    for state in (arrived, failed, abandoned, done, over):
        state.upon(I.abort).loop().returns(None)
        state.upon(I.credit).loop().returns(None)
    for state in (refused, arrived, failed, abandoned, done, over):
        state.upon(I.cut).loop().returns(None)
    return builder.build()


#: The machine; calling it with a core gives one download's inputs.
DOWNLOAD_MACHINE = _build()

__all__ = ["DOWNLOAD_MACHINE", "DownloadCore", "DownloadInputs"]
