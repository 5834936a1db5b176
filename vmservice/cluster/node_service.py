# -*- test-case-name: tests.cluster.test_node_controller -*-
"""
:class:`NodeService`: the node controller (and the pod controller, once the
Node is registered) as a service of the daemon's tree, started and stopped
with it.  At stop the pods' VMs are left to the fleet: a restart finds and
adopts those still running.
"""

from __future__ import annotations

from twisted.application.service import Service

from .node_controller import NodeController
from .pod_controller import PodController


class NodeService(Service):
    """
    Runs ``controller`` (and ``pods``) while the daemon runs.

    :ivar controller: the Node, its Lease and its status.
    :ivar pods: the pods bound to the Node, run as VMs (``None``: none are).
    """

    def __init__(self, controller: NodeController, pods: PodController | None = None) -> None:
        self.controller, self.pods = controller, pods
        self._pods_started = False

    def pods_start(self) -> None:
        """The Node is registered: the pods are watched from now on (once)."""
        if self.pods is not None and not self._pods_started and self.running:
            self._pods_started = True
            self.pods.start()

    def startService(self) -> None:
        super().startService()  # type: ignore[no-untyped-call]  # Twisted's services are not annotated
        self.controller.start()

    def stopService(self) -> None:
        if self.pods is not None:
            self.pods.stop()
        self.controller.stop()
        super().stopService()  # type: ignore[no-untyped-call]  # (as above)


__all__ = ["NodeService"]
