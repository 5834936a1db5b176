# -*- test-case-name: tests.config.test_checks -*-
"""
:class:`Checks`: what the resolvers of the configuration share (a problem
located at its key and line, a value not empty, one of a list).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import yaml

from ..structuring import Path, format_path
from .error import ConfigError
from .yaml_source import line_of


@attrs.define
class Checks:
    """
    What every resolver of the configuration shares: a problem at a key
    path, as a :class:`ConfigError` that knows the line of the key at fault,
    and the checks of a value that every section makes.

    :ivar source: The file name, for :attr:`ConfigError.source`.
    :ivar root: The YAML node tree, for line numbers.
    :ivar environ: The environment, for the ``image_dir`` default.
    """

    source: str
    root: yaml.Node | None
    environ: Mapping[str, str]

    def error(self, parts: Path, message: str) -> ConfigError:
        """The problem ``message`` at the key path ``parts``."""
        return ConfigError(format_path(parts), message, source=self.source, line=line_of(self.root, parts))

    def nonempty(self, value: str, parts: Path) -> str:
        """``value`` unless it is empty or white space."""
        if not value.strip():
            raise self.error(parts, "must not be empty")
        return value

    def one_of(self, value: str, allowed: tuple[str, ...], what: str, parts: Path) -> str:
        """``value`` if it is one of ``allowed`` (a ``what``)."""
        if value not in allowed:
            raise self.error(parts, f"unknown {what} {value!r} (expected one of: {', '.join(allowed)})")
        return value
