# -*- test-case-name: tests.cluster.test_node_controller -*-
"""
:class:`NodeService`: the node controller as a service of the daemon's tree,
started and stopped with it.
"""

from __future__ import annotations

from twisted.application.service import Service

from .node_controller import NodeController


class NodeService(Service):
    """
    Runs ``controller`` while the daemon runs.

    :ivar controller: the Node, its Lease and its status.
    """

    def __init__(self, controller: NodeController) -> None:
        self.controller = controller

    def startService(self) -> None:
        super().startService()  # type: ignore[no-untyped-call]  # Twisted's services are not annotated
        self.controller.start()

    def stopService(self) -> None:
        self.controller.stop()
        super().stopService()  # type: ignore[no-untyped-call]  # (as above)


__all__ = ["NodeService"]
