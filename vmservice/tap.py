# -*- test-case-name: tests.test_tap -*-
"""
The twistd plugin's options and ``makeService``:
``twistd -n vmservice --config conf/vmservice.yaml``.

A bad configuration stops the daemon before it starts, with exit status 1
and one line naming the key and what is wrong.

The daemon's umask is 077 (``twistd -n`` keeps the shell's): what it and its
children (QEMU, qemu-img) create is its own alone, even where no mode is
given (docs/security.md).
"""

from __future__ import annotations

import os
import sys
from typing import cast

from twisted.application.service import IService
from twisted.python import usage

from .config import ConfigError, load_config
from .service import IDaemonReactor, StartupError, make_service


#: The daemon's umask: no group or other bits on anything it or its children create.
UMASK = 0o077


class Options(usage.Options):
    """Command-line options of ``twistd vmservice``."""

    optParameters = [
        ["config", "c", "conf/vmservice.yaml", "The YAML configuration file."],
    ]


def makeService(options: Options) -> IService:
    """
    Set the daemon's umask (:data:`UMASK`), load the configuration and
    build the daemon on the global reactor (the one place that takes it);
    exit with status 1 and one line on stderr when the configuration is bad
    or the daemon cannot start.

    :param options: the parsed command line.
    """
    from twisted.internet import reactor

    os.umask(UMASK)
    try:
        config = load_config(options["config"])
        # The global reactor provides every part IDaemonReactor names.
        return make_service(config, cast(IDaemonReactor, reactor))
    except (ConfigError, StartupError) as error:
        sys.stderr.write(f"vmservice: {error}\n")
        sys.stderr.flush()
        raise SystemExit(1)
