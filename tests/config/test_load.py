# -*- test-case-name: tests.config.test_load -*-
"""
Tests for load_config and parse_config (:mod:`vmservice.config.load`): the file read, step 1 (the shape, strict) and the first problem told.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.config.parsing import EXAMPLE, ConfigErrorCase, GiB, MiB, group_text
from vmservice.config import DEFAULT_IMAGE_DIR, ApiConfig, AuthConfig, Config, ConfigError, E2bConfig, HostGroupConfig, load_config


class ExampleTests(SynchronousTestCase):
    """
    The example shipped in ``conf/vmservice.yaml``.
    """

    def test_loads(self) -> None:
        """
        The example loads into the configuration the documentation promises:
        TCP on 127.0.0.1:8080 without auth, one empty ``demo`` group whose nodes are clones, and the
        E2B API on 127.0.0.1:49982 serving ``base`` from a warm ``e2b`` group of the ``e2b`` image.
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
                    HostGroupConfig(name="e2b", count=0, vcpu=1, ram_bytes=256 * MiB, storage_size=2 * GiB, warm=True,
                                    image="e2b"),
                ),
                e2b=E2bConfig(bind_address="127.0.0.1", port=49982, templates=(("base", "e2b"),)),
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


class ErrorTests(ConfigErrorCase):
    """Every kind of mistake gives one ``ConfigError`` with the key path, a message and the line of the key."""

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
        self.assertConfigError(group_text("name: a\ncpus: 2"), "config.host_groups[0].cpus: unknown key", 4)
        self.assertConfigError(
            group_text("name: a\nnetwork:\n  mode: isolated\n  ranges: 10.0.0.0/22"),
            "config.host_groups[0].network.ranges: unknown key",
            6,
        )

    def test_firstErrorInFileOrder(self) -> None:
        """
        With several mistakes, the one nearest the top of the file is reported.
        """
        text = "config:\n  accel: 1\n  api:\n    port: x\n  zzz: 1\n  aaa: 2\n"
        self.assertConfigError(text, "config.accel: expected a string, got integer 1", 2)

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
            group_text("name: a\nvcpu: 1.5"), "config.host_groups[0].vcpu: expected an integer, got number 1.5", 4
        )
        self.assertConfigError(
            group_text("name: a\ncount: true"),
            "config.host_groups[0].count: expected an integer, got boolean true",
            4,
        )

    def test_optionalKeepsTypes(self) -> None:
        """
        Keys that may be left out are still type-checked when given.
        """
        self.assertConfigError(
            group_text("name: a\nram_gb: '1'"),
            "config.host_groups[0].ram_gb: expected an integer, got string '1'",
            4,
        )
        self.assertConfigError(
            group_text("name: a\nnetwork: 5"),
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
            group_text("name: a\npersistent: null"),
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
            group_text("name: 12"), "config.host_groups[0].name: expected a string, got integer 12", 3
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

    def test_missingName(self) -> None:
        """
        A group needs a name.
        """
        self.assertConfigError(group_text("count: 1"), "config.host_groups[0].name: required key missing", 3)

    def test_missingMode(self) -> None:
        """
        A network section needs a mode.
        """
        self.assertConfigError(
            group_text("name: a\nnetwork:\n  range: 10.0.0.0/22"),
            "config.host_groups[0].network.mode: required key missing",
            4,
        )
