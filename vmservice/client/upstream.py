# -*- test-case-name: tests.cli.test_forwarding -*-
"""
The upstream of a tunnel as clients write it (the forward route's
``upstream``): ``host:port`` or ``unix:/path`` inside the node, read and
checked here before anything is dialled, so a bad one is refused with the
daemon's own words without a request.
"""

from __future__ import annotations

from attrs import frozen

__all__ = ["MAX_UNIX_SOCKET_PATH", "Upstream"]

#: Longest UNIX socket path in the guest (``sun_path`` holds 108 bytes with its NUL).
MAX_UNIX_SOCKET_PATH = 107


@frozen
class Upstream:
    """
    The upstream of a tunnel inside the guest: ``host``:``port`` over TCP, or
    the UNIX socket ``unix`` (then ``host`` is empty and ``port`` 0).
    """

    host: str = ""
    port: int = 0
    unix: str = ""

    def describe(self) -> str:
        """``host:port`` or ``unix:/path``, as clients write it."""
        if self.unix:
            return f"unix:{self.unix}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> "Upstream":
        """
        Read ``host:port`` (``[v6 address]:port`` too) or ``unix:/absolute/path``.

        :raises ValueError: anything else, saying why.
        """
        if text.startswith("unix:"):
            path = text[5:]
            if not path.startswith("/") or "\0" in path:
                raise ValueError(f"a UNIX socket upstream needs an absolute path: {text!r}")
            if len(path.encode("utf-8", "surrogateescape")) > MAX_UNIX_SOCKET_PATH:
                raise ValueError(f"the UNIX socket path is longer than {MAX_UNIX_SOCKET_PATH} bytes")
            return cls(unix=path)
        host, colon, port = text.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not colon or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"the upstream must be host:port (port 1 to 65535) or unix:/path, not {text!r}")
        if any(c.isspace() or c in "\0/[]" for c in host) or len(host) > 253:
            raise ValueError(f"invalid upstream host {host!r}")
        return cls(host=host, port=int(port))
