# -*- test-case-name: tests.test_config -*-
"""
Tests for :mod:`vmservice.config`: loading, defaults, inheritance, and one
exact one-line error (key path, message, line) per kind of mistake.
"""

from __future__ import annotations

import os
import textwrap
from ipaddress import IPv4Interface, IPv4Network

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.endpoints import serverFromString
from twisted.internet.protocol import Factory
from twisted.internet.testing import MemoryReactor
from twisted.trial.unittest import SynchronousTestCase

from vmservice.config import (
    DEFAULT_IMAGE_DIR,
    ApiConfig,
    AuditConfig,
    AuthConfig,
    Config,
    ConfigError,
    HostGroupConfig,
    NetworkConfig,
    format_size,
    load_config,
    parse_config,
    parse_size,
)

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "vmservice.yaml")
MiB = 1024**2
GiB = 1024**3


def _parse(text: str, environ: dict[str, str] | None = None) -> Config:
    """
    Parse dedented ``text`` as ``test.yaml`` with an empty environment (unless
    given), so that the tests do not depend on the caller's shell.
    """
    return parse_config(textwrap.dedent(text), "test.yaml", environ={} if environ is None else environ)


def _group(body: str) -> str:
    """
    A configuration whose first host group is ``body`` (YAML indented by
    six spaces under ``- ``); the group's first key is on line 3.
    """
    return "config:\n  host_groups:\n    - " + textwrap.dedent(body).strip().replace("\n", "\n      ") + "\n"


class ExampleTests(SynchronousTestCase):
    """
    The example shipped in ``conf/vmservice.yaml``.
    """

    def test_loads(self) -> None:
        """
        The example loads into the configuration the documentation promises:
        TCP on 127.0.0.1:8080 without auth and one empty ``demo`` group whose nodes are clones.
        """
        config = load_config(EXAMPLE, environ={})
        self.assertEqual(
            config,
            Config(
                api=ApiConfig(bind_address="127.0.0.1", port=8080, auth=AuthConfig(enabled=False)),
                state_dir="/var/lib/vmservice",
                image_dir=DEFAULT_IMAGE_DIR,
                host_groups=(
                    HostGroupConfig(name="demo", count=0, vcpu=1, ram_bytes=256 * MiB, storage_size=2 * GiB, warm=True),
                ),
            ),
        )

    def test_missingFile(self) -> None:
        """
        A file that does not exist is a ``ConfigError`` naming the file.
        """
        path = self.mktemp()
        error = self.assertRaises(ConfigError, load_config, path)
        self.assertEqual(str(error), f"{path}: cannot read: No such file or directory")

    def test_notUtf8(self) -> None:
        """
        A file that is not UTF-8 text is a ``ConfigError`` naming the file.
        """
        path = self.mktemp()
        with open(path, "wb") as stream:
            stream.write(b"config:\n  image: \xff\n")
        error = self.assertRaises(ConfigError, load_config, path)
        self.assertEqual(str(error), f"{path}: cannot read: not UTF-8 (invalid start byte)")

    def test_loadReportsFileAndLine(self) -> None:
        """
        An error from a file carries the file name and the line of the key, so
        the daemon can point an editor at it.
        """
        path = self.mktemp()
        with open(path, "w") as stream:
            stream.write("config:\n  api:\n    port: 99999\n")
        error = self.assertRaises(ConfigError, load_config, path)
        self.assertEqual(str(error), "config.api.port: port 99999 out of range (0-65535)")
        self.assertEqual(error.location, f"{path}:3")


class DefaultsTests(SynchronousTestCase):
    """
    What an almost empty file means.
    """

    def test_emptyConfig(self) -> None:
        """
        ``config: {}`` gives every documented default.
        """
        config = _parse("config: {}\n")
        self.assertEqual(config, Config())
        self.assertEqual(
            config.api, ApiConfig(bind_address="127.0.0.1", port=8080, auth=AuthConfig(enabled=False))
        )
        self.assertEqual(
            (config.state_dir, config.image_dir, config.image, config.hypervisor),
            ("/var/lib/vmservice", "/var/cache/vmservice/images", "default", "qemu"),
        )
        self.assertEqual((config.graceful_shutdown, config.accel, config.host_groups), (True, "auto", ()))

    def test_imageDirFromEnvironment(self) -> None:
        """
        Without ``image_dir``, ``VMSERVICE_IMAGE_DIR`` decides; an empty
        variable is ignored.
        """
        self.assertEqual(
            _parse("config: {}\n", {"VMSERVICE_IMAGE_DIR": "/tmp/images"}).image_dir, "/tmp/images"
        )
        self.assertEqual(_parse("config: {}\n", {"VMSERVICE_IMAGE_DIR": ""}).image_dir, DEFAULT_IMAGE_DIR)

    def test_imageDirFromFile(self) -> None:
        """
        ``image_dir`` in the file wins over the environment.
        """
        config = _parse("config:\n  image_dir: /srv/images\n", {"VMSERVICE_IMAGE_DIR": "/tmp/images"})
        self.assertEqual(config.image_dir, "/srv/images")

    def test_groupDefaults(self) -> None:
        """
        A group with only a name has count 0, one vCPU, 256 MiB, a 2 GiB image
        disk, no network and is not persistent.
        """
        group = _parse(_group("name: a")).host_groups[0]
        self.assertEqual(group, HostGroupConfig(name="a"))
        self.assertEqual(
            (group.count, group.vcpu, group.ram_bytes, group.storage, group.storage_size),
            (0, 1, 256 * MiB, "image", 2 * GiB),
        )
        self.assertEqual((group.persistent, group.network, group.arch), (False, None, "x86_64"))

    def test_ramUnits(self) -> None:
        """
        ``ram_gb``, ``ram_mb`` and ``ram_bytes`` all resolve to ``ram_bytes``.
        """
        for key, value, expected in (
            ("ram_gb", 2, 2 * GiB),
            ("ram_mb", 384, 384 * MiB),
            ("ram_bytes", MiB, MiB),
        ):
            group = _parse(_group(f"name: a\n{key}: {value}")).host_groups[0]
            self.assertEqual(group.ram_bytes, expected, key)

    def test_storageSizeForms(self) -> None:
        """
        ``storage_size`` takes unit strings and plain byte integers.
        """
        for text, expected in (
            ("2G", 2 * GiB),
            ("512M", 512 * MiB),
            ("1.5G", 3 * GiB // 2),
            ("1048576", MiB),
        ):
            group = _parse(_group(f"name: a\nstorage_size: {text}")).host_groups[0]
            self.assertEqual(group.storage_size, expected, text)

    def test_groupLookup(self) -> None:
        """
        ``Config.group`` finds a group by name and answers ``None`` otherwise.
        """
        config = _parse("config:\n  host_groups:\n    - name: a\n    - name: b\n      count: 2\n")
        group = config.group("b")
        assert group is not None
        self.assertEqual((group.name, group.count), ("b", 2))
        self.assertIsNone(config.group("c"))


class InheritanceTests(SynchronousTestCase):
    """
    Groups inherit ``image``, ``hypervisor`` and ``graceful_shutdown``.
    """

    def test_inherited(self) -> None:
        """
        A group without its own values takes the top-level ones.
        """
        config = _parse("""\
            config:
              image: tiny
              graceful_shutdown: false
              host_groups:
                - name: a
            """)
        group = config.host_groups[0]
        self.assertEqual((group.image, group.hypervisor, group.graceful_shutdown), ("tiny", "qemu", False))

    def test_overridden(self) -> None:
        """
        A group's own values win over the top-level ones.
        """
        config = _parse("""\
            config:
              image: tiny
              graceful_shutdown: false
              host_groups:
                - name: a
                  image: big
                  hypervisor: qemu
                  graceful_shutdown: true
            """)
        group = config.host_groups[0]
        self.assertEqual((group.image, group.hypervisor, group.graceful_shutdown), ("big", "qemu", True))


class ApiTests(SynchronousTestCase):
    """
    ``config.api``: TCP or UNIX socket, and authentication.
    """

    def test_unixSocket(self) -> None:
        """
        A ``bind_address`` that is a path means a UNIX socket, with auth off
        unless the file turns it on explicitly.
        """
        api = _parse("config:\n  api:\n    bind_address: /run/vmservice/api.sock\n").api
        self.assertEqual(api.unix_socket_path, "/run/vmservice/api.sock")
        self.assertFalse(api.auth.enabled)
        api = _parse("config:\n  api:\n    bind_address: ./api.sock\n    auth: {enabled: true}\n").api
        self.assertEqual(api.unix_socket_path, "./api.sock")
        self.assertTrue(api.auth.enabled)

    def test_tcp(self) -> None:
        """
        IPv4 and IPv6 addresses mean TCP: no socket path.
        """
        for address in ("127.0.0.1", "0.0.0.0", "::1", "::"):
            api = _parse(f"config:\n  api:\n    bind_address: '{address}'\n    auth: {{enabled: true}}\n").api
            self.assertIsNone(api.unix_socket_path, address)

    def test_remote_without_auth(self) -> None:
        """
        A TCP address that is not a loopback one with auth off is refused at
        load, naming the setting that allows it; with that setting, or with
        auth on, it is accepted. Loopback addresses and UNIX sockets need neither.
        """
        for address in ("0.0.0.0", "::", "192.0.2.7", "2001:db8::1"):
            error = self.assertRaises(ConfigError, _parse, f"config:\n  api:\n    bind_address: '{address}'\n")
            self.assertEqual(error.path, "config.api.bind_address")
            self.assertIn("api.allow_unauthenticated_remote", error.message)
            self.assertEqual(error.line, 3)
            api = _parse(f"config:\n  api:\n    bind_address: '{address}'\n"
                         "    allow_unauthenticated_remote: true\n").api
            self.assertTrue(api.allow_unauthenticated_remote)
            self.assertFalse(api.auth.enabled)
        for address in ("127.0.0.1", "127.0.0.2", "::1", "./api.sock"):
            self.assertFalse(_parse(f"config:\n  api:\n    bind_address: '{address}'\n").api.auth.enabled)

    def test_allowed_hosts_and_origins(self) -> None:
        """
        allowed_hosts takes names and addresses (lowercased, without a final
        dot; IPv6 without brackets); allowed_origins takes origins exactly as
        browsers send them; both default to none. public_metrics defaults to off.
        """
        api = _parse("config:\n  api:\n    allowed_hosts: [VMs.Example.com., '[2001:DB8::1]', 10.0.0.7]\n"
                     "    allowed_origins: ['https://vms.example.com', 'http://127.0.0.1:3000', 'http://[::1]:8000']\n"
                     "    auth: {enabled: true, public_metrics: true}\n").api
        self.assertEqual(api.allowed_hosts, ("vms.example.com", "2001:db8::1", "10.0.0.7"))
        self.assertEqual(api.allowed_origins, ("https://vms.example.com", "http://127.0.0.1:3000", "http://[::1]:8000"))
        self.assertTrue(api.auth.public_metrics)
        default = _parse("config: {}\n").api
        self.assertEqual((default.allowed_hosts, default.allowed_origins, default.auth.public_metrics), ((), (), False))

    def test_bad_allowed_hosts_and_origins(self) -> None:
        """Hosts with a port or a scheme, and origins a browser would never send, are refused with their index."""
        for host in ("vms.example.com:8080", "http://vms.example.com", "", "a b", "*"):
            error = self.assertRaises(ConfigError, _parse, f"config:\n  api:\n    allowed_hosts: ['{host}']\n")
            self.assertEqual(error.path, "config.api.allowed_hosts[0]", host)
        for origin in ("https://vms.example.com/", "HTTPS://vms.example.com", "https://vms.example.com:443",
                       "http://x:80", "ftp://x", "vms.example.com", "null", "*", "https://u@x", "http://x:99999"):
            error = self.assertRaises(ConfigError, _parse, f"config:\n  api:\n    allowed_origins: ['{origin}']\n")
            self.assertEqual(error.path, "config.api.allowed_origins[0]", origin)

    def test_portZero(self) -> None:
        """
        Port 0 (any free port, useful in tests) is accepted.
        """
        self.assertEqual(_parse("config:\n  api:\n    port: 0\n").api.port, 0)

    def test_endpointTcp(self) -> None:
        """
        The endpoint description listens on the configured IPv4 address and port.
        """
        reactor = MemoryReactor()
        description = ApiConfig(bind_address="127.0.0.1", port=8081).endpoint_description()
        serverFromString(reactor, description).listen(Factory())
        port, _, _, interface = reactor.tcpServers[0]
        self.assertEqual((port, interface), (8081, "127.0.0.1"))

    def test_endpointTcp6(self) -> None:
        """
        The colons of an IPv6 address are quoted in the endpoint description.
        """
        reactor = MemoryReactor()
        description = ApiConfig(bind_address="::1", port=8082).endpoint_description()
        serverFromString(reactor, description).listen(Factory())
        port, _, _, interface = reactor.tcpServers[0]
        self.assertEqual((port, interface), (8082, "::1"))

    def test_endpointUnix(self) -> None:
        """
        A UNIX socket endpoint is created at the path with mode 0660, even when
        the path contains a colon.
        """
        reactor = MemoryReactor()
        description = ApiConfig(bind_address="/run/vm:1/api.sock").endpoint_description()
        serverFromString(reactor, description).listen(Factory())
        address, _, _, mode, _ = reactor.unixServers[0]
        self.assertEqual((address, mode), ("/run/vm:1/api.sock", 0o660))


class NetworkTests(SynchronousTestCase):
    """
    The optional ``network`` section of a group.
    """

    def test_isolated(self) -> None:
        """
        An isolated network keeps its range and allow/drop lists as networks.
        """
        group = _parse(_group("""\
                name: a
                network:
                  mode: isolated
                  range: 10.77.0.0/22
                  allow: [10.0.0.0/8]
                  drop: [192.168.0.0/16, 172.16.0.0/12]
                """)).host_groups[0]
        self.assertEqual(
            group.network,
            NetworkConfig(
                mode="isolated",
                range=IPv4Network("10.77.0.0/22"),
                allow=(IPv4Network("10.0.0.0/8"),),
                drop=(IPv4Network("192.168.0.0/16"), IPv4Network("172.16.0.0/12")),
            ),
        )

    def test_bridge(self) -> None:
        """
        A bridge network keeps its bridge name and gateway address.
        """
        group = _parse(_group("""\
                name: a
                network:
                  mode: bridge
                  bridge: br0
                  range: 192.168.137.128/25
                  gateway: 192.168.137.1/24
                """)).host_groups[0]
        self.assertEqual(
            group.network,
            NetworkConfig(
                mode="bridge",
                range=IPv4Network("192.168.137.128/25"),
                bridge="br0",
                gateway=IPv4Interface("192.168.137.1/24"),
            ),
        )

    def test_countFitsSlots(self) -> None:
        """
        An isolated /22 holds exactly 256 VMs.
        """
        text = _group("name: a\ncount: 256\nnetwork: {mode: isolated, range: 10.77.0.0/22}")
        self.assertEqual(_parse(text).host_groups[0].count, 256)

    def test_separateRanges(self) -> None:
        """
        Groups with adjacent ranges that do not overlap are accepted.
        """
        config = _parse(
            "config:\n  host_groups:\n"
            "    - {name: a, network: {mode: isolated, range: 10.77.0.0/22}}\n"
            "    - {name: b, network: {mode: isolated, range: 10.77.4.0/22}}\n"
        )
        self.assertEqual(len(config.host_groups), 2)


class ErrorTests(SynchronousTestCase):
    """
    Every kind of mistake gives one ``ConfigError`` with the key path, a
    message and the line of the key.
    """

    def assertConfigError(self, text: str, expected: str, line: int | None = None) -> ConfigError:
        """
        Parsing ``text`` fails with exactly ``expected`` as ``str()`` (one line)
        and, if given, on ``line`` of ``test.yaml``.
        """
        error: ConfigError = self.assertRaises(ConfigError, _parse, text)
        self.assertEqual(str(error), expected)
        self.assertNotIn("\n", str(error))
        self.assertEqual(f"{error.path}: {error.message}", expected)
        if line is not None:
            self.assertEqual(
                (error.source, error.line, error.location), ("test.yaml", line, f"test.yaml:{line}")
            )
        return error

    def test_oneLine(self) -> None:
        """
        A message given with line breaks is folded onto one line.
        """
        self.assertEqual(str(ConfigError("config.x", "bad\n  thing")), "config.x: bad thing")

    def test_locationUnknown(self) -> None:
        """
        Without a source and a line there is no location.
        """
        self.assertIsNone(ConfigError("config.x", "bad").location)

    def test_missingRoot(self) -> None:
        """
        A file without the ``config:`` root says so.
        """
        message = "config: missing root key (the file must have a top-level 'config:' mapping)"
        self.assertConfigError("api:\n  port: 80\n", message, 1)
        self.assertConfigError("", message)
        self.assertConfigError("- config\n", message, 1)

    def test_unknownRootKey(self) -> None:
        """
        A key beside ``config:`` is refused.
        """
        self.assertConfigError(
            "config: {}\nhost_groups: []\n",
            "host_groups: unknown key (everything belongs under 'config:')",
            2,
        )

    def test_configNotMapping(self) -> None:
        """
        An empty ``config:`` is not a mapping.
        """
        self.assertConfigError("config:\n", "config: expected a mapping, got null", 1)

    def test_unknownKeys(self) -> None:
        """
        Unknown keys are refused at every level, by their full path.
        """
        self.assertConfigError("config:\n  sate_dir: /x\n", "config.sate_dir: unknown key", 2)
        self.assertConfigError("config:\n  api:\n    prot: 80\n", "config.api.prot: unknown key", 3)
        self.assertConfigError(
            "config:\n  api:\n    auth: {on: true}\n", "config.api.auth.True: unknown key", 3
        )
        self.assertConfigError(
            "config:\n  api:\n    auth: {enable: true}\n", "config.api.auth.enable: unknown key", 3
        )
        self.assertConfigError(_group("name: a\ncpus: 2"), "config.host_groups[0].cpus: unknown key", 4)
        self.assertConfigError(
            _group("name: a\nnetwork:\n  mode: isolated\n  ranges: 10.0.0.0/22"),
            "config.host_groups[0].network.ranges: unknown key",
            6,
        )

    def test_duplicateKey(self) -> None:
        """
        A key given twice in one mapping is refused rather than silently
        keeping the last value.
        """
        self.assertConfigError(
            "config:\n  api:\n    port: 1\n    port: 2\n", "config.api.port: duplicate key", 4
        )

    def test_firstErrorInFileOrder(self) -> None:
        """
        With several mistakes, the one nearest the top of the file is reported.
        """
        text = "config:\n  accel: 1\n  api:\n    port: x\n  zzz: 1\n  aaa: 2\n"
        self.assertConfigError(text, "config.accel: expected a string, got integer 1", 2)

    def test_yamlSyntax(self) -> None:
        """
        A YAML syntax error names the file and line.
        """
        self.assertConfigError(
            "config:\n  api:\n    port: 80\n   bad: [\n",
            "test.yaml:4: YAML syntax error: expected <block end>, but found "
            "'<block mapping start>' (while parsing a block mapping)",
            4,
        )
        self.assertConfigError(
            "config:\n  image: a: b\n",
            "test.yaml:2: YAML syntax error: mapping values are not allowed here",
            2,
        )

    def test_yamlTwoDocuments(self) -> None:
        """
        More than one YAML document in the file is an error.
        """
        self.assertConfigError(
            "config: {}\n---\nconfig: {}\n",
            "test.yaml:2: YAML syntax error: but found another document "
            "(expected a single document in the stream)",
            2,
        )

    def test_intNotCoerced(self) -> None:
        """
        A quoted number is a string, not an integer.
        """
        self.assertConfigError(
            "config:\n  api:\n    port: '8080'\n",
            "config.api.port: expected an integer, got string '8080'",
            3,
        )
        self.assertConfigError(
            _group("name: a\nvcpu: 1.5"), "config.host_groups[0].vcpu: expected an integer, got number 1.5", 4
        )
        self.assertConfigError(
            _group("name: a\ncount: true"),
            "config.host_groups[0].count: expected an integer, got boolean true",
            4,
        )

    def test_optionalKeepsTypes(self) -> None:
        """
        Keys that may be left out are still type-checked when given.
        """
        self.assertConfigError(
            _group("name: a\nram_gb: '1'"),
            "config.host_groups[0].ram_gb: expected an integer, got string '1'",
            4,
        )
        self.assertConfigError(
            _group("name: a\nnetwork: 5"),
            "config.host_groups[0].network: expected a mapping, got integer 5",
            4,
        )

    def test_boolMustBeYamlBool(self) -> None:
        """
        A boolean must be a YAML boolean, not a string or a number.
        """
        self.assertConfigError(
            "config:\n  graceful_shutdown: 'true'\n",
            "config.graceful_shutdown: expected true or false, got string 'true'",
            2,
        )
        self.assertConfigError(
            "config:\n  api:\n    auth:\n      enabled: 1\n",
            "config.api.auth.enabled: expected true or false, got integer 1",
            4,
        )
        self.assertConfigError(
            _group("name: a\npersistent: null"),
            "config.host_groups[0].persistent: expected true or false, got null",
            4,
        )

    def test_stringExpected(self) -> None:
        """
        A number where a string is expected is refused, not converted.
        """
        self.assertConfigError(
            "config:\n  image: 2024\n", "config.image: expected a string, got integer 2024", 2
        )
        self.assertConfigError(
            _group("name: 12"), "config.host_groups[0].name: expected a string, got integer 12", 3
        )

    def test_containerTypes(self) -> None:
        """
        A mapping where a list is expected, and the reverse, are refused.
        """
        self.assertConfigError(
            "config:\n  host_groups:\n    name: a\n", "config.host_groups: expected a list, got a mapping", 2
        )
        self.assertConfigError("config:\n  api: [1]\n", "config.api: expected a mapping, got a list", 2)
        self.assertConfigError(
            "config:\n  host_groups:\n    - demo\n",
            "config.host_groups[0]: expected a mapping, got string 'demo'",
            3,
        )

    def test_badSizes(self) -> None:
        """
        Sizes that do not parse, are fractional bytes, negative, zero or not
        sector multiples are refused.
        """
        self.assertConfigError(
            "config:\n  host_groups:\n    - name: a\n    - name: b\n      storage_size: 2X\n",
            "config.host_groups[1].storage_size: bad size '2X' (expected e.g. 2G, 512M or bytes)",
            5,
        )
        self.assertConfigError(
            _group("name: a\nstorage_size: 0.1K"),
            "config.host_groups[0].storage_size: bad size '0.1K' (not a whole number of bytes)",
            4,
        )
        self.assertConfigError(
            _group("name: a\nstorage_size: -1"),
            "config.host_groups[0].storage_size: bad size -1 (must not be negative)",
            4,
        )
        self.assertConfigError(
            _group("name: a\nstorage_size: [2G]"),
            "config.host_groups[0].storage_size: expected a size (expected e.g. 2G, 512M or bytes), got a list",
            4,
        )
        for size in ("0", "1000"):
            self.assertConfigError(
                _group(f"name: a\nstorage_size: {size}"),
                f"config.host_groups[0].storage_size: storage_size {size} must be a positive multiple of 512 bytes",
                4,
            )

    def test_badCidrs(self) -> None:
        """
        Ranges and allow/drop entries must be IPv4 networks written with a
        prefix length and no host bits.
        """
        network = "name: a\nnetwork:\n  mode: isolated\n  range: 10.0.0.0/22\n"
        cases = [
            (
                "  allow: [10.0.0.1/8]",
                "allow[0]: bad CIDR '10.0.0.1/8' (host bits set; did you mean 10.0.0.0/8?)",
            ),
            ("  drop: [10.0.0.0/8, nonsense/8]", "drop[1]: bad CIDR 'nonsense/8' (expected e.g. 10.0.0.0/8)"),
            ("  drop: [10.0.0.0]", "drop[0]: bad CIDR '10.0.0.0' (missing prefix length, e.g. 10.0.0.0/32)"),
            ("  allow: ['fd00::/8']", "allow[0]: bad CIDR 'fd00::/8' (only IPv4 is supported)"),
            ("  allow: [10]", "allow[0]: expected a CIDR such as 10.0.0.0/8, got integer 10"),
            ("  allow: 10.0.0.0/8", "allow: expected a list, got string '10.0.0.0/8'"),
            ("  allow: [10.0.0.0/33]", "allow[0]: bad CIDR '10.0.0.0/33' (expected e.g. 10.0.0.0/8)"),
        ]
        for line, message in cases:
            self.assertConfigError(_group(network + line), f"config.host_groups[0].network.{message}", 7)
        self.assertConfigError(
            _group("name: a\nnetwork:\n  mode: isolated\n  range: 10.77.0.1/22"),
            "config.host_groups[0].network.range: bad CIDR '10.77.0.1/22' (host bits set; did you mean 10.77.0.0/22?)",
            6,
        )

    def test_ramTwice(self) -> None:
        """
        Memory may be given in one unit only.
        """
        self.assertConfigError(
            _group("name: a\nram_gb: 1\nram_mb: 512"),
            "config.host_groups[0].ram_mb: give only one of ram_gb, ram_mb, ram_bytes (found ram_gb, ram_mb)",
            5,
        )

    def test_ramNotPositive(self) -> None:
        """
        ``ram_gb: 0`` (or any memory of zero or less) is refused.
        """
        self.assertConfigError(
            _group("name: a\nram_gb: 0"), "config.host_groups[0].ram_gb: ram_gb 0 must be positive", 4
        )
        self.assertConfigError(
            _group("name: a\nram_mb: -5"), "config.host_groups[0].ram_mb: ram_mb -5 must be positive", 4
        )

    def test_ramWholeMiB(self) -> None:
        """
        ``ram_bytes`` must be a whole number of MiB, which QEMU's ``-m`` takes.
        """
        self.assertConfigError(
            _group("name: a\nram_bytes: 1000000"),
            "config.host_groups[0].ram_bytes: ram_bytes 1000000 must be a whole number of MiB",
            4,
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

    def test_badGroupNames(self) -> None:
        """
        Group names must be usable as hostname prefixes.
        """
        rule = (
            "expected 1-20 characters: lowercase letters, digits and '-', "
            "starting with a letter and not ending with '-'"
        )
        for name in ("Demo", "1demo", "demo-", "de_mo", "de.mo", "''", "abcdefghijklmnopqrstu"):
            shown = "''" if name == "''" else repr(name)
            self.assertConfigError(
                _group(f"name: {name}"), f"config.host_groups[0].name: bad group name {shown} ({rule})", 3
            )

    @given(st.from_regex(r"[a-z](?:[a-z0-9-]{0,18}[a-z0-9])?", fullmatch=True))
    def test_goodGroupNames(self, name: str) -> None:
        """
        Every name of lowercase letters, digits and inner dashes, starting with
        a letter and at most 20 characters long, is accepted.
        """
        self.assertEqual(_parse(_group(f"name: '{name}'")).host_groups[0].name, name)

    def test_unknownChoices(self) -> None:
        """
        Values outside the known choices are refused, listing the choices.
        """
        self.assertConfigError(
            "config:\n  hypervisor: firecracker\n",
            "config.hypervisor: unknown hypervisor 'firecracker' (expected one of: qemu)",
            2,
        )
        self.assertConfigError(
            _group("name: a\nhypervisor: xen"),
            "config.host_groups[0].hypervisor: unknown hypervisor 'xen' (expected one of: qemu)",
            4,
        )
        self.assertConfigError(
            "config:\n  accel: hvf\n",
            "config.accel: unknown accel 'hvf' (expected one of: auto, kvm, tcg)",
            2,
        )
        self.assertConfigError(
            _group("name: a\nstorage: zfs"),
            "config.host_groups[0].storage: unknown storage 'zfs' (expected one of: image)",
            4,
        )
        self.assertConfigError(
            _group("name: a\nnetwork: {mode: nat}"),
            "config.host_groups[0].network.mode: unknown network mode 'nat' (expected one of: isolated, bridge)",
            4,
        )

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

    def test_emptyStrings(self) -> None:
        """
        Directories and image names must not be empty.
        """
        self.assertConfigError("config:\n  state_dir: ''\n", "config.state_dir: must not be empty", 2)
        self.assertConfigError("config:\n  image_dir: ' '\n", "config.image_dir: must not be empty", 2)
        self.assertConfigError(
            _group("name: a\nimage: ''"), "config.host_groups[0].image: must not be empty", 4
        )

    def test_countNegative(self) -> None:
        """
        ``count`` must not be negative.
        """
        self.assertConfigError(
            _group("name: a\ncount: -1"), "config.host_groups[0].count: count -1 must not be negative", 4
        )

    def test_vcpuBelowOne(self) -> None:
        """
        ``vcpu`` must be at least 1.
        """
        self.assertConfigError(
            _group("name: a\nvcpu: 0"), "config.host_groups[0].vcpu: vcpu 0 must be at least 1", 4
        )

    def test_missingName(self) -> None:
        """
        A group needs a name.
        """
        self.assertConfigError(_group("count: 1"), "config.host_groups[0].name: required key missing", 3)

    def test_missingMode(self) -> None:
        """
        A network section needs a mode.
        """
        self.assertConfigError(
            _group("name: a\nnetwork:\n  range: 10.0.0.0/22"),
            "config.host_groups[0].network.mode: required key missing",
            4,
        )

    def test_overlappingRanges(self) -> None:
        """
        Two groups whose ranges overlap are refused, naming both.
        """
        self.assertConfigError(
            "config:\n  host_groups:\n"
            "    - {name: a, network: {mode: isolated, range: 10.77.0.0/16}}\n"
            "    - {name: b, network: {mode: isolated, range: 10.77.4.0/22}}\n",
            "config.host_groups[1].network.range: range 10.77.4.0/22 overlaps "
            "config.host_groups[0].network.range (10.77.0.0/16)",
            4,
        )

    def test_isolatedRules(self) -> None:
        """
        Isolated mode needs a range of at least a /30, no more VMs than slots,
        and no bridge settings.
        """
        prefix = "config.host_groups[0]"
        self.assertConfigError(
            _group("name: a\nnetwork: {mode: isolated}"),
            f"{prefix}.network.range: required for mode isolated",
            4,
        )
        self.assertConfigError(
            _group("name: a\nnetwork: {mode: isolated, range: 10.0.0.0/31}"),
            f"{prefix}.network.range: range 10.0.0.0/31 is too small "
            "(isolated mode gives each VM a /30, so use at most /30)",
            4,
        )
        self.assertConfigError(
            _group("name: a\ncount: 257\nnetwork: {mode: isolated, range: 10.77.0.0/22}"),
            f"{prefix}.count: count 257 exceeds the 256 VM slots of network.range 10.77.0.0/22",
            4,
        )
        self.assertConfigError(
            _group("name: a\nnetwork: {mode: isolated, range: 10.77.0.0/22, bridge: br0}"),
            f"{prefix}.network.bridge: only allowed with mode bridge",
            4,
        )

    def test_bridgeRules(self) -> None:
        """
        Bridge mode needs a valid bridge name, takes no allow/drop lists, and
        its range must lie in the gateway's network, given as a host address.
        """
        prefix = "config.host_groups[0].network"
        self.assertConfigError(
            _group("name: a\nnetwork: {mode: bridge}"), f"{prefix}.bridge: required for mode bridge", 4
        )
        self.assertConfigError(
            _group("name: a\nnetwork: {mode: bridge, bridge: a-very-long-bridge}"),
            f"{prefix}.bridge: bad bridge name 'a-very-long-bridge' (expected 1-15 letters, digits, '_', '.' or '-')",
            4,
        )
        self.assertConfigError(
            _group("name: a\nnetwork: {mode: bridge, bridge: br0, drop: [10.0.0.0/8]}"),
            f"{prefix}.drop: only allowed with mode isolated",
            4,
        )
        self.assertConfigError(
            _group(
                "name: a\nnetwork: {mode: bridge, bridge: br0, range: 10.0.0.0/24, gateway: 192.168.137.1/24}"
            ),
            f"{prefix}.range: range 10.0.0.0/24 is outside the gateway's network 192.168.137.0/24",
            4,
        )
        self.assertConfigError(
            _group("name: a\nnetwork: {mode: bridge, bridge: br0, gateway: 192.168.137.0/24}"),
            f"{prefix}.gateway: bad address '192.168.137.0/24' (not a host address of 192.168.137.0/24)",
            4,
        )


class SizeTests(SynchronousTestCase):
    """
    Tests for :func:`parse_size` and :func:`format_size`.
    """

    def test_examples(self) -> None:
        """
        Units are binary whatever the spelling; bare numbers are bytes.
        """
        examples = {
            "512M": 512 * MiB,
            "2G": 2 * GiB,
            "2g": 2 * GiB,
            "2GB": 2 * GiB,
            "2GiB": 2 * GiB,
            "1.5G": 3 * GiB // 2,
            "1T": 1024 * GiB,
            "4k": 4096,
            "4096": 4096,
            "4096B": 4096,
            " 2 G ": 2 * GiB,
            "0": 0,
        }
        for text, size in examples.items():
            self.assertEqual(parse_size(text), size, text)

    def test_errors(self) -> None:
        """
        Unknown units, signs, missing digits and fractions of a byte are refused.
        """
        for text in ("2X", "-1G", "G", "", "1.G", "2Gb", "2iB", "1e9", "0x10"):
            error = self.assertRaises(ValueError, parse_size, text)
            self.assertEqual(str(error), f"bad size {text!r} (expected e.g. 2G, 512M or bytes)")
        error = self.assertRaises(ValueError, parse_size, "1.5")
        self.assertEqual(str(error), "bad size '1.5' (not a whole number of bytes)")

    def test_format(self) -> None:
        """
        Sizes are written with the largest unit that divides them.
        """
        self.assertEqual(
            [format_size(size) for size in (0, 1, 1024, 1536, 512 * MiB, 2 * GiB, 3 * 1024 * GiB)],
            ["0", "1", "1K", "1536", "512M", "2G", "3T"],
        )
        self.assertRaises(ValueError, format_size, -1)

    @given(st.integers(min_value=0, max_value=2**64))
    def test_roundTrip(self, size: int) -> None:
        """
        Formatting a size and parsing it back gives the same number of bytes.
        """
        self.assertEqual(parse_size(format_size(size)), size)

    @given(
        st.integers(min_value=0, max_value=10**6),
        st.sampled_from([("K", 1024), ("M", MiB), ("G", GiB), ("T", 1024 * GiB)]),
        st.sampled_from(["", "B", "iB"]),
        st.booleans(),
    )
    def test_unitSpellings(self, number: int, unit: tuple[str, int], suffix: str, lower: bool) -> None:
        """
        ``<n><unit>``, ``<n><unit>B`` and ``<n><unit>iB`` in either case all
        mean ``n`` binary units.
        """
        letter, multiplier = unit
        text = f"{number}{letter.lower() if lower else letter}{suffix}"
        self.assertEqual(parse_size(text), number * multiplier)


class StatsIntervalTests(SynchronousTestCase):
    """``stats_interval``: how often the nodes' statistics are sampled for ``/metrics``."""

    def test_default_and_given(self) -> None:
        """15 seconds unless given; 0 turns the sampling off."""
        self.assertEqual(_parse("config: {}\n").stats_interval, 15.0)
        self.assertEqual(_parse("config: {stats_interval: 2.5}\n").stats_interval, 2.5)
        self.assertEqual(_parse("config: {stats_interval: 0}\n").stats_interval, 0)

    def test_out_of_range(self) -> None:
        for value in ("0.5", "-1", "3601"):
            with self.assertRaisesRegex(ConfigError, "stats_interval"):
                _parse(f"config: {{stats_interval: {value}}}\n")


class WarmTests(SynchronousTestCase):
    """``warm`` per group, and the templates' tmpfs directory and budget."""

    def test_defaults(self) -> None:
        """Groups boot cold unless they say ``warm: true``; templates use up to 2 GiB of /dev/shm."""
        config = _parse("config: {host_groups: [{name: a}, {name: b, warm: true}]}\n")
        self.assertEqual([group.warm for group in config.host_groups], [False, True])
        self.assertEqual(config.templates_tmpfs_dir, "/dev/shm")
        self.assertEqual(config.templates_tmpfs_budget, 2 * 1024**3)

    def test_given(self) -> None:
        config = _parse("config: {templates_tmpfs_dir: /run/t, templates_tmpfs_budget: 512MiB}\n")
        self.assertEqual((config.templates_tmpfs_dir, config.templates_tmpfs_budget), ("/run/t", 512 * 1024**2))

    def test_bad(self) -> None:
        for text in ("{templates_tmpfs_dir: ''}", "{templates_tmpfs_budget: lots}", "{host_groups: [{name: a, warm: 3}]}"):
            with self.assertRaises(ConfigError):
                _parse(f"config: {text}\n")


class WarmSpareTests(SynchronousTestCase):
    """``warm_spare`` per group: a boolean (1 or 0) or a count of spare VMs up to the bound."""

    def test_default_and_given(self) -> None:
        config = _parse("config: {host_groups: [{name: a}, {name: b, warm_spare: true}, {name: c, warm_spare: false},"
                        " {name: d, warm_spare: 4}, {name: e, warm_spare: 0}, {name: f, warm_spare: 8}]}\n")
        self.assertEqual([group.warm_spare for group in config.host_groups], [1, 1, 0, 4, 0, 8])

    def test_bad(self) -> None:
        for value, message in (("9", "must be from 0 to 8"), ("-1", "must be from 0 to 8"),
                               ("'4'", "expected a boolean or a count"), ("1.5", "expected a boolean or a count")):
            with self.assertRaisesRegex(ConfigError, rf"host_groups\[0\]\.warm_spare: .*{message}"):
                _parse(f"config: {{host_groups: [{{name: a, warm_spare: {value}}}]}}\n")


class ForkMemoryTests(SynchronousTestCase):
    """``fork_memory`` per group: ``copy`` unless ``file`` is asked for; ``file`` not with ``warm``."""

    def test_default_and_given(self) -> None:
        config = _parse("config: {host_groups: [{name: a}, {name: b, fork_memory: file}, {name: c, fork_memory: copy}]}\n")
        self.assertEqual([group.fork_memory for group in config.host_groups], ["copy", "file", "copy"])

    def test_bad(self) -> None:
        with self.assertRaisesRegex(ConfigError, "unknown fork_memory 'shared'"):
            _parse("config: {host_groups: [{name: a, fork_memory: shared}]}\n")
        with self.assertRaisesRegex(ConfigError, "cannot be used with warm"):
            _parse("config: {host_groups: [{name: a, fork_memory: file, warm: true}]}\n")


class TcgTbSizeTests(SynchronousTestCase):
    """``tcg_tb_size_mb``: the translation cache of each VM under TCG."""

    def test_default(self) -> None:
        """64 MiB unless said otherwise."""
        self.assertEqual(_parse("config: {}\n").tcg_tb_size_mb, 64)

    def test_given(self) -> None:
        """0 (QEMU's default) and a size in MiB are taken."""
        self.assertEqual(_parse("config: {tcg_tb_size_mb: 0}\n").tcg_tb_size_mb, 0)
        self.assertEqual(_parse("config: {tcg_tb_size_mb: 128}\n").tcg_tb_size_mb, 128)

    def test_bad(self) -> None:
        """Negative, too large or not an integer: one line naming the key."""
        for text in ("-1", "5000", "'64M'"):
            error = self.assertRaises(ConfigError, _parse, f"config: {{tcg_tb_size_mb: {text}}}\n")
            self.assertTrue(str(error).startswith("config.tcg_tb_size_mb: "), str(error))


class ConsoleLogSizeTests(SynchronousTestCase):
    """``console_log_size``: how much of each node's serial console is kept on disk."""

    def test_default(self) -> None:
        """4 MiB unless said otherwise."""
        self.assertEqual(_parse("config: {}\n").console_log_size, 4 * 1024 * 1024)

    def test_given(self) -> None:
        """A size with a unit or in bytes, from 64K to 1G."""
        self.assertEqual(_parse("config: {console_log_size: 64K}\n").console_log_size, 64 * 1024)
        self.assertEqual(_parse("config: {console_log_size: 1G}\n").console_log_size, 1024**3)
        self.assertEqual(_parse("config: {console_log_size: 1048576}\n").console_log_size, 1024 * 1024)

    def test_bad(self) -> None:
        """Too small, too large, negative or not a size: one line naming the key."""
        for text in ("1K", "65535", "2G", "-1", "lots", "true"):
            error = self.assertRaises(ConfigError, _parse, f"config: {{console_log_size: {text}}}\n")
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
        config = _parse("config: {}\n")
        self.assertEqual((config.codehost_url, config.codehost_timeout), ("https://github.com", 5.0))

    def test_given(self) -> None:
        """
        Another site (its final ``/`` dropped, a path kept) and a timeout in
        seconds, integer or not.
        """
        config = _parse("config:\n  codehost_url: http://127.0.0.1:8000/git/\n  codehost_timeout: 2.5\n")
        self.assertEqual((config.codehost_url, config.codehost_timeout), ("http://127.0.0.1:8000/git", 2.5))
        self.assertEqual(_parse("config:\n  codehost_timeout: 10\n").codehost_timeout, 10.0)

    def test_disabled(self) -> None:
        """
        An empty value or ``null`` turns the code host off.
        """
        for value in ('""', "null", "", "'  '"):
            self.assertIsNone(_parse(f"config:\n  codehost_url: {value}\n").codehost_url, value)

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
            error = self.assertRaises(ConfigError, _parse, f"config:\n  state_dir: /tmp/x\n  {line}\n")
            self.assertEqual((str(error), error.line), (f"config.{key}: {message}", 3))
            self.assertNotIn("s3cret", str(error))


class GpuTests(SynchronousTestCase):
    """``host_groups[].gpus``: the PCI addresses of a group's GPUs."""

    def test_gpus(self) -> None:
        """Addresses are kept in order, short ones made full and lower case; none by default."""
        config = _parse(_group("""
            name: gpu
            gpus: ["01:00.0", "0000:AF:00.0"]
        """))
        self.assertEqual(config.host_groups[0].gpus, ("0000:01:00.0", "0000:af:00.0"))
        self.assertEqual(_parse(_group("name: demo")).host_groups[0].gpus, ())

    def test_bad_address(self) -> None:
        """A GPU that is not a PCI address is refused at its key path and line."""
        error = self.assertRaises(ConfigError, _parse, _group("""
            name: gpu
            gpus:
              - "01:00.0"
              - gpu0
        """))
        self.assertEqual(error.path, "config.host_groups[0].gpus[1]")
        self.assertIn("'gpu0' is not a PCI address", error.message)
        self.assertEqual(error.line, 6)

    def test_duplicate(self) -> None:
        """The same GPU twice in a group (in any spelling) is refused."""
        error = self.assertRaises(ConfigError, _parse, _group("""
            name: gpu
            gpus: ["01:00.0", "0000:01:00.0"]
        """))
        self.assertEqual(str(error), "config.host_groups[0].gpus[1]: duplicate GPU 0000:01:00.0")

    def test_unquoted(self) -> None:
        """An unquoted address that YAML reads as a number is refused with a hint to quote it."""
        error = self.assertRaises(ConfigError, _parse, _group("""
            name: gpu
            gpus: [0000:01:00.0]
        """))
        self.assertEqual(error.path, "config.host_groups[0].gpus[0]")
        self.assertIn("in quotes", error.message)


class IdleSuspendTests(SynchronousTestCase):
    """``idle_suspend`` per group: how long a node may be idle before it is suspended."""

    def test_default_and_given(self) -> None:
        """Off unless given (or null); a Go duration in seconds otherwise."""
        config = _parse("config: {host_groups: [{name: a}, {name: b, idle_suspend: 10m}, "
                        "{name: c, idle_suspend: 1m30s}, {name: d, idle_suspend: null}]}\n")
        self.assertEqual([group.idle_suspend for group in config.host_groups], [None, 600.0, 90.0, None])

    def test_bad(self) -> None:
        """Not a duration, shorter than 1 s, or not a string: one line naming the key."""
        for value in ("abc", "0s", "500ms", "-5m", "10"):
            with self.assertRaisesRegex(ConfigError, r"config\.host_groups\[0\]\.idle_suspend"):
                _parse(f"config: {{host_groups: [{{name: a, idle_suspend: {value}}}]}}\n")


class GuestAslrTests(SynchronousTestCase):
    """``guest_aslr`` per group: whether the guests randomize their address spaces."""

    def test_default_and_given(self) -> None:
        """On unless a group says ``guest_aslr: false``."""
        config = _parse("config: {host_groups: [{name: a}, {name: b, guest_aslr: false}, {name: c, guest_aslr: true}]}\n")
        self.assertEqual([group.guest_aslr for group in config.host_groups], [True, False, True])

    def test_bad(self) -> None:
        """Only a YAML boolean."""
        for value in ("0", "off2", "'no'"):
            with self.assertRaisesRegex(ConfigError, "guest_aslr"):
                _parse(f"config: {{host_groups: [{{name: a, guest_aslr: {value}}}]}}\n")


class LimitsTests(SynchronousTestCase):
    """``limits``: the buffer budget, background execs per node, the API's connections."""

    def test_defaults(self) -> None:
        """No buffer budget given (the daemon sizes it from the RAM), 64 execs per node, 1024 and 256 connections."""
        from vmservice.config import LimitsConfig

        limits = _parse("config: {}\n").limits
        self.assertEqual(limits, LimitsConfig())
        self.assertEqual((limits.buffer_budget, limits.background_execs_per_node, limits.max_connections,
                          limits.max_connections_per_peer), (None, 64, 1024, 256))

    def test_given(self) -> None:
        """Each key as given; the budget is a size."""
        limits = _parse("config:\n  limits: {buffer_budget: 4M, background_execs_per_node: 3, max_connections: 8,"
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
                _parse(f"config:\n  limits: {{{text}}}\n")


class TokenFileAndAuditTests(SynchronousTestCase):
    """``config.api.auth.token_file`` and ``config.audit``."""

    def test_token_file(self) -> None:
        """token_file is an absolute path (none by default: <state_dir>/auth/token); a relative one is refused."""
        self.assertIsNone(_parse("config: {}\n").api.auth.token_file)
        api = _parse("config:\n  api:\n    auth: {enabled: true, token_file: /etc/vmservice/tokens}\n").api
        self.assertEqual(api.auth.token_file, "/etc/vmservice/tokens")
        error = self.assertRaises(ConfigError, _parse, "config:\n  api:\n    auth: {token_file: tokens}\n")
        self.assertEqual(error.path, "config.api.auth.token_file")

    def test_audit(self) -> None:
        """The audit log is on by default (10M, 5 kept); its path absolute, its size at least 64K, keep 0-100."""
        self.assertEqual(_parse("config: {}\n").audit, AuditConfig())
        self.assertEqual((AuditConfig().enabled, AuditConfig().max_size, AuditConfig().keep), (True, 10 * MiB, 5))
        audit = _parse("config:\n  audit: {enabled: false, path: /var/log/vms/audit.log, max_size: 1M, keep: 0}\n").audit
        self.assertEqual(audit, AuditConfig(enabled=False, path="/var/log/vms/audit.log", max_size=MiB, keep=0))
        for body, key in (("{path: audit.log}", "path"), ("{max_size: 1K}", "max_size"), ("{keep: 101}", "keep"),
                          ("{keep: -1}", "keep")):
            error = self.assertRaises(ConfigError, _parse, f"config:\n  audit: {body}\n")
            self.assertEqual(error.path, f"config.audit.{key}", body)
