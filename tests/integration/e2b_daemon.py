"""
What the E2B integration tests share: :class:`E2bDaemonTestCase`, one daemon
per test class with the E2B port on (``base`` served by a small warm
``e2b`` group of the ``e2b`` image, as ``conf/vmservice.yaml``'s, whose
template is built before the first test; the image is built first if it is
missing).
"""

from __future__ import annotations

from typing import Any

from tests.integration.daemon import CREATE_TIMEOUT, TemplatesDaemonTestCase, ensure_image, free_port

#: The small warm group the ``base`` template names, of the ``e2b`` image (the account ``user``).
GROUPS: list[dict[str, Any]] = [
    {"name": "e2b", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "image": "e2b"},
]


class E2bDaemonTestCase(TemplatesDaemonTestCase):
    """
    Tests sharing a daemon whose E2B port is at :attr:`url`.

    :cvar url: the E2B port's URL (both planes).
    """

    groups = GROUPS
    url: str

    @classmethod
    def start_shared(cls) -> None:
        port = free_port()
        cls.settings = {"e2b": {"enabled": True, "port": port, "templates": {"base": "e2b"}}}
        cls.url = f"http://127.0.0.1:{port}"
        ensure_image("e2b")
        super().start_shared()

    @classmethod
    def started(cls) -> None:
        """The group's template built (a cold boot under TCG takes longer than the SDK's 60 s request timeout)."""
        created = cls.daemon.json("POST", f"/hostgroup/e2b/nodes?wait=agent&timeout={CREATE_TIMEOUT}", {}, expect=201)
        cls.daemon.json("DELETE", f"/hostgroup/e2b/nodes/{created['hostname']}")
