# -*- test-case-name: tests.config.test_load -*-
"""
Loading the configuration: :func:`load_config` reads the file,
:func:`parse_config` its text, in two steps (see :mod:`vmservice.config`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..structuring import format_path, structure_errors
from .document import ConfigDocument
from .error import ConfigError
from .model import Config
from .resolve import Resolver
from .values import CONVERTER
from .yaml_source import compose, find_duplicate_key, line_of


def parse_config(text: str, source: str = "<config>", environ: Mapping[str, str] | None = None) -> Config:
    """
    Parse and check configuration text.

    :param text: The YAML text, with a ``config:`` root.
    :param source: Where the text came from, for error locations.
    :param environ: The environment to read ``VMSERVICE_IMAGE_DIR`` from;
        ``os.environ`` when ``None`` (tests pass their own).
    :return: The fully resolved configuration.
    :raises ConfigError: On the first problem, in file order.
    """
    node, data = compose(text, source)
    duplicate = find_duplicate_key(node, ())
    if duplicate is not None:
        parts, key_node = duplicate
        raise ConfigError(
            format_path(parts), "duplicate key", source=source, line=key_node.start_mark.line + 1
        )
    resolver = Resolver(source=source, root=node, environ=os.environ if environ is None else environ)
    if not isinstance(data, dict) or "config" not in data:
        raise resolver.error(
            ("config",), "missing root key (the file must have a top-level 'config:' mapping)"
        )
    extra = [key for key in data if key != "config"]
    if extra:
        raise resolver.error((str(extra[0]),), "unknown key (everything belongs under 'config:')")
    try:
        document = CONVERTER.structure(data["config"], ConfigDocument)
    except Exception as error:
        problems = list(structure_errors(error, ("config",)))
        if not problems:  # pragma: no cover - cattrs always says something
            raise resolver.error(("config",), f"invalid value ({error})") from None
        located = [
            (line_of(node, parts) or 1 << 30, order, parts, message)
            for order, (parts, message) in enumerate(problems)
        ]
        _, _, parts, message = min(located)
        raise resolver.error(parts, message) from None
    return resolver.config(document)


def load_config(path: str, environ: Mapping[str, str] | None = None) -> Config:
    """
    Read, parse and check the configuration file at ``path``.

    :param path: The YAML file.
    :param environ: As for :func:`parse_config`.
    :raises ConfigError: If the file cannot be read or is not valid; a file
        problem names the file, a value problem the key path.
    """
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except OSError as error:
        raise ConfigError(path, f"cannot read: {error.strerror or error}", source=path) from None
    except UnicodeDecodeError as error:
        raise ConfigError(path, f"cannot read: not UTF-8 ({error.reason})", source=path) from None
    return parse_config(text, source=path, environ=environ)
