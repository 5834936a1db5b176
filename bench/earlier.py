"""
What the side-by-side benchmarks share: a daemon of this checkout or of an
earlier one (``--before DIR``, e.g. ``git archive``'s), and the spare VMs a
daemon's log shows ready and not taken.
"""

from __future__ import annotations

import os
import re
from typing import Any

from tests.integration.daemon import Daemon


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


def ready_spares(log: str) -> dict[str, str]:
    """The spare VMs ``log`` shows ready and not taken, ended or failed: their names and their templates' digests."""
    ready = dict(re.findall(r"spare VM (spare-\w+) of template (\w+) is ready", log))
    gone = set(re.findall(r"(?:cloned from spare VM|could not take spare VM) (spare-\w+)", log))
    gone |= set(re.findall(r"spare VM (spare-\w+) ended on its own", log))
    return {name: digest for name, digest in ready.items() if name not in gone}
