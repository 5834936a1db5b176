# -*- test-case-name: tests.service -*-
"""
Assembling the daemon: configuration in, a ``MultiService`` out
(:func:`make_service`).

The service holds the fleet (which stops every VM when the daemon stops) and
the API listener (which stops first, so no request arrives while VMs go).
What the start takes of the host is in :mod:`~vmservice.service.host` (each
refusal a :class:`StartupError`), the KVM/TCG decision in
:mod:`~vmservice.service.driver`, the wiring in
:mod:`~vmservice.service.assembly`, and what the daemon needs of its reactor
in :mod:`~vmservice.service.reactor`.
"""

from .assembly import make_service
from .driver import decide_driver, probe_directory
from .host import StartupError
from .reactor import IDaemonReactor

__all__ = ["IDaemonReactor", "StartupError", "decide_driver", "make_service", "probe_directory"]
