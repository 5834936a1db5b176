# -*- test-case-name: tests.wire.test_tunnelport -*-
"""
The tunnel ports' names and the OPEN header of a tunnel over one
(``{"op": "forward-port", ...}``, ``docs/agent-protocol.md``, "The tunnel
ports").  Stdlib only: the guest imports this module.

The header is a ``forward`` one (:class:`~vmservice.wire.openheaders.tunnel.ForwardHeader`)
with ``"tunnel_port": "tunnelK"`` and ``"token": HEX`` added.  Each side ends
its direction on the tunnel's stream with ``{"size": N}`` (the bytes it put
on the port, :func:`vmservice.wire.bulk.encode_upload_end`) and HALF_CLOSE;
the other delivers exactly N bytes from the port before it closes its side.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from vmservice.wire.bulk import parse_token

__all__ = ["MAX_TUNNEL_PORTS", "OP", "PORT_PREFIX", "parse_port", "port_header", "port_name", "socket_name"]

#: The operation of a tunnel over a port.
OP = "forward-port"
#: The ports' names: this and a number from 0.
PORT_PREFIX = "tunnel"
#: The most tunnel ports a node may have.
MAX_TUNNEL_PORTS = 8


def port_name(index: int) -> str:
    """The name of tunnel port ``index``."""
    if not 0 <= index < MAX_TUNNEL_PORTS:
        raise ValueError(f"a tunnel port is numbered from 0 to {MAX_TUNNEL_PORTS - 1}")
    return f"{PORT_PREFIX}{index}"


def socket_name(index: int) -> str:
    """The file name of QEMU's socket of tunnel port ``index`` (in the node's directory, beside the agent's)."""
    return f"tun{index}.sock"


def port_header(forward: Mapping[str, Any], name: str, token: bytes) -> dict[str, Any]:
    """The OPEN header of a tunnel over port ``name``, from a ``forward`` header."""
    return {**forward, "op": OP, "tunnel_port": name, "token": token.hex()}


def parse_port(header: Mapping[str, Any]) -> Optional[tuple[str, bytes]]:
    """The port's name and the token a header names, or ``None`` when it names no tunnel port."""
    name, token = header.get("tunnel_port"), parse_token(header.get("token"))
    if token is None or not isinstance(name, str) or name not in {port_name(i) for i in range(MAX_TUNNEL_PORTS)}:
        return None
    return name, token
