"""Tests for :mod:`vmservice.api.inputs.lifecycle`: ``wait`` and a shutdown's action."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.api.inputs.requests import dummy_request
from vmservice.api.inputs.lifecycle import shutdown_action, wait_for
from vmservice.errors import BadRequest
from vmservice.nodes.model import Wait
from vmservice.nodes.transitions import Op


class LifecycleInputTests(SynchronousTestCase):
    def test_wait(self) -> None:
        """wait=agent waits for the agent, wait=userdata for the userdata too, absent waits for nothing."""
        self.assertEqual((wait_for("agent"), wait_for("userdata"), wait_for(None)),
                         (Wait.AGENT, Wait.USERDATA, Wait.NONE))

    def test_shutdown_action(self) -> None:
        """The query's action wins over the body's; reboot is the default; others are refused."""
        self.assertIs(shutdown_action(dummy_request({"action": "reboot"}), "shutdown"), Op.SHUTDOWN)
        self.assertIs(shutdown_action(dummy_request({"action": "shutdown"}), None), Op.SHUTDOWN)
        self.assertIs(shutdown_action(dummy_request(), None), Op.REBOOT)
        for body in ({"action": "halt"}, {"action": 3}):
            self.assertEqual(self.assertRaises(BadRequest, shutdown_action, dummy_request(body), None).code,
                             "invalid_action")
