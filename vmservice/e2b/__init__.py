"""
The E2B-compatible surface (``docs/e2b.md``): E2B's control plane (sandboxes:
create, list, describe, time out, pause, connect, kill, metrics) over the
fleet, and beside it on the same listener each sandbox's data plane, envd's
Connect RPC services (processes and terminals, files and watches) and its
``/files`` routes, over the node's guest.  Thin translation, like the Slicer
API (:mod:`vmservice.api`): nothing below it knows E2B.
"""
