# -*- test-case-name: tests.hypervisors -*-
"""
VM drivers: the interface every hypervisor implements (:mod:`.base`), and
QEMU's (the package :mod:`.qemu`, with its monitor client :mod:`.qmp`); the
KVM probe's outcome remembered across restarts (:mod:`.probe_memory`), and
what tells one build of a file from another (:mod:`.file_identity`).
"""
