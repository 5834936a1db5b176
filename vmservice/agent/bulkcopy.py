# -*- test-case-name: tests.agent.test_bulk -*-
"""
Binary copies over a guest's bulk port (:mod:`.bulk`), with the copy's
multiplexed stream for the head, the reply and the end: the same
:class:`~vmservice.guestport.files.IUpload` and
:class:`~vmservice.guestport.files.IDownload` as :mod:`.copying`, which
they fall back to when the port is busy, missing or not served by the agent
(``docs/agent-protocol.md``, "The bulk port").

- :class:`BulkUpload`: OPEN ``cp-upload-bulk`` with the link's token; the
  body is held until the guest's head ``{"ok": true, "bulk": true}`` says it
  holds the port, then the token and the body go on the link, and once the
  body ended ``{"size": N}`` and HALF_CLOSE on the stream; the reply is the
  ``cp-upload`` one.  A RESET before that head (``REFUSED``: the guest's port
  is busy; ``UNKNOWN_OP``: an older agent) sends the body as a ``cp-upload``.
- :class:`BulkDownload`: OPEN ``cp-download`` with ``"bulk": TOKEN``; a head
  with ``"bulk": true`` means the content comes on the link (exactly
  ``size`` bytes after the guest's echo of the token), else on the stream as
  before (an older agent ignores the field).
"""

from __future__ import annotations

from typing import Any, Optional, cast

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from ..errors import AgentError
from ..guestport.files import DownloadRequest, IUpload, UploadRequest, usable_size
from ..wire import ResetCode
from .bulk import BulkChannel, BulkLink
from .bulk_upload_state import BULK_UPLOAD_MACHINE, HELD_HIGH_WATER, BulkUploadCore
from .channel import Channel
from .copying import GuestDownload, _UploadProtocol
from .errors import stream_error
from .headed import HeadedProtocol
from .stream import AgentStream, StreamReset


class _BulkReply:
    """
    The :class:`~.headed.HeadReceiver` of a bulk upload: the guest's head (it
    holds the port; a head that does not decode counts as one that says
    otherwise, and resets the stream), then its reply as for ``cp-upload``.
    """

    def __init__(self, owner: "BulkUpload") -> None:
        self._owner = owner
        self._headed = False
        self.reply = _UploadProtocol()

    def connected(self, stream: AgentStream) -> None:
        self.reply.transport = stream

    def head_malformed(self, error: ValueError) -> None:
        self.headed({}, b"")

    def headed(self, head: dict[str, Any], rest: bytes) -> None:
        self._headed = True
        if head.get("ok") is not True or head.get("bulk") is not True:
            cast(AgentStream, self.reply.transport).abortConnection(ResetCode.PROTOCOL_ERROR, "bad bulk head")
            return
        self._owner._accepted()
        if rest:
            self.reply.dataReceived(rest)

    def body(self, data: bytes) -> None:
        self.reply.dataReceived(data)

    def read_ended(self) -> None:
        if self._headed:
            self.reply.readConnectionLost()

    def ended(self, reason: Failure) -> None:
        if self._headed:
            self.reply.connectionLost(reason)
        else:
            self._owner._refused(reason)


@implementer(IUpload)
class BulkUpload:
    """
    An upload over the bulk port (or, when the guest refuses it, its stream);
    its lifecycle is the machine of :mod:`.bulk_upload_state`.

    :ivar result: fires with the guest's reply, or fails.
    """

    def __init__(self, agent: Channel, channel: BulkChannel, request: UploadRequest) -> None:
        self._core = BulkUploadCore(agent=agent, channel=channel, request=request)
        self._inputs = BULK_UPLOAD_MACHINE(self._core)
        self.result = self._core.result

    async def open(self) -> None:
        """Connect the link and open the stream (or fall back at once)."""
        core = self._core
        link = await core.channel.connect()
        if link is None:
            self._inputs.no_link()
            return
        if not self._inputs.link_connected(link):
            return
        header = {**core.request.to_json(), "op": "cp-upload-bulk", "bulk": link.token.hex()}
        protocol = _BulkReply(self)
        try:
            core.stream = core.agent.open_stream(header, HeadedProtocol(protocol))
        except AgentError as e:
            self._inputs.failed(e)
            return
        protocol.reply.reply.addBoth(self._inputs.replied)

    # -- the guest's answers ------------------------------------------------------------

    def _accepted(self) -> None:
        self._inputs.accepted()

    def _refused(self, reason: Failure) -> None:
        error = reason.value
        if isinstance(error, StreamReset) and error.code in (ResetCode.REFUSED, ResetCode.UNKNOWN_OP):
            self._inputs.declined(error.code == ResetCode.REFUSED)
        else:
            self._inputs.failed(stream_error(reason, "the copy"))

    def _settle(self, outcome: Any) -> None:
        self._core.settle(outcome)

    # -- IUpload ----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Body bytes: held until the guest said how it takes them (what the machine's state does with them)."""
        self._core.on_write(data)

    def register_producer(self, producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take more."""
        self._inputs.register_producer(producer)

    def unregister_producer(self) -> None:
        """Forget the producer."""
        self._inputs.unregister_producer()

    def end(self) -> None:
        """The body is complete."""
        self._inputs.end()

    def abort(self) -> None:
        """Give up: the guest removes what it was writing."""
        self._inputs.abort()


class BulkDownload(GuestDownload):
    """A download whose content may come over the bulk port."""

    def __init__(self, channel: BulkChannel) -> None:
        super().__init__()
        self._channel = channel
        self._link: Optional[BulkLink] = None
        self._bulk_size: Optional[int] = None
        self._bulk_received = 0
        self._stream_ended = False

    async def open(self, agent: Channel, request: DownloadRequest) -> None:
        """Connect the link and open the stream."""
        link = await self._channel.connect()
        if not self._inputs.may_open():
            if link is not None:
                link.close()
            return
        header = request.to_json()
        if link is not None:
            header["bulk"] = link.token.hex()
            self._link = link
            link.lost.addCallback(lambda _: self._link_lost())
        try:
            stream = agent.open_stream(header, HeadedProtocol(self))
        except AgentError as e:
            if link is not None:
                link.close()
            self._head_failed(Failure(e))
            return
        stream.loseConnection()
        self._regulate()

    def headed(self, reply: Any, rest: bytes) -> None:
        result = reply.get("result") if isinstance(reply, dict) else None
        size = result.get("size") if isinstance(result, dict) else None
        link = self._link
        if link is not None and isinstance(result, dict) and result.get("bulk") is True and usable_size(size):
            self._bulk_size = size
        elif link is not None:
            self._link = None
            link.close()
        head = self._head_of(reply)
        if head is None:
            if self._bulk_size is not None and link is not None:
                link.close()
            return
        self._take(head, rest)
        if self._bulk_size is not None and link is not None:
            link.start(self._bulk_content)

    def _bulk_content(self, data: bytes) -> None:
        assert self._bulk_size is not None
        left = self._bulk_size - self._bulk_received
        data = data[:left]
        self._bulk_received += len(data)
        if data:
            GuestDownload.body(self, data)
        if self._bulk_received >= self._bulk_size:
            link, self._link = self._link, None
            if link is not None:
                link.close()
            self._complete()

    def ended(self, reason: Failure) -> None:
        if self._bulk_size is None or reason.check(ConnectionDone) is None:
            if self._link is not None:
                link, self._link = self._link, None
                link.close()
            super().ended(reason)
            return
        self._stream_ended = True
        self._complete()

    def _complete(self) -> None:
        """Both the stream ended and all content came: done (once there is a writer)."""
        assert self._bulk_size is not None
        if self._stream_ended and self._bulk_received >= self._bulk_size:
            super().ended(Failure(ConnectionDone()))

    def _link_lost(self) -> None:
        if self._bulk_size is None or self._bulk_received >= self._bulk_size:
            return
        self._inputs.cut(f"the bulk port closed after {self._bulk_received} bytes", ResetCode.CANCEL,
                         "bulk port closed")

    def give_credit(self, holding: bool) -> None:
        """The link's socket is paused as the stream's credit is withheld."""
        super().give_credit(holding)
        link = self._link
        if link is None:
            return
        if self.withheld(holding):
            link.pause()
        else:
            link.resume()

    def abort(self) -> None:
        """Reset the stream and drop the link (the guest stops)."""
        super().abort()
        if self._link is not None:
            link, self._link = self._link, None
            link.close()


__all__ = ["BulkDownload", "BulkUpload", "HELD_HIGH_WATER"]
