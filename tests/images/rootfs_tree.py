"""
Files written into a directory tree, their parent directories made, for the tests that build a root
file system from one (:mod:`tests.images.test_rootfs`, :mod:`tests.integration.images.test_rootfs`,
:mod:`tests.images.test_accounts`, :mod:`tests.images.test_postinst`), and read back.
"""

from __future__ import annotations

import os


def write(root: str, relative: str, data: bytes = b"") -> str:
    """Write ``data`` to ``relative`` under ``root``, its directories made; answer the file's path."""
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as stream:
        stream.write(data)
    return path


def read(root: str, relative: str) -> str:
    """The text of ``relative`` under ``root``."""
    with open(os.path.join(root, relative)) as stream:
        return stream.read()
