# -*- test-case-name: tests.secretstore -*-
"""
The daemon's secrets store: named blobs that nodes get in their guest's
``/run/secrets`` (see :mod:`vmservice.nodes.provisioning`).

Layout under ``state_dir``::

    secrets/                  the directory, mode 0700
    secrets/<name>.secret     one file per secret, mode 0600: a line of JSON
                              metadata, then the content as it is

Every file is written whole beside its final name and renamed over it
(:func:`vmservice.durable.write_atomic`), so a crash leaves the old secret or
the new one; temporary files a crash left behind are removed at start.  The
store reads the directory on every call (nothing is cached), so the files
are the one truth.

Only metadata ever leaves the store towards the API (:meth:`SecretStore.list`);
the content goes only to guests.  No message, log line or error says
anything of a secret's content: they name the secret and the problem.

Limits: a name matches :data:`~vmservice.nodes.model.SECRET_NAME_PATTERN`
(no path separators, no dot-files, at most 128 characters); a secret holds
at most :data:`MAX_SECRET_SIZE` bytes; the store holds at most
:data:`MAX_SECRETS` secrets.

Subscribers (the fleet) are told a secret's name after it was created,
changed or deleted, so nodes that hold it get the new set at once.

The records and their checks are in :mod:`~vmservice.secretstore.records`,
the store in :mod:`~vmservice.secretstore.store`; this package offers both.
"""

from .records import (
    DEFAULT_PERMISSIONS,
    MAX_ID,
    MAX_SECRET_SIZE,
    MAX_SECRETS,
    Secret,
    SecretChange,
    SecretMeta,
    SecretSpec,
    check_secret_name,
)
from .store import SecretStore

__all__ = [
    "DEFAULT_PERMISSIONS",
    "MAX_ID",
    "MAX_SECRETS",
    "MAX_SECRET_SIZE",
    "Secret",
    "SecretChange",
    "SecretMeta",
    "SecretSpec",
    "SecretStore",
    "check_secret_name",
]
