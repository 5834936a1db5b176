"""Tests for the ``e2b:`` section: :mod:`vmservice.config.e2b` and :mod:`vmservice.config.resolve_e2b`."""

from __future__ import annotations

import textwrap

from tests.config.parsing import EXAMPLE, ConfigErrorCase, parse_text
from vmservice.config import E2bConfig, load_config

E = "config.e2b"
GROUPS = """
  host_groups:
    - {name: sandbox, ram_mb: 256}
    - {name: big, ram_mb: 512}
"""


def section(body: str = "", api: str = "") -> str:
    """A configuration with two groups and ``e2b:`` enabled, its other keys ``body`` (indented by four)."""
    keys = "".join(f"\n    {line}" for line in textwrap.dedent(body).strip().splitlines())
    return f"config:{api}{GROUPS}  e2b:\n    enabled: true{keys}\n"


class SectionTests(ConfigErrorCase):
    """The section resolved."""

    def test_absent_or_disabled(self) -> None:
        """No section, or enabled: false (the default): no E2B API, nothing else checked."""
        self.assertIsNone(parse_text("config: {}\n").e2b)
        self.assertIsNone(parse_text("config:\n  e2b:\n    port: 99999\n").e2b)

    def test_defaults(self) -> None:
        """The API's address, port 49982, ``base`` for the first group, envd 0.6.4, 300 s and a day."""
        self.assertEqual(parse_text(section()).e2b, E2bConfig(
            bind_address="127.0.0.1", port=49982, templates=(("base", "sandbox"),), envd_version="0.6.4",
            default_timeout_seconds=300, max_timeout_seconds=86400))

    def test_given(self) -> None:
        """Every key as given; templates sorted by id."""
        e2b = parse_text(section("""
            bind_address: "::1"
            port: 0
            templates: {zeta: big, base: sandbox, "team/x:v1": big}
            envd_version: 0.5.7
            default_timeout_seconds: 60
            max_timeout_seconds: 600
        """)).e2b
        assert e2b is not None
        self.assertEqual((e2b.bind_address, e2b.port, e2b.envd_version), ("::1", 0, "0.5.7"))
        self.assertEqual(e2b.templates, (("base", "sandbox"), ("team/x:v1", "big"), ("zeta", "big")))
        self.assertEqual((e2b.default_timeout_seconds, e2b.max_timeout_seconds), (60, 600))
        self.assertEqual((e2b.group_of("zeta"), e2b.group_of("other")), ("big", None))

    def test_unix_api(self) -> None:
        """An API on a UNIX socket: the E2B listener takes loopback by default."""
        e2b = parse_text(section(api="\n  api: {bind_address: /run/vms/api.sock}")).e2b
        assert e2b is not None
        self.assertEqual(e2b.bind_address, "127.0.0.1")

    def test_remote_needs_auth(self) -> None:
        """A non-loopback address with auth off is refused, unless auth is on or remote use is allowed."""
        self.assertConfigError(section("bind_address: 0.0.0.0"),
                               f"{E}.bind_address: 0.0.0.0 is not a loopback address and auth is off: anyone who "
                               "reaches it could make sandboxes; turn api.auth.enabled on, or set "
                               "api.allow_unauthenticated_remote: true")
        on = parse_text(section("bind_address: 0.0.0.0", api="\n  api: {auth: {enabled: true}}")).e2b
        assert on is not None
        self.assertEqual(on.bind_address, "0.0.0.0")

    def test_bad_values(self) -> None:
        """Each bad value named at its key."""
        self.assertConfigError(section("bind_address: localhost"),
                               f"{E}.bind_address: bad bind address 'localhost' (expected an IP address)")
        self.assertConfigError(section("port: 70000"), f"{E}.port: port 70000 out of range (0-65535)")
        self.assertConfigError(section("port: 8080"), f"{E}.port: port 8080 is the API's own port on 127.0.0.1")
        self.assertConfigError(section("envd_version: 0.0.9"),
                               f"{E}.envd_version: envd_version '0.0.9' must be MAJOR.MINOR.PATCH, at least 0.1.0 "
                               "(the SDKs refuse older)")
        self.assertConfigError(section("envd_version: latest"),
                               f"{E}.envd_version: envd_version 'latest' must be MAJOR.MINOR.PATCH, at least 0.1.0 "
                               "(the SDKs refuse older)")
        self.assertConfigError(section("max_timeout_seconds: 0"),
                               f"{E}.max_timeout_seconds: max_timeout_seconds 0 must be from 1 to 2592000")
        self.assertConfigError(section("default_timeout_seconds: 700\nmax_timeout_seconds: 600"),
                               f"{E}.default_timeout_seconds: default_timeout_seconds 700 must be from 1 to "
                               "max_timeout_seconds (600)")
        self.assertConfigError(section("templates: {base: nowhere}"), f"{E}.templates.base: unknown host group "
                                                                      "'nowhere'")
        self.assertConfigError(section('templates: {"-x": sandbox}'),
                               f"{E}.templates.-x: bad template id '-x' (letters, digits and . _ : / -, at most 128 "
                               "characters)")
        self.assertConfigError("config:\n  e2b: {enabled: true}\n",
                               f"{E}.templates: the E2B API needs a host group for its sandboxes; none is configured")

    def test_unknown_key(self) -> None:
        """A key the section does not have is refused by the strict reading."""
        self.assertRaises(Exception, parse_text, section("colour: blue"))

    def test_shipped(self) -> None:
        """The shipped configuration serves ``base`` from its E2B group."""
        e2b = load_config(EXAMPLE, environ={}).e2b
        assert e2b is not None
        self.assertEqual(e2b.group_of("base"), "e2b")
