# -*- test-case-name: tests.config.test_resolve -*-
"""
Tests for :mod:`vmservice.config.resolve`: the ``config:`` section's values checked and resolved.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.config.parsing import ConfigErrorCase, MiB, parse_text
from vmservice.config import DEFAULT_IMAGE_DIR, AuditConfig, ConfigError


class ImageDirTests(SynchronousTestCase):
    """``image_dir``: the file's, else the environment's, else the default."""

    def test_imageDirFromEnvironment(self) -> None:
        """
        Without ``image_dir``, ``VMSERVICE_IMAGE_DIR`` decides; an empty
        variable is ignored.
        """
        self.assertEqual(
            parse_text("config: {}\n", {"VMSERVICE_IMAGE_DIR": "/tmp/images"}).image_dir, "/tmp/images"
        )
        self.assertEqual(parse_text("config: {}\n", {"VMSERVICE_IMAGE_DIR": ""}).image_dir, DEFAULT_IMAGE_DIR)

    def test_imageDirFromFile(self) -> None:
        """
        ``image_dir`` in the file wins over the environment.
        """
        config = parse_text("config:\n  image_dir: /srv/images\n", {"VMSERVICE_IMAGE_DIR": "/tmp/images"})
        self.assertEqual(config.image_dir, "/srv/images")


class ApiTests(SynchronousTestCase):
    """
    ``config.api``: TCP or UNIX socket, and authentication.
    """

    def test_remote_without_auth(self) -> None:
        """
        A TCP address that is not a loopback one with auth off is refused at
        load, naming the setting that allows it; with that setting, or with
        auth on, it is accepted. Loopback addresses and UNIX sockets need neither.
        """
        for address in ("0.0.0.0", "::", "192.0.2.7", "2001:db8::1"):
            error = self.assertRaises(ConfigError, parse_text, f"config:\n  api:\n    bind_address: '{address}'\n")
            self.assertEqual(error.path, "config.api.bind_address")
            self.assertIn("api.allow_unauthenticated_remote", error.message)
            self.assertEqual(error.line, 3)
            api = parse_text(f"config:\n  api:\n    bind_address: '{address}'\n"
                         "    allow_unauthenticated_remote: true\n").api
            self.assertTrue(api.allow_unauthenticated_remote)
            self.assertFalse(api.auth.enabled)
        for address in ("127.0.0.1", "127.0.0.2", "::1", "./api.sock"):
            self.assertFalse(parse_text(f"config:\n  api:\n    bind_address: '{address}'\n").api.auth.enabled)

    def test_allowed_hosts_and_origins(self) -> None:
        """
        allowed_hosts takes names and addresses (lowercased, without a final
        dot; IPv6 without brackets); allowed_origins takes origins exactly as
        browsers send them; both default to none. public_metrics defaults to off.
        """
        api = parse_text("config:\n  api:\n    allowed_hosts: [VMs.Example.com., '[2001:DB8::1]', 10.0.0.7]\n"
                     "    allowed_origins: ['https://vms.example.com', 'http://127.0.0.1:3000', 'http://[::1]:8000']\n"
                     "    auth: {enabled: true, public_metrics: true}\n").api
        self.assertEqual(api.allowed_hosts, ("vms.example.com", "2001:db8::1", "10.0.0.7"))
        self.assertEqual(api.allowed_origins, ("https://vms.example.com", "http://127.0.0.1:3000", "http://[::1]:8000"))
        self.assertTrue(api.auth.public_metrics)
        default = parse_text("config: {}\n").api
        self.assertEqual((default.allowed_hosts, default.allowed_origins, default.auth.public_metrics), ((), (), False))

    def test_bad_allowed_hosts_and_origins(self) -> None:
        """Hosts with a port or a scheme, and origins a browser would never send, are refused with their index."""
        for host in ("vms.example.com:8080", "http://vms.example.com", "", "a b", "*"):
            error = self.assertRaises(ConfigError, parse_text, f"config:\n  api:\n    allowed_hosts: ['{host}']\n")
            self.assertEqual(error.path, "config.api.allowed_hosts[0]", host)
        for origin in ("https://vms.example.com/", "HTTPS://vms.example.com", "https://vms.example.com:443",
                       "http://x:80", "ftp://x", "vms.example.com", "null", "*", "https://u@x", "http://x:99999"):
            error = self.assertRaises(ConfigError, parse_text, f"config:\n  api:\n    allowed_origins: ['{origin}']\n")
            self.assertEqual(error.path, "config.api.allowed_origins[0]", origin)

    def test_portZero(self) -> None:
        """
        Port 0 (any free port, useful in tests) is accepted.
        """
        self.assertEqual(parse_text("config:\n  api:\n    port: 0\n").api.port, 0)


class ErrorTests(ConfigErrorCase):
    """Every kind of mistake gives one ``ConfigError`` with the key path, a message and the line of the key."""

    def test_portOutOfRange(self) -> None:
        """
        Ports must lie in 0-65535.
        """
        for port in (-1, 65536):
            self.assertConfigError(
                f"config:\n  api:\n    port: {port}\n",
                f"config.api.port: port {port} out of range (0-65535)",
                3,
            )

    def test_badBindAddress(self) -> None:
        """
        A host name is neither an IP address nor a socket path.
        """
        self.assertConfigError(
            "config:\n  api:\n    bind_address: localhost\n",
            "config.api.bind_address: bad bind address 'localhost' "
            "(expected an IP address, or a UNIX socket path containing '/')",
            3,
        )

    def test_duplicateGroupNames(self) -> None:
        """
        Two groups may not share a name.
        """
        self.assertConfigError(
            "config:\n  host_groups:\n    - name: a\n    - name: b\n    - name: a\n",
            "config.host_groups[2].name: duplicate group name 'a' (also config.host_groups[0])",
            5,
        )


class StatsIntervalTests(SynchronousTestCase):
    """``stats_interval``: how often the nodes' statistics are sampled for ``/metrics``."""

    def test_default_and_given(self) -> None:
        """15 seconds unless given; 0 turns the sampling off."""
        self.assertEqual(parse_text("config: {}\n").stats_interval, 15.0)
        self.assertEqual(parse_text("config: {stats_interval: 2.5}\n").stats_interval, 2.5)
        self.assertEqual(parse_text("config: {stats_interval: 0}\n").stats_interval, 0)

    def test_out_of_range(self) -> None:
        for value in ("0.5", "-1", "3601"):
            with self.assertRaisesRegex(ConfigError, "stats_interval"):
                parse_text(f"config: {{stats_interval: {value}}}\n")


class WarmTests(SynchronousTestCase):
    """``warm`` per group, and the templates' tmpfs directory and budget."""

    def test_defaults(self) -> None:
        """Groups boot cold unless they say ``warm: true``; templates use up to 2 GiB of /dev/shm."""
        config = parse_text("config: {host_groups: [{name: a}, {name: b, warm: true}]}\n")
        self.assertEqual([group.warm for group in config.host_groups], [False, True])
        self.assertEqual(config.templates_tmpfs_dir, "/dev/shm")
        self.assertEqual(config.templates_tmpfs_budget, 2 * 1024**3)

    def test_given(self) -> None:
        config = parse_text("config: {templates_tmpfs_dir: /run/t, templates_tmpfs_budget: 512MiB}\n")
        self.assertEqual((config.templates_tmpfs_dir, config.templates_tmpfs_budget), ("/run/t", 512 * 1024**2))

    def test_bad(self) -> None:
        for text in ("{templates_tmpfs_dir: ''}", "{templates_tmpfs_budget: lots}", "{host_groups: [{name: a, warm: 3}]}"):
            with self.assertRaises(ConfigError):
                parse_text(f"config: {text}\n")


class TcgTbSizeTests(SynchronousTestCase):
    """``tcg_tb_size_mb``: the translation cache of each VM under TCG."""

    def test_default(self) -> None:
        """64 MiB unless said otherwise."""
        self.assertEqual(parse_text("config: {}\n").tcg_tb_size_mb, 64)

    def test_given(self) -> None:
        """0 (QEMU's default) and a size in MiB are taken."""
        self.assertEqual(parse_text("config: {tcg_tb_size_mb: 0}\n").tcg_tb_size_mb, 0)
        self.assertEqual(parse_text("config: {tcg_tb_size_mb: 128}\n").tcg_tb_size_mb, 128)

    def test_bad(self) -> None:
        """Negative, too large or not an integer: one line naming the key."""
        for text in ("-1", "5000", "'64M'"):
            error = self.assertRaises(ConfigError, parse_text, f"config: {{tcg_tb_size_mb: {text}}}\n")
            self.assertTrue(str(error).startswith("config.tcg_tb_size_mb: "), str(error))


class ConsoleLogSizeTests(SynchronousTestCase):
    """``console_log_size``: how much of each node's serial console is kept on disk."""

    def test_default(self) -> None:
        """4 MiB unless said otherwise."""
        self.assertEqual(parse_text("config: {}\n").console_log_size, 4 * 1024 * 1024)

    def test_given(self) -> None:
        """A size with a unit or in bytes, from 64K to 1G."""
        self.assertEqual(parse_text("config: {console_log_size: 64K}\n").console_log_size, 64 * 1024)
        self.assertEqual(parse_text("config: {console_log_size: 1G}\n").console_log_size, 1024**3)
        self.assertEqual(parse_text("config: {console_log_size: 1048576}\n").console_log_size, 1024 * 1024)

    def test_bad(self) -> None:
        """Too small, too large, negative or not a size: one line naming the key."""
        for text in ("1K", "65535", "2G", "-1", "lots", "true"):
            error = self.assertRaises(ConfigError, parse_text, f"config: {{console_log_size: {text}}}\n")
            self.assertTrue(str(error).startswith("config.console_log_size: "), str(error))


class CodehostTests(SynchronousTestCase):
    """
    ``codehost_url`` and ``codehost_timeout``: where ``codehost_user``'s keys
    come from, and how long fetching them may take.
    """

    def test_defaults(self) -> None:
        """
        Without the keys, keys come from GitHub within 5 seconds.
        """
        config = parse_text("config: {}\n")
        self.assertEqual((config.codehost_url, config.codehost_timeout), ("https://github.com", 5.0))

    def test_given(self) -> None:
        """
        Another site (its final ``/`` dropped, a path kept) and a timeout in
        seconds, integer or not.
        """
        config = parse_text("config:\n  codehost_url: http://127.0.0.1:8000/git/\n  codehost_timeout: 2.5\n")
        self.assertEqual((config.codehost_url, config.codehost_timeout), ("http://127.0.0.1:8000/git", 2.5))
        self.assertEqual(parse_text("config:\n  codehost_timeout: 10\n").codehost_timeout, 10.0)

    def test_disabled(self) -> None:
        """
        An empty value or ``null`` turns the code host off.
        """
        for value in ('""', "null", "", "'  '"):
            self.assertIsNone(parse_text(f"config:\n  codehost_url: {value}\n").codehost_url, value)

    def test_refused(self) -> None:
        """
        Anything but an http(s) URL with a host, and credentials, a query or a
        fragment in it, are refused with the key's line; so is a timeout out of
        (0, 60] or not a number.  Credentials are not repeated in the message.
        """
        cases = [
            ("codehost_url: github.com", "bad URL 'github.com' (expected http:// or https:// and a host, e.g. "
                                          "https://github.com)"),
            ("codehost_url: ftp://example.com", "bad URL 'ftp://example.com' (expected http:// or https:// and a "
                                                 "host, e.g. https://github.com)"),
            ("codehost_url: 'https://'", "bad URL 'https://' (expected http:// or https:// and a host, e.g. "
                                          "https://github.com)"),
            ("codehost_url: https://example.com:http", "bad URL 'https://example.com:http' (expected e.g. "
                                                        "https://github.com)"),
            ("codehost_url: https://me:s3cret@example.com", "bad URL: credentials in it are not accepted"),
            ("codehost_url: https://example.com/?tab=keys", "bad URL 'https://example.com/?tab=keys' (no query, "
                                                             "fragment or white space)"),
            ("codehost_url: https://example.com/#keys", "bad URL 'https://example.com/#keys' (no query, fragment "
                                                         "or white space)"),
            ("codehost_url: 'https://exa mple.com'", "bad URL 'https://exa mple.com' (no query, fragment or white "
                                                      "space)"),
            ("codehost_url: 8080", "expected a string, got integer 8080"),
            ("codehost_timeout: 0", "codehost_timeout 0 must be more than 0 and at most 60 seconds"),
            ("codehost_timeout: -1", "codehost_timeout -1 must be more than 0 and at most 60 seconds"),
            ("codehost_timeout: 61", "codehost_timeout 61 must be more than 0 and at most 60 seconds"),
            ("codehost_timeout: 5s", "expected a number, got string '5s'"),
        ]
        for line, message in cases:
            key = line.split(":", 1)[0]
            error = self.assertRaises(ConfigError, parse_text, f"config:\n  state_dir: /tmp/x\n  {line}\n")
            self.assertEqual((str(error), error.line), (f"config.{key}: {message}", 3))
            self.assertNotIn("s3cret", str(error))


class LimitsTests(SynchronousTestCase):
    """``limits``: the buffer budget, background execs per node, the API's connections."""

    def test_defaults(self) -> None:
        """No buffer budget given (the daemon sizes it from the RAM), 64 execs per node, 1024 and 256 connections."""
        from vmservice.config import LimitsConfig

        limits = parse_text("config: {}\n").limits
        self.assertEqual(limits, LimitsConfig())
        self.assertEqual((limits.buffer_budget, limits.background_execs_per_node, limits.max_connections,
                          limits.max_connections_per_peer), (None, 64, 1024, 256))

    def test_given(self) -> None:
        """Each key as given; the budget is a size."""
        limits = parse_text("config:\n  limits: {buffer_budget: 4M, background_execs_per_node: 3, max_connections: 8,"
                        " max_connections_per_peer: 8}\n").limits
        self.assertEqual((limits.buffer_budget, limits.background_execs_per_node, limits.max_connections,
                          limits.max_connections_per_peer), (4 * MiB, 3, 8, 8))

    def test_bad(self) -> None:
        """Each key checked at load, with its key path."""
        cases = (
            ("buffer_budget: 1000", r"config\.limits\.buffer_budget: buffer_budget 1000 must be at least 1M"),
            ("buffer_budget: lots", r"config\.limits\.buffer_budget: bad size"),
            ("background_execs_per_node: 0", r"background_execs_per_node 0 must be from 1 to 256"),
            ("background_execs_per_node: 257", r"background_execs_per_node 257 must be from 1 to 256"),
            ("max_connections: 0", r"config\.limits\.max_connections: max_connections 0 must be from 1 to 65536"),
            ("max_connections_per_peer: 2000", r"max_connections_per_peer 2000 must be from 1 to max_connections "
                                               r"\(1024\)"),
            ("max_connections: '8'", r"config\.limits\.max_connections: expected an integer"),
            ("connections: 8", r"config\.limits\.connections: unknown key"),
        )
        for text, message in cases:
            with self.assertRaisesRegex(ConfigError, message):
                parse_text(f"config:\n  limits: {{{text}}}\n")


class TokenFileAndAuditTests(SynchronousTestCase):
    """``config.api.auth.token_file`` and ``config.audit``."""

    def test_token_file(self) -> None:
        """token_file is an absolute path (none by default: <state_dir>/auth/token); a relative one is refused."""
        self.assertIsNone(parse_text("config: {}\n").api.auth.token_file)
        api = parse_text("config:\n  api:\n    auth: {enabled: true, token_file: /etc/vmservice/tokens}\n").api
        self.assertEqual(api.auth.token_file, "/etc/vmservice/tokens")
        error = self.assertRaises(ConfigError, parse_text, "config:\n  api:\n    auth: {token_file: tokens}\n")
        self.assertEqual(error.path, "config.api.auth.token_file")

    def test_audit(self) -> None:
        """The audit log is on by default (10M, 5 kept); its path absolute, its size at least 64K, keep 0-100."""
        self.assertEqual(parse_text("config: {}\n").audit, AuditConfig())
        self.assertEqual((AuditConfig().enabled, AuditConfig().max_size, AuditConfig().keep), (True, 10 * MiB, 5))
        audit = parse_text("config:\n  audit: {enabled: false, path: /var/log/vms/audit.log, max_size: 1M, keep: 0}\n").audit
        self.assertEqual(audit, AuditConfig(enabled=False, path="/var/log/vms/audit.log", max_size=MiB, keep=0))
        for body, key in (("{path: audit.log}", "path"), ("{max_size: 1K}", "max_size"), ("{keep: 101}", "keep"),
                          ("{keep: -1}", "keep")):
            error = self.assertRaises(ConfigError, parse_text, f"config:\n  audit: {body}\n")
            self.assertEqual(error.path, f"config.audit.{key}", body)
