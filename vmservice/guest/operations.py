# -*- test-case-name: tests.guest.test_agent -*-
"""
The agent's operation table: the ``op`` of a stream's OPEN header names a
:class:`~vmservice.guest.streams.StreamHandler` subclass, either here
(:data:`HANDLERS`) or in a module imported on first use (:data:`LAZY_HANDLERS`).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping, Optional

from vmservice.guest import agentlog, deferred
from vmservice.guest.echo import EchoHandler
from vmservice.guest.health import HealthHandler
from vmservice.guest.streams import StreamHandler

#: The operations the agent serves, by the ``op`` of the OPEN header.
HANDLERS: dict[str, type[StreamHandler]] = {
    "health": HealthHandler,
    "echo": EchoHandler,
}

#: Operations served by other modules, as ``"module:Class"``: imported on first
#: use, so that the agent starts fast (every import costs under TCG). The clock
#: is one of them: only a paused, suspended or restored guest is asked to set it,
#: and its header's module brings :mod:`dataclasses` (a tenth of a second).
LAZY_HANDLERS: dict[str, str] = {
    "clock": "vmservice.guest.clock:ClockHandler",
    "exec": "vmservice.guest.execution:ExecHandler",
    "fs": "vmservice.guest.fs_requests:FsHandler",
    "cp-upload": "vmservice.guest.copying.streams:UploadHandler",
    "cp-download": "vmservice.guest.copying.streams:DownloadHandler",
    "cp-upload-bulk": "vmservice.guest.copying.streams:BulkUploadHandler",
    "background": "vmservice.guest.background_requests:BackgroundHandler",
    "watch": "vmservice.guest.watching:WatchHandler",
    "shell": "vmservice.guest.shell:ShellHandler",
    "forward": "vmservice.guest.forwarding:ForwardHandler",
    "forward-port": "vmservice.guest.tunnelport:PortForwardHandler",
    "secrets": "vmservice.guest.secrets:SecretsHandler",
    "userdata": "vmservice.guest.userdata:UserdataHandler",
    "login": "vmservice.guest.login:LoginHandler",
    "adopt": "vmservice.guest.identity:AdoptHandler",
}


def find_handler(op: object, handlers: Mapping[str, type[StreamHandler]]) -> Optional[type[StreamHandler]]:
    """
    The handler class of operation ``op``: from ``handlers``, else imported from
    :data:`LAZY_HANDLERS` (only when ``handlers`` is the agent's own table).
    """
    if not isinstance(op, str):
        return None
    if op not in deferred.UNDEFERRED_OPS:
        deferred.run_deferred()
    found = handlers.get(op)
    if found is not None or handlers is not HANDLERS or op not in LAZY_HANDLERS:
        return found
    module_name, _, class_name = LAZY_HANDLERS[op].partition(":")
    try:
        module = __import__(module_name, fromlist=[class_name])
        loaded: type[StreamHandler] = getattr(module, class_name)
    except (ImportError, AttributeError) as e:
        agentlog.log(f"op {op!r} is not available: {e!r}")
        return None
    HANDLERS[op] = loaded
    return loaded


__all__ = ["HANDLERS", "LAZY_HANDLERS", "find_handler"]
