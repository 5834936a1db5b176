# -*- test-case-name: tests.config -*-
"""
The daemon's configuration: a YAML file with a ``config:`` root, in the shape
of Slicer's configuration, read into frozen attrs records.

Loading happens in two steps, so that each step does one job:

1. **Shape.** The YAML is structured by a strict cattrs converter
   (:mod:`~vmservice.config.values`) into records that mirror the file key for
   key: the sections the file writes as the public records hold them are read
   straight into those records (:mod:`~vmservice.config.model`, each field
   declared once), the root and the host groups into the documents of
   :mod:`~vmservice.config.document` (the keys they share with
   :class:`Config` and :class:`HostGroupConfig` declared once, in
   :mod:`~vmservice.config.model`).  Unknown keys are refused
   (``forbid_extra_keys``), a string is never coerced into an integer and a
   boolean must be a YAML boolean. cattrs reports every problem as an
   exception group with notes naming the attribute or list index; we walk that
   group to get the key path.
2. **Meaning.** The documents are checked value by value
   (:mod:`~vmservice.config.resolve`, :mod:`~vmservice.config.resolve_groups`) (names, ranges,
   sizes, overlaps) and resolved into the public records :class:`Config`,
   :class:`ApiConfig`, :class:`AuthConfig`, :class:`HostGroupConfig` and
   :class:`NetworkConfig`. Inherited values (a group's ``image``,
   ``hypervisor`` and ``graceful_shutdown``) are filled in from the top level,
   so the rest of the program never has to know about inheritance.

Every problem becomes one :class:`ConfigError` whose ``str()`` is a single
line, ``<key path>: <what is wrong>``, and which knows the line of the file
the key is on (:mod:`~vmservice.config.yaml_source`). The daemon prints it
and exits with status 1.

This package offers the records, :class:`ConfigError`, the entry points
(:mod:`~vmservice.config.load`), sizes (:mod:`~vmservice.config.units`) and
the defaults and bounds that other parts of the daemon share (the others are
read from :mod:`~vmservice.config.defaults` itself).
"""

from .defaults import (
    DEFAULT_BACKGROUND_EXECS_PER_NODE,
    DEFAULT_CODEHOST_TIMEOUT,
    DEFAULT_IMAGE_DIR,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_PEER,
    ISOLATED_SLOT_PREFIX,
    MAX_BACKGROUND_EXECS_PER_NODE,
    MAX_USERDATA,
)
from .e2b import E2bConfig
from .error import ConfigError
from .kubernetes import CapacityConfig, KubernetesConfig, TaintConfig, TokenSource
from .load import load_config, parse_config
from .model import (
    AdmissionConfig,
    ApiConfig,
    AuditConfig,
    AuthConfig,
    Config,
    HostGroupConfig,
    LimitsConfig,
    NetworkConfig,
)
from .units import GiB, KiB, MiB, TiB, format_size, parse_size

__all__ = [
    "DEFAULT_BACKGROUND_EXECS_PER_NODE",
    "DEFAULT_CODEHOST_TIMEOUT",
    "DEFAULT_IMAGE_DIR",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_CONNECTIONS_PER_PEER",
    "ISOLATED_SLOT_PREFIX",
    "MAX_BACKGROUND_EXECS_PER_NODE",
    "MAX_USERDATA",
    "AdmissionConfig",
    "ApiConfig",
    "AuditConfig",
    "AuthConfig",
    "CapacityConfig",
    "Config",
    "ConfigError",
    "GiB",
    "HostGroupConfig",
    "KiB",
    "E2bConfig",
    "KubernetesConfig",
    "LimitsConfig",
    "MiB",
    "NetworkConfig",
    "TaintConfig",
    "TiB",
    "TokenSource",
    "format_size",
    "load_config",
    "parse_config",
    "parse_size",
]
