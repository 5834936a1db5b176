# -*- test-case-name: tests.guest.test_identity -*-
"""
The guest's ``adopt`` operation (:mod:`vmservice.guest.identity`) through a real
:class:`~vmservice.guest.agent.Session`, with its ioctl, files, clock and ``ip``
replaced (the kernel's routing netlink by :class:`FakeRoute`): these tests
never touch the random generator, host name, clock or network of the machine
they run on.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import struct
import time
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.identity_fakes import BEFORE, FakeSteps
from tests.guest.session import GuestSessionMixin
from vmservice.guest import deferred, operations
from vmservice.guest import login, rtnetlink
from vmservice.guest.adoption_system import RNDADDENTROPY, RNDRESEEDCRNG, add_entropy, hosts_file
from vmservice.guest.identity import PERSIST_DELAY, SETTLE_LIMIT, SETTLE_POLL, AdoptHandler
from vmservice.wire import ResetCode
from vmservice.wire.adoption import AdoptionRequest, encode_adoption
from vmservice.wire.events import Data, HalfClose, Hello, Open, Reset

LATER = BEFORE + 86_400_000_000_000
ENTROPY = bytes(range(64))
REQUEST = AdoptionRequest("clone-3", "0123456789abcdef0123456789abcdef", LATER, ENTROPY,
                          "52:54:00:0a:00:09", "10.0.0.9/24", "10.0.0.1")


class AdoptTests(GuestSessionMixin, SynchronousTestCase):
    """``{"op": "adopt", ...}`` and the new session after it."""

    def setUp(self) -> None:
        steps = FakeSteps(self)
        self.calls, self.failing, self.etc, self.clock = steps.calls, steps.failing, steps.etc, steps.clock
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
        self.assertEqual(operations.LAZY_HANDLERS["adopt"], "vmservice.guest.identity:AdoptHandler")

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
            ("link", "52:54:00:0a:00:09", "up"),
            ("addresses",),
            ("deladdr", "10.0.0.3/24"),
            ("deladdr", "fe80::ff:fe00:1/64"),
            ("addr", "10.0.0.9/24"),
            ("route", "10.0.0.1"),
        ])
        self.assertEqual(self.steps.route.closed, 1)
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
        self.wait(deferred.DEFERRED_DELAY - 0.01)
        self.assertEqual(self.read("hostname"), "template\n")
        self.wait(0.01)
        self.assertEqual(self.read("hostname"), "clone-3\n")
        self.assertEqual(self.read("hosts"), hosts_file("clone-3"))
        self.assertEqual(self.read("hosts"), "127.0.0.1\tlocalhost\n127.0.1.1\tclone-3\n::1\tlocalhost ip6-localhost ip6-loopback\n")
        self.assertEqual(self.read("machine-id"), "0123456789abcdef0123456789abcdef\n")
        self.assertEqual(os.stat(os.path.join(self.etc, "machine-id")).st_mode & 0o777, 0o444)
        self.assertEqual(sorted(os.listdir(self.etc)), ["hostname", "hosts", "machine-id"])
        self.assertRegex(self.logged[-1], r"\Aadopted clone-3 \(entropy \d+ ms, ssh \d+ ms, clock \d+ ms, hostname \d+ ms, "
                                          r"network \d+ ms, files \d+ ms; answered after \d+ ms\)\Z")

    def write_host_keys(self) -> None:
        for name in ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "ssh_host_rsa_key", "ssh_host_rsa_key.pub",
                     "sshd_config"):
            with open(self.steps.ssh.path(f"/etc/ssh/{name}"), "w") as stream:
                stream.write("parent's\n")

    def test_inherited_ssh_server_stopped_and_keys_renewed(self) -> None:
        """
        A fork's child whose parent ran the SSH server: right after the reseed (new keys come from the
        reseeded generator) and before the clock and the network, that server is stopped (it holds the
        parent's host key; its exit would take the vCPU before the answer) and its pid file removed;
        after the answer, with the deferred work, every inherited host key is deleted, the stopped server
        killed and waited for (its port free), and a server started again with a key made then.
        """
        ssh = self.steps.ssh
        ssh.pid = 4321
        login.SERVER.seen = True  # the parent's agent had started it
        with open(ssh.path(login.SSHD_PID), "w") as stream:
            stream.write("4321\n")
        self.write_host_keys()
        self.adopt()
        self.assertEqual(self.calls[1:4], [("ioctl", RNDRESEEDCRNG, 0), ("signal", 4321, signal.SIGSTOP),
                                           ("clock", LATER)])
        self.assertFalse(os.path.exists(ssh.path(login.SSHD_PID)))
        # Not on the path to the answer: no program run yet, the files still there.
        self.assertEqual(ssh.ran, [])
        self.assertIn("ssh_host_ed25519_key", ssh.files("/etc/ssh"))
        self.send(self.host.hello("host"))
        self.wait(deferred.DEFERRED_DELAY)
        self.assertEqual(ssh.files("/etc/ssh"), ["sshd_config"])
        self.assertEqual(self.calls[-4:], [("signal", 4321, signal.SIGKILL), ("gone", 4321),
                                           ("run", "/usr/bin/ssh-keygen"), ("run", "/usr/sbin/sshd")])
        self.assertEqual(ssh.ran[0][-1], ssh.path(login.HOST_KEY))
        self.assertEqual(self.logged[-1], "deleted the inherited SSH host keys (ssh_host_ed25519_key, "
                                          "ssh_host_ed25519_key.pub, ssh_host_rsa_key, ssh_host_rsa_key.pub); "
                                          "SSH server started with a new host key")

    def test_clone_without_ssh_server(self) -> None:
        """
        A clone of a template (whose agent never started an SSH server): the adoption makes no system
        call for it (not even the pid file is looked at), nothing is stopped and no program runs; host
        keys its disk holds are still deleted after the answer, so a server started later makes its own.
        """
        self.write_host_keys()
        self.adopt()
        self.assertEqual([call for call in self.calls if call[0] == "signal"], [])
        self.assertEqual(self.steps.ssh.looked, [])
        self.send(self.host.hello("host"))
        self.wait(deferred.DEFERRED_DELAY)
        self.assertEqual([call for call in self.calls if call[0] == "signal"], [])
        self.assertEqual(self.steps.ssh.files("/etc/ssh"), ["sshd_config"])
        self.assertEqual(self.steps.ssh.ran, [])
        self.assertEqual((login.INHERITED.keys, login.INHERITED.sshd), (False, None))

    def test_server_the_agent_did_not_start(self) -> None:
        """
        An SSH server the agent did not know of (an earlier agent process started it and no login came
        since, or someone did by hand with the usual pid file): the adoption leaves it alone, the deferred
        work stops, ends and replaces it, as one the agent had started.
        """
        ssh = self.steps.ssh
        ssh.pid = 777
        self.adopt()
        self.assertEqual(([call for call in self.calls if call[0] == "signal"], ssh.looked), ([], []))
        self.send(self.host.hello("host"))
        self.wait(deferred.DEFERRED_DELAY)
        self.assertEqual([call for call in self.calls if call[0] in ("signal", "gone", "run")], [
            ("signal", 777, signal.SIGSTOP), ("signal", 777, signal.SIGKILL), ("gone", 777),
            ("run", "/usr/bin/ssh-keygen"), ("run", "/usr/sbin/sshd")])

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
        self.wait(deferred.DEFERRED_DELAY)
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
        self.wait(deferred.DEFERRED_DELAY)
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
        self.wait(deferred.DEFERRED_DELAY)
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
        self.wait(deferred.DEFERRED_DELAY)
        self.wait(PERSIST_DELAY)
        self.assertRegex(self.logged[-1], r"\Acannot keep the machine-id of clone-3 on the disk: ")

    def test_no_network(self) -> None:
        """Without a net the routing netlink is not used."""
        self.adopt(AdoptionRequest("solo", "1" * 32, LATER, ENTROPY))
        self.wait(deferred.DEFERRED_DELAY)
        self.assertEqual([call[0] for call in self.calls], ["ioctl", "ioctl", "clock"])
        self.assertEqual(self.steps.route.closed, 0)
        self.assertEqual(self.read("hostname"), "solo\n")

    def test_request_flags(self) -> None:
        """
        Every change asks for its acknowledgement; the list of addresses is a
        dump; the address is created (not an existing one's changed), the
        route created or replaced.
        """
        self.adopt()
        ack, create = rtnetlink.NLM_F_ACK, rtnetlink.NLM_F_CREATE
        self.assertEqual(self.steps.route.flags, [ack, ack | rtnetlink.NLM_F_DUMP, ack, ack,
                                                  ack | create | rtnetlink.NLM_F_EXCL,
                                                  ack | create | rtnetlink.NLM_F_REPLACE])

    def test_brought_up(self) -> None:
        """An eth0 that is down is brought up with its new MAC (IFF_UP in the same message)."""
        self.steps.route.link_up = False
        self.adopt()
        self.assertEqual(self.calls[3], ("link", "52:54:00:0a:00:09", "up"))
        self.assertTrue(self.steps.route.link_up)

    def test_no_gateway(self) -> None:
        """Without a gateway no default route is set."""
        self.adopt(AdoptionRequest("solo", "1" * 32, LATER, ENTROPY, "52:54:00:0a:00:09", "10.0.0.9/24", None))
        self.assertEqual(self.calls[-1], ("addr", "10.0.0.9/24"))

    def test_address_change_while_down(self) -> None:
        """A device that refuses a new MAC while up is taken down for it (and up again with it)."""
        self.failing.add("address while up")
        data, _, _ = self.adopt()
        self.assertEqual(json.loads(data.data), {"previous_ns": BEFORE})
        self.assertEqual(self.calls[3:7], [
            ("link", "52:54:00:0a:00:09", "up"),
            ("link", None, "down"),
            ("link", "52:54:00:0a:00:09", "up"),
            ("addresses",),
        ])
        self.assertTrue(self.steps.route.link_up)

    def test_failed_step(self) -> None:
        """
        A step that fails stops the adoption there: the answer names it, with
        the kernel's errno and its text, and the session carries on (no new
        nonce); the netlink socket is closed.
        """
        nonce = self.session.conn.nonce
        self.failing.add("addr 10.0.0.9/24")
        data, end = self.adopt()
        answer = json.loads(data.data)
        self.assertEqual((answer["error"], answer["step"]), ("adoption_failed", "network"))
        self.assertEqual(answer["message"], f"network: add 10.0.0.9/24 to eth0: {os.strerror(errno.EEXIST)} "
                                            f"(errno {errno.EEXIST})")
        self.assertEqual(end, HalfClose(1))
        self.assertEqual(self.calls[-1], ("addr", "10.0.0.9/24"))
        self.assertEqual(self.steps.route.closed, 1)
        self.assertEqual(self.session.conn.nonce, nonce)
        self.assertTrue(self.session.conn.established)

    def test_failed_down(self) -> None:
        """A device that refuses its new MAC, and then to go down, fails the step with the second refusal."""
        self.failing.update({"address while up", "link None"})
        data, _ = self.adopt()
        answer = json.loads(data.data)
        self.assertEqual(answer["step"], "network")
        self.assertIn("eth0 down: ", answer["message"])

    def test_unknown_interface(self) -> None:
        """An image without eth0 fails the network step with the kernel's error."""
        def missing(name: str) -> int:
            raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))

        self.patch(AdoptHandler, "interface_index", staticmethod(missing))
        data, _ = self.adopt()
        answer = json.loads(data.data)
        self.assertEqual((answer["step"], answer["message"]), ("network", f"network: [Errno {errno.ENODEV}] "
                                                                          f"{os.strerror(errno.ENODEV)}"))

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
