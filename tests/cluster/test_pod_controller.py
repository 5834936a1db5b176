"""
Tests for :mod:`vmservice.cluster.pod_controller` (and its status writer):
each reconcile path against the fake API server and a fake provider.
"""

from __future__ import annotations

import base64
import json

from twisted.trial.unittest import SynchronousTestCase


from tests.cluster.pod_harness import SCHEDULED, FakeProvider, PodHarness, pod, pod_path
from vmservice.cluster.pod_object import PodKey
from vmservice.cluster.pod_provider import VmPhase, VmState
from vmservice.cluster.pod_resolver import PodResolver


class NewPodTests(SynchronousTestCase):
    """A pod bound to the node becomes a VM."""

    def setUp(self) -> None:
        self.h = PodHarness(FakeProvider(instant=False))
        self.h.api.add(pod())
        self.h.start()

    def tearDown(self) -> None:
        self.h.stop()

    def test_pending_then_running(self) -> None:
        """Pending (ContainerCreating, PodScheduled kept) while the VM boots; Running and Ready with its IP after."""
        [pending] = self.h.api.patches()
        self.assertEqual(pending["phase"], "Pending")
        self.assertIn(SCHEDULED, pending["conditions"])
        self.assertEqual(pending["containerStatuses"][0]["state"], {"waiting": {"reason": "ContainerCreating"}})
        self.assertEqual(len(self.h.provider.created), 1)
        self.h.provider.settle()
        self.h.flush()
        running = self.h.api.patches()[-1]
        self.assertEqual(running["phase"], "Running")
        self.assertEqual((running["podIP"], running["podIPs"], running["hostIP"]),
                         ("10.240.0.2", [{"ip": "10.240.0.2"}], "10.0.0.5"))
        self.assertIn(SCHEDULED, running["conditions"])
        kinds = {c["type"]: c["status"] for c in running["conditions"]}
        self.assertEqual(kinds, {"PodScheduled": "True", "Initialized": "True", "ContainersReady": "True",
                                 "Ready": "True"})
        container = running["containerStatuses"][0]
        self.assertEqual(container["containerID"], "vmservice://web")
        self.assertIn("startedAt", container["state"]["running"])
        self.assertEqual(self.h.api.events(), ["Created", "Started"])
        self.assertEqual(PodResolver(self.h.controller)("default", "web", "main"), "web")

    def test_create_fails(self) -> None:
        """A create that fails (admission full) fails the pod with its reason; a FailedCreate event."""
        self.h.provider.settle(VmState(VmPhase.FAILED, reason="InsufficientMemory", message="no room"))
        self.h.flush()
        failed = self.h.api.patches()[-1]
        self.assertEqual((failed["phase"], failed["reason"], failed["message"]),
                         ("Failed", "InsufficientMemory", "no room"))
        self.assertEqual(self.h.api.events(), ["FailedCreate"])

    def test_vm_dies(self) -> None:
        """A VM that ends fails its pod (and the failed pod's VM is deleted)."""
        self.h.provider.settle()
        self.h.flush()
        self.h.provider.change("uid-web", VmState(VmPhase.FAILED, "web", reason="VmStopped", message="stopped"))
        self.h.flush()
        self.assertEqual(self.h.api.patches()[-1]["reason"], "VmStopped")
        self.assertIn("Failed", self.h.api.events())

    def test_agent_down_not_ready(self) -> None:
        """A VM whose agent went away keeps the pod Running, not Ready; only changes are written."""
        self.h.provider.settle()
        self.h.flush()
        count = len(self.h.api.patches())
        self.h.provider.change("uid-web", VmState(VmPhase.BOOTING, "web", "10.240.0.2", 1_700_000_000.0))
        self.h.flush()
        self.h.provider.change("uid-web", VmState(VmPhase.BOOTING, "web", "10.240.0.2", 1_700_000_000.0))
        self.h.flush()
        self.assertEqual(len(self.h.api.patches()), count + 1)
        last = self.h.api.patches()[-1]
        self.assertEqual(last["phase"], "Running")
        self.assertEqual({c["type"]: c["status"] for c in last["conditions"]}["Ready"], "False")


class SpecTests(SynchronousTestCase):
    """What the spec asks for, or refuses."""

    def tearDown(self) -> None:
        self.h.stop()

    def test_unsupported(self) -> None:
        """Two containers: Failed Unsupported at once, no VM."""
        self.h = PodHarness()
        self.h.api.add(pod(containers=[{"name": "a", "image": "vm"}, {"name": "b", "image": "vm"}]))
        self.h.start()
        [failed] = self.h.api.patches()
        self.assertEqual((failed["phase"], failed["reason"]), ("Failed", "Unsupported"))
        self.assertEqual(self.h.provider.created, [])
        self.assertEqual(self.h.api.events(), ["Failed"])

    def test_secrets(self) -> None:
        """The Secrets a pod names are read and handed over with its plain env."""
        self.h = PodHarness()
        self.h.api.objects["/api/v1/namespaces/default/secrets/db"] = {
            "kind": "Secret", "metadata": {"name": "db"}, "data": {"password": base64.b64encode(b"s3").decode()}}
        self.h.api.add(pod(containers=[{"name": "main", "image": "vm", "env": [
            {"name": "A", "value": "1"},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}]))
        self.h.start()
        [(spec, env)] = self.h.provider.created
        self.assertEqual(dict(env), {"A": "1", "PW": "s3"})

    def test_missing_secret(self) -> None:
        """A Secret that is not there fails the pod (SecretNotFound)."""
        self.h = PodHarness()
        self.h.api.add(pod(containers=[{"name": "main", "image": "vm", "envFrom": [{"secretRef": {"name": "x"}}]}]))
        self.h.start()
        self.assertEqual(self.h.api.patches()[-1]["reason"], "SecretNotFound")


class DeletionTests(SynchronousTestCase):
    """A pod's deletion, and pods that go."""

    def setUp(self) -> None:
        self.h = PodHarness()
        self.h.api.add(pod())
        self.h.start()

    def tearDown(self) -> None:
        self.h.stop()

    def _event(self, kind: str, item: dict[str, object]) -> None:
        self.h.api.send(json.dumps({"type": kind, "object": item}).encode() + b"\n")
        self.h.flush()

    def test_deletion_timestamp(self) -> None:
        """The VM is deleted within the grace, then the pod with grace 0 on its uid; a Killing event."""
        item = pod()
        item["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=7)
        self._event("MODIFIED", item)
        self.assertEqual(self.h.provider.deleted, [(PodKey("default", "web", "uid-web"), 7)])
        [delete] = [body for method, path, body in self.h.api.requests if method == "DELETE"]
        self.assertEqual((delete["gracePeriodSeconds"], delete["preconditions"]), (0, {"uid": "uid-web"}))
        self.assertNotIn(pod_path("web"), self.h.api.objects)
        self.assertIn("Killing", self.h.api.events())

    def test_deleted_from_api(self) -> None:
        """A pod deleted (forced) or bound elsewhere: its VM is deleted at once."""
        self._event("DELETED", pod())
        self.assertEqual(self.h.provider.deleted, [(PodKey("default", "web", "uid-web"), 0)])

    def test_status_404(self) -> None:
        """A status write answered 404: the pod is gone, its VM is deleted."""
        self.h.api.queue("PATCH", "/status", 404)
        self.h.provider.change("uid-web", VmState(VmPhase.BOOTING, "web", "10.240.0.2"))
        self.h.flush()
        self.assertEqual(self.h.provider.deleted, [(PodKey("default", "web", "uid-web"), 0)])

    def test_status_409(self) -> None:
        """A status write answered 409: the pod is read again and the status written again."""
        self.h.api.queue("PATCH", "/status", 409)
        self.h.provider.change("uid-web", VmState(VmPhase.BOOTING, "web", "10.240.0.2"))
        self.h.flush()
        methods = [(m, p.rsplit("/", 1)[-1]) for m, p, _ in self.h.api.requests][-3:]
        self.assertEqual(methods, [("PATCH", "status"), ("GET", "web"), ("PATCH", "status")])

    def test_api_down_retried(self) -> None:
        """A write that fails (503) is tried again after a back-off; nothing is left after stop."""
        self.h.api.queue("PATCH", "/status", 503)
        self.h.provider.change("uid-web", VmState(VmPhase.BOOTING, "web", "10.240.0.2"))
        self.h.flush()
        before = len(self.h.api.patches())
        self.h.clock.advance(2)
        self.h.flush()
        self.assertEqual(len(self.h.api.patches()), before + 1)


class RestartTests(SynchronousTestCase):
    """The first listing after a restart: adopt, delete strays, finish deletions."""

    def test_reconcile_on_start(self) -> None:
        provider = FakeProvider()
        running = VmState(VmPhase.RUNNING, "kept", "10.240.0.3", 1_700_000_000.0)
        for name, uid in (("kept", "uid-kept"), ("stray", "uid-stray"), ("moved", "uid-old"), ("ending", "uid-end")):
            provider.vms_by_uid[uid] = (PodKey("default", name, uid), running)
        self.h = PodHarness(provider)
        self.addCleanup(self.h.stop)
        self.h.api.add(pod("kept"))
        self.h.api.add(pod("moved", uid="uid-new", node="vms-b"))
        ending = pod("ending", uid="uid-end")
        ending["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.h.api.add(ending)
        self.h.start()
        self.assertEqual(provider.created, [])
        self.assertEqual(sorted(key.uid for key, _ in provider.deleted), ["uid-end", "uid-old", "uid-stray"])
        self.assertEqual(list(provider.vms_by_uid), ["uid-kept"])
        self.assertEqual(self.h.api.patches()[-1]["phase"], "Running")
        self.assertNotIn(pod_path("ending"), self.h.api.objects)
        self.assertEqual(provider.swept, 1)

    def test_vm_lost(self) -> None:
        """A pod whose VM was made but is gone (the host lost it) fails VmLost; no new VM."""
        self.h = PodHarness()
        self.addCleanup(self.h.stop)
        item = pod()
        item["status"]["containerStatuses"] = [{"name": "main", "containerID": "vmservice://web"}]
        self.h.api.add(item)
        self.h.start()
        self.assertEqual(self.h.api.patches()[-1]["reason"], "VmLost")
        self.assertEqual(self.h.provider.created, [])


class WatchTests(SynchronousTestCase):
    """Watch events and relists drive reconciles; nothing is left after stop."""

    def test_relist_on_410(self) -> None:
        self.h = PodHarness()
        self.h.start()
        self.h.api.add(pod("late"))
        self.h.api.send(json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410}}).encode() + b"\n")
        self.h.flush()
        self.h.clock.advance(2)
        self.h.flush()
        self.assertEqual([spec.key.name for spec, _ in self.h.provider.created], ["late"])
        self.h.stop()
        self.assertEqual(self.h.clock.getDelayedCalls(), [])
        self.assertTrue(self.h.controller.idle)

    def test_added(self) -> None:
        self.h = PodHarness()
        self.h.start()
        self.h.api.add(pod("new"))
        self.h.api.send(json.dumps({"type": "ADDED", "object": pod("new")}).encode() + b"\n")
        self.h.flush()
        self.assertEqual([spec.key.name for spec, _ in self.h.provider.created], ["new"])
        self.h.api.send(json.dumps({"type": "ADDED", "object": pod("other", node="vms-b")}).encode() + b"\n")
        self.h.flush()
        self.assertEqual(len(self.h.provider.created), 1)
        self.h.stop()
        self.assertEqual(self.h.clock.getDelayedCalls(), [])



