"""
The E2B-compatible surface (``docs/e2b.md``): E2B's control plane (sandboxes:
create, list, describe, time out, pause, connect, kill, metrics) over the
fleet, on a listener of its own; envd's data plane (Connect RPC) comes
beside it on the same listener.  Thin translation, like the Slicer API
(:mod:`vmservice.api`): nothing below it knows E2B.
"""
