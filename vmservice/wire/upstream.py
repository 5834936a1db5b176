# -*- test-case-name: tests.wire.test_upstream -*-
"""
The upstream of a tunnel inside a node: ``host:port`` (``[v6 address]:port``
too) over TCP, or ``unix:/absolute/path``, as clients write it (the forward
route's ``X-Inlets-Upstream`` header or ``upstream`` parameter, ``vmctl
forward``'s SPEC).  One rule, read the same by the daemon before it opens a
tunnel and by the client before it dials one, so a bad upstream is refused
with the same words on either side.  Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_UNIX_SOCKET_PATH", "Upstream"]

#: Longest UNIX socket path in the guest (``sun_path`` holds 108 bytes with its NUL).
MAX_UNIX_SOCKET_PATH = 107


@dataclass(frozen=True)
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
