# -*- test-case-name: tests.guest.test_identity -*-
"""
The guest's ``adopt`` operation (:mod:`vmservice.guest.identity`) through a real
:class:`~vmservice.guest.agent.Session`, with its ioctl, files, clock and ``ip``
replaced: these tests never touch the random generator, host name, clock or
network of the machine they run on.
"""

from __future__ import annotations

import json
import os
import struct
import time
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import FakeClock, GuestSessionMixin
from tests.guest.test_agent import temp_dir
from vmservice.guest import agent
from vmservice.guest.agent import AgentContext
from vmservice.guest.identity import (PERSIST_DELAY, RNDADDENTROPY, RNDRESEEDCRNG, SETTLE_LIMIT, SETTLE_POLL,
                                      AdoptHandler, add_entropy, hosts_file)
from vmservice.wire import ResetCode
from vmservice.wire.adoption import AdoptionRequest, encode_adoption
from vmservice.wire.events import Data, HalfClose, Hello, Open, Reset

BEFORE = 1_700_000_000_000_000_000
LATER = BEFORE + 86_400_000_000_000
ENTROPY = bytes(range(64))
REQUEST = AdoptionRequest("clone-3", "0123456789abcdef0123456789abcdef", LATER, ENTROPY,
                          "52:54:00:0a:00:09", "10.0.0.9/24", "10.0.0.1")


class FakeSteps:
    """
    Replaces what :class:`AdoptHandler` touches for ``case``: the ioctl, ``ip``
    (failing when asked), the files (in a temporary directory) and the clock.

    :ivar calls: the ioctls, ``ip`` commands and clock settings, in order.
    :ivar failing: what fails: ``"ioctl"``, ``"address while up"``, or the words
        1 to 3 of an ``ip`` command (``"addr add 10.0.0.9/24"``).
    :ivar context: an agent context whose clock is :attr:`clock`.
    """

    def __init__(self, case: SynchronousTestCase) -> None:
        self.calls: list[Any] = []
        self.failing: set[str] = set()
        root = temp_dir(case)
        self.etc = os.path.join(root, "etc")
        os.mkdir(self.etc)
        for name in ("hostname", "hosts", "machine-id"):
            with open(os.path.join(self.etc, name), "w") as stream:
                stream.write("template\n")
        self.kernel: list[str] = []
        net_sysfs = os.path.join(root, "net")
        os.makedirs(os.path.join(net_sysfs, "eth0"))
        self.flags = os.path.join(net_sysfs, "eth0", "flags")
        with open(self.flags, "w") as stream:
            stream.write("0x1003\n")
        random_device = os.path.join(root, "urandom")
        open(random_device, "w").close()
        calls, failing = self.calls, self.failing

        def ioctl(fd: int, request: int, argument: Any) -> None:
            calls.append(("ioctl", request, argument))
            if "ioctl" in failing:
                raise PermissionError(1, "Operation not permitted")

        link = {"up": True}

        def run(argv: list[str]) -> tuple[int, str]:
            calls.append(tuple(argv))
            if argv[-1] in ("up", "down"):
                link["up"] = argv[-1] == "up"
            busy = "address while up" in failing and "address" in argv and link["up"]
            if busy or " ".join(argv[1:4]) in failing:
                return 2, "RTNETLINK answers: Operation not supported"
            return 0, ""

        self.clock = FakeClock(BEFORE)

        def set_clock(unix_ns: int) -> None:
            calls.append(("clock", unix_ns))
            self.clock.set(unix_ns)

        case.patch(AdoptHandler, "ioctl", staticmethod(ioctl))
        case.patch(AdoptHandler, "run", staticmethod(run))
        case.patch(AdoptHandler, "random_device", random_device)
        case.patch(AdoptHandler, "set_kernel_hostname", staticmethod(self.kernel.append))
        case.patch(AdoptHandler, "etc", self.etc)
        case.patch(AdoptHandler, "net_sysfs", net_sysfs)
        # The guest's other services: the metrics agent serves (its file exists), no ext4lazyinit thread.
        self.metrics_ready = os.path.join(root, "metrics.ready")
        open(self.metrics_ready, "w").close()
        self.proc = os.path.join(root, "proc")
        os.makedirs(os.path.join(self.proc, "1"))
        with open(os.path.join(self.proc, "1", "comm"), "w") as stream:
            stream.write("init\n")
        self.persisted = os.path.join(root, "var", "lib", "vmservice", "machine-id")
        case.patch(agent, "DEFERRED", [])
        case.patch(AdoptHandler, "metrics_ready", self.metrics_ready)
        case.patch(AdoptHandler, "proc", self.proc)
        case.patch(AdoptHandler, "persisted_machine_id", self.persisted)
        case.patch(AdoptHandler, "sync", staticmethod(lambda: calls.append("sync")))
        case.patch(AdoptHandler, "freeze_objects", staticmethod(lambda: calls.append("freeze")))
        #: The loop's and the handler's monotonic clock, in seconds.
        self.now = 1000.0
        case.patch(AdoptHandler, "monotonic_ns", staticmethod(lambda: int(self.now * 1e9)))
        self.context = AgentContext("t", int(self.now * 1e9), realtime_ns=self.clock.read, set_realtime_ns=set_clock)


class AdoptTests(GuestSessionMixin, SynchronousTestCase):
    """``{"op": "adopt", ...}`` and the new session after it."""

    def setUp(self) -> None:
        steps = FakeSteps(self)
        self.calls, self.failing, self.etc, self.clock = steps.calls, steps.failing, steps.etc, steps.clock
        self.flags = steps.flags
        kernel, context = steps.kernel, steps.context
        self.kernel = kernel
        self.logged: list[str] = []
        self.steps = steps
        self.start_session(context=context, log=self.logged.append, clock=lambda: steps.now)
        self.handshake()

    def adopt(self, request: AdoptionRequest = REQUEST, header: dict[str, Any] | None = None,
              body: bytes | None = None) -> list[Any]:
        encoded_header, encoded_body = encode_adoption(request)
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, header if header is not None else encoded_header),
                  Data(stream_id, encoded_body if body is None else body), HalfClose(stream_id))
        return self.receive()

    def read(self, name: str) -> str:
        with open(os.path.join(self.etc, name)) as stream:
            return stream.read()

    def test_lazy(self) -> None:
        """The operation is imported on first use."""
        self.assertEqual(agent.LAZY_HANDLERS["adopt"], "vmservice.guest.identity:AdoptHandler")

    def test_adopts_in_order_then_starts_a_new_session(self) -> None:
        """
        Entropy (added, then the reseed) comes first, then the clock, the host
        name, the network; the answer is the clock before, then the guest's HELLO
        of a new session with a new nonce that echoes the host's: the host meets
        it as a restart, is established at once, and its answer establishes the
        guest (no second HELLO from the guest).
        """
        old_nonce = self.session.conn.nonce
        events = self.adopt()
        pool = struct.pack("=ii", 64 * 8, 64) + ENTROPY
        self.assertEqual(self.calls, [
            ("ioctl", RNDADDENTROPY, pool),
            ("ioctl", RNDRESEEDCRNG, 0),
            ("clock", LATER),
            ("ip", "link", "set", "dev", "eth0", "address", "52:54:00:0a:00:09"),
            ("ip", "addr", "flush", "dev", "eth0"),
            ("ip", "addr", "add", "10.0.0.9/24", "dev", "eth0"),
            ("ip", "route", "replace", "default", "via", "10.0.0.1", "dev", "eth0"),
        ])
        self.assertEqual(self.kernel, ["clone-3"])
        data, end, hello = events
        self.assertEqual(json.loads(data.data), {"previous_ns": BEFORE})
        self.assertEqual(end, HalfClose(1))
        assert isinstance(hello, Hello)
        new_nonce = self.session.conn.nonce
        self.assertNotEqual(new_nonce, old_nonce)
        self.assertEqual((hello.nonce, hello.echo), (new_nonce, b"HOSTNONC"))
        self.assertFalse(self.session.conn.established)
        self.assertTrue(self.host.established)
        self.assertTrue(self.host.hello_wanted)
        self.send(self.host.hello("host"))
        self.assertEqual(self.receive(), [])
        self.assertTrue(self.session.conn.established)
        self.assertEqual(self.logged, ["starting a new session: adopted a new identity"])

    def test_files_after_the_answer(self) -> None:
        """
        /etc/hostname, /etc/hosts and /etc/machine-id are written after the answer, a moment later
        (:data:`~vmservice.guest.agent.DEFERRED_DELAY`) when no operation comes, then the adoption is
        logged with its steps.
        """
        self.adopt()
        self.send(self.host.hello("host"))
        self.loop.run_once(0)
        self.assertEqual(self.read("hostname"), "template\n")
        self.wait(agent.DEFERRED_DELAY - 0.01)
        self.assertEqual(self.read("hostname"), "template\n")
        self.wait(0.01)
        self.assertEqual(self.read("hostname"), "clone-3\n")
        self.assertEqual(self.read("hosts"), hosts_file("clone-3"))
        self.assertEqual(self.read("hosts"), "127.0.0.1\tlocalhost\n127.0.1.1\tclone-3\n::1\tlocalhost ip6-localhost ip6-loopback\n")
        self.assertEqual(self.read("machine-id"), "0123456789abcdef0123456789abcdef\n")
        self.assertEqual(os.stat(os.path.join(self.etc, "machine-id")).st_mode & 0o777, 0o444)
        self.assertEqual(sorted(os.listdir(self.etc)), ["hostname", "hosts", "machine-id"])
        self.assertRegex(self.logged[-1], r"\Aadopted clone-3 \(entropy \d+ ms, clock \d+ ms, hostname \d+ ms, "
                                          r"network \d+ ms, files \d+ ms; answered after \d+ ms\)\Z")

    def test_files_before_an_operation(self) -> None:
        """
        An operation that could read the files (an fs stat here) finds them written; one that could
        not (health) does not write them.
        """
        self.adopt()
        self.send(self.host.hello("host"))
        self.receive()
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "health"}), HalfClose(stream_id))
        self.receive()
        self.assertEqual(self.read("hostname"), "template\n")
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "fs", "action": "stat", "path": os.path.join(self.etc, "hostname")}),
                  HalfClose(stream_id))
        # Written before the operation started (its stat runs on a thread of its own).
        self.assertEqual(self.read("hostname"), "clone-3\n")
        events: list[Any] = []
        for _ in range(100):
            self.loop.run_once(0.05)
            events += self.receive()
            if events:
                break
        self.assertEqual(json.loads(events[0].data)["result"]["size"], len("clone-3\n"))

    def test_files_fail_after_the_answer(self) -> None:
        """A file that cannot be written after the answer is logged; the agent goes on."""
        os.mkdir(os.path.join(self.etc, "hostname.adopt"))  # where the new file would be written first
        data, _, _ = self.adopt()
        self.assertEqual(json.loads(data.data), {"previous_ns": BEFORE})
        self.wait(agent.DEFERRED_DELAY)
        self.assertRegex(self.logged[-1], r"\Aadoption of clone-3 answered, then failed at files: files: ")
        self.assertEqual(self.read("hostname"), "template\n")

    def prepare(self) -> int:
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "adopt", "prepare": True}), HalfClose(stream_id))
        return stream_id

    def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass on the loop's clock and run what became due."""
        self.steps.now += seconds
        self.loop.run_once(0)

    def test_prepare(self) -> None:
        """
        ``prepare`` with the guest settled: the agent's objects frozen, the disks synced, the answer; no
        step runs and the session goes on.
        """
        nonce = self.session.conn.nonce
        stream_id = self.prepare()
        data, end = self.receive()
        self.assertEqual((json.loads(data.data), end), ({"prepared": True}, HalfClose(stream_id)))
        self.assertEqual(self.calls, ["freeze", "sync"])
        self.assertEqual(self.read("hostname"), "template\n")
        self.assertEqual(self.session.conn.nonce, nonce)

    def test_prepare_waits_for_the_metrics_agent(self) -> None:
        """Until the metrics agent serves its port, ``prepare`` does not answer (nor sync)."""
        os.unlink(self.steps.metrics_ready)
        stream_id = self.prepare()
        self.wait(1.0)
        self.assertEqual((self.receive(), self.calls), ([], []))
        open(self.steps.metrics_ready, "w").close()
        self.wait(SETTLE_POLL)
        data, end = self.receive()
        self.assertEqual((json.loads(data.data), end), ({"prepared": True}, HalfClose(stream_id)))
        self.assertEqual(self.calls, ["freeze", "sync"])

    def test_prepare_waits_for_lazy_init(self) -> None:
        """While the kernel's ext4lazyinit thread runs, ``prepare`` does not answer."""
        thread = os.path.join(self.steps.proc, "93")
        os.mkdir(thread)
        with open(os.path.join(thread, "comm"), "w") as stream:
            stream.write("ext4lazyinit\n")
        os.mkdir(os.path.join(self.steps.proc, "sys"))  # not a process
        self.prepare()
        self.wait(1.0)
        self.assertEqual(self.receive(), [])
        os.unlink(os.path.join(thread, "comm"))  # the thread ended (its directory is gone or unreadable)
        self.wait(SETTLE_POLL)
        data, _ = self.receive()
        self.assertEqual(json.loads(data.data), {"prepared": True})

    def test_prepare_gives_up_waiting(self) -> None:
        """
        :data:`SETTLE_LIMIT` seconds after the agent started it answers anyway (an image without a
        metrics agent; a fork's parent, which waits for nothing once it ran that long).
        """
        os.unlink(self.steps.metrics_ready)
        self.prepare()
        self.wait(SETTLE_LIMIT - 1)
        self.assertEqual(self.receive(), [])
        self.wait(1.0)
        data, _ = self.receive()
        self.assertEqual(json.loads(data.data), {"prepared": True})
        self.prepare()
        data, _ = self.receive()
        self.assertEqual(json.loads(data.data), {"prepared": True})

    def test_files_through_links(self) -> None:
        """
        /etc/hostname, /etc/hosts and /etc/machine-id that are links (into /run) stay links: the files
        they name are written.
        """
        run = os.path.join(os.path.dirname(self.etc), "run", "vmservice")
        os.makedirs(run)
        for name in ("hostname", "hosts", "machine-id"):
            os.unlink(os.path.join(self.etc, name))
            os.symlink(f"../run/vmservice/{name}", os.path.join(self.etc, name))
        with open(os.path.join(run, "hostname"), "w") as stream:
            stream.write("template\n")
        self.adopt()
        self.wait(agent.DEFERRED_DELAY)
        self.assertEqual(sorted(os.listdir(run)), ["hostname", "hosts", "machine-id"])
        for name in ("hostname", "hosts", "machine-id"):
            self.assertTrue(os.path.islink(os.path.join(self.etc, name)))
        self.assertEqual(self.read("hostname"), "clone-3\n")
        self.assertEqual(self.read("hosts"), hosts_file("clone-3"))
        self.assertEqual(self.read("machine-id"), "0123456789abcdef0123456789abcdef\n")
        self.assertEqual(os.stat(os.path.join(run, "machine-id")).st_mode & 0o777, 0o444)

    def test_machine_id_kept_on_the_disk_later(self) -> None:
        """:data:`PERSIST_DELAY` seconds after the answer, the hostname and machine-id are kept on the disk."""
        self.adopt()
        self.wait(agent.DEFERRED_DELAY)
        self.wait(PERSIST_DELAY - 1)
        self.assertFalse(os.path.exists(self.steps.persisted))
        self.wait(1.0)
        with open(self.steps.persisted) as stream:
            self.assertEqual(stream.read(), "clone-3\n0123456789abcdef0123456789abcdef\n")
        self.assertEqual(os.listdir(os.path.dirname(self.steps.persisted)), ["machine-id"])

    def test_machine_id_not_kept(self) -> None:
        """A machine-id that cannot be kept on the disk is logged; the agent goes on."""
        os.makedirs(os.path.dirname(self.steps.persisted))
        os.mkdir(self.steps.persisted + ".adopt")
        self.adopt()
        self.wait(agent.DEFERRED_DELAY)
        self.wait(PERSIST_DELAY)
        self.assertRegex(self.logged[-1], r"\Acannot keep the machine-id of clone-3 on the disk: ")

    def test_no_network(self) -> None:
        """Without a net nothing runs ``ip``."""
        self.adopt(AdoptionRequest("solo", "1" * 32, LATER, ENTROPY))
        self.wait(agent.DEFERRED_DELAY)
        self.assertEqual([call[0] for call in self.calls], ["ioctl", "ioctl", "clock"])
        self.assertEqual(self.read("hostname"), "solo\n")

    def test_brought_up(self) -> None:
        """An eth0 that is down (or whose flags cannot be read) is brought up after its address is added."""
        for flags in ("0x1002\n", "nonsense"):
            self.calls.clear()
            with open(self.flags, "w") as stream:
                stream.write(flags)
            self.adopt()
            self.assertEqual(self.calls[5:7], [("ip", "addr", "add", "10.0.0.9/24", "dev", "eth0"),
                                               ("ip", "link", "set", "dev", "eth0", "up")])
            self.handshake()

    def test_no_gateway(self) -> None:
        """Without a gateway no default route is set."""
        self.adopt(AdoptionRequest("solo", "1" * 32, LATER, ENTROPY, "52:54:00:0a:00:09", "10.0.0.9/24", None))
        self.assertNotIn("route", [call[1] for call in self.calls])

    def test_address_change_while_down(self) -> None:
        """A device that refuses a new MAC while up is taken down for it (and up again after)."""
        self.failing.add("address while up")
        data, _, _ = self.adopt()
        self.assertEqual(json.loads(data.data), {"previous_ns": BEFORE})
        self.assertEqual(self.calls[3:9], [
            ("ip", "link", "set", "dev", "eth0", "address", "52:54:00:0a:00:09"),
            ("ip", "link", "set", "dev", "eth0", "down"),
            ("ip", "link", "set", "dev", "eth0", "address", "52:54:00:0a:00:09"),
            ("ip", "addr", "flush", "dev", "eth0"),
            ("ip", "addr", "add", "10.0.0.9/24", "dev", "eth0"),
            ("ip", "link", "set", "dev", "eth0", "up"),
        ])

    def test_failed_step(self) -> None:
        """
        A step that fails stops the adoption there: the answer names it and the
        session carries on (no new nonce).
        """
        nonce = self.session.conn.nonce
        self.failing.add("addr add 10.0.0.9/24")
        data, end = self.adopt()
        answer = json.loads(data.data)
        self.assertEqual((answer["error"], answer["step"]), ("adoption_failed", "network"))
        self.assertIn("ip addr add 10.0.0.9/24 dev eth0 failed (2): RTNETLINK", answer["message"])
        self.assertEqual(end, HalfClose(1))
        self.assertEqual(self.calls[-1], ("ip", "addr", "add", "10.0.0.9/24", "dev", "eth0"))
        self.assertEqual(self.session.conn.nonce, nonce)
        self.assertTrue(self.session.conn.established)

    def test_entropy_fails_first(self) -> None:
        """Without the reseed nothing else is done."""
        self.failing.add("ioctl")
        data, _ = self.adopt()
        self.assertEqual(json.loads(data.data)["step"], "entropy")
        self.assertEqual(len(self.calls), 1)
        self.assertEqual(self.read("hostname"), "template\n")

    def test_clock_refused(self) -> None:
        """A clock the kernel refuses fails the clock step."""
        self.clock.error = OSError(22, "Invalid argument")
        data, _ = self.adopt()
        self.assertEqual(json.loads(data.data)["step"], "clock")

    def test_invalid_requests(self) -> None:
        """A header or body that is not a valid request is refused with BAD_HEADER, before any step."""
        header, body = encode_adoption(REQUEST)
        for bad_header, bad_body in (({**header, "entropy_size": 5}, body), (header, body[:-1]),
                                     ({**header, "machine_id": "x"}, body)):
            events = self.adopt(header=bad_header, body=bad_body)
            reset = events[-1]
            assert isinstance(reset, Reset)
            self.assertEqual(reset.code, ResetCode.BAD_HEADER)
        self.assertEqual(self.calls, [])

    def test_other_streams_end_with_the_session(self) -> None:
        """A stream still open when the session starts over is gone (PEER_RESTARTED) on both sides."""
        self.send(Open(self.host.next_stream_id(), {"op": "echo"}))
        self.assertEqual(list(self.session.streams), [1])
        events = self.adopt()
        self.assertIsInstance(events[-1], Hello)
        self.assertIn(Reset(1, ResetCode.PEER_RESTARTED, "peer restarted"), events)
        self.assertEqual(self.session.streams, {})


class EntropyTests(SynchronousTestCase):
    """add_entropy's ioctls."""

    def test_pool_info(self) -> None:
        """struct rand_pool_info: entropy_count in bits, buf_size in bytes, then the bytes; then the reseed."""
        calls: list[tuple[int, int, Any]] = []
        add_entropy(7, b"\x01\x02" * 16, lambda fd, request, argument: calls.append((fd, request, argument)))
        self.assertEqual(calls, [(7, 0x40085203, b"\x00\x01\x00\x00\x20\x00\x00\x00" + b"\x01\x02" * 16),
                                 (7, 0x5207, 0)])
