# -*- test-case-name: tests.e2b.test_data_plane -*-
"""
The services of a sandbox's data plane, gathered for its router
(:class:`~.data_plane.DataPlane`): the Connect RPC methods by
``package.Service/Method`` and the plain HTTP routes by method and path.
Each service module adds its own here.
"""

from __future__ import annotations

from typing import Mapping

from twisted.internet.interfaces import IReactorTime

from .data_plane import PlainHandler, RpcMethod
from .files import files_routes
from .filesystem import filesystem_methods
from .host import SandboxHost
from .process_service import ProcessService
from .processes import Processes
from .sandboxes import Sandboxes
from .watching import Watchers


def envd_methods(clock: IReactorTime, sandboxes: Sandboxes, host: SandboxHost) -> Mapping[str, RpcMethod]:
    """Every RPC method served."""
    return {
        **ProcessService(Processes(clock, host)).methods(),
        **filesystem_methods(), **Watchers(sandboxes, host).methods(),
    }


def envd_routes(clock: IReactorTime, sandboxes: Sandboxes, host: SandboxHost) -> Mapping[tuple[bytes, str], PlainHandler]:
    """Every plain HTTP route served."""
    return {
        **files_routes(clock),
    }


__all__ = ["envd_methods", "envd_routes"]
