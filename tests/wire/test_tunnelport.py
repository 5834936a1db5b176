"""The tunnel ports' names and OPEN header (:mod:`vmservice.wire.tunnelport`)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice.wire.bulk import new_token
from vmservice.wire.tunnelport import MAX_TUNNEL_PORTS, OP, parse_port, port_header, port_name, socket_name


class TunnelPortTests(SynchronousTestCase):
    def test_names(self) -> None:
        """Ports are tunnel0.. and their sockets tun0.sock..; no other number is one."""
        self.assertEqual((port_name(0), port_name(MAX_TUNNEL_PORTS - 1)), ("tunnel0", f"tunnel{MAX_TUNNEL_PORTS - 1}"))
        self.assertEqual(socket_name(2), "tun2.sock")
        for index in (-1, MAX_TUNNEL_PORTS):
            self.assertRaises(ValueError, port_name, index)

    def test_round_trip(self) -> None:
        """A header names the port and token a forward header had added."""
        token = new_token()
        header = port_header({"op": "forward", "unix": "/run/s"}, "tunnel1", token)
        self.assertEqual(header, {"op": OP, "unix": "/run/s", "tunnel_port": "tunnel1", "token": token.hex()})
        self.assertEqual(parse_port(header), ("tunnel1", token))

    def test_refusals(self) -> None:
        """No port, another port (bulk, a number out of range), no token or a bad one: no tunnel port."""
        token = new_token().hex()
        for header in ({"token": token}, {"tunnel_port": "bulk", "token": token},
                       {"tunnel_port": f"tunnel{MAX_TUNNEL_PORTS}", "token": token},
                       {"tunnel_port": "tunnel0"}, {"tunnel_port": "tunnel0", "token": token.upper()},
                       {"tunnel_port": 0, "token": token}):
            self.assertIsNone(parse_port(header), header)
