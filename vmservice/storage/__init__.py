# -*- test-case-name: tests.storage -*-
"""
Node disks: qcow2 overlays on the image (:mod:`.overlay`), which the node
layer takes through :class:`.interfaces.IDisks`.
"""
