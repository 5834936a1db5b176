"""
Tests for ``GET /vm/{hostname}`` (:mod:`vmservice.api.vm`): the wire shape
existing clients decode (the Node fields, ``storage`` and ``image`` as
strings, ``network`` with its policies) and the extensions, through a real
Site and Agent over in-memory connections, with the fleet on fakes; and for
``GET /vm/{hostname}/logs``: the tail's bound, and all of the console
streamed with the client's pace (:mod:`vmservice.api.console_body`).
"""

from __future__ import annotations

import json
import os
from ipaddress import IPv4Network
from typing import Any, Callable

from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.api.fleet_api import ApiTestCase
from tests.fakes import FleetHarness
from vmservice.api.app import Api
from vmservice.api.console_body import write_console
from vmservice.api.nodes import NodesApi
from vmservice.api.openapi import openapi_document
from vmservice.api.vm import MAX_LINES, VmApi
from vmservice.config import HostGroupConfig, NetworkConfig
from vmservice.errors import Internal
from vmservice.nodes import console
from vmservice.nodes.tagging import TagEdit

MiB = 1024 * 1024


class DescribeRouteTests(ApiTestCase):
    def test_plain_node(self) -> None:
        """Every field of a running node of a group without a network; unknown facts are left out."""
        code, created, _ = self.call("POST", "/hostgroup/demo/nodes", b'{"tags": ["a"], "persistent": true}')
        self.assertEqual(code, 201)
        self.h.agents[0].ready()
        code, body, _ = self.call("GET", "/vm/demo-1")
        self.assertEqual(code, 200)
        disk = body.pop("disk")
        self.assertEqual(
            body,
            {
                "hostname": "demo-1", "hostgroup": "demo", "ip": "", "ram_bytes": 512 * MiB, "cpus": 2,
                "created_at": created["created_at"], "tags": ["a"], "arch": "x86_64", "status": "Running",
                "persistent": True,
                "protected": False, "snapshot": False, "agent_connected": True,
                "storage": "image", "image": "default",
                "network": {"mode": "none", "policy_source": "host_group",
                            "host_group": {"allow": [], "drop": []}, "effective": {"allow": [], "drop": []}},
                "pid": 1000, "kernel": self.h.image.kernel.path, "initrd": self.h.image.initrd.path,
                "hypervisor": "fake",
            },
        )
        self.assertEqual(disk["format"], "qcow2")
        self.assertEqual(disk["backing_file"], self.h.image.rootfs.path)
        self.assertTrue(disk["path"].endswith("/nodes/demo-1/disk.qcow2"))
        self.assertNotIn("commit_id", body)

    def test_listing_fields_agree(self) -> None:
        """The Node fields of the description are the node's listing entry, also after a tag change."""
        self.call("POST", "/hostgroup/demo/nodes", b'{"tags": ["a"]}')
        self.h.fleet.tagging.edit("demo-1", TagEdit(add=("b",)))
        listed = self.call("GET", "/nodes")[1][0]
        described = self.call("GET", "/vm/demo-1")[1]
        self.assertEqual({key: described[key] for key in listed}, listed)

    def test_errors(self) -> None:
        """Unknown node 404, bad hostname 400."""
        self.assertError(self.call("GET", "/vm/demo-9"), 404, "node_not_found")
        self.assertError(self.call("GET", "/vm/Bad_Name"), 400, "invalid_hostname")


class DescribeNetworkTests(ApiTestCase):
    def setUp(self) -> None:
        super().setUp()  # the metrics; the fleet is replaced by one with an isolated group
        network = NetworkConfig(mode="isolated", range=IPv4Network("10.77.0.0/24"),
                                drop=(IPv4Network("10.9.0.0/16"),))
        self.h = FleetHarness(self.mktemp(), (HostGroupConfig(name="iso", vcpu=1, ram_bytes=256 * MiB,
                                                              network=network),))
        self.h.fleet.startService()
        self.api = Api(self.h.reactor, NodesApi(self.h.fleet).routes() + VmApi(self.h.fleet).routes(), self.metrics,
                       None)
        self.treq = StubTreq(self.api.resource())

    def test_isolated(self) -> None:
        """An isolated node: its group's policy (effective the same), address with prefix, gateway, MAC."""
        self.assertEqual(self.call("POST", "/hostgroup/iso/nodes", b"{}")[0], 201)
        network = self.call("GET", "/vm/iso-1")[1]["network"]
        self.assertEqual(network, {
            "mode": "isolated", "policy_source": "host_group",
            "host_group": {"allow": [], "drop": ["10.9.0.0/16"]}, "effective": {"allow": [], "drop": ["10.9.0.0/16"]},
            "address": "10.77.0.2/30", "gateway": "10.77.0.1", "mac": "52:54:0a:4d:00:02",
        })


class LogsRouteTests(ApiTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.call("POST", "/hostgroup/demo/nodes", b"{}")
        self.log = self.h.node("demo-1").paths.console

    def test_all_streamed(self) -> None:
        """
        lines=0 answers the LogsResponse of the whole console, its content escaped as JSON (quotes,
        backslashes, control characters, non-ASCII, invalid UTF-8), ``lines`` after it.
        """
        data = 'say "hi" \\ there\ttab \x1b[1mbold\x1b[0m caf\u00e9 \u2603\r\n'.encode() * 3 + b"bad \xff end"
        with open(console.previous(self.log), "wb") as f:
            f.write(b"older\n")
        with open(self.log, "wb") as f:
            f.write(data)
        code, body, response = self.call("GET", "/vm/demo-1/logs?lines=0")
        self.assertEqual(code, 200)
        self.assertEqual(response.headers.getRawHeaders("content-type"), ["application/json"])
        text, count = console.tail(self.log, 0, 1 << 30)
        self.assertEqual(body, {"hostname": "demo-1", "content": text, "lines": count})
        self.assertEqual(count, 5)
        self.assertTrue(body["content"].endswith("bad \ufffd end"))

    def test_empty(self) -> None:
        """A console not written yet streams as an empty one."""
        os.unlink(self.log)
        self.assertEqual(self.call("GET", "/vm/demo-1/logs?lines=0")[1],
                         {"hostname": "demo-1", "content": "", "lines": 0})

    def test_unreadable(self) -> None:
        """A console that cannot be read is an ordinary 500 log_read_failed, nothing streamed before it."""
        os.unlink(self.log)
        os.makedirs(self.log)
        self.assertError(self.call("GET", "/vm/demo-1/logs?lines=0"), 500, "log_read_failed")
        self.assertError(self.call("GET", "/vm/demo-9/logs?lines=0"), 404, "node_not_found")

    def test_most_lines(self) -> None:
        """At most MAX_LINES lines may be asked for: more is a 400 (lines=0 gives everything)."""
        self.assertEqual(self.call("GET", f"/vm/demo-1/logs?lines={MAX_LINES}")[1]["lines"], 30)
        self.assertError(self.call("GET", f"/vm/demo-1/logs?lines={MAX_LINES + 1}"), 400, "invalid_query")
        self.assertError(self.call("GET", "/vm/demo-1/logs?lines=99999999999999999999"), 400, "invalid_query")

    def test_openapi(self) -> None:
        """The OpenAPI document says the bound."""
        document = openapi_document(self.api.routes)
        [lines] = [p for p in document["paths"]["/vm/{hostname}/logs"]["get"]["parameters"] if p["name"] == "lines"]
        [number, _empty] = lines["schema"]["anyOf"]  # lines= is the default, as absent
        self.assertEqual((number["minimum"], number["maximum"]), (0, MAX_LINES))


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abortConnection(self) -> None:
        self.aborted = True


class _Channel:
    def __init__(self) -> None:
        self.transport = _Transport()


class _Request:
    """What :func:`write_console` needs of a request, recording what it is given."""

    def __init__(self) -> None:
        self.channel: _Channel | None = _Channel()
        self.code: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.written: list[bytes] = []
        self.producer: Any = None
        #: Whether a write fills the connection's buffer (the producer is then paused, as twisted.web does).
        self.full = False

    def setResponseCode(self, code: int) -> None:
        self.code = code

    def setHeader(self, name: bytes, value: bytes) -> None:
        self.headers[name] = value

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        assert streaming and self.producer is None
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None

    def write(self, data: bytes) -> None:
        self.written.append(data)
        if self.full and self.producer is not None:
            self.producer.pauseProducing()


class WriteConsoleTests(SynchronousTestCase):
    """The streamed answer with a thread pool played by the test: each blocking step waits for it."""

    def setUp(self) -> None:
        directory = self.mktemp()
        os.makedirs(directory)
        self.log = os.path.join(directory, "console.log")
        self.patch(console, "BLOCK", 4)
        with open(self.log, "wb") as f:
            f.write(b"abcdefgh\nijkl\n")
        #: The blocking steps asked for and not yet run.
        self.steps: list[tuple[Callable[[], Any], Deferred[Any]]] = []
        self.closed: list[bool] = []
        self.request = _Request()

    def blocking(self, call: Callable[[], Any]) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        self.steps.append((call, d))
        return d

    def run_step(self) -> str:
        """Run the oldest step waiting, as a thread would; its name."""
        call, d = self.steps.pop(0)
        try:
            result = call()
        except Exception:
            d.errback(Failure())
        else:
            d.callback(result)
        return getattr(call, "__name__", "")

    def write(self) -> Deferred[bytes]:
        stream = console.ConsoleStream(console.ConsoleText(self.log, 1 << 30), self.blocking)
        return Deferred.fromCoroutine(write_console(self.request, "demo-1", stream))  # type: ignore[arg-type]

    def test_one_piece_at_a_time(self) -> None:
        """
        One read at a time, the next only once the client took the last piece: while the connection
        is paused no read is asked for; the answer is whole once the log is, then the files are closed.
        """
        d = self.write()
        self.assertEqual(len(self.steps), 1)
        self.request.full = True  # the next write fills the connection's buffer
        self.assertEqual(self.run_step(), "read")
        self.assertEqual(self.request.code, 200)
        self.assertEqual(len(self.request.written), 2)  # the head and the first piece
        self.assertEqual(self.steps, [])
        self.request.full = False
        self.request.producer.resumeProducing()
        while self.steps and self.steps[0][0].__name__ == "read":
            self.assertEqual(len(self.steps), 1)
            self.run_step()
        self.assertEqual(self.run_step(), "close")
        self.assertEqual(self.successResultOf(d), b"")
        self.assertIsNone(self.request.producer)
        self.assertEqual(json.loads(b"".join(self.request.written)),
                         {"hostname": "demo-1", "content": "abcdefgh\nijkl\n", "lines": 2})

    def test_client_gone(self) -> None:
        """A client that goes away (the handler cancelled) during a read: the files are closed after it."""
        from twisted.internet.defer import CancelledError

        d = self.write()
        self.run_step()
        d.cancel()
        self.assertEqual([call.__name__ for call, _ in self.steps], ["read", "close"])
        self.assertNoResult(d)  # until the files are closed
        written = list(self.request.written)
        self.run_step()
        self.run_step()
        self.failureResultOf(d, CancelledError)
        self.assertEqual(self.steps, [])
        self.assertEqual(self.request.written, written)
        self.assertIsNone(self.request.producer)

    def test_read_fails_midway(self) -> None:
        """A read that fails once the head is out drops the connection: no error body after half a JSON."""
        d = self.write()
        self.run_step()
        written = list(self.request.written)
        call, step = self.steps.pop(0)
        step.errback(Internal("cannot read the console log: EIO", code="log_read_failed"))
        self.assertEqual(self.run_step(), "close")
        self.assertEqual(self.successResultOf(d), b"")
        self.assertTrue(self.request.channel.transport.aborted)
        self.assertEqual(self.request.written, written)
