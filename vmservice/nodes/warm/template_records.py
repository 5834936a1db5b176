# -*- test-case-name: tests.nodes.warm.test_template_state -*-
"""
The records of one template key's states (:mod:`.template_state`): a build
under way, a built template and its spares, a failed build, the files a
state holds; why a template is unavailable; and what a state does to files
and spares (:func:`delete_files`, :func:`new_spare`).
"""

from __future__ import annotations

import os
import shutil
from typing import Awaitable, Callable

from attrs import field, frozen
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from ...errors import Internal
from ...observer import OneShotObserver
from ..paths import discard
from .spare import SPARE_PREFIX, SPARE_TAP_PREFIX, Spare
from .template_files import Template

log = Logger()

#: Builds a template into its (empty, existing) files; fails with why not.
Build = Callable[[Template], Awaitable[None]]

#: Seconds a failed build of a key is remembered: creates meanwhile boot cold at once instead of trying again.
RETRY_AFTER = 60.0


class TemplateUnavailable(Exception):
    """No template can be used: the node boots cold.

    :ivar kind: a short word for the metric (``build_failed``, ``budget``,
        ``missing``, ``load_failed``, ``network``).
    """

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


@frozen
class BuildUnderWay:
    """
    A build under way.

    :ivar template: the files it makes.
    :ivar observer: fired with the template (or failed) when it ends; every ask waits for it.
    :ivar run: the build itself (cancelled when the daemon stops).
    """

    template: Template
    observer: OneShotObserver[Template]
    run: Deferred[None]


@frozen
class Built:
    """
    A ready template.

    :ivar template: its files.
    :ivar spares: its spare VMs (those that hold memory no longer are dropped when it is looked at).
    """

    template: Template
    spares: list[Spare] = field(factory=list)

    def pool(self) -> list[Spare]:
        """The spares that hold memory (starting or ready), the others forgotten."""
        self.spares[:] = [spare for spare in self.spares if spare.phase.holds()]
        return self.spares


@frozen
class BuildFailure:
    """
    A failed build, remembered.

    :ivar at: when it failed.
    :ivar reason: why.
    """

    at: float
    reason: str


@frozen
class Held:
    """
    What of a key's files :meth:`~vmservice.nodes.warm.templates.TemplateStore.collect` keeps.

    :ivar directory: the ready template's directory (``""``: none).
    :ivar ram_name: the name of the ready template's RAM file (``""``: none).
    :ivar spares: the directories of its spares.
    :ivar building: the name of the directory and RAM file of the build under way (``""``: none).
    """

    directory: str = ""
    ram_name: str = ""
    spares: tuple[str, ...] = ()
    building: str = ""


def delete_files(template: Template, keep_disk: bool) -> None:
    """Remove ``template``'s RAM file, device state and empty overlay, and its directory unless ``keep_disk``."""
    for path in (template.ram_file, template.device_state, template.empty_overlay):
        discard(path)
    if not keep_disk:
        shutil.rmtree(template.directory, ignore_errors=True)


def new_spare(template: Template) -> Spare | None:
    """A spare of ``template`` under a name no earlier one had (with a tap of its own when it has a network)."""
    name = os.urandom(3).hex()
    while os.path.exists(os.path.join(template.directory, SPARE_PREFIX + name)):
        name = os.urandom(3).hex()
    try:
        return Spare(template, os.path.join(template.directory, SPARE_PREFIX + name),
                     SPARE_TAP_PREFIX + name if template.key.network else None)
    except Internal as error:
        log.warn("no spare VM for template {digest}: {error}", digest=template.key.digest(), error=error)
        return None


async def run_build(build: Build, template: Template) -> None:
    """Run ``build`` of ``template`` as a coroutine."""
    await build(template)


__all__ = [
    "Build", "BuildFailure", "BuildUnderWay", "Built", "Held", "RETRY_AFTER", "TemplateUnavailable", "delete_files",
    "new_spare", "run_build",
]
