# -*- test-case-name: tests.nodes.test_provisioning -*-
"""
Tests for :mod:`vmservice.nodes.provisioning` and the create-time fields it
serves (userdata, secrets, SSH keys, the login user), on a fleet of fakes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile

from attrs import evolve
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FleetHarness
from tests.log_capture import assert_never_logged, captured_log, logged_text
from vmservice.config import HostGroupConfig
from vmservice.errors import BadRequest, Internal, WaitTimeout
from vmservice.nodes.model import CreateRequest, NodeRecord, Wait

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBtvT6HR4TvFsTmVm7wBgXVf0M6RprIaaQJcYmcvtIvz alice@laptop"


class ProvisioningTests(SynchronousTestCase):
    def setUp(self) -> None:
        groups = (
            HostGroupConfig(name="demo", vcpu=2, ram_bytes=512 * 1024 * 1024, userdata="echo group"),
            HostGroupConfig(name="plain", vcpu=1, ram_bytes=256 * 1024 * 1024),
        )
        self.h = FleetHarness(self.short_dir(), groups=groups, codehost={"octocat": (KEY,)})
        self.h.fleet.startService()
        self.fleet = self.h.fleet
        self.h.secrets.put("db-password", b"hunter2", permissions=0o400, uid=1000, gid=1000)

    def short_dir(self) -> str:
        """A state directory short enough for UNIX socket paths whatever the test's name."""
        directory = tempfile.mkdtemp(dir="/tmp")
        self.addCleanup(shutil.rmtree, directory, True)
        return directory

    def create(self, request: CreateRequest, wait: Wait = Wait.NONE, group: str = "demo",
               timeout: float = 300.0) -> Deferred[NodeRecord]:
        return Deferred.fromCoroutine(self.fleet.create(group, request, wait, timeout))

    def stored(self, hostname: str) -> NodeRecord:
        """The record of ``hostname`` as written on disk."""
        [record] = [r for r in self.h.store.load_all()[0] if r.hostname == hostname]
        return record

    def ops(self, index: int = 0) -> list[str]:
        return [header["op"] for header, _ in self.h.agents[index].requests]

    def test_unknown_secret_creates_nothing(self) -> None:
        """A secret the store does not hold is a 400 before anything exists."""
        failure = self.failureResultOf(self.create(CreateRequest(secrets=("nope",))), BadRequest)
        self.assertEqual(failure.value.code, "unknown_secret")
        self.assertEqual((self.h.driver.machines, self.fleet.list()), ([], []))
        self.assertEqual(os.listdir(os.path.join(self.h.config.state_dir, "nodes")), [])

    def test_secrets_then_answer(self) -> None:
        """wait=agent answers once the secrets are placed, with their metadata; the record keeps their names."""
        d = self.create(CreateRequest(secrets=("db-password",)), Wait.AGENT, group="plain")
        self.assertNoResult(d)
        self.h.agents[0].ready()
        record = self.successResultOf(d)
        [(header, body)] = self.h.agents[0].requests
        self.assertEqual(header, {"op": "secrets", "entries": [
            {"name": "db-password", "size": 7, "mode": 0o400, "uid": 1000, "gid": 1000}]})
        self.assertEqual(body, b"hunter2")
        self.assertEqual(self.stored(record.hostname).secrets, ("db-password",))

    def test_secret_changes_reach_running_nodes(self) -> None:
        """A changed secret is placed again in the nodes that hold it; a deleted one is removed from them."""
        self.successResultOf(self.create(CreateRequest(secrets=("db-password",)), group="plain"))
        self.successResultOf(self.create(CreateRequest(), group="plain"))
        for agent in self.h.agents:
            agent.ready()
        self.h.secrets.put("db-password", b"new", permissions=0o440)
        self.h.secrets.put("unrelated", b"x")
        requests = self.h.agents[0].requests
        self.assertEqual(len(requests), 2)
        self.assertEqual((requests[1][0]["entries"][0]["mode"], requests[1][1]), (0o440, b"new"))
        self.assertEqual(self.h.agents[1].requests, [])
        self.h.secrets.delete("db-password")
        self.assertEqual(requests[2][0]["entries"], [])

    def test_secrets_never_logged(self) -> None:
        """
        Placing secrets at a create, placing a changed one again in the running node that holds it (also
        when the guest refuses it), and deleting it: the log names the secret and the node, never its
        content, in any form.
        """
        secret, changed = b"hunter2-never-logged-\x01\xff", b"changed-never-logged-content"
        events = captured_log(self)
        self.h.secrets.put("token", secret)
        d = self.create(CreateRequest(secrets=("token",)), Wait.AGENT, group="plain")
        agent = self.h.agents[0]
        agent.ready()
        self.successResultOf(d)
        self.h.secrets.put("token", changed)
        self.assertEqual(agent.requests[-1][1], changed)

        async def refuse(header: object, limit: int, body: bytes = b"") -> bytes:
            return json.dumps({"nonsense": True}).encode()

        agent.request = refuse  # type: ignore[method-assign]
        self.h.secrets.put("token", secret)
        self.h.secrets.delete("token")
        text = logged_text(events)
        self.assertIn("placing secret token again in node plain-1", text)
        self.assertIn("could not place the secrets of node plain-1 again", text)
        for content in (secret, changed):
            assert_never_logged(self, events, content)

    def test_every_connection_configures_again(self) -> None:
        """Each new agent connection (reboot, restore, daemon restart) places secrets and login again."""
        self.successResultOf(self.create(CreateRequest(secrets=("db-password",), ssh_keys=(KEY,)), group="plain"))
        agent = self.h.agents[0]
        agent.ready()
        agent.ready()
        self.assertEqual(self.ops(), ["secrets", "login", "secrets", "login"])

    def test_wait_userdata(self) -> None:
        """
        wait=userdata answers once userdata is over; the script is the group's then the node's, kept
        0600 in the node's directory; secrets and login come first.
        """
        agent_hold: Deferred[None] = Deferred()
        d = self.create(CreateRequest(userdata="echo node", secrets=("db-password",), import_user="alice"),
                        Wait.USERDATA)
        agent = self.h.agents[0]
        agent.hold_userdata = agent_hold
        agent.ready()
        self.assertNoResult(d)
        self.assertEqual(self.ops(), ["secrets", "login", "userdata"])
        header, body = agent.requests[2]
        self.assertEqual((header, body), ({"op": "userdata", "size": 20}, b"echo group\necho node"))
        self.assertEqual((agent.requests[1][0]["user"], agent.requests[1][1]), ("alice", b""))
        path = self.h.node("demo-1").paths.userdata
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        agent_hold.callback(None)
        self.assertEqual(self.successResultOf(d).hostname, "demo-1")

    def test_wait_userdata_timeout_removes_the_node(self) -> None:
        """A userdata that does not end within the timeout: 408 and the node is gone."""
        d = self.create(CreateRequest(userdata="sleep 1000"), Wait.USERDATA, timeout=30)
        agent = self.h.agents[0]
        agent.hold_userdata = Deferred()
        agent.ready()
        self.h.reactor.advance(31)
        self.failureResultOf(d, WaitTimeout)
        self.assertEqual(self.fleet.list(), [])
        self.assertFalse(os.path.exists(os.path.join(self.h.config.state_dir, "nodes", "demo-1")))

    def test_no_userdata(self) -> None:
        """Without userdata (nor the group's) wait=userdata is wait=agent; health says it ran."""
        d = self.create(CreateRequest(), Wait.USERDATA, group="plain")
        self.h.agents[0].ready()
        record = self.successResultOf(d)
        self.assertEqual(self.ops(), [])
        health = self.successResultOf(Deferred.fromCoroutine(self.fleet.health(record.hostname)))
        self.assertTrue(health.userdata_ran)

    def test_userdata_health_from_the_agent(self) -> None:
        """With userdata, userdata_ran is the agent's."""
        record = self.successResultOf(self.create(CreateRequest(userdata="true")))
        self.h.agents[0].ready()
        health = self.successResultOf(Deferred.fromCoroutine(self.fleet.health(record.hostname)))
        self.assertFalse(health.userdata_ran)

    def test_userdata_limit_with_the_group(self) -> None:
        """The group's userdata counts toward the limit."""
        failure = self.failureResultOf(self.create(CreateRequest(userdata="x" * (512 * 1024 - 5))), BadRequest)
        self.assertEqual(failure.value.code, "userdata_too_large")
        self.successResultOf(self.create(CreateRequest(userdata="x" * (512 * 1024 - 5)), group="plain"))

    def test_keys_for_root_by_default(self) -> None:
        """SSH keys without import_user are root's."""
        record = self.successResultOf(self.create(CreateRequest(ssh_keys=(KEY,)), group="plain"))
        self.h.agents[0].ready()
        header, body = self.h.agents[0].requests[0]
        self.assertEqual((header, body), ({"op": "login", "user": "root"}, (KEY + "\n").encode()))
        stored = self.stored(record.hostname)
        self.assertEqual((stored.login_user, stored.ssh_keys), ("root", (KEY,)))

    def test_codehost_user(self) -> None:
        """codehost_user's published keys replace ssh_keys; an unknown user is a 400 before anything exists."""
        self.successResultOf(self.create(CreateRequest(ssh_keys=("ssh-rsa AAAA other",), codehost_user="octocat"),
                                         group="plain"))
        self.h.agents[0].ready()
        self.assertEqual(self.h.agents[0].requests[0][1], (KEY + "\n").encode())
        self.failureResultOf(self.create(CreateRequest(codehost_user="nobody"), group="plain"), BadRequest)
        self.assertEqual(len(self.h.driver.machines), 1)

    def test_no_codehost(self) -> None:
        """Without a code host configured, codehost_user is refused."""
        h = FleetHarness(self.short_dir())
        h.fleet.startService()
        d = Deferred.fromCoroutine(h.fleet.create("demo", CreateRequest(codehost_user="octocat"), Wait.NONE, 1))
        self.assertEqual(self.failureResultOf(d, BadRequest).value.code, "not_supported")

    def test_image_without_ssh_server(self) -> None:
        """Keys for an image whose manifest says it has no SSH server are refused."""
        self.h.image = evolve(self.h.image, manifest={"ssh_server": False})
        failure = self.failureResultOf(self.create(CreateRequest(ssh_keys=(KEY,)), group="plain"), BadRequest)
        self.assertEqual(failure.value.code, "no_ssh_server")
        self.successResultOf(self.create(CreateRequest(import_user="alice"), group="plain"))

    def test_guest_refuses(self) -> None:
        """A guest that answers nonsense to the secrets fails wait=agent (500) and the node is removed."""
        d = self.create(CreateRequest(secrets=("db-password",)), Wait.AGENT, group="plain")
        agent = self.h.agents[0]

        async def refuse(header: object, limit: int, body: bytes = b"") -> bytes:
            return json.dumps({"nonsense": True}).encode()

        agent.request = refuse  # type: ignore[method-assign]
        agent.ready()
        self.assertEqual(self.failureResultOf(d, Internal).value.code, "guest_setup_failed")
        self.assertEqual(self.fleet.list(), [])
