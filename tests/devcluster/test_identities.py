"""
Tests for :mod:`vmservice.devcluster.identities`: the token file and the kubeconfigs.
"""

from __future__ import annotations

import csv
import io

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.devcluster.identities import (ADMIN, CONTROLLER_MANAGER, SCHEDULER, Identity, identities, node_user,
                                             parse_tokens, render_kubeconfig, render_tokens)

#: Any text a path or name may hold (no lone surrogates: no file name or user name is one).
TEXT = st.characters(blacklist_categories=("Cs",))


class TokenFileTests(SynchronousTestCase):
    def test_rows(self) -> None:
        """One row a user: token, user, uid (the user) and its groups, one quoted field (commas inside)."""
        text = render_tokens([Identity("admin", ("system:masters",), "t1"),
                              Identity("system:node:vms-a", ("system:nodes", "extra"), "t2"),
                              Identity("system:kube-scheduler", (), "t3")])
        self.assertEqual(text, "t1,admin,admin,system:masters\n"
                               't2,system:node:vms-a,system:node:vms-a,"system:nodes,extra"\n'
                               "t3,system:kube-scheduler,system:kube-scheduler\n")

    def test_identities(self) -> None:
        """The administrator is in system:masters, each host system:node:NAME in system:nodes, the components in none."""
        users = identities(["vms-a", "vms-b"], {})
        self.assertEqual([(each.user, each.groups) for each in users],
                         [(ADMIN, ("system:masters",)), (SCHEDULER, ()), (CONTROLLER_MANAGER, ()),
                          ("system:node:vms-a", ("system:nodes",)), ("system:node:vms-b", ("system:nodes",))])
        self.assertEqual(len({each.token for each in users}), 5)
        self.assertTrue(all(len(each.token) == 48 for each in users))

    def test_known_tokens_kept(self) -> None:
        """A user's token is kept from the earlier file; a new node gets a new one."""
        first = identities(["vms-a"], {})
        again = identities(["vms-a", "vms-b"], parse_tokens(render_tokens(first)))
        self.assertEqual(again[:4], first)
        self.assertNotIn(again[4].token, {each.token for each in first})

    def test_node_user(self) -> None:
        """A host's user name is system:node:NAME."""
        self.assertEqual(node_user("vms-a"), "system:node:vms-a")

    @given(st.lists(st.tuples(st.text(alphabet="0123456789abcdef", min_size=1, max_size=48),
                              st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"),
                                      min_size=1, max_size=30),
                              st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz:-", min_size=1, max_size=20),
                                       max_size=3)),
                    max_size=10, unique_by=lambda row: row[1]))
    @settings(max_examples=150, deadline=None)
    def test_property_round_trip(self, rows: list[tuple[str, str, list[str]]]) -> None:
        """Any users (quotes and commas in names too) read back as written, and each row has its groups in one field."""
        users = [Identity(user, tuple(groups), token) for token, user, groups in rows]
        text = render_tokens(users)
        self.assertEqual(parse_tokens(text), {each.user: each.token for each in users})
        for row, each in zip(csv.reader(io.StringIO(text)), users):
            self.assertEqual(row[3:], [",".join(each.groups)] if each.groups else [])


class KubeconfigTests(SynchronousTestCase):
    def test_fields(self) -> None:
        """A kubeconfig names the server, the CA file and the user's token, in one current context."""
        config = yaml.safe_load(render_kubeconfig("https://127.0.0.1:16443", "/d/ca.crt", "system:node:vms-a", "tok"))
        self.assertEqual(config["clusters"][0]["cluster"], {"server": "https://127.0.0.1:16443",
                                                           "certificate-authority": "/d/ca.crt"})
        self.assertEqual(config["users"], [{"name": "system:node:vms-a", "user": {"token": "tok"}}])
        self.assertEqual(config["contexts"][0]["context"]["user"], "system:node:vms-a")
        self.assertEqual(config["current-context"], config["contexts"][0]["name"])

    @given(st.text(alphabet=TEXT, max_size=40), st.text(alphabet=TEXT, max_size=40))
    @settings(max_examples=100, deadline=None)
    def test_property_quoting(self, path: str, user: str) -> None:
        """Whatever a path or a user name holds (quotes, colons, newlines), a YAML reader gets it back as it was."""
        config = yaml.safe_load(render_kubeconfig("https://127.0.0.1:1", path, user, "t"))
        self.assertEqual(config["clusters"][0]["cluster"]["certificate-authority"], path)
        self.assertEqual(config["users"][0]["name"], user)
