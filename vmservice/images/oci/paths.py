# -*- test-case-name: tests.images.oci.test_paths -*-
"""
Paths inside a root tree on the host, resolved as they would be with the tree as ``/``
(:func:`resolve_inside`): symbolic links met on the way, absolute ones included, never lead out of it.
"""

from __future__ import annotations

import os

from .errors import OciError

#: The most symbolic links followed in resolving one path (in a tree or in a tar file).
SYMLINK_HOPS = 40


def resolve_inside(root: str, relative: str, follow_last: bool = True) -> str:
    """
    The host path of ``relative`` in the tree ``root``, every symbolic link on the way resolved as it
    would be with ``root`` as ``/``: absolute targets start again at ``root``, and ``..`` stops at it.
    The result is always inside ``root``.

    :param follow_last: resolve the last component too when it is a symbolic link.
    """
    pending = [part for part in relative.split("/") if part not in ("", ".")]
    pending.reverse()
    resolved: list[str] = []
    hops = 0
    while pending:
        part = pending.pop()
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = os.path.join(root, *resolved, part)
        if os.path.islink(candidate) and (pending or follow_last):
            hops += 1
            if hops > SYMLINK_HOPS:
                raise OciError(f"too many symbolic links resolving {relative}")
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            pending.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
            continue
        resolved.append(part)
    return os.path.join(root, *resolved)


__all__ = ["SYMLINK_HOPS", "resolve_inside"]
