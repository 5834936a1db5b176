"""
Tests for :mod:`vmservice.cluster.pod_spec`, :mod:`.pod_object` and
:mod:`.quantity`: a Pod read into the VM it asks for, or refused with a
reason; arbitrary JSON never raises anything else.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import attrs
from hypothesis import given, settings, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster.pod_harness import CONFIG, GROUPS, pod
from vmservice.cluster.pod_object import pod_facts
from vmservice.cluster.pod_spec import PodRejected, parse_spec
from vmservice.cluster.quantity import QuantityError, parse_quantity
from vmservice.config import HostGroupConfig

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                    max_leaves=20)
KEYS = st.sampled_from(["metadata", "spec", "containers", "annotations", "resources", "limits", "env", "envFrom",
                        "name", "namespace", "uid", "image", "cpu", "memory", "valueFrom", "secretKeyRef", "key"])
POD_LIKE = st.recursive(st.none() | st.text(max_size=10) | st.integers(),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=5),
                        max_leaves=30)


def _container(**fields: Any) -> dict[str, Any]:
    return pod(containers=[{"name": "main", "image": "vm", **fields}])


class QuantityTests(SynchronousTestCase):
    def test_forms(self) -> None:
        for text, value in (("500m", Fraction(1, 2)), ("2", 2), ("512Mi", 512 * 2**20), ("1G", 10**9),
                            ("1e3", 1000), ("1.5", Fraction(3, 2)), (".5Ki", 512)):
            self.assertEqual(parse_quantity(text), value, text)

    def test_refused(self) -> None:
        for text in ("", "-1", "1x", "Mi", "1" * 70, "9" * 30 + "Ei", "1e999"):
            self.assertRaises(QuantityError, parse_quantity, text)


class ParseTests(SynchronousTestCase):
    def test_defaults(self) -> None:
        spec = parse_spec(pod(), GROUPS, CONFIG)
        self.assertEqual((spec.group, spec.cpus, spec.ram_bytes, spec.container, spec.persistent),
                         ("vm", None, None, "main", False))

    def test_resources(self) -> None:
        """Limits win over requests; CPUs rounded up to whole cores."""
        spec = parse_spec(_container(resources={"limits": {"cpu": "1500m", "memory": "256Mi"},
                                                "requests": {"cpu": "1", "memory": "1Gi"}}), GROUPS, CONFIG)
        self.assertEqual((spec.cpus, spec.ram_bytes), (2, 256 * 2**20))
        spec = parse_spec(_container(resources={"requests": {"memory": "100M"}}), GROUPS, CONFIG)
        self.assertEqual(spec.ram_bytes, 10**8)

    def test_over_limits(self) -> None:
        for limits in ({"cpu": "3"}, {"memory": "2Gi"}):
            with self.assertRaises(PodRejected) as caught:
                parse_spec(_container(resources={"limits": limits}), GROUPS, CONFIG)
            self.assertEqual(caught.exception.reason, "OverGroupLimits")

    def test_group(self) -> None:
        """The annotation, then the image (vmservice.io/group/NAME, images, a bare group), then default_group."""
        groups = {**GROUPS, "big": HostGroupConfig(name="big", vcpu=4)}
        config = attrs.evolve(CONFIG, images=(("ubuntu:24.04", "big"),))
        item = pod(containers=[{"name": "c", "image": "nginx"}])
        self.assertEqual(parse_spec(item, groups, config).group, "vm")
        for image in ("vmservice.io/group/big", "ubuntu:24.04", "big"):
            self.assertEqual(parse_spec(pod(containers=[{"name": "c", "image": image}]), groups, config).group, "big")
        item["metadata"]["annotations"] = {"vmservice.io/group": "big"}
        self.assertEqual(parse_spec(item, groups, config).group, "big")
        with self.assertRaises(PodRejected) as caught:
            parse_spec(pod(containers=[{"name": "c", "image": "nginx"}]), groups,
                       attrs.evolve(CONFIG, default_group=None))
        self.assertEqual(caught.exception.reason, "UnknownGroup")

    def test_annotations(self) -> None:
        item = pod()
        item["metadata"]["annotations"] = {"vmservice.io/userdata": "echo hi", "vmservice.io/persistent": "true",
                                           "vmservice.io/ssh-keys": "ssh-ed25519 AAAA a\n\n ssh-rsa BBBB b \n"}
        spec = parse_spec(item, GROUPS, CONFIG)
        self.assertEqual((spec.userdata, spec.persistent, spec.ssh_keys),
                         ("echo hi", True, ("ssh-ed25519 AAAA a", "ssh-rsa BBBB b")))

    def test_unsupported(self) -> None:
        for item in (pod(containers=[]), pod(initContainers=[{"name": "i"}]),
                     _container(env=[{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]),
                     _container(envFrom=[{"configMapRef": {"name": "c"}}]),
                     _container(env=[{"name": "A-B", "value": "1"}])):
            with self.assertRaises(PodRejected) as caught:
                parse_spec(item, GROUPS, CONFIG)
            self.assertEqual(caught.exception.reason, "Unsupported")

    def test_secret_refs(self) -> None:
        spec = parse_spec(_container(env=[{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}],
                                     envFrom=[{"secretRef": {"name": "all", "optional": True}, "prefix": "X_"},
                                              {"secretRef": {"name": "db"}}]), GROUPS, CONFIG)
        self.assertEqual(spec.secrets, ("db", "all"))

    @settings(max_examples=300, deadline=None)
    @given(JSON)
    def test_arbitrary_json(self, document: Any) -> None:
        """Anything at all: a spec or PodRejected, nothing else; pod_facts never raises."""
        try:
            parse_spec(document, GROUPS, CONFIG)
        except PodRejected:
            pass
        if isinstance(document, dict):
            pod_facts(document)

    @settings(max_examples=300, deadline=None)
    @given(POD_LIKE)
    def test_pod_like(self, spec: Any) -> None:
        """Pods whose spec is made of the keys a pod has, in any shape."""
        item = pod()
        item["spec"] = spec
        item["metadata"]["annotations"] = spec if isinstance(spec, dict) else None
        try:
            parse_spec(item, GROUPS, CONFIG)
        except PodRejected:
            pass
        pod_facts(item)


class FactsTests(SynchronousTestCase):
    def test_facts(self) -> None:
        item = pod()
        item["metadata"].update(deletionTimestamp="x", deletionGracePeriodSeconds=99999)
        item["status"]["containerStatuses"] = [{"containerID": "vmservice://web-1"}]
        facts = pod_facts(item)
        assert facts is not None
        self.assertEqual((facts.deleting, facts.grace, facts.vm_hostname, facts.node_name),
                         (True, 600, "web-1", "vms-a"))
        self.assertIsNone(pod_facts({"metadata": {"name": "Bad Name", "namespace": "d", "uid": "u"}}))
