"""
Tests for the pure parts of the pod controller: :mod:`vmservice.cluster.pod_naming`
(tags, hostnames), :mod:`.pod_env` (the environment file), :mod:`.pod_events`
(bounded, best-effort) and :mod:`.work_queue`.
"""

from __future__ import annotations

import base64
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster.pod_harness import CONFIG, GROUPS, pod
from vmservice.cluster.pod_env import env_file, environment, secret_values
from vmservice.cluster.pod_events import EventRecorder
from vmservice.cluster.pod_naming import env_secret, pod_tags, read_tags, vm_hostname
from vmservice.cluster.pod_object import PodKey
from vmservice.cluster.pod_spec import PodRejected, parse_spec
from vmservice.cluster.work_queue import WorkQueue
from vmservice.nodes.model import tag_problem, valid_hostname

KEY = PodKey("default", "web.front", "0f8c2d6e-1111-2222-3333-444455556666")


class NamingTests(SynchronousTestCase):
    def test_tags_round_trip(self) -> None:
        tags = pod_tags(KEY, "vms-a")
        tags_read = read_tags(("other", *tags))
        assert tags_read is not None
        self.assertEqual((tags_read.key, tags_read.node_name), (KEY, "vms-a"))
        long = PodKey("n" * 63, "p" * 253, KEY.uid)
        tags = pod_tags(long, "vms-a")
        self.assertTrue(all(tag_problem(tag) is None for tag in tags))
        tags_read = read_tags(tags)
        assert tags_read is not None
        self.assertEqual(tags_read.key.uid, KEY.uid)
        self.assertIsNone(read_tags(tags[:2]))

    def test_hostname(self) -> None:
        self.assertEqual(vm_hostname(KEY, lambda name: False), "web-front")
        taken = vm_hostname(KEY, lambda name: name == "web-front")
        self.assertEqual(taken, "web-front-0f8c2")
        self.assertTrue(valid_hostname(vm_hostname(PodKey("d", "x" * 253, "u"), lambda name: True)))
        self.assertEqual(env_secret(KEY.uid), f"pod-{KEY.uid}.env")


class EnvTests(SynchronousTestCase):
    def _spec(self, **container: Any) -> Any:
        return parse_spec(pod(containers=[{"name": "c", "image": "vm", **container}]), GROUPS, CONFIG)

    def test_order_and_quoting(self) -> None:
        spec = self._spec(envFrom=[{"secretRef": {"name": "s"}, "prefix": "S_"}],
                          env=[{"name": "S_A", "value": "it's"},
                               {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "b"}}}])
        values = secret_values({"data": {"A": base64.b64encode(b"1").decode(), "b": base64.b64encode(b"2").decode()}})
        env = environment(spec, {"s": values})
        self.assertEqual(dict(env), {"S_A": "it's", "S_b": "2", "B": "2"})
        self.assertIn(b"export S_A='it'\\''s'\n", env_file(env))

    def test_missing(self) -> None:
        spec = self._spec(env=[{"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "b",
                                                                           "optional": True}}}])
        self.assertEqual(environment(spec, {"s": None}), ())
        spec = self._spec(env=[{"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "b"}}}])
        with self.assertRaises(PodRejected) as caught:
            environment(spec, {"s": {}})
        self.assertEqual(caught.exception.reason, "SecretNotFound")
        self.assertRaises(PodRejected, secret_values, {"data": {"a": "!!"}})
        self.assertRaises(PodRejected, env_file, (("A", "x" * 300_000),))


class EventTests(SynchronousTestCase):
    def test_bounded(self) -> None:
        """One post at a time, at most the limit waiting, the rest dropped; stop cancels."""
        posts: list[tuple[str, dict[str, Any], Deferred[Any]]] = []

        def post(namespace: str, event: dict[str, Any]) -> Deferred[Any]:
            waiting: Deferred[Any] = Deferred()
            posts.append((namespace, event, waiting))
            return waiting

        recorder = EventRecorder(post, lambda: 0.0, "vms-a", limit=2)
        for reason in ("A", "B", "C", "D"):
            recorder.record(KEY, "c", "Normal", reason, "m")
        self.assertEqual((len(posts), recorder.dropped), (1, 1))
        event = posts[0][1]
        self.assertEqual((event["involvedObject"]["uid"], event["reason"], event["source"]["host"]),
                         (KEY.uid, "A", "vms-a"))
        posts[0][2].errback(Exception("down"))
        self.assertEqual(len(posts), 2)
        recorder.stop()
        self.assertTrue(posts[1][2].called)
        self.assertTrue(recorder.idle)


class QueueTests(SynchronousTestCase):
    def test_one_at_a_time(self) -> None:
        """A key added while its work runs runs again after; the same key waits once; concurrency holds."""
        running: dict[str, Deferred[None]] = {}
        done: list[str] = []

        def work(key: str) -> Deferred[None]:
            done.append(key)
            running[key] = Deferred()
            return running[key]

        queue = WorkQueue(work, concurrency=1, limit=2)
        for key in ("a", "a", "b", "b", "c"):
            queue.add(key)
        self.assertEqual((done, queue.refused), (["a"], 0))
        queue.add("a")
        queue.add("d")
        self.assertEqual(queue.refused, 1)
        running["a"].callback(None)
        running["b"].callback(None)
        running["c"].callback(None)
        self.assertEqual(done, ["a", "b", "c", "a"])
        running["a"].callback(None)
        self.assertTrue(queue.idle)
        queue.add("x")
        queue.stop()
        queue.add("y")
        self.assertEqual(done[-1], "x")

    def test_failure_logged(self) -> None:
        queue = WorkQueue(lambda key: succeed(None) if key == "ok" else Deferred.fromCoroutine(self._boom()))
        queue.add("bad")
        queue.add("ok")
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)
        self.assertTrue(queue.idle)

    async def _boom(self) -> None:
        raise ValueError("boom")
