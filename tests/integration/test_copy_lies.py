# -*- test-case-name: tests.integration.test_copy_lies -*-
"""
``GET /vm/{hostname}/cp`` against a real guest that lies, as a malicious
guest can: its root user appends to the guest agent's copy code an
override of ``download`` that rewrites the head the honest code sends
(from ``/tmp/lie.json``: a size off by some bytes, a type or a name of its
choosing; the content stays the file's, on the stream, never the bulk
port), then has init start the agent again.  The daemon answers a valid
response for a head it cannot carry as it is, and aborts the connection of
a file whose content is not the size the head gave, never sending a byte
past its ``Content-Length``.
"""

from __future__ import annotations

import http.client
import json
import shlex
from typing import Any
from urllib.parse import urlencode

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image

#: Appended to the guest's ``vmservice/guest/copying/downloading.py``: the module's ``download`` rewrites its head.
LIAR = '''

_honest_download = download


def download(path, mode, write, semantics="legacy", excludes=None, bulk=None):
    import json as _json
    import struct as _struct
    try:
        with open("/tmp/lie.json") as _stream:
            lie = _json.load(_stream)
    except OSError:
        return _honest_download(path, mode, write, semantics, excludes, bulk)
    first = [True]

    def lying(data):
        if first[0]:
            first[0] = False
            head = _json.loads(data[4:])
            result = head.get("result", {})
            if "size_delta" in lie and result.get("size"):
                result["size"] += lie["size_delta"]
            for key in ("type", "name"):
                if key in lie:
                    result[key] = lie[key]
            body = _json.dumps(head).encode()
            data = _struct.pack(">I", len(body)) + body
        write(data)

    return _honest_download(path, mode, lying, semantics, excludes, None)
'''
CONTENT = b"0123456789" * 100


class LyingGuestTests(SharedDaemonTestCase):
    """One daemon, one node whose agent lies once ``/tmp/lie.json`` says how."""

    host: str

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon()
        cls.daemon.start()
        cls.host = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)["hostname"]
        daemon, host = cls.daemon, cls.host
        code, out = daemon.run(host, "pgrep -f 'guest[.]agent import'")
        assert code == 0, out
        old_agent = out.split()[0]
        script = (f"printf %s {shlex.quote(LIAR)} >> /opt/vmservice/vmservice/guest/copying/downloading.py && "
                  f"printf %s {shlex.quote(CONTENT.decode())} > /root/file && "
                  f"setsid sh -c 'sleep 1; kill {old_agent}' >/dev/null 2>&1 < /dev/null &")
        code, out = daemon.run(host, script)
        assert code == 0, out

        def lying_agent() -> bool:
            try:
                code, out = daemon.run(host, "pgrep -f 'guest[.]agent import'")
            except AssertionError:
                return False
            return code == 0 and out.split()[0] != old_agent

        daemon.wait_for("the guest's new agent", lying_agent, timeout=120)

    def lie(self, **how: Any) -> None:
        code, out = self.daemon.run(self.host, f"printf %s {shlex.quote(json.dumps(how))} > /tmp/lie.json")
        self.assertEqual(code, 0, out)

    def download(self) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
        connection = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=120)
        self.addCleanup(connection.close)
        connection.request("GET", f"/vm/{self.host}/cp?{urlencode({'path': '/root/file', 'mode': 'binary'})}")
        return connection.getresponse(), connection

    def aborted_download(self) -> tuple[bytes, BaseException | None, bool]:
        """
        A download the daemon may abort at any point (its headers and what fits may be lost with the
        connection): the bytes the client got, the error it saw, and whether the connection was closed
        after a body read in full.
        """
        try:
            response, connection = self.download()
        except (http.client.RemoteDisconnected, ConnectionResetError) as error:
            return b"", error, True
        try:
            body = response.read()
        except http.client.IncompleteRead as error:
            return error.partial, error, True
        except ConnectionResetError as error:
            return b"", error, True
        try:
            closed = connection.sock is None or connection.sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
        return body, None, closed

    def test_honest_first(self) -> None:
        """Without a lie the file comes whole (the override changes nothing by itself)."""
        self.daemon.run(self.host, "rm -f /tmp/lie.json")
        response, _ = self.download()
        self.assertEqual((response.status, response.getheader("Content-Length"), response.read()),
                         (200, str(len(CONTENT)), CONTENT))

    def test_declares_more_than_it_sends(self) -> None:
        """
        A head 100 bytes longer than the file: the client sees an error (the connection aborted), never a
        finished response, and no byte that is not the file's.
        """
        self.lie(size_delta=100)
        body, error, _ = self.aborted_download()
        self.assertIsNotNone(error)
        self.assertTrue(CONTENT.startswith(body))
        self.daemon.wait_for("the log", lambda: "bytes it declared" in self.daemon.log(), timeout=30)

    def test_sends_more_than_it_declares(self) -> None:
        """
        A head 7 bytes shorter than the file: the client never gets a byte past the declared ones (an
        error, or exactly those bytes and then the connection closed), and the log says why.
        """
        self.lie(size_delta=-7)
        body, error, closed = self.aborted_download()
        self.assertTrue(CONTENT[:-7].startswith(body), body)
        self.assertTrue(error is not None or (body == CONTENT[:-7] and closed), (error, len(body), closed))
        self.daemon.wait_for("the log", lambda: "sent more than the" in self.daemon.log(), timeout=30)

    def test_head_the_headers_cannot_carry(self) -> None:
        """A type that is not ASCII and a name with a separator: 200 with type ``file`` and no name header."""
        self.lie(type="f\u00efle", name="../../etc/passwd")
        response, _ = self.download()
        self.assertEqual((response.status, response.getheader("X-Slicer-Source-Type"),
                          response.getheader("X-Slicer-Source-Name-Base64"), response.read()),
                         (200, "file", None, CONTENT))
