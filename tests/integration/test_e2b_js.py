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

from tests.integration.e2b_daemon import E2bDaemonTestCase
from tests.integration.e2b_js_sdk import SOURCE, sdk

#: The longest a scenario may take.
SCENARIO_TIMEOUT = 240


class E2bJsSdkTests(E2bDaemonTestCase):
    """The JavaScript SDK's scenarios, one daemon for them all."""

    timeout = 600

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

    def test_commands(self) -> None:
        """run (stdout, stderr, exit code), envs (create-time and per command, not leaking), cwd, user, a
        failing command raising with its exit code, output callbacks, background + list + kill, stdin."""
        seen = self.scenario("commands")
        self.assertEqual(seen["echo"], {"stdout": "hi\n", "stderr": "err\n", "exitCode": 0})
        self.assertEqual((seen["envs"], seen["envsAfter"]), ("create-run\n", "create-\n"))
        self.assertEqual((seen["pwd"], seen["whoami"]), ("/home/user\n", "user\n"))
        self.assertEqual(seen["failure"], {"name": "CommandExitError", "exitCode": 3})
        self.assertEqual(seen["callbacks"], "line1\nline2\nline3\n")
        self.assertEqual((seen["listed"], seen["killed"], seen["listedAfterKill"]), (True, True, False))
        self.assertEqual(seen["stdin"], "through stdin\n")

    def test_files(self) -> None:
        """write and read (text, bytes, several at once), list, exists, make_dir twice, rename, get_info,
        remove, watch_dir."""
        seen = self.scenario("files")
        self.assertEqual((seen["read"], seen["bytes"]), ("hello from js", 13))
        self.assertEqual(seen["many"], ["one", "two"])
        self.assertEqual(seen["listed"], [["a.txt", "file"]])
        self.assertEqual(seen["exists"], [True, False])
        self.assertEqual(seen["madeDir"], [True, False])
        self.assertEqual(seen["renamed"], "b.txt")
        self.assertEqual(seen["info"], {"name": "b.txt", "type": "file", "size": 13, "owner": "user"})
        self.assertFalse(seen["existsAfterRemove"])
        self.assertIn(["new.txt", "create"], seen["events"])

    def test_pty(self) -> None:
        """A terminal: what is typed runs, a resize reaches it (stty size), kill."""
        self.assertEqual(self.scenario("pty"), {"typed": True, "resized": True, "killed": True})
