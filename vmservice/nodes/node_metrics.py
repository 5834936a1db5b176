# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.warm.test_cloning -*-
"""
What the node layer reports for the daemon's metrics: :class:`NodeMetrics`,
which the daemon's :class:`vmservice.metrics.Metrics` provides, and
:class:`NullMetrics`, which reports nothing.
"""

from __future__ import annotations

from typing import Protocol


class NodeMetrics(Protocol):
    """The node layer's measurements, each of a node of host group ``group``."""

    def observe_boot(self, group: str, seconds: float) -> None:
        """A node's agent first answered ``seconds`` after its boot began."""

    def observe_restore(self, group: str, seconds: float) -> None:
        """A node's VM ran again ``seconds`` after its restore began."""

    def observe_clone(self, group: str, seconds: float) -> None:
        """A node was cloned: ``seconds`` from its disk's creation to its VM running with its identity adopted."""

    def observe_warm_fallback(self, group: str, reason: str) -> None:
        """A node of warm ``group`` booted cold instead; ``reason`` says why (a short word)."""

    def observe_idle(self, group: str, what: str, seconds: float) -> None:
        """An automatic suspend or wake (``what``, see :mod:`.idling`) took ``seconds``."""


class NullMetrics:
    """Measures nothing."""

    def observe_boot(self, group: str, seconds: float) -> None:
        pass

    def observe_restore(self, group: str, seconds: float) -> None:
        pass

    def observe_clone(self, group: str, seconds: float) -> None:
        pass

    def observe_warm_fallback(self, group: str, reason: str) -> None:
        pass

    def observe_idle(self, group: str, what: str, seconds: float) -> None:
        pass


__all__ = ["NodeMetrics", "NullMetrics"]
