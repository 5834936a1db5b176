"""
Fakes for the tests of the image store and builder: an image's directory with dummy files
(:func:`fake_image`) and a command runner that refuses to run anything (:func:`refuse`).
"""

from __future__ import annotations

import json
import os
from typing import Sequence


def fake_image(directory: str, manifest: object = None) -> None:
    """Write the four files of an image (with dummy content) into ``directory``."""
    os.makedirs(directory)
    for name in ("vmlinux", "initrd.img", "rootfs.ext4"):
        with open(os.path.join(directory, name), "wb") as stream:
            stream.write(name.encode())
    with open(os.path.join(directory, "manifest.json"), "w") as stream:
        json.dump({"name": "default", "recipe_hash": "0123456789abcdef"} if manifest is None else manifest, stream)


def refuse(argv: Sequence[str], cwd: str | None) -> str:
    """A runner for builds that must not run anything."""
    raise AssertionError(f"unexpected command {argv}")
