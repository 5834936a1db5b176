# -*- test-case-name: tests.service.test_e2b_port -*-
"""
The E2B port, wired (with ``e2b:`` enabled): the sandboxes over the fleet
(:class:`~vmservice.e2b.sandboxes.Sandboxes`, their records in
``<state_dir>/e2b/``) and the E2B listener that serves them, as one service
whose listener stops first (no request arrives while the sandboxes stop);
the assembly adds it after the fleet, so it stops before the fleet does.
"""

from __future__ import annotations

import ipaddress
import os

from twisted.application.service import MultiService
from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.internet.interfaces import IStreamServerEndpoint

from ..auth import Tokens
from ..config import Config, E2bConfig
from ..e2b.host import FleetHost
from ..e2b.sandboxes import Sandboxes
from ..e2b.site import e2b_site
from ..e2b.store import SandboxStore
from ..listening import listening_service
from ..nodes.fleet import Fleet
from ..private_files import NotPrivate
from .host import StartupError
from .reactor import IDaemonReactor

#: The sandboxes' records, under the state directory.
RECORDS_DIR = "e2b"


def e2b_endpoint(reactor: IDaemonReactor, e2b: E2bConfig) -> IStreamServerEndpoint:
    """Where the E2B listener listens (TCP only)."""
    if ipaddress.ip_address(e2b.bind_address).version == 6:
        return TCP6ServerEndpoint(reactor, e2b.port, interface=e2b.bind_address)
    return TCP4ServerEndpoint(reactor, e2b.port, interface=e2b.bind_address)


def e2b_port(config: Config, e2b: E2bConfig, reactor: IDaemonReactor, fleet: Fleet,
             tokens: Tokens | None) -> MultiService:
    """
    The sandboxes and their listener.

    :raise StartupError: the records' directory is not the daemon's alone.
    """
    try:
        store = SandboxStore(os.path.join(config.state_dir, RECORDS_DIR))
    except NotPrivate as error:
        raise StartupError(f"e2b: {error}") from None
    host = FleetHost(fleet)
    sandboxes = Sandboxes(reactor, host, store, e2b)
    top = MultiService()
    sandboxes.setServiceParent(top)  # type: ignore[no-untyped-call]  # Twisted's services are not annotated
    listening_service(e2b_endpoint(reactor, e2b), e2b_site(reactor, config, e2b, sandboxes, host, tokens)).setServiceParent(top)
    return top


__all__ = ["RECORDS_DIR", "e2b_endpoint", "e2b_port"]
