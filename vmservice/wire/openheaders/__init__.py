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
- :mod:`.copy`: copies into and out of the guest;
- :mod:`.fs`, :mod:`.background`, :mod:`.provisioning`, :mod:`.clock`: the
  requests of those operations.

Import each header from its module: this package imports none of them, so
that the guest agent, which loads its operations one by one as they are first
used, pays for no header module it does not use yet (under TCG every import
costs).

Stdlib only: the guest image copies these files.
"""
