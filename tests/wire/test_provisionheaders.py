# -*- test-case-name: tests.wire.test_provisionheaders -*-
"""
Tests for the headers that configure the guest and set its clock
(:mod:`vmservice.wire.openheaders.provisioning`,
:mod:`vmservice.wire.openheaders.clock`): every record comes back from its own
JSON, no JSON value makes a reader raise anything but ``BadHeader``, and the
refusals are the words the guest has always sent, in the order it has always
checked.
"""

from __future__ import annotations

from typing import Any, Union

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.wire.headerchecks import any_texts, ids, read_all, refusal, through_json
from tests.wire.strategies import headers, json_values
from vmservice.wire.openheaders.clock import MAX_CLOCK_NS, ClockHeader
from vmservice.wire.openheaders.provisioning import (MAX_SECRETS, MAX_USERDATA, LoginHeader, SecretEntry,
                                                     SecretsHeader, UserdataHeader)

secret_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
secret_entries = st.builds(SecretEntry, secret_names, ids, st.integers(0, 0o7777), ids, ids)
secrets_headers = st.lists(secret_entries, max_size=5, unique_by=lambda entry: entry.name).map(
    lambda entries: SecretsHeader(tuple(entries)))
login_headers = st.builds(LoginHeader, st.from_regex(r"[a-z_][a-z0-9_-]{0,31}", fullmatch=True))
userdata_headers = st.builds(UserdataHeader, st.integers(0, MAX_USERDATA))
clock_headers = st.builds(ClockHeader, st.integers(1, MAX_CLOCK_NS))

Header = Union[SecretsHeader, LoginHeader, UserdataHeader, ClockHeader]
#: The op each record's JSON names.
OPS = {SecretsHeader: "secrets", LoginHeader: "login", UserdataHeader: "userdata", ClockHeader: "clock"}
#: Every reader of untrusted JSON, and every field one looks at.
READERS = [SecretsHeader.from_json, SecretEntry.from_json, LoginHeader.from_json, UserdataHeader.from_json,
           ClockHeader.from_json]
FIELDS = ["entries", "name", "size", "mode", "uid", "gid", "user", "unix_ns"]


class RoundTripTests(SynchronousTestCase):
    """``from_json(to_json(record)) == record``, through real JSON."""

    @given(secrets_headers | login_headers | userdata_headers | clock_headers)
    def test_round_trip(self, header: Header) -> None:
        """Every record comes back unchanged from its JSON, which names its op."""
        sent = through_json(header.to_json())
        self.assertEqual(sent["op"], OPS[type(header)])
        self.assertEqual(type(header).from_json(sent), header)

    def test_json(self) -> None:
        """The headers the host always sent."""
        self.assertEqual(SecretsHeader((SecretEntry("a", 3, 0o600, 1, 2),)).to_json(), {
            "op": "secrets", "entries": [{"name": "a", "size": 3, "mode": 0o600, "uid": 1, "gid": 2}]})
        self.assertEqual(UserdataHeader(7).to_json(), {"op": "userdata", "size": 7})
        self.assertEqual(LoginHeader("root").to_json(), {"op": "login", "user": "root"})
        self.assertEqual(ClockHeader(5).to_json(), {"op": "clock", "unix_ns": 5})

    def test_secrets_size(self) -> None:
        """The body of a secrets request is the sum of the entries' sizes."""
        self.assertEqual(SecretsHeader((SecretEntry("a", 3, 0, 0, 0), SecretEntry("b", 4, 0, 0, 0))).size, 7)


class UntrustedTests(SynchronousTestCase):
    """Whatever the peer sends, a reader returns a record or raises ``BadHeader``."""

    @given(json_values)
    def test_any_json(self, value: Any) -> None:
        """Any JSON value: a record or BadHeader."""
        read_all(READERS, value)
        read_all([SecretsHeader.from_json], {"entries": [value]})

    @given(headers, st.sampled_from(FIELDS), json_values | any_texts, st.sampled_from([{}, {"name": "a"}]))
    def test_any_field(self, header: dict[str, Any], name: str, value: Any, base: dict[str, Any]) -> None:
        """An object with any value in a known field (and others besides): a record or BadHeader."""
        read_all(READERS, {**header, **base, name: value})
        read_all([SecretsHeader.from_json], {"entries": [{**header, **base, name: value}]})


class MessageTests(SynchronousTestCase):
    """The refusals, in the words the guest has always sent."""

    def test_secrets(self) -> None:
        """The list, then each entry (name, size, mode, uid, gid), then duplicate names."""
        entry = {"name": "a", "size": 1, "mode": 0o600, "uid": 0, "gid": 0}
        for entries, message in [
            (None, f"entries must be a list of at most {MAX_SECRETS}"),
            ([entry] * (MAX_SECRETS + 1), f"entries must be a list of at most {MAX_SECRETS}"),
            ([entry, "x"], "each entry must be an object"),
            ([{**entry, "name": ".a", "size": -1}], "bad secret name '.a'"),
            ([{**entry, "name": "a" * 129}], f"bad secret name {'a' * 129!r}"),
            ([{**entry, "size": True, "mode": -1}], "bad size for secret 'a'"),
            ([{**entry, "mode": 0o10000}], "bad mode for secret 'a'"),
            ([{**entry, "uid": 2**32}], "bad uid for secret 'a'"),
            ([{**entry, "gid": 1.0}], "bad gid for secret 'a'"),
            ([entry, entry, {**entry, "name": "/"}], "bad secret name '/'"),
            ([entry, entry], "a secret is named twice"),
        ]:
            self.assertEqual(refusal(SecretsHeader.from_json, {"entries": entries}), message)

    def test_others(self) -> None:
        """userdata's size, login's user, clock's unix_ns."""
        for size in (None, -1, MAX_USERDATA + 1, True, "1"):
            self.assertEqual(refusal(UserdataHeader.from_json, {"size": size}), "size must be an integer from 0 to 524288")
        for user in (None, "", "Root", "a" * 33, 1):
            self.assertEqual(refusal(LoginHeader.from_json, {"user": user}), f"bad user name {user!r}")
        for unix_ns in (None, 0, 2**63, True, 1.5):
            self.assertEqual(refusal(ClockHeader.from_json, {"unix_ns": unix_ns}),
                             f"unix_ns must be a positive integer (nanoseconds), not {unix_ns!r}")
