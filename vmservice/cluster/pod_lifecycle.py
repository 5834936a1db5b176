# -*- test-case-name: tests.cluster.test_pod_lifecycle -*-
"""
A VM pod over time, as an automat machine (diagram:
``docs/state-machines/pod-lifecycle.dot``): ``Waiting`` (seen, no VM yet),
``Creating`` (its VM being made), ``Running`` (its VM made, or found at a
restart and adopted), ``Failed`` (its VM could not be made, or ended),
``Terminating`` (its deletion asked: the VM is being deleted, then the
Pod), ``Deleted`` (both gone).

The machine decides which Events are recorded on the pod (``Created`` and
``Started``, ``FailedCreate``, ``Failed``, ``Killing``) and what is logged;
the :class:`~vmservice.cluster.pod_controller.PodController` reconciles
and tells the machine what came of it.  An input that changes nothing
(the same failure again, a late one after the deletion) is ignored.
"""

from __future__ import annotations

from typing import Callable, Protocol

from attrs import define
from automat import TypeMachine, TypeMachineBuilder
from twisted.logger import Logger

log = Logger(namespace="vmservice.cluster")


class PodInputs(Protocol):
    """What happens to a pod's VM."""

    def create(self) -> None:
        """Its VM is being made."""

    def made(self, hostname: str) -> None:
        """Its VM was made and its agent answered."""

    def adopted(self, hostname: str) -> None:
        """Its VM was found (a restart of the daemon)."""

    def failed(self, reason: str, message: str) -> None:
        """Its VM could not be made, or ended."""

    def delete(self, hostname: str) -> None:
        """Its deletion was asked (``hostname``: its VM's, empty without one)."""

    def deleted(self) -> None:
        """Its VM and the Pod are gone."""


@define
class PodCore:
    """
    What the machine sets going.

    :ivar pod: ``namespace/name``, for the log.
    :ivar event: records an Event on the pod: type, reason, message.
    """

    pod: str
    event: Callable[[str, str, str], None]


def _build() -> TypeMachine[PodInputs, PodCore]:
    builder = TypeMachineBuilder(PodInputs, PodCore)
    waiting, creating, running = builder.state("Waiting"), builder.state("Creating"), builder.state("Running")
    failed, terminating, deleted = builder.state("Failed"), builder.state("Terminating"), builder.state("Deleted")

    @waiting.upon(PodInputs.create).to(creating)
    def create(inputs: PodInputs, core: PodCore) -> None:
        log.info("pod {pod}: making its VM", pod=core.pod)

    @creating.upon(PodInputs.made).to(running)
    def made(inputs: PodInputs, core: PodCore, hostname: str) -> None:
        core.event("Normal", "Created", f"Created VM {hostname}")
        core.event("Normal", "Started", f"Started VM {hostname}")

    @waiting.upon(PodInputs.adopted).to(running)
    def adopted(inputs: PodInputs, core: PodCore, hostname: str) -> None:
        log.info("pod {pod}: VM {hostname} adopted", pod=core.pod, hostname=hostname)

    running.upon(PodInputs.adopted).loop().returns(None)

    @creating.upon(PodInputs.failed).to(failed)
    def create_failed(inputs: PodInputs, core: PodCore, reason: str, message: str) -> None:
        core.event("Warning", "FailedCreate", f"{reason}: {message}")

    @waiting.upon(PodInputs.failed).to(failed)
    @running.upon(PodInputs.failed).to(failed)
    def vm_failed(inputs: PodInputs, core: PodCore, reason: str, message: str) -> None:
        log.info("pod {pod}: failed ({reason}: {message})", pod=core.pod, reason=reason, message=message)
        core.event("Warning", "Failed", f"{reason}: {message}")

    failed.upon(PodInputs.failed).loop().returns(None)
    failed.upon(PodInputs.adopted).loop().returns(None)

    @waiting.upon(PodInputs.delete).to(terminating)
    @creating.upon(PodInputs.delete).to(terminating)
    @running.upon(PodInputs.delete).to(terminating)
    @failed.upon(PodInputs.delete).to(terminating)
    def delete(inputs: PodInputs, core: PodCore, hostname: str) -> None:
        if hostname:
            core.event("Normal", "Killing", f"Stopping VM {hostname}")

    terminating.upon(PodInputs.delete).loop().returns(None)

    @terminating.upon(PodInputs.deleted).to(deleted)
    def gone(inputs: PodInputs, core: PodCore) -> None:
        log.info("pod {pod}: its VM and the Pod are gone", pod=core.pod)

    deleted.upon(PodInputs.delete).loop().returns(None)
    deleted.upon(PodInputs.deleted).loop().returns(None)
    for late in (PodInputs.failed, PodInputs.adopted, PodInputs.made):
        terminating.upon(late).loop().returns(None)
        deleted.upon(late).loop().returns(None)
    return builder.build()


#: A pod's lifecycle; calling it with a :class:`PodCore` gives one, ``Waiting``.
POD_MACHINE = _build()

__all__ = ["POD_MACHINE", "PodCore", "PodInputs"]
