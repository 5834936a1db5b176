# -*- test-case-name: tests.integration.test_e2b -*-
"""
The E2B port driven by the official E2B Python SDK (``e2b``, unchanged)
against a real daemon and real guests: create from ``base`` (a small warm
group), list with a metadata filter, ``get_info``, ``set_timeout`` and the
sandbox gone at its end, ``kill`` (True, then False), ``pause`` then
``Sandbox.connect`` resuming the same sandbox.  The SDK finds the daemon
through ``E2B_API_URL`` and ``E2B_SANDBOX_URL`` (both the port's URL) and
sends any ``E2B_API_KEY``: the daemon runs with auth off.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from e2b import Sandbox, SandboxQuery, SandboxState
from e2b.exceptions import SandboxNotFoundException

from tests.integration.daemon import wait_until
from tests.integration.e2b_daemon import E2bDaemonTestCase


class E2bSdkTests(E2bDaemonTestCase):
    """A few sandboxes, made and ended through the SDK."""

    timeout = 300

    def create(self, **options: Any) -> Sandbox:
        sandbox = Sandbox.create(**options)
        self.addCleanup(lambda: Sandbox.kill(sandbox.sandbox_id))
        return sandbox

    def test_create_list_info_timeout(self) -> None:
        """create (base), list by metadata, get_info, set_timeout: gone at its end (health 502, info 404)."""
        suite = uuid.uuid4().hex
        tagged = self.create(metadata={"suite": suite, "role": "tagged"})
        other = self.create(metadata={"suite": "another"})
        self.assertTrue(tagged.is_running())
        listed = Sandbox.list(query=SandboxQuery(metadata={"suite": suite})).next_items()
        self.assertEqual([info.sandbox_id for info in listed], [tagged.sandbox_id])
        self.assertEqual(listed[0].metadata, {"suite": suite, "role": "tagged"})
        running = Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()
        self.assertTrue({tagged.sandbox_id, other.sandbox_id} <= {info.sandbox_id for info in running})
        info = tagged.get_info()
        self.assertEqual((info.sandbox_id, info.template_id, info.state, info.cpu_count, info.memory_mb),
                         (tagged.sandbox_id, "base", SandboxState.RUNNING, 1, 256))
        self.assertGreater(info.end_at, info.started_at)
        tagged.set_timeout(3)
        began = time.monotonic()
        wait_until("the sandbox gone at its end", lambda: not tagged.is_running(), 15, 0.2)
        self.assertLess(time.monotonic() - began, 8)
        self.assertRaises(SandboxNotFoundException, Sandbox.get_info, tagged.sandbox_id)
        self.assertFalse(Sandbox.kill(tagged.sandbox_id))

    def test_kill(self) -> None:
        """kill: True, then False; the sandbox no longer listed."""
        sandbox = Sandbox.create()
        self.assertTrue(sandbox.kill())
        self.assertFalse(Sandbox.kill(sandbox.sandbox_id))
        self.assertNotIn(sandbox.sandbox_id, [info.sandbox_id for info in Sandbox.list().next_items()])

    def test_pause_and_connect(self) -> None:
        """pause (then again: False), listed paused, connect resumes the same sandbox, running again."""
        sandbox = self.create()
        self.assertTrue(sandbox.pause())
        self.assertFalse(sandbox.pause())
        self.assertEqual(Sandbox.get_info(sandbox.sandbox_id).state, SandboxState.PAUSED)
        self.assertFalse(sandbox.is_running())
        paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        self.assertIn(sandbox.sandbox_id, [info.sandbox_id for info in paused])
        resumed = Sandbox.connect(sandbox.sandbox_id, timeout=120)
        self.assertEqual(resumed.sandbox_id, sandbox.sandbox_id)
        self.assertTrue(resumed.is_running())
        self.assertEqual(resumed.get_info().state, SandboxState.RUNNING)
        self.assertEqual(len(resumed.get_metrics()), 1)
