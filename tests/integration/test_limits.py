"""
The ``limits`` of the configuration against the real daemon: the buffer
budget with a real guest (two buffered execs at once whose output does not
fit together: one is refused with 503 ``buffer_budget_exhausted`` and its
process stopped, the other answers whole, and the budget comes back; invalid
bytes counted as their six-byte escapes), the bound on a node's background
execs (409 ``background_limit_reached``), and the API's connections from one
address and in all (429 ``too_many_connections``, 503
``connection_limit_reached``, answered while the others work).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any
from urllib.parse import urlencode

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.daemon import Daemon, SharedDaemonTestCase, SharedGuestTestCase, ensure_image

#: The budget of the guest tests' daemon, and the background execs its node may keep.
BUDGET = 4 * 1024 * 1024
BACKGROUND = 3


def metric(daemon: Daemon, name: str) -> float:
    """The value of the unlabelled series ``name`` in ``/metrics`` now."""
    status, _, body = daemon.request("GET", "/metrics", timeout=10)
    assert status == 200, status
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and not sample.labels:
                return float(sample.value)
    raise AssertionError(f"no {name} in /metrics")


def buffered(daemon: Daemon, cmd: str, timeout: float = 120.0) -> tuple[int, Any]:
    """A buffered exec on demo-1: its status and JSON answer."""
    query = urlencode({"cmd": cmd, "buffered": "true"})
    status, _, body = daemon.request("POST", "/vm/demo-1/exec?" + query, timeout=timeout)
    return status, json.loads(body)


class BudgetTests(SharedGuestTestCase):
    """One daemon with a 4 MiB buffer budget and 3 background execs per node, and one booted node."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(limits={"buffer_budget": BUDGET, "background_execs_per_node": BACKGROUND})
        cls.daemon.start()
        cls.created = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)

    def held(self) -> float:
        return metric(self.daemon, "vmservice_buffer_budget_held_bytes")

    def test_two_buffered_execs_over_budget(self) -> None:
        """
        A buffered exec holding 3 MB of output while it waits, and a second
        one whose 2 MB do not fit beside it: the second is refused with 503
        buffer_budget_exhausted and its process group stopped; the daemon
        answers meanwhile; the first answers its 3 MB whole; the budget comes
        back to nothing, and a third exec of 3 MB answers.
        """
        daemon = self.daemon
        self.addCleanup(daemon.request, "POST", "/vm/demo-1/exec?" + urlencode({"cmd": "rm -f /tmp/go"}))
        first: dict[str, Any] = {}

        def hold() -> None:
            try:
                first["answer"] = buffered(daemon, "head -c 3000000 /dev/zero | tr '\\0' a; "
                                                   "while [ ! -e /tmp/go ]; do sleep 0.1; done", timeout=600)
            except Exception as error:  # reported by the test below
                first["error"] = error

        holder = threading.Thread(target=hold)
        holder.start()
        # Cleanups run last first: let the first exec end, wait for it, then remove the file.
        self.addCleanup(holder.join, 600)
        self.addCleanup(daemon.request, "POST", "/vm/demo-1/exec?" + urlencode({"cmd": "touch /tmp/go"}))
        daemon.wait_for("the first exec's output held", lambda: self.held() >= 3_000_000, timeout=120)
        status, answer = buffered(daemon, "head -c 2000000 /dev/zero | tr '\\0' b; sleep 601")
        self.assertEqual((status, answer["code"]), (503, "buffer_budget_exhausted"), answer)
        self.assertIn("limits.buffer_budget", answer["error"])
        self.assertEqual(daemon.request("GET", "/healthz")[0], 200)
        daemon.wait_for("the refused exec's process gone",
                        lambda: buffered(daemon, "pgrep -f 'sleep 60[1]' || echo none")[1]["stdout"] == "none\n")
        self.assertEqual(buffered(daemon, "touch /tmp/go")[0], 200)
        holder.join(600)
        self.assertNotIn("error", first)
        status, answer = first["answer"]
        self.assertEqual((status, answer["exit_code"], answer["stdout"]), (200, 0, "a" * 3_000_000))
        daemon.wait_for("the budget back", lambda: self.held() == 0)
        status, answer = buffered(daemon, "head -c 3000000 /dev/zero | tr '\\0' c")
        self.assertEqual((status, answer["stdout"]), (200, "c" * 3_000_000))
        self.assertGreaterEqual(metric(daemon, "vmservice_buffer_budget_refusals_total"), 1)
        self.assertEqual(self.held(), 0)

    def test_invalid_bytes_count_as_escapes(self) -> None:
        """
        800 kB of bytes that are not UTF-8 take 4.8 MB as \\ufffd escapes in the
        answer: refused under the 4 MiB budget, while 800 kB of text answers.
        """
        status, answer = buffered(self.daemon, "head -c 800000 /dev/zero | tr '\\0' '\\377'")
        self.assertEqual((status, answer["code"]), (503, "buffer_budget_exhausted"))
        status, answer = buffered(self.daemon, "head -c 800000 /dev/zero | tr '\\0' t")
        self.assertEqual((status, len(answer["stdout"])), (200, 800_000))
        self.daemon.wait_for("the budget back", lambda: self.held() == 0)

    def test_background_execs_beyond_the_limit(self) -> None:
        """
        The node keeps 3 background execs (running or ended): a fourth start is
        409 background_limit_reached; once one is deleted, a start succeeds.
        """
        daemon = self.daemon
        started = []
        for cmd in ("sleep 600", "sleep 600", "true"):
            status, _, body = daemon.request("POST", "/vm/demo-1/exec?" + urlencode({"cmd": cmd, "background": "true"}))
            self.assertEqual(status, 201, body)
            exec_id = json.loads(body)["exec_id"]
            started.append(exec_id)
            self.addCleanup(daemon.request, "DELETE", f"/vm/demo-1/exec/{exec_id}")
            self.addCleanup(daemon.request, "POST", f"/vm/demo-1/exec/{exec_id}/kill", {"signal": "KILL"})
        daemon.json("GET", f"/vm/demo-1/exec/{started[2]}/wait-exit?timeout=60")
        status, _, body = daemon.request("POST", "/vm/demo-1/exec?" + urlencode({"cmd": "true", "background": "true"}))
        self.assertEqual((status, json.loads(body)["code"]), (409, "background_limit_reached"), body)
        self.assertEqual(len(daemon.json("GET", "/vm/demo-1/exec")), 3)
        daemon.json("DELETE", f"/vm/demo-1/exec/{started[2]}")
        status, _, body = daemon.request("POST", "/vm/demo-1/exec?" + urlencode({"cmd": "true", "background": "true"}))
        self.assertEqual(status, 201, body)
        exec_id = json.loads(body)["exec_id"]
        self.addCleanup(daemon.request, "DELETE", f"/vm/demo-1/exec/{exec_id}")
        daemon.json("GET", f"/vm/demo-1/exec/{exec_id}/wait-exit?timeout=60")


class _Client:
    """One keep-alive HTTP connection from a given loopback address."""

    def __init__(self, port: int, source: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))

    def get(self, path: str = "/healthz") -> tuple[int, dict[str, str], bytes]:
        self.connection.request("GET", path)
        response = self.connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()

    def close(self) -> None:
        self.connection.close()


class ConnectionTests(SharedDaemonTestCase):
    """One daemon without nodes that allows 6 connections, 3 from one address."""

    @classmethod
    def start_shared(cls) -> None:
        cls.daemon = Daemon(limits={"max_connections": 6, "max_connections_per_peer": 3})
        cls.daemon.start()

    def client(self, source: str, expect: int = 200) -> _Client:
        """
        A connection from ``source`` whose first request answered ``expect``,
        kept open until the test ends.  A refusal (429, 503) that connections
        the test has just closed may still cause (the daemon hears of a close a
        little later) is tried again.
        """
        deadline = time.monotonic() + 30
        while True:
            client = _Client(self.daemon.port, source)
            self.addCleanup(client.close)
            status, _, body = client.get()
            if status == expect or status not in (429, 503) or time.monotonic() > deadline:
                self.assertEqual(status, expect, body)
                return client
            client.close()
            time.sleep(0.1)

    def test_per_address_and_total(self) -> None:
        """
        A fourth connection from 127.0.0.2 is answered 429 too_many_connections
        (an ErrorResponse, Connection: close) while its three others go on
        working and other addresses are served; with 6 open in all, a seventh
        from another address is answered 503 connection_limit_reached; once
        some close, new connections are served again.
        """
        held = [self.client("127.0.0.2") for _ in range(3)]
        extra = _Client(self.daemon.port, "127.0.0.2")
        self.addCleanup(extra.close)
        status, headers, body = extra.get()
        self.assertEqual((status, json.loads(body)["code"]), (429, "too_many_connections"), body)
        self.assertEqual((headers["connection"], headers["content-type"]), ("close", "application/json"))
        for client in held:
            self.assertEqual(client.get()[0], 200)
        self.assertEqual(self.daemon.request("GET", "/healthz")[0], 200)
        held += [self.client("127.0.0.3") for _ in range(3)]
        seventh = _Client(self.daemon.port, "127.0.0.4")
        self.addCleanup(seventh.close)
        status, _, body = seventh.get()
        self.assertEqual((status, json.loads(body)["code"]), (503, "connection_limit_reached"), body)
        for client in held:
            self.assertEqual(client.get()[0], 200)
        for client in held:
            client.close()
        self.client("127.0.0.2")
        self.client("127.0.0.4")
        status, _, body = self.daemon.request("GET", "/metrics")
        text = body.decode()
        self.assertRegex(text, r'vmservice_api_connections_refused_total\{limit="peer"\} [1-9]')
        self.assertRegex(text, r'vmservice_api_connections_refused_total\{limit="total"\} [1-9]')
