# -*- test-case-name: tests.client.test_facade,tests.integration.test_client -*-
"""
The Python client of the vmservice HTTP API, built on treq.

It speaks to a daemon over TCP (``http://host:port``) or over a UNIX socket
(any address that starts with ``/``, ``./``, ``../``, ``~/`` or ``unix://``, or
ends in ``.sock``: the rule every Slicer client follows, so one address works
with all of them; :mod:`~vmservice.client.addresses`).  Every call is a
coroutine that answers the decoded JSON body (or the text of a
``text/plain`` answer: pause, resume, suspend, restore, shutdown); a non-2xx
answer raises :class:`ApiError` carrying the daemon's ErrorResponse, and a
daemon that cannot be reached raises :class:`ConnectFailed` naming the
address, so callers never see raw Twisted connection errors
(:mod:`~vmservice.client.errors`).

:class:`Client` (:mod:`~vmservice.client.facade`) puts the families of calls
together, one module each; all requests go through
:class:`~vmservice.client.requests.Requests`, so each operation is one small
method.  Operations whose data can be large stream it both ways instead of
holding it:

- :meth:`Client.exec` hands each NDJSON record to a callback as it arrives
  (read with :func:`treq.collect`); with ``stdin`` the request body streams
  from an ``IBodyProducer`` or a file while the output comes back (full
  duplex, see :mod:`vmservice._duplex`); how a command runs is one
  :class:`ExecOptions` (:mod:`~vmservice.client.execs`);
- :meth:`Client.upload` streams a file, a pipe (chunked) or a producer
  (:mod:`~vmservice.client.bodies`); :meth:`Client.download` hands each
  chunk to a ``write`` callback (:mod:`~vmservice.client.copies`);
- :meth:`Client.shell` opens an interactive shell over a WebSocket
  (:mod:`vmservice.client.shell`);
- :meth:`Client.tunnel_endpoint` makes connections that are tunnels into a
  node (:mod:`vmservice.client.tunnel`);
- :meth:`Client.watch` is an asynchronous iterator of file-system events
  (Server-Sent Events, decoded by :class:`SseDecoder`); a consumer that
  falls behind pauses the connection, and leaving the loop closes it
  (:mod:`~vmservice.client.watching`, :mod:`~vmservice.client.sse`).
"""

from .addresses import DEFAULT_URL, is_unix_socket, socket_path
from .bodies import FdBodyProducer, FdReader, body_producer
from .copies import CP_V1_MODES, Download
from .errors import ApiError, ConnectFailed, ExecInterrupted, WatchInterrupted
from .execs import ExecOptions
from .facade import Client
from .reactors import IBodyReactor, IClientReactor
from .records import ExecRecord, ExecResult, NdjsonDecoder, decode_exec_record
from .shell import ShellError, ShellSession
from .sse import SseDecoder
from .tunnel import TunnelEndpoint, TunnelRefused

__all__ = [
    "ApiError",
    "CP_V1_MODES",
    "Client",
    "ConnectFailed",
    "DEFAULT_URL",
    "Download",
    "ExecInterrupted",
    "ExecOptions",
    "ExecRecord",
    "ExecResult",
    "FdBodyProducer",
    "FdReader",
    "IBodyReactor",
    "IClientReactor",
    "NdjsonDecoder",
    "ShellError",
    "ShellSession",
    "SseDecoder",
    "TunnelEndpoint",
    "TunnelRefused",
    "WatchInterrupted",
    "body_producer",
    "decode_exec_record",
    "is_unix_socket",
    "socket_path",
]
