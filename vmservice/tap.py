# -*- test-case-name: tests.test_tap -*-
"""
The twistd plugin's options and ``makeService``:
``twistd -n vmservice --config conf/vmservice.yaml``.

A bad configuration stops the daemon before it starts, with exit status 1
and one line naming the key and what is wrong.
"""

from __future__ import annotations

import sys
from typing import cast

from twisted.application.service import IService
from twisted.python import usage

from .config import ConfigError, load_config
from .service import IDaemonReactor, StartupError, make_service


class Options(usage.Options):
    """Command-line options of ``twistd vmservice``."""

    optParameters = [
        ["config", "c", "conf/vmservice.yaml", "The YAML configuration file."],
    ]


def makeService(options: Options) -> IService:
    """
    Load the configuration and build the daemon on the global reactor (the
    one place that takes it); exit with status 1 and one line on stderr when
    the configuration is bad or the daemon cannot start.

    :param options: the parsed command line.
    """
    from twisted.internet import reactor

    try:
        config = load_config(options["config"])
        # The global reactor provides every part IDaemonReactor names.
        return make_service(config, cast(IDaemonReactor, reactor))
    except (ConfigError, StartupError) as error:
        sys.stderr.write(f"vmservice: {error}\n")
        sys.stderr.flush()
        raise SystemExit(1)
