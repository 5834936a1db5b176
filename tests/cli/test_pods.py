# -*- test-case-name: tests.cli.test_pods -*-
"""
Tests for :mod:`vmservice.cli.pods`: every command of the table that takes
a node takes ``pod/NAME`` too, and is rewritten to the pod's host and VM
(against :class:`~tests.client.kubefakes.FakeKube`); the usage errors and the
failures are worded like vmctl's others.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tempfile
from typing import Any, Iterator

import yaml
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.cli.parsing import GrammarCase, parse
from tests.client.kubefakes import FakeKube, vm_pod, vmservice_node
from vmservice.cli.copying import Location, parse_location
from vmservice.cli.context import Failed
from vmservice.cli.main import build_parser, run
from vmservice.cli.pods import resolve_pod_references
from vmservice.client.kubeapi import KubeApi
from vmservice.client.kubeconfig import ClusterAccess

#: A sample command line of each command that takes a node, the node as {}.
NODE_COMMANDS = {
    "describe": ["describe", "{}"], "delete": ["delete", "vm", "{}"], "tag": ["tag", "{}", "+a"],
    "logs": ["logs", "{}"], "stats": ["stats", "{}"], "health": ["health", "{}"], "pause": ["pause", "{}"],
    "resume": ["resume", "{}"], "suspend": ["suspend", "{}"], "restore": ["restore", "{}"], "fork": ["fork", "{}"],
    "relaunch": ["relaunch", "{}"], "shutdown": ["shutdown", "{}"], "reboot": ["reboot", "{}"],
    "exec": ["exec", "{}", "--", "echo", "hi"], "ps": ["ps", "{}"], "kill": ["kill", "{}", "e1"],
    "shell": ["shell", "{}"], "watch": ["watch", "{}", "/tmp"], "forward": ["forward", "{}", "8080:127.0.0.1:80"],
    "fs ls": ["fs", "ls", "{}", "/"], "fs stat": ["fs", "stat", "{}", "/"], "fs mkdir": ["fs", "mkdir", "{}", "/a"],
    "fs rm": ["fs", "rm", "{}", "/a"],
}


def _parsers(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command's parser in the grammar, by its words (``fs ls``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from _parsers(sub, f"{prefix}{name} ")


class TableTests(SynchronousTestCase):
    def test_every_node_argument(self) -> None:
        """Every command with a node argument marks it for pod/NAME, and those are the commands sampled here."""
        found = set()
        for words, sub in _parsers(build_parser()):
            if any(action.dest == "hostname" and not action.option_strings for action in sub._actions):
                self.assertIs(sub.get_default("node_argument"), True, words)
                found.add(words)
        self.assertEqual(found, set(NODE_COMMANDS))


class GrammarTests(GrammarCase):
    def test_references_checked(self) -> None:
        """A malformed pod/ reference, or --url with one, is a usage error; $VMSERVICE_URL is not."""
        self.assertEqual(parse("exec", "pod/web", "--", "true").hostname, "pod/web")
        self.assertIn("pod/NAMESPACE/NAME", self.assertUsageError("exec", "pod/a/b/c", "--", "true"))
        self.assertIn("not a pod name", self.assertUsageError("cp", "x", "pod/Web:/tmp"))
        self.assertIn("--url cannot be used", self.assertUsageError("--url", "http://h:1", "suspend", "pod/web"))
        self.assertEqual(parse("suspend", "pod/web", VMSERVICE_URL="http://h:1").hostname, "pod/web")
        self.assertEqual(parse("create", "vm", "--hostname", "pod/x").hostname, "pod/x")  # a name, not a node

    def test_cp_locations(self) -> None:
        """pod/[NS/]NAME:PATH is in a pod; ./pod/x:y is a file here."""
        self.assertEqual(parse_location("pod/web:/tmp/x"), Location("pod/web", "/tmp/x"))
        self.assertEqual(parse_location("pod/ns/web:x"), Location("pod/ns/web", "x"))
        self.assertEqual(parse_location("./pod/web:x"), Location(None, "./pod/web:x"))
        self.assertEqual(parse_location("pod/web"), Location(None, "pod/web"))


class ResolveTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.kubeconfig = os.path.join(self.directory, "config")
        with open(self.kubeconfig, "w") as stream:
            yaml.safe_dump({"current-context": "c", "contexts": [{"name": "c", "context": {
                "cluster": "k", "user": "u", "namespace": "team"}}],
                "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}]}, stream)
        self.kube = FakeKube()
        self.kube.objects["/api/v1/namespaces/team/pods/web"] = vm_pod(namespace="team")
        self.kube.objects["/api/v1/nodes/vms-a"] = vmservice_node(api="http://10.0.0.2:8081")
        self.reactor = MemoryReactorClock()

    def api(self, reactor: Any, access: ClusterAccess) -> KubeApi:
        return KubeApi(reactor, access, self.kube)

    def resolved(self, *argv: str) -> Any:
        options = parse(*argv, KUBECONFIG=self.kubeconfig)
        self.successResultOf(Deferred.fromCoroutine(resolve_pod_references(
            self.reactor, options, {"KUBECONFIG": self.kubeconfig}, self.api)))
        return options

    def test_every_node_command(self) -> None:
        """Each command's pod/NAME becomes the host's API and the VM's hostname (the context's namespace)."""
        for name, words in NODE_COMMANDS.items():
            options = self.resolved(*[word.format("pod/web") for word in words])
            self.assertEqual((options.url, options.hostname), ("http://10.0.0.2:8081", "vm-3"), name)

    def test_hostname_untouched(self) -> None:
        """A hostname is left as it is, and the Kubernetes API is not asked."""
        options = self.resolved("exec", "vm-1", "--", "true")
        self.assertEqual((options.hostname, self.kube.requests), ("vm-1", []))

    def test_cp(self) -> None:
        """Either side of cp may be a pod."""
        options = self.resolved("cp", "here.txt", "pod/team/web:/tmp/x")
        self.assertEqual((options.url, options.source, options.destination),
                         ("http://10.0.0.2:8081", Location(None, "here.txt"), Location("vm-3", "/tmp/x")))
        options = self.resolved("cp", "pod/web:/tmp/x", ".")
        self.assertEqual(options.source, Location("vm-3", "/tmp/x"))

    def test_failed(self) -> None:
        """A pod that leads nowhere is Failed, naming it."""
        options = parse("exec", "pod/gone", "--", "true")
        failure = self.failureResultOf(Deferred.fromCoroutine(resolve_pod_references(
            self.reactor, options, {"KUBECONFIG": self.kubeconfig}, self.api)), Failed)
        self.assertEqual(str(failure.value), "pod/gone: no pod team/gone (pod/NAMESPACE/NAME names another namespace)")

    def test_run_without_kubeconfig(self) -> None:
        """vmctl with a pod and no kubeconfig exits 1 with one line, no traceback."""
        out, err = io.StringIO(), io.StringIO()
        missing = os.path.join(self.directory, "none")
        code = self.successResultOf(Deferred.fromCoroutine(run(
            self.reactor, ["exec", "pod/web", "--", "true"], out, err, {"KUBECONFIG": missing})))  # type: ignore[arg-type]
        self.assertEqual((code, out.getvalue()), (1, ""))
        self.assertEqual(err.getvalue(), f"vmctl: pod/web: cannot read the kubeconfig {missing}: "
                                         "No such file or directory\n")
