# -*- test-case-name: tests.config.test_yaml_source -*-
"""
The YAML side of a configuration: its text parsed into both data and a
node tree, so that a key path can be turned into the line of the file it
is on; keys given twice in one mapping found.
"""

from __future__ import annotations

import yaml

from ..structuring import Path
from .error import ConfigError


def compose(text: str, source: str) -> tuple[yaml.Node | None, object]:
    """
    Parse YAML into both its node tree (for line numbers) and its data.

    :raises ConfigError: On a syntax error, naming ``source`` and the line.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        what = error.problem or "unreadable"
        if error.context:
            what += f" ({error.context})"
        raise ConfigError(
            f"{source}:{line}" if line is not None else source,
            f"YAML syntax error: {what}",
            source=source,
            line=line,
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(source, f"YAML error: {error}", source=source) from None
    finally:
        loader.dispose()
    return node, data


def find_duplicate_key(node: yaml.Node | None, parts: Path) -> tuple[Path, yaml.Node] | None:
    """
    The first key that occurs twice in one mapping: PyYAML silently keeps the
    last, which hides a typo'd edit, so we refuse it.
    """
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
                continue
            if key.value in seen:
                return (*parts, key.value), key
            seen.add(key.value)
            found = find_duplicate_key(value, (*parts, key.value))
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found = find_duplicate_key(item, (*parts, index))
            if found is not None:
                return found
    return None


def line_of(node: yaml.Node | None, parts: Path) -> int | None:
    """
    The 1-based line of the key at ``parts``, or of the deepest enclosing
    value that exists (a missing key is reported where its mapping starts).
    """
    if node is None:
        return None
    mark = node.start_mark
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    mark, node = key.start_mark, value
                    break
            else:
                break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            mark = node.start_mark
        else:
            break
    return mark.line + 1
