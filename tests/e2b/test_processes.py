"""
Tests for :mod:`vmservice.e2b.processes` and :mod:`vmservice.e2b.process_service`:
envd's process service through the data plane, over a guest that runs
nothing (:class:`~tests.e2b.process_fakes.FakeProcessGuest`).
"""

from __future__ import annotations

from base64 import b64encode
from typing import Any, Mapping

from twisted.internet.error import ConnectionLost
from twisted.python.failure import Failure

from tests.e2b.envd_harness import EnvdCase, messages
from tests.e2b.hosts import CONFIG
from tests.e2b.process_fakes import FakeProcessGuest
from vmservice.config import ApiConfig, AuthConfig, Config
from vmservice.e2b.process_messages import end_event, start_event
from vmservice.e2b.process_service import ProcessService
from vmservice.e2b.processes import Processes
from vmservice.e2b.site import e2b_site
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.guest import IGuest

START = "/process.Process/Start"
ROOT = {"Authorization": "Basic " + b64encode(b"root:").decode()}


def command(cmd: str = "echo hi", **more: Any) -> dict[str, Any]:
    """A start request as the SDK sends it."""
    return {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd], "envs": more.pop("envs", {}),
                        **more.pop("process", {})}, **more}


class ProcessCase(EnvdCase):
    """A data plane serving the process service (at most three processes a sandbox) over a fake guest."""

    env_vars = (("GLOBAL", "1"), ("SHARED", "sandbox"))

    def make_guest(self) -> IGuest | None:
        self.guest = FakeProcessGuest()
        return self.guest  # type: ignore[return-value]

    def setUp(self) -> None:
        super().setUp()
        self.processes = Processes(self.clock, self.host, limit=3, keepalive=50)
        config = Config(api=ApiConfig(auth=AuthConfig(enabled=False)))
        self.site = e2b_site(self.clock, config, CONFIG, self.sandboxes, self.host, None,
                             ProcessService(self.processes).methods()).wrappedFactory

    def start(self, message: Mapping[str, Any], headers: Mapping[str, str] | None = None,
              pid: int | None = 40) -> tuple[Any, Any]:
        """Start a process (the guest reports ``pid`` unless ``None``): its channel and transport."""
        channel, transport = self.open_stream(START, message, headers)
        if pid is not None:
            started = (self.guest.shells if "pty" in message else self.guest.execs)[-1]
            started.sink.started(pid)
        return channel, transport

    def call(self, method: str, message: Mapping[str, Any]) -> tuple[int, Any]:
        return self.unary(f"/process.Process/{method}", message)


class StartTests(ProcessCase):
    """``Start`` runs an exec as the call's user, with the sandbox's environment under its own."""

    def test_exec(self) -> None:
        """The exec: no shell, the user's identity and home, umask 022, stdin a pipe; then its events."""
        _, transport = self.start(command(envs={"SHARED": "mine", "OWN": "2"}))
        [started] = self.guest.execs
        request = started.request
        self.assertEqual((request.cmd, request.args, request.shell), ("/bin/bash", ("-l", "-c", "echo hi"), ""))
        self.assertEqual(request.env, ("GLOBAL=1", "SHARED=sandbox", "SHARED=mine", "OWN=2"))
        self.assertEqual((request.uid, request.gid, request.cwd, request.umask, request.stdin),
                         (1000, 1000, "/home/user", 0o022, True))
        started.sink.output("stdout", b"hi\n")
        started.sink.exited(0, None)
        self.assertEqual(messages(transport), (200, [start_event(40), {"event": {"data": {"stdout": "aGkK"}}},
                                                     end_event(0, None)], {}))
        self.assertEqual(len(self.processes.table(self.sandbox_id)), 0)
        self.assertEqual(self.host.holds[self.sandbox_id], 0)

    def test_root_cwd_stdin(self) -> None:
        """Root's home; a cwd given is used; ``stdin: false`` is /dev/null."""
        self.start(command(process={"cwd": "/tmp"}, stdin=False), ROOT)
        self.start(command(), ROOT)
        first, second = self.guest.execs
        self.assertEqual((first.request.uid, first.request.cwd, first.request.stdin), (0, "/tmp", False))
        self.assertEqual(second.request.cwd, "/root")

    def test_envs_do_not_leak(self) -> None:
        """One command's environment is not the next one's."""
        self.start(command(envs={"ONLY": "first"}))
        self.start(command())
        self.assertEqual(self.guest.execs[1].request.env, ("GLOBAL=1", "SHARED=sandbox"))

    def test_exit_code(self) -> None:
        """A failing command's end event carries its code and status."""
        _, transport = self.start(command("exit 3"))
        self.guest.execs[0].sink.output("stderr", b"bad")
        self.guest.execs[0].sink.exited(3, None)
        self.assertEqual(messages(transport)[1][-1], end_event(3, None))

    def test_refused(self) -> None:
        """A request the guest refuses fails with its code; the table lets it go."""
        _, transport = self.start(command(process={"cwd": "/nope"}), pid=None)
        self.guest.execs[0].sink.lost(AgentError(GuestErrorKind.REJECTED, "cwd '/nope' does not exist"))
        self.assertEqual(messages(transport)[2]["error"]["code"], "invalid_argument")
        self.assertEqual(len(self.processes.table(self.sandbox_id)), 0)

    def test_unavailable(self) -> None:
        """A guest that cannot take the exec at all: ``unavailable``, nothing kept."""
        self.guest.error = AgentError(GuestErrorKind.UNAVAILABLE, "no agent")
        _, transport = self.open_stream(START, command())
        self.assertEqual(messages(transport)[2]["error"]["code"], "unavailable")
        self.assertEqual((len(self.processes.table(self.sandbox_id)), self.host.holds[self.sandbox_id]), (0, 0))

    def test_bad_request(self) -> None:
        """A malformed request is ``invalid_argument`` and starts nothing."""
        _, transport = self.open_stream(START, {"process": {"cmd": ""}})
        self.assertEqual(messages(transport)[2]["error"]["code"], "invalid_argument")
        self.assertEqual(self.guest.execs, [])

    def test_bounded(self) -> None:
        """Beyond the table's limit, ``resource_exhausted``; room again once one ends."""
        for _ in range(3):
            self.start(command("sleep 100"))
        _, transport = self.open_stream(START, command())
        self.assertEqual(messages(transport)[2]["error"]["code"], "resource_exhausted")
        self.guest.execs[0].sink.exited(0, None)
        self.start(command(), pid=44)
        self.assertEqual(len(self.guest.execs), 4)

    def test_client_gone(self) -> None:
        """A client going away leaves the process running, listed, its output dropped."""
        channel, transport = self.start(command("sleep 100"))
        channel.connectionLost(Failure(ConnectionLost()))
        self.guest.execs[0].sink.output("stdout", b"nobody")
        self.assertEqual([p["pid"] for p in self.call("List", {})[1]["processes"]], [40])
        self.assertFalse(self.guest.execs[0].killed)
        self.assertEqual(self.host.holds[self.sandbox_id], 1)

    def test_lost(self) -> None:
        """A guest lost mid-command breaks the stream at the connection: no end envelope."""
        _, transport = self.start(command("sleep 100"))
        self.guest.execs[0].sink.lost(AgentError(GuestErrorKind.UNAVAILABLE, "agent gone"))
        self.assertEqual(messages(transport), (200, [start_event(40)], None))
        self.assertTrue(transport.disconnecting)
        self.assertEqual(self.call("List", {})[1], {"processes": []})

    def test_sandbox_deleted(self) -> None:
        """The sandbox's node deleted: its processes killed, their streams broken, its table gone."""
        _, transport = self.start(command("sleep 100"))
        self.host.remove(self.sandbox_id)
        self.assertTrue(self.guest.execs[0].killed)
        self.assertTrue(transport.disconnecting)
        self.assertEqual(self.host.holds[self.sandbox_id], 0)

    def test_forged_pid(self) -> None:
        """A pid no guest has ends the process: killed, its stream broken, nothing kept."""
        for pid in (0, -5, 2**32):
            _, transport = self.start(command(), pid=pid)
            self.assertTrue(self.guest.execs[-1].killed)
            self.assertTrue(transport.disconnecting)
        self.assertEqual((len(self.processes.table(self.sandbox_id)), self.host.holds[self.sandbox_id]), (0, 0))

    def test_keepalive(self) -> None:
        """A stream with nothing to say gets a keepalive at the interval."""
        _, transport = self.start(command("sleep 100"))
        self.clock.advance(50)
        self.assertEqual(messages(transport)[1][-1], {"event": {"keepalive": {}}})


class TerminalTests(ProcessCase):
    """A command with a terminal runs as the guest's shell on a pseudo-terminal."""

    def test_pty(self) -> None:
        """The shell: the command, the size, the environment; terminal output, input and resize."""
        pty = {"process": {"cmd": "/bin/bash", "args": ["-i", "-l"], "envs": {"TERM": "xterm"}},
               "pty": {"size": {"cols": 120, "rows": 40}}}
        _, transport = self.start(pty)
        [shell] = self.guest.shells
        self.assertEqual((shell.request.shell, shell.request.cols, shell.request.rows, shell.request.uid,
                          shell.request.cwd, shell.request.env),
                         ("/bin/bash", 120, 40, 1000, "/home/user", ("GLOBAL=1", "SHARED=sandbox", "TERM=xterm")))
        shell.sink.output(b"$ ")
        self.assertEqual(messages(transport)[1][-1], {"event": {"data": {"pty": "JCA="}}})
        self.assertEqual(self.call("SendInput", {"process": {"pid": 40}, "input": {"pty": "bHMK"}}), (200, {}))
        self.assertEqual(self.call("Update", {"process": {"pid": 40}, "pty": {"size": {"cols": 80, "rows": 20}}}),
                         (200, {}))
        self.assertEqual((shell.typed, shell.sizes), ([b"ls\n"], [(80, 20)]))
        self.assertEqual(self.call("SendInput", {"process": {"pid": 40}, "input": {"stdin": "bHMK"}})[1]["code"],
                         "internal")
        self.assertEqual(self.call("CloseStdin", {"process": {"pid": 40}})[1]["code"], "unknown")
        self.assertEqual(self.call("SendSignal", {"process": {"pid": 40}, "signal": "SIGNAL_SIGKILL"}), (200, {}))
        self.assertTrue(shell.hung_up)
        self.assertEqual(messages(transport)[1:], ([start_event(40), {"event": {"data": {"pty": "JCA="}}},
                                                    end_event(-1, "SIGKILL")], {}))


class ControlTests(ProcessCase):
    """``List``, ``Connect``, ``SendInput``, ``CloseStdin``, ``SendSignal``, ``Update`` by pid or tag."""

    def test_list(self) -> None:
        """The running processes, their configuration as asked, their pid and tag; not the starting ones."""
        self.start(command("sleep 1", tag="web", process={"cwd": "/srv"}))
        self.start(command(), pid=None)
        self.assertEqual(self.call("List", {}), (200, {"processes": [{
            "config": {"cmd": "/bin/bash", "args": ["-l", "-c", "sleep 1"], "envs": {}, "cwd": "/srv"},
            "pid": 40, "tag": "web"}]}))

    def test_connect(self) -> None:
        """``Connect`` by pid or tag: the start event, then what comes from now on, then the end."""
        self.start(command("sleep 1", tag="web"))
        sink = self.guest.execs[0].sink
        sink.output("stdout", b"before")
        _, by_pid = self.open_stream("/process.Process/Connect", {"process": {"pid": 40}})
        _, by_tag = self.open_stream("/process.Process/Connect", {"process": {"tag": "web"}})
        sink.output("stdout", b"after")
        sink.exited(0, None)
        for transport in (by_pid, by_tag):
            self.assertEqual(messages(transport), (200, [start_event(40), {"event": {"data": {"stdout": "YWZ0ZXI="}}},
                                                         end_event(0, None)], {}))

    def test_not_found(self) -> None:
        """An unknown pid or tag is ``not_found``, for every method."""
        for method, extra in (("SendInput", {"input": {"stdin": ""}}), ("CloseStdin", {}),
                              ("SendSignal", {"signal": "SIGNAL_SIGTERM"}), ("Update", {})):
            self.assertEqual(self.call(method, {"process": {"pid": 9}, **extra})[1]["code"], "not_found")
        _, transport = self.open_stream("/process.Process/Connect", {"process": {"tag": "none"}})
        self.assertEqual(messages(transport)[2]["error"]["code"], "not_found")

    def test_stdin(self) -> None:
        """Input to stdin, then its end; input after the end (or with stdin off, or to a pty) is refused."""
        self.start(command("cat", tag="cat"))
        self.assertEqual(self.call("SendInput", {"process": {"tag": "cat"}, "input": {"stdin": "aGk="}}), (200, {}))
        self.assertEqual(self.call("SendInput", {"process": {"pid": 40}, "input": {"pty": "aGk="}})[1]["code"],
                         "internal")
        self.assertEqual(self.call("CloseStdin", {"process": {"pid": 40}}), (200, {}))
        self.assertEqual(self.call("SendInput", {"process": {"pid": 40}, "input": {"stdin": "aGk="}})[1]["code"],
                         "internal")
        self.assertEqual((self.guest.execs[0].stdin, self.guest.execs[0].stdin_closed), ([b"hi"], True))
        self.assertEqual(self.call("SendInput", {"process": {"pid": 40}, "input": {"stdin": "!"}})[1]["code"],
                         "invalid_argument")

    def test_signal(self) -> None:
        """SIGTERM or SIGKILL end the process (its stream reset), its stream ended cleanly; another is refused."""
        _, transport = self.start(command("sleep 100"))
        self.assertEqual(self.call("SendSignal", {"process": {"pid": 40}, "signal": "SIGNAL_UNSPECIFIED"})[1]["code"],
                         "invalid_argument")
        self.assertFalse(self.guest.execs[0].killed)
        self.assertEqual(self.call("SendSignal", {"process": {"pid": 40}, "signal": "SIGNAL_SIGTERM"}), (200, {}))
        self.assertTrue(self.guest.execs[0].killed)
        self.assertEqual(messages(transport)[1:], ([start_event(40), end_event(-1, "SIGTERM")], {}))
        self.assertEqual(self.host.holds[self.sandbox_id], 0)
        self.assertEqual(self.call("SendSignal", {"process": {"pid": 40}, "signal": "SIGNAL_SIGKILL"})[1]["code"],
                         "not_found")

    def test_update(self) -> None:
        """A process without a terminal cannot be resized; an update without a size does nothing."""
        self.start(command())
        self.assertEqual(self.call("Update", {"process": {"pid": 40}}), (200, {}))
        self.assertEqual(self.call("Update", {"process": {"pid": 40}, "pty": {"size": {"cols": 1, "rows": 1}}}
                                   )[1]["code"], "failed_precondition")
