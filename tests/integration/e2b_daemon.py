"""
What the E2B integration tests share: :class:`E2bDaemonTestCase`, one daemon
per test class with the E2B port on (``base`` served by a small warm
``e2b`` group of the ``e2b`` image, as ``conf/vmservice.yaml``'s, whose
template is built before the first test), the official SDK pointed at it
through its environment for the class's length, and, when the class asks
for one, a sandbox its tests share.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Optional

from e2b import Sandbox

from tests.integration.daemon import CREATE_TIMEOUT, TemplatesDaemonTestCase, free_port

#: The small warm group the ``base`` template names, of the ``e2b`` image (the account ``user``).
GROUPS: list[dict[str, Any]] = [
    {"name": "e2b", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "image": "e2b"},
]
#: The SDK's settings, read from the environment.
SDK_ENVIRONMENT = ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "E2B_DEBUG", "E2B_DOMAIN")


class E2bDaemonTestCase(TemplatesDaemonTestCase):
    """
    Tests sharing a daemon whose E2B port is at :attr:`url`, the SDK pointed at it.

    :cvar url: the E2B port's URL (both planes).
    :cvar sandbox_envs: when not ``None``, a sandbox made with these ``envs``
        before the first test is :attr:`sandbox`, killed after the last.
    """

    groups = GROUPS
    url: str
    sandbox_envs: ClassVar[Optional[dict[str, str]]] = None
    sandbox: Sandbox
    _saved: dict[str, Optional[str]]

    @classmethod
    def start_shared(cls) -> None:
        port = free_port()
        cls.settings = {"e2b": {"enabled": True, "port": port, "templates": {"base": "e2b"}}}
        cls.url = f"http://127.0.0.1:{port}"
        cls._saved = {name: os.environ.get(name) for name in SDK_ENVIRONMENT}
        os.environ.update(E2B_API_URL=cls.url, E2B_SANDBOX_URL=cls.url, E2B_API_KEY="e2b_any_key")
        for name in ("E2B_DEBUG", "E2B_DOMAIN"):
            os.environ.pop(name, None)
        super().start_shared()

    @classmethod
    def started(cls) -> None:
        """The group's template built (a cold boot under TCG takes longer than the SDK's 60 s request timeout)."""
        created = cls.daemon.json("POST", f"/hostgroup/e2b/nodes?wait=agent&timeout={CREATE_TIMEOUT}", {}, expect=201)
        cls.daemon.json("DELETE", f"/hostgroup/e2b/nodes/{created['hostname']}")
        if cls.sandbox_envs is not None:
            cls.sandbox = Sandbox.create(envs=cls.sandbox_envs)

    @classmethod
    def _stop_shared(cls) -> None:
        try:
            sandbox = cls.__dict__.get("sandbox")
            if sandbox is not None:
                del cls.sandbox
                Sandbox.kill(sandbox.sandbox_id)
        finally:
            try:
                super()._stop_shared()
            finally:
                for name, value in cls.__dict__.get("_saved", {}).items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
