# -*- test-case-name: tests.client.test_pods -*-
"""
Tests for :mod:`vmservice.client.pods`: ``pod/NAME`` read, and resolved
through :class:`~tests.client.kubefakes.FakeKube` to the host's API and the
VM's hostname, with every dead end its own error.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.client.kubefakes import FakeKube, vm_pod, vmservice_node
from vmservice.client.kubeapi import KubeApi
from vmservice.client.kubeconfig import ClusterAccess
from vmservice.client.pods import PodLookupError, PodReference, PodTarget, parse_pod_reference, resolve_pod

POD = "/api/v1/namespaces/default/pods/web"
NODE = "/api/v1/nodes/vms-a"


class ReferenceTests(SynchronousTestCase):
    def test_forms(self) -> None:
        """pod/NAME and pod/NAMESPACE/NAME are pods; anything else is a hostname."""
        self.assertEqual(parse_pod_reference("pod/web-1.x"), PodReference("web-1.x"))
        self.assertEqual(parse_pod_reference("pod/team/web"), PodReference("web", "team"))
        self.assertIsNone(parse_pod_reference("vm-1"))
        self.assertIsNone(parse_pod_reference("pods/web"))

    def test_malformed(self) -> None:
        """An empty, upper-case or too deep reference is refused with the reason."""
        for text in ("pod/", "pod/a/b/c", "pod/Web", "pod/ns_1/web", "pod//web", "pod/web/", "pod/" + "a" * 254):
            self.assertRaises(ValueError, parse_pod_reference, text)

    @given(st.text(max_size=40))
    def test_any_text(self, text: str) -> None:
        """Any text is a reference, None or a ValueError."""
        try:
            parse_pod_reference("pod/" + text)
        except ValueError:
            pass


class ResolveTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.kube = FakeKube()
        self.kube.objects[POD] = vm_pod()
        self.kube.objects[NODE] = vmservice_node()
        self.api = KubeApi(MemoryReactorClock(), ClusterAccess(server=self.kube.server, ca_pem=None, token="t",
                                                                client_pem=None, namespace="default"), self.kube)

    def resolve(self, reference: PodReference = PodReference("web"), namespace: str = "default") -> Deferred[Any]:
        return Deferred.fromCoroutine(resolve_pod(self.api, reference, namespace))

    def refused(self, *words: str) -> None:
        message = str(self.failureResultOf(self.resolve(), PodLookupError).value)
        for word in words:
            self.assertIn(word, message)

    def test_resolved(self) -> None:
        """The Node's annotation (its final / dropped) and the containerID's hostname."""
        self.kube.objects[NODE] = vmservice_node(api="https://host-a:8443/")
        self.assertEqual(self.successResultOf(self.resolve()), PodTarget("https://host-a:8443", "vm-3", "vms-a"))
        self.assertEqual([url for url, _ in self.kube.requests],
                         [self.kube.server + POD, self.kube.server + NODE])

    def test_namespace(self) -> None:
        """The reference's namespace wins over the context's."""
        self.kube.objects["/api/v1/namespaces/team/pods/web"] = vm_pod(namespace="team")
        self.successResultOf(self.resolve(PodReference("web", "team"), "default"))
        self.successResultOf(Deferred.fromCoroutine(resolve_pod(self.api, PodReference("web"), "team")))

    def test_not_found(self) -> None:
        """No such pod."""
        del self.kube.objects[POD]
        self.refused("no pod default/web")

    def test_not_bound(self) -> None:
        """A pod not scheduled yet."""
        self.kube.objects[POD] = vm_pod(node=None, container=None)
        self.refused("not bound to a node yet")

    def test_no_node(self) -> None:
        """A pod bound to a Node that is gone."""
        del self.kube.objects[NODE]
        self.refused("bound to the Node vms-a, which does not exist")

    def test_not_a_vmservice_node(self) -> None:
        """A Node without the annotation, or with one that is not an http(s) URL."""
        self.kube.objects[NODE] = vmservice_node(api=None)
        self.refused("no vmservice.io/api annotation", "not a vmservice host")
        for bad in ("ftp://h", "http://", "http://u:p@h:1", "http://h:99999", "http://h/?q=1", "/run/v.sock"):
            self.kube.objects[NODE] = vmservice_node(api=bad)
            self.refused("is not an http(s) URL")

    def test_no_vm_yet(self) -> None:
        """A bound pod whose VM has not started."""
        self.kube.objects[POD] = vm_pod(container=None)
        self.refused("has no VM yet", "Pending")

    def test_not_a_vmservice_pod(self) -> None:
        """A pod of another runtime, or a containerID naming no hostname."""
        self.kube.objects[POD] = vm_pod(container="containerd://abc")
        self.refused("not a vmservice pod", "'containerd'")
        self.kube.objects[POD] = vm_pod(container="vmservice://a/b")
        self.refused("names no hostname")

    def test_malformed_objects(self) -> None:
        """Fields of the wrong type are dead ends, not crashes."""
        self.kube.objects[POD] = {"spec": {"nodeName": ["x"]}, "status": 3}
        self.refused("not bound")
        self.kube.objects[POD] = {"spec": {"nodeName": "../x"}}
        self.refused("not a Node's name")
        self.kube.objects[POD] = {"spec": {"nodeName": "vms-a"}, "status": {"containerStatuses": "x"}}
        self.refused("has no VM yet")

    def test_api_error(self) -> None:
        """Any other refusal of the API passes on with the server's message."""
        self.kube.answers[POD] = (403, b'{"kind": "Status", "message": "pods \\"web\\" is forbidden: User \\"x\\""}')
        self.refused("403", 'pods "web" is forbidden')
