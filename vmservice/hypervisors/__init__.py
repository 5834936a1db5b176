# -*- test-case-name: tests.hypervisors -*-
"""
VM drivers: the interface every hypervisor implements (:mod:`.base`), and
QEMU's (:mod:`.qemu`, with its monitor client :mod:`.qmp`).
"""
