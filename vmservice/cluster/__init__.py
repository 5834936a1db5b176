"""
The daemon as a node of a Kubernetes cluster (``docs/cluster.md``): a small
client of the Kubernetes API over treq (:mod:`.api_client`, its errors
:mod:`.api_errors`), watch streams (:mod:`.watch_events`, :mod:`.watch_loop`),
and the node controller (:mod:`.node_controller`: the Node, its Lease and its
status), after Virtual Kubelet's split.  Nothing below this package knows
HTTP or Kubernetes: what it reads of the daemon is admission's budget and
the configuration.
"""
