"""
A fleet made of :class:`~vmservice.nodes.parts.FleetParts` with warm start
wired in as the daemon's composition root does (:func:`fleet_of`), for the
tests that build fleets of fakes.
"""

from __future__ import annotations

from vmservice.nodes.fleet import Fleet
from vmservice.nodes.parts import FleetParts
from vmservice.nodes.warm.adoption import ICloneAdoption
from vmservice.nodes.warm.starts import WarmStarts
from vmservice.nodes.warm.templates import TemplateStore


def fleet_of(parts: FleetParts, templates: TemplateStore | None = None,
             adoption: ICloneAdoption | None = None) -> Fleet:
    """A fleet of ``parts``, its warm groups cloned from ``templates`` with ``adoption`` (none by default)."""
    return Fleet(parts, WarmStarts(parts, templates, adoption))
