# -*- test-case-name: tests.guestport,tests.nodes.test_fakes -*-
"""
The guest port: what the daemon needs of a node's guest, as interfaces and
the records that cross them, apart from both sides.  The node layer and the
API call these interfaces; ``vmservice.agent`` implements them over the agent
channel and imports nothing from ``vmservice.nodes``.

- :mod:`.guest`: :class:`~.guest.IGuest` (what a running node's guest offers)
  and :class:`~.guest.IGuestConnection` (what the fleet needs to run its agent
  connection), the records of health and provisioning;
- :mod:`.exec`: one command run (``ExecRequest``, ``IExecSink``, ``IExecProcess``);
- :mod:`.files`: copies both ways and file-system entries;
- :mod:`.watch`: file watching;
- :mod:`.shell`: interactive shells;
- :mod:`.tunnel`: tunnels to an upstream in the guest (the upstream itself: :mod:`vmservice.wire.upstream`);
- :mod:`.background`: background execs (``IBackgroundExecs``);
- :mod:`.identity`: what a clone or fork child adopts to become a node of its
  own (``GuestIdentity``, ``new_identity``, ``IAdoption``).
"""
