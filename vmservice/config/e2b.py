# -*- test-case-name: tests.config.test_e2b -*-
"""
The ``e2b:`` section: the E2B-compatible API (see ``docs/e2b.md``), as the
file writes it (:class:`E2bDocument`) and as it means it
(:class:`E2bConfig`: where its listener is, which host group each template
id names, the envd version reported, the sandboxes' timeouts).
"""

from __future__ import annotations

import attrs

#: The E2B listener's TCP port unless ``e2b.port`` says otherwise (beside envd's 49983 in E2B's own cloud).
DEFAULT_E2B_PORT = 49982
#: The envd version reported to the SDKs, which gate features by it (0.6.4 unlocks every one they have).
DEFAULT_ENVD_VERSION = "0.6.4"
#: Seconds a sandbox lives when its create names no ``timeout`` (the SDKs' own default).
DEFAULT_SANDBOX_TIMEOUT = 300
#: The longest ``timeout`` a create, ``set_timeout`` or ``connect`` may ask for, unless the file says otherwise.
DEFAULT_MAX_SANDBOX_TIMEOUT = 24 * 3600
#: The longest ``max_timeout_seconds`` the file may say (thirty days).
MAX_SANDBOX_TIMEOUT = 30 * 24 * 3600
#: The template id the SDKs create from when the caller names none.
BASE_TEMPLATE = "base"


@attrs.frozen(kw_only=True)
class E2bDocument:
    """The ``e2b:`` section key for key, as the file writes it."""

    enabled: bool = False
    bind_address: str | None = None
    port: int = DEFAULT_E2B_PORT
    templates: dict[str, str] = attrs.field(factory=dict)
    envd_version: str = DEFAULT_ENVD_VERSION
    default_timeout_seconds: int = DEFAULT_SANDBOX_TIMEOUT
    max_timeout_seconds: int = DEFAULT_MAX_SANDBOX_TIMEOUT


@attrs.frozen(kw_only=True)
class E2bConfig:
    """
    The ``e2b:`` section resolved: the E2B-compatible API is served.

    :ivar bind_address: The IP address its listener is bound to.
    :ivar port: Its TCP port (0: a free one).
    :ivar templates: Template ids and the host groups they name, sorted by id.
    :ivar envd_version: The envd version reported in every sandbox.
    :ivar default_timeout_seconds: Seconds a sandbox lives when its create names none.
    :ivar max_timeout_seconds: The longest timeout a client may ask for.
    """

    bind_address: str = "127.0.0.1"
    port: int = DEFAULT_E2B_PORT
    templates: tuple[tuple[str, str], ...] = ()
    envd_version: str = DEFAULT_ENVD_VERSION
    default_timeout_seconds: int = DEFAULT_SANDBOX_TIMEOUT
    max_timeout_seconds: int = DEFAULT_MAX_SANDBOX_TIMEOUT

    def group_of(self, template: str) -> str | None:
        """The host group template id ``template`` names, or ``None``."""
        return dict(self.templates).get(template)


__all__ = [
    "BASE_TEMPLATE", "DEFAULT_E2B_PORT", "DEFAULT_ENVD_VERSION", "DEFAULT_MAX_SANDBOX_TIMEOUT",
    "DEFAULT_SANDBOX_TIMEOUT", "E2bConfig", "E2bDocument", "MAX_SANDBOX_TIMEOUT",
]
