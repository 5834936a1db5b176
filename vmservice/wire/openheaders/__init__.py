# -*- test-case-name: tests.wire.test_openheaders -*-
"""
The OPEN headers of the agent's streams as typed records, one per kind of
stream: the host builds a record and sends :meth:`to_json`, the guest reads the
untrusted JSON object back with :meth:`from_json`, which raises
:class:`~vmservice.wire.openheaders.fields.BadHeader` and nothing else.  The
fields of each header and their checks are written here once.

- :mod:`.fields`: :class:`BadHeader` and the readers of single fields;
- :mod:`.exec`: exec streams and the start of a background exec;
- :mod:`.shell`: shell streams;
- :mod:`.tunnel`: tunnels (``forward`` streams);
- :mod:`.watch`: file watches;
- :mod:`.copy`: copies into and out of the guest.

Stdlib only: the guest image copies these files.
"""

from vmservice.wire.openheaders.copy import DownloadHeader, UploadHeader
from vmservice.wire.openheaders.exec import BackgroundStartHeader, ExecHeader
from vmservice.wire.openheaders.fields import BadHeader
from vmservice.wire.openheaders.shell import ShellHeader
from vmservice.wire.openheaders.tunnel import ForwardHeader
from vmservice.wire.openheaders.watch import WatchHeader

__all__ = [
    "BackgroundStartHeader",
    "BadHeader",
    "DownloadHeader",
    "ExecHeader",
    "ForwardHeader",
    "ShellHeader",
    "UploadHeader",
    "WatchHeader",
]
