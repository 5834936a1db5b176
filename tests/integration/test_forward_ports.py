"""
Tunnels over the tunnel ports (``docs/agent-protocol.md``, "The tunnel
ports") against the real daemon and a real guest whose group has the
default 4: both ways with equal sha256 over TCP and a UNIX socket, 5 at
once (one takes its stream, all correct), and a client that vanishes half
way (its port is free again for the next tunnels, which are correct); and
in a warm group's clone taken from a spare (its ports' sockets renamed at the
hand-over, its template keyed by them) and in a fork child of it (the ports
its saved state had).  The daemon's log says which way each tunnel went.
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import threading
import time

from tests.integration.daemon import CREATE_TIMEOUT, SharedGuestTestCase, TemplatesDaemonTestCase
from tests.integration.forwarding import (open_pipe, read_all, read_digest, send_to_sink, source_digest,
                                          start_guest_servers)

#: Bytes of the transfers each way.
SIZE = 64 * 1024 * 1024
#: What the source sends (see GUEST_SERVER): big enough that a client leaving half way leaves it mid-stream.
SOURCE = 1024 * 1024 * 1024


def echo(sock: socket.socket, payload: bytes) -> bytes:
    """Send ``payload`` (on a thread) while reading its echo back."""
    sender = threading.Thread(target=sock.sendall, args=(payload,))
    sender.start()
    got = bytearray()
    while len(got) < len(payload):
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    sender.join()
    return bytes(got)


def ways(log: str) -> tuple[int, int]:
    """How many tunnels a daemon's log says went over a port, and how many on their stream."""
    return log.count(": port tunnel"), log.count("its stream carries it")


class ForwardPortTests(SharedGuestTestCase):
    """Tunnels into demo-1 over its tunnel ports."""

    @classmethod
    def start_shared(cls) -> None:
        super().start_shared()
        start_guest_servers(cls.daemon, ("exec python3 /tmp/server.py echo 9000",
                                         "exec python3 /tmp/server.py echo /tmp/echo.sock",
                                         "exec python3 /tmp/server.py sink 9001",
                                         "exec python3 /tmp/server.py sink /tmp/sink.sock",
                                         "exec python3 /tmp/server.py source 9002 %d" % SIZE,
                                         "exec python3 /tmp/server.py source /tmp/source.sock %d" % SIZE,
                                         "exec python3 /tmp/server.py source 9003 %d" % SOURCE,
                                         "exec python3 /tmp/server.py store 9004 /tmp/stored"),
                            "test -S /tmp/echo.sock -a -S /tmp/sink.sock -a -S /tmp/source.sock && python3 -c "
                            "\"import socket; [socket.create_connection(('127.0.0.1', p)).close() "
                            "for p in (9000, 9001, 9004)]\"")

    def setUp(self) -> None:
        super().setUp()
        # A closed tunnel's port is free once the guest ended it (a round trip after its client left).
        self.daemon.wait_for("the tunnels of the tests before to be over",
                             lambda: self.ways()[0] == self.daemon.log().count(" over tunnel"), 30)

    def ways(self) -> tuple[int, int]:
        """How many tunnels the daemon's log says went over a port, and how many on their stream."""
        return ways(self.daemon.log())

    def wait_ways(self, expected: tuple[int, int]) -> None:
        """Wait until the log says ``expected`` (it is written as each tunnel opens)."""
        self.daemon.wait_for(f"tunnels {expected}", lambda: self.ways() == expected, 30)

    def download(self, upstream: str) -> str:
        sock, status = open_pipe(self.daemon, upstream, timeout=300)
        with sock:
            self.assertEqual(status, b"HTTP/1.1 200 OK")
            size, digest = read_digest(sock)
        self.assertEqual(size, SIZE)
        return digest

    def upload(self, upstream: str) -> None:
        sock, status = open_pipe(self.daemon, upstream, timeout=300)
        with sock:
            self.assertEqual(status, b"HTTP/1.1 200 OK")
            sent = send_to_sink(sock, SIZE)
            answer = read_all(sock)
        self.assertEqual(answer.decode(), sent)

    def test_tcp_both_ways(self) -> None:
        """64 MiB from and to a TCP upstream over a port, equal sha256 both ways."""
        before = self.ways()
        self.assertEqual(self.download("127.0.0.1:9002"), source_digest(SIZE))
        self.upload("127.0.0.1:9001")
        self.wait_ways((before[0] + 2, before[1]))

    def test_unix_both_ways(self) -> None:
        """The same with a UNIX socket upstream, and an echo."""
        before = self.ways()
        self.assertEqual(self.download("unix:/tmp/source.sock"), source_digest(SIZE))
        self.upload("unix:/tmp/sink.sock")
        sock, status = open_pipe(self.daemon, "unix:/tmp/echo.sock", timeout=120)
        payload = os.urandom(4 << 20)
        with sock:
            self.assertEqual(status, b"HTTP/1.1 200 OK")
            self.assertEqual(echo(sock, payload), payload)
        self.wait_ways((before[0] + 3, before[1]))

    def test_client_closes_after_sending(self) -> None:
        """
        A client that closes its connection right after its last bytes: the upstream gets them all (the
        tunnel's end goes on the stream only after them, and the guest delivers its count first).
        """
        before = self.ways()
        sock, status = open_pipe(self.daemon, "127.0.0.1:9004", timeout=120)
        self.assertEqual(status, b"HTTP/1.1 200 OK")
        payload = os.urandom(4 << 20)
        sock.sendall(payload)
        sock.close()
        self.wait_ways((before[0] + 1, before[1]))
        digest = hashlib.sha256(payload).hexdigest()
        self.daemon.wait_for("the upstream to store what the client sent",
                             lambda: self.daemon.run("demo-1", "sha256sum /tmp/stored")[1].split()[:1] == [digest], 60)

    def at_once(self, upstreams: list[str]) -> list[socket.socket]:
        """
        Tunnels to ``upstreams`` open at once, taken once min(4, their number) went over ports (ports the
        tunnels of a test before may still be freeing: those are tried again, up to a minute).
        """
        deadline = time.monotonic() + 60
        while True:
            start = self.ways()
            socks = []
            for upstream in upstreams:
                sock, status = open_pipe(self.daemon, upstream, timeout=120)
                self.assertEqual(status, b"HTTP/1.1 200 OK")
                socks.append(sock)
            self.daemon.wait_for("the tunnels logged", lambda: sum(self.ways()) == sum(start) + len(socks), 30)
            over_ports = min(4, len(upstreams))
            if self.ways() == (start[0] + over_ports, start[1] + len(upstreams) - over_ports):
                return socks
            for each in socks:
                each.close()
            self.assertLess(time.monotonic(), deadline, "the ports were not freed")
            time.sleep(0.5)

    def test_five_at_once(self) -> None:
        """5 tunnels open at once: 4 take the ports, the fifth its stream; all echo correctly."""
        socks = self.at_once(["127.0.0.1:9000" if index % 2 else "unix:/tmp/echo.sock" for index in range(5)])
        results: dict[int, bool] = {}

        def one(index: int) -> None:
            payload = os.urandom(8 << 20)
            results[index] = echo(socks[index], payload) == payload

        threads = [threading.Thread(target=one, args=(index,)) for index in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        for sock in socks:
            sock.close()
        self.assertEqual(results, {index: True for index in range(5)})

    def test_client_vanishes(self) -> None:
        """
        A client that resets its connection half way through a download frees
        its port: 4 tunnels at once afterwards all take ports, and are correct.
        """
        before = self.ways()
        sock, status = open_pipe(self.daemon, "127.0.0.1:9003", timeout=120)
        self.assertEqual(status, b"HTTP/1.1 200 OK")
        got = 0
        while got < 8 << 20:
            got += len(sock.recv(1 << 20))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        self.wait_ways((before[0] + 1, before[1]))
        socks = self.at_once(["127.0.0.1:9000"] * 4)
        payloads = [os.urandom(4 << 20) for _ in socks]
        for each, payload in zip(socks, payloads):
            with each:
                self.assertEqual(echo(each, payload), payload)


class StreamForwardTests(SharedGuestTestCase):
    """Tunnels into demo-1 of a group without tunnel ports: each on its agent stream."""

    groups = [{"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "tunnel_ports": 0}]

    @classmethod
    def start_shared(cls) -> None:
        super().start_shared()
        # The upstream reads only a second after its connection came: the client has closed by then, with
        # most of what it sent still on its way in the guest.
        start_guest_servers(cls.daemon, ("exec python3 /tmp/server.py store 9004 /tmp/stored 1",),
                            "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9004)).close()\"")

    def test_client_closes_after_sending(self) -> None:
        """
        A client that closes its connection right after its last bytes: the upstream gets them all (the
        client's end half-closes the stream after them; a reset would overtake them, and the guest would
        drop what the upstream had not taken yet).
        """
        for _ in range(3):
            sock, status = open_pipe(self.daemon, "127.0.0.1:9004", timeout=120)
            self.assertEqual(status, b"HTTP/1.1 200 OK")
            payload = os.urandom(8 << 20)
            sock.sendall(payload)
            sock.close()
            digest = hashlib.sha256(payload).hexdigest()
            self.daemon.wait_for("the upstream to store what the client sent",
                                 lambda: self.daemon.run("demo-1", "sha256sum /tmp/stored")[1].split()[:1] == [digest],
                                 60)
        self.assertEqual(ways(self.daemon.log())[0], 0)


class WarmForwardPortTests(TemplatesDaemonTestCase):
    """A warm group with a spare: its clones and their fork children have the template's tunnel ports."""

    groups = [{"name": "warm", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True,
               "warm_spare": 1, "tunnel_ports": 2}]

    def echo_over_port(self, hostname: str) -> None:
        start_guest_servers(self.daemon, ("exec python3 /tmp/server.py echo 9000",),
                            "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9000)).close()\"",
                            hostname)
        before = ways(self.daemon.log())
        sock, status = open_pipe(self.daemon, "127.0.0.1:9000", hostname=hostname, timeout=120)
        payload = os.urandom(4 << 20)
        with sock:
            self.assertEqual(status, b"HTTP/1.1 200 OK")
            self.assertEqual(echo(sock, payload), payload)
        self.daemon.wait_for("the tunnel logged", lambda: ways(self.daemon.log()) == (before[0] + 1, before[1]), 30)

    def test_clone_and_fork_child(self) -> None:
        """A clone (from the spare when it was ready) and a fork child of it each tunnel over a port."""
        clone = self.create_node("warm", timeout=CREATE_TIMEOUT)
        node_dir = os.path.join(self.daemon.state_dir, "nodes", clone)
        self.assertEqual(sorted(name for name in os.listdir(node_dir) if name.startswith("tun")),
                         ["tun0.sock", "tun1.sock"])
        self.echo_over_port(clone)
        child = self.fork_node(clone, {"count": 1})[0]["hostname"]
        self.echo_over_port(child)

