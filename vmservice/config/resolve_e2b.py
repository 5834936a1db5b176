# -*- test-case-name: tests.config.test_e2b -*-
"""
Checking and resolving the ``e2b:`` section (step 2 of loading):
:class:`E2bChecks`, which the :class:`~vmservice.config.resolve.Resolver`
is made with.
"""

from __future__ import annotations

import ipaddress
import re

from ..structuring import Path
from .checks import Checks
from .e2b import BASE_TEMPLATE, MAX_SANDBOX_TIMEOUT, E2bConfig, E2bDocument
from .model import ApiConfig

#: A template id: what E2B's template ids and names look like (``base``, ``team/name:tag``), at most 128 characters.
TEMPLATE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
#: An envd version as the SDKs compare it: ``MAJOR.MINOR.PATCH``.
_VERSION = re.compile(r"(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})")
#: The oldest envd version the SDKs accept.
_OLDEST_ENVD = (0, 1, 0)


class E2bChecks(Checks):
    """The checks of the ``e2b:`` section."""

    def e2b(self, document: E2bDocument | None, parts: Path, api: ApiConfig, groups: tuple[str, ...]) -> E2bConfig | None:
        """The section resolved; ``None`` when absent or not enabled (no E2B API is served)."""
        if document is None or not document.enabled:
            return None
        address = self.e2b_address(document.bind_address, api, (*parts, "bind_address"))
        if not 0 <= document.port <= 65535:
            raise self.error((*parts, "port"), f"port {document.port} out of range (0-65535)")
        if document.port and address == api.bind_address and document.port == api.port:
            raise self.error((*parts, "port"), f"port {document.port} is the API's own port on {address}")
        version = _VERSION.fullmatch(document.envd_version)
        if version is None or tuple(int(part) for part in version.groups()) < _OLDEST_ENVD:
            raise self.error((*parts, "envd_version"), f"envd_version {document.envd_version!r} must be "
                                                       "MAJOR.MINOR.PATCH, at least 0.1.0 (the SDKs refuse older)")
        most = document.max_timeout_seconds
        if not 1 <= most <= MAX_SANDBOX_TIMEOUT:
            raise self.error((*parts, "max_timeout_seconds"), f"max_timeout_seconds {most} must be from 1 to "
                                                              f"{MAX_SANDBOX_TIMEOUT}")
        default = document.default_timeout_seconds
        if not 1 <= default <= most:
            raise self.error((*parts, "default_timeout_seconds"), f"default_timeout_seconds {default} must be from "
                                                                  f"1 to max_timeout_seconds ({most})")
        return E2bConfig(
            bind_address=address, port=document.port, envd_version=document.envd_version,
            templates=self.e2b_templates(document.templates, groups, (*parts, "templates")),
            default_timeout_seconds=default, max_timeout_seconds=most,
        )

    def e2b_address(self, address: str | None, api: ApiConfig, parts: Path) -> str:
        """
        An IP address (the API's when none is given and the API listens on
        TCP, else loopback), refused when it is not loopback while auth is off
        (unless ``api.allow_unauthenticated_remote`` says so).
        """
        if address is None:
            address = "127.0.0.1" if api.unix_socket_path is not None else api.bind_address
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            raise self.error(parts, f"bad bind address {address!r} (expected an IP address)") from None
        if not ip.is_loopback and not api.auth.enabled and not api.allow_unauthenticated_remote:
            raise self.error(parts, f"{address} is not a loopback address and auth is off: anyone who reaches it "
                                    "could make sandboxes; turn api.auth.enabled on, or set "
                                    "api.allow_unauthenticated_remote: true")
        return ip.compressed

    def e2b_templates(self, templates: dict[str, str], groups: tuple[str, ...],
                      parts: Path) -> tuple[tuple[str, str], ...]:
        """Template ids and their host groups, sorted; none given: ``base`` names the first group."""
        if not templates:
            if not groups:
                raise self.error(parts, "the E2B API needs a host group for its sandboxes; none is configured")
            return ((BASE_TEMPLATE, groups[0]),)
        for template, group in templates.items():
            if not TEMPLATE_ID.fullmatch(template):
                raise self.error((*parts, template), f"bad template id {template!r} (letters, digits and . _ : / -, "
                                                     "at most 128 characters)")
            if group not in groups:
                raise self.error((*parts, template), f"unknown host group {group!r}")
        return tuple(sorted(templates.items()))


__all__ = ["E2bChecks", "TEMPLATE_ID"]
