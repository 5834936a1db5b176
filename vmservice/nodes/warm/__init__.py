"""
Warm start: templates, their spares and clones, hot forks and the memory
files they map.  The node core (every other module of :mod:`vmservice.nodes`)
imports nothing of this package: it asks for what it needs through the
protocols of :mod:`vmservice.nodes.warm_port`, which :class:`.starts.WarmStarts`
implements, wired in by the daemon's composition root.
"""
