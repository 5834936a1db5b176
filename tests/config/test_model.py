# -*- test-case-name: tests.config.test_model -*-
"""
Tests for :mod:`vmservice.config.model`: the records' own behaviour (a group by name, the API's endpoint).
"""

from __future__ import annotations

from twisted.internet.endpoints import serverFromString
from twisted.internet.protocol import Factory
from twisted.internet.testing import MemoryReactor
from twisted.trial.unittest import SynchronousTestCase

from tests.config.parsing import parse_text
from vmservice.config import ApiConfig


def _tcp_listening(api: ApiConfig) -> tuple[int, str]:
    """The port and interface a listener on ``api``'s endpoint description takes (on a memory reactor)."""
    reactor = MemoryReactor()
    serverFromString(reactor, api.endpoint_description()).listen(Factory())
    port, _, _, interface = reactor.tcpServers[0]
    return port, interface


class LookupTests(SynchronousTestCase):
    """``Config.group``: a group by its name."""

    def test_groupLookup(self) -> None:
        """
        ``Config.group`` finds a group by name and answers ``None`` otherwise.
        """
        config = parse_text("config:\n  host_groups:\n    - name: a\n    - name: b\n      count: 2\n")
        group = config.group("b")
        assert group is not None
        self.assertEqual((group.name, group.count), ("b", 2))
        self.assertIsNone(config.group("c"))


class ApiTests(SynchronousTestCase):
    """
    ``config.api``: TCP or UNIX socket, and authentication.
    """

    def test_unixSocket(self) -> None:
        """
        A ``bind_address`` that is a path means a UNIX socket, with auth off
        unless the file turns it on explicitly.
        """
        api = parse_text("config:\n  api:\n    bind_address: /run/vmservice/api.sock\n").api
        self.assertEqual(api.unix_socket_path, "/run/vmservice/api.sock")
        self.assertFalse(api.auth.enabled)
        api = parse_text("config:\n  api:\n    bind_address: ./api.sock\n    auth: {enabled: true}\n").api
        self.assertEqual(api.unix_socket_path, "./api.sock")
        self.assertTrue(api.auth.enabled)

    def test_tcp(self) -> None:
        """
        IPv4 and IPv6 addresses mean TCP: no socket path.
        """
        for address in ("127.0.0.1", "0.0.0.0", "::1", "::"):
            api = parse_text(f"config:\n  api:\n    bind_address: '{address}'\n    auth: {{enabled: true}}\n").api
            self.assertIsNone(api.unix_socket_path, address)

    def test_endpointTcp(self) -> None:
        """
        The endpoint description listens on the configured IPv4 address and port.
        """
        self.assertEqual(_tcp_listening(ApiConfig(bind_address="127.0.0.1", port=8081)), (8081, "127.0.0.1"))

    def test_endpointTcp6(self) -> None:
        """
        The colons of an IPv6 address are quoted in the endpoint description.
        """
        self.assertEqual(_tcp_listening(ApiConfig(bind_address="::1", port=8082)), (8082, "::1"))

    def test_endpointUnix(self) -> None:
        """
        A UNIX socket endpoint is created at the path with mode 0660, even when
        the path contains a colon.
        """
        reactor = MemoryReactor()
        description = ApiConfig(bind_address="/run/vm:1/api.sock").endpoint_description()
        serverFromString(reactor, description).listen(Factory())
        address, _, _, mode, _ = reactor.unixServers[0]
        self.assertEqual((address, mode), ("/run/vm:1/api.sock", 0o660))
