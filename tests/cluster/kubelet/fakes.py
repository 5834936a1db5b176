"""Fakes of what the kubelet API drives: a guest's exec, the pod resolver, the fleet's guests."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from tests.agent.fakes import RecordingProducer
from vmservice.cluster.kubelet.pods import PodRef
from vmservice.errors import NotFound
from vmservice.guestport.exec import ExecRequest, IExecProcess, IExecSink
from vmservice.guestport.shell import IShellSession, IShellSink, ShellRequest


@implementer(IExecProcess)
class FakeProcess(RecordingProducer):
    """A running exec that records what it is told."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Any] = []  # type: ignore[assignment]  # strings and resizes
        self.stdin = b""
        self.stdin_producer: Optional[IPushProducer] = None

    def write_stdin(self, data: bytes) -> None:
        self.stdin += data

    def close_stdin(self) -> None:
        self.calls.append("eof")

    def register_stdin_producer(self, producer: IPushProducer) -> None:
        self.stdin_producer = producer

    def unregister_stdin_producer(self) -> None:
        self.stdin_producer = None

    def kill(self) -> None:
        self.calls.append("kill")


@implementer(IShellSession)
class FakeShellSession(FakeProcess):
    """A running shell that records what it is told (typing goes to ``stdin``)."""

    def write(self, data: bytes) -> None:
        self.stdin += data

    def resize(self, cols: int, rows: int) -> None:
        self.calls.append(("resize", cols, rows))

    def register_input_producer(self, producer: IPushProducer) -> None:
        self.stdin_producer = producer

    def unregister_input_producer(self) -> None:
        self.stdin_producer = None

    def hangup(self) -> None:
        self.calls.append("hangup")


class FakeExecGuest:
    """
    A guest whose execs and shells are recorded: ``requests`` and their
    ``sink``, each exec given ``process`` and each shell ``shell_session``.
    """

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.sink: Any = None
        self.process = FakeProcess()
        self.shell_session = FakeShellSession()

    def exec(self, request: ExecRequest, sink: IExecSink) -> FakeProcess:
        self.requests.append(request)
        self.sink = sink
        return self.process

    def shell(self, request: ShellRequest, sink: IShellSink) -> FakeShellSession:
        self.requests.append(request)
        self.sink = sink
        return self.shell_session


class FakeResolver:
    """One pod, ``default/web`` with container ``vm``, on VM ``demo-1``; it lists itself."""

    def __call__(self, namespace: str, pod: str, container: str) -> Optional[str]:
        return "demo-1" if (namespace, pod, container) == ("default", "web", "vm") else None

    def pods(self) -> Sequence[PodRef]:
        return [PodRef("default", "web", "uid-1", ("vm",), "demo-1")]


class FakeGuests:
    """The fleet's guests: ``demo-1`` is ``guest``."""

    def __init__(self, guest: Any) -> None:
        self.guest_ = guest

    async def guest(self, hostname: str) -> Any:
        if hostname != "demo-1":
            raise NotFound(f"no node {hostname}")
        return self.guest_
