# -*- test-case-name: tests.wire.test_openheaders -*-
"""
The OPEN header of a tunnel (``{"op": "forward", ...}``, :class:`ForwardHeader`),
written by the host and read by the guest (documented in
``docs/agent-protocol.md``).  Stdlib only: the guest imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vmservice.wire.openheaders.fields import BadHeader, header_object
from vmservice.wire.upstream import MAX_UNIX_SOCKET_PATH, Upstream

#: Longest message of a refused upstream, in characters.
_MESSAGE = 200


def _encodable(path: str) -> bool:
    """Whether ``path`` names a file: JSON may carry lone surrogates no file name holds."""
    try:
        path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class ForwardHeader:
    """
    The header of a byte tunnel to a socket inside the guest.

    :ivar upstream: the UNIX socket (``unix``) or ``host``:``port`` to connect to.
    """

    upstream: Upstream

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object: ``unix``, or ``host`` and ``port``."""
        if self.upstream.unix:
            return {"op": "forward", "unix": self.upstream.unix}
        return {"op": "forward", "host": self.upstream.host, "port": self.upstream.port}

    @classmethod
    def from_json(cls, value: object) -> ForwardHeader:
        """
        Read and check a header (its ``op`` is not looked at): ``unix`` when
        present, else ``host`` and ``port``.  A host name is not resolved here.

        :raises BadHeader: a header that names no upstream.
        """
        header = header_object(value)
        unix = header.get("unix")
        if unix is not None:
            if not isinstance(unix, str) or not unix.startswith("/") or "\0" in unix or not _encodable(unix):
                raise BadHeader(f"unix must be an absolute path, not {unix!r}"[:_MESSAGE])
            if len(unix.encode("utf-8", "surrogateescape")) > MAX_UNIX_SOCKET_PATH:
                raise BadHeader("the UNIX socket path is too long")
            return cls(Upstream(unix=unix))
        host, port = header.get("host"), header.get("port")
        if not isinstance(host, str) or not host or "\0" in host:
            raise BadHeader(f"host must be a non-empty string, not {host!r}"[:_MESSAGE])
        if type(port) is not int or not 0 < port < 65536:
            raise BadHeader(f"port must be an integer from 1 to 65535, not {port!r}"[:_MESSAGE])
        return cls(Upstream(host=host, port=port))


__all__ = ["ForwardHeader"]
