# -*- test-case-name: tests.integration.test_e2b_js -*-
"""
The E2B port driven by the official E2B JavaScript SDK (npm ``e2b``,
unchanged; installed by ``make test``, see :mod:`tests.integration.e2b_js_sdk`)
against a real daemon and real guests: each test runs one scenario of
``tests/integration/e2b_js/check.mjs`` in Node.js and checks what it saw.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from tests.integration.daemon import CREATE_TIMEOUT, TemplatesDaemonTestCase, free_port
from tests.integration.e2b_js_sdk import SOURCE, sdk

#: The small warm group the ``base`` template names.
GROUPS: list[dict[str, Any]] = [
    {"name": "e2b", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True},
]
#: The longest a scenario may take.
SCENARIO_TIMEOUT = 240


class E2bJsSdkTests(TemplatesDaemonTestCase):
    """The JavaScript SDK's scenarios, one daemon for them all."""

    timeout = 600
    groups = GROUPS
    url: str

    @classmethod
    def start_shared(cls) -> None:
        port = free_port()
        cls.settings = {"e2b": {"enabled": True, "port": port, "templates": {"base": "e2b"}}}
        cls.url = f"http://127.0.0.1:{port}"
        super().start_shared()

    @classmethod
    def started(cls) -> None:
        """The group's template built (a cold boot under TCG takes longer than the SDK's request timeout)."""
        created = cls.daemon.json("POST", f"/hostgroup/e2b/nodes?wait=agent&timeout={CREATE_TIMEOUT}", {}, expect=201)
        cls.daemon.json("DELETE", f"/hostgroup/e2b/nodes/{created['hostname']}")

    def scenario(self, name: str) -> dict[str, Any]:
        """Run scenario ``name``; what it saw."""
        installed = sdk()
        if installed is None:
            self.fail("the E2B JavaScript SDK is not installed: `make e2b-js` (which `make test` runs) installs it")
        environment = {key: value for key, value in os.environ.items() if not key.startswith("E2B_")}
        environment.update(E2B_API_URL=self.url, E2B_SANDBOX_URL=self.url, E2B_API_KEY="e2b_any_key",
                           E2B_SDK_ENTRY=installed.entry)
        result = subprocess.run([installed.node, os.path.join(SOURCE, "check.mjs"), name], env=environment,
                                capture_output=True, timeout=SCENARIO_TIMEOUT, cwd=SOURCE)
        self.assertEqual(result.returncode, 0, result.stderr.decode(errors="replace")[-4000:])
        seen: dict[str, Any] = json.loads(result.stdout.decode().strip().splitlines()[-1])
        return seen

    def test_lifecycle(self) -> None:
        """create, list by metadata, info, set_timeout, pause, connect (resumed, the same id), kill."""
        seen = self.scenario("lifecycle")
        self.assertTrue(seen["running"])
        self.assertEqual(seen["listed"], [seen["id"]])
        self.assertEqual(set(seen["metadata"]), {"suite"})
        self.assertTrue(seen["paused"])
        self.assertEqual(seen["stateAfterPause"], "paused")
        self.assertEqual((seen["resumedId"], seen["runningAfterConnect"]), (seen["id"], True))
        self.assertEqual((seen["killed"], seen["killedAgain"]), (True, False))
