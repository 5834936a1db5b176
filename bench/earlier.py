"""
What the side-by-side benchmarks share: a daemon of this checkout or of an
earlier one (``--before DIR``, e.g. ``git archive``'s, or ``--before-ref
REF``, unpacked here), the earlier checkout's guest image built by its own
builder from its own recipe, and the spare VMs a daemon's log shows ready
and not taken.

The earlier checkout's guest code differs from this one's, so its daemon
boots an image of its own: :func:`prepare` unpacks ``REF`` once per commit
under :data:`TREES` and builds that tree's ``default`` image into
``--before-image-dir`` (:data:`IMAGE_DIR`; the build is skipped when the
recipe's hash is unchanged), with the Debian packages the shared image
directory already downloaded.  By hand::

    .venv/bin/python bench/earlier.py --ref 9690c00   # prints the tree and the image directory
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import IMAGE_DIR as SHARED_IMAGE_DIR, Daemon  # noqa: E402

#: The checkout the benchmarks belong to (the parent of ``bench/``): where ``--before-ref`` is looked up.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Where ``--before-ref`` trees are unpacked, one directory per commit.
TREES = "/var/tmp/vmservice-before"
#: Where the earlier checkout's images are built (never the shared directory this checkout's come from).
IMAGE_DIR = "/var/cache/vmservice/images-before"
#: The image builder's package cache in an image directory (``vmservice.images.build.DEB_CACHE``).
DEB_CACHE = ".debs"


@dataclass(frozen=True)
class Earlier:
    """
    An earlier checkout ready to run beside this one.

    :ivar path: its tree (its ``vmservice`` goes first on its daemon's path).
    :ivar image_dir: where its own ``default`` image was built.
    :ivar commit: the commit it was unpacked from (``None`` for a ``--before DIR`` of unknown origin).
    :ivar image: the build its ``default`` link names (``default-<recipe hash>``).
    """

    path: str
    image_dir: str
    commit: str | None
    image: str

    def record(self) -> dict[str, Any]:
        """What a results file says of the earlier code it measured."""
        return {"code": self.path, "commit": self.commit, "image_dir": self.image_dir, "image": self.image}


def add_options(parser: argparse.ArgumentParser) -> None:
    """The side-by-side options every such benchmark takes: ``--before``, ``--before-ref``, ``--before-image-dir``."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--before", metavar="DIR", help="an earlier checkout (git archive COMMIT | tar -x -C DIR) "
                                                       "whose daemon runs beside this one's, measured alike")
    which.add_argument("--before-ref", metavar="REF", help="as --before, of this repository's REF (e.g. 9690c00), "
                                                           f"unpacked once under {TREES}")
    parser.add_argument("--before-image-dir", metavar="DIR", default=IMAGE_DIR,
                        help=f"where the earlier checkout's own image is built and booted (default {IMAGE_DIR})")


def from_options(options: argparse.Namespace) -> Earlier | None:
    """The earlier checkout ``options`` name, prepared (see :func:`prepare`); ``None`` without one."""
    if options.before_ref:
        return prepare(unpack(options.before_ref), options.before_image_dir)
    if options.before:
        return prepare(os.path.abspath(options.before), options.before_image_dir)
    return None


def unpack(ref: str, trees: str = TREES) -> str:
    """The tree of this repository's ``ref`` under ``trees``, unpacked with ``git archive`` unless it is already."""
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", f"{ref}^{{commit}}"], check=True,
                            capture_output=True, text=True).stdout.strip()
    path = os.path.join(trees, commit)
    if os.path.isdir(path):
        return path
    partial = f"{path}.partial-{os.getpid()}"
    os.makedirs(partial)
    archive = subprocess.Popen(["git", "-C", ROOT, "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", partial], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {commit} failed")
    os.rename(partial, path)  # whole or not at all: a tree found is a complete one
    return path


def prepare(path: str, image_dir: str = IMAGE_DIR, name: str = "default") -> Earlier:
    """
    The checkout at ``path`` with its image ``name`` built by its own builder
    (``python -m vmservice.images build``, run with ``path`` first on the
    path) into ``image_dir``: up to date, the build is skipped.  Packages the
    shared image directory downloaded are copied into ``image_dir``'s cache
    first (the machine may reach no Debian mirror).
    """
    cache = os.path.join(image_dir, DEB_CACHE)
    os.makedirs(cache, exist_ok=True)
    shared = os.path.join(SHARED_IMAGE_DIR, DEB_CACHE)
    for entry in sorted(os.listdir(shared)) if os.path.isdir(shared) else []:
        if entry.endswith(".deb") and not os.path.exists(os.path.join(cache, entry)):
            shutil.copy2(os.path.join(shared, entry), os.path.join(cache, entry))
    subprocess.run([sys.executable, "-m", "vmservice.images", "build", "--image-dir", image_dir, "--name", name],
                   cwd=path, env={**os.environ, "PYTHONPATH": path}, check=True)
    commit = os.path.basename(path) if re.fullmatch(r"[0-9a-f]{40}", os.path.basename(path)) else None
    return Earlier(path=path, image_dir=image_dir, commit=commit, image=os.readlink(os.path.join(image_dir, name)))


def start_daemon(groups: list[dict[str, Any]], path: str | None = None, image_dir: str | None = None) -> Daemon:
    """A started daemon of ``groups``: of the code in ``path`` if given (else this checkout's), its images in ``image_dir``."""
    daemon = Daemon(groups=groups)
    if image_dir is not None:
        daemon.config["config"]["image_dir"] = image_dir
    old = os.environ.get("PYTHONPATH")
    if path is not None:
        os.environ["PYTHONPATH"] = os.path.abspath(path)  # its vmservice package first on the daemon's path
    try:
        daemon.start()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return daemon


def start_earlier(earlier: Earlier, groups: list[dict[str, Any]]) -> Daemon:
    """A started daemon of ``groups`` running ``earlier``'s code on its own image."""
    return start_daemon(groups, path=earlier.path, image_dir=earlier.image_dir)


def _figure(result: dict[str, Any], key: str) -> Any:
    """The value at ``key`` of ``result``, dot-separated as bench/publish.py's markers name it (``None`` if absent)."""
    value: Any = result
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def ratios(after: dict[str, Any], before: dict[str, Any], keys: tuple[str, ...]) -> dict[str, float | None]:
    """
    For each of ``keys`` (dot-separated, e.g. ``api_create_wait_agent_s.median``),
    this checkout's figure over the earlier one's, the key named as in
    ``after``: above 1 means more (slower, for seconds) than before.
    ``None`` where either figure is missing or the earlier one is 0.
    """
    out: dict[str, float | None] = {}
    for key in keys:
        mine, theirs = _figure(after, key), _figure(before, key)
        out[key] = mine / theirs if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)) and theirs \
            else None
    return out


def ready_spares(log: str) -> dict[str, str]:
    """The spare VMs ``log`` shows ready and not taken, ended or failed: their names and their templates' digests."""
    ready = dict(re.findall(r"spare VM (spare-\w+) of template (\w+) is ready", log))
    gone = set(re.findall(r"(?:cloned from spare VM|could not take spare VM) (spare-\w+)", log))
    gone |= set(re.findall(r"spare VM (spare-\w+) ended on its own", log))
    return {name: digest for name, digest in ready.items() if name not in gone}


def main() -> None:
    parser = argparse.ArgumentParser(description="Unpack an earlier commit and build its own guest image.")
    parser.add_argument("--ref", required=True, help="the commit (or any ref) of this repository, e.g. 9690c00")
    parser.add_argument("--image-dir", default=IMAGE_DIR, help=f"where its image is built (default {IMAGE_DIR})")
    options = parser.parse_args()
    earlier = prepare(unpack(options.ref), options.image_dir)
    print(f"--before {earlier.path} --before-image-dir {earlier.image_dir}  ({earlier.image})")


if __name__ == "__main__":
    main()
