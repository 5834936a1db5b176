"""
PCI devices of the host given to nodes' VMs (VFIO pass-through): addresses,
the checks a device must pass on the host (:mod:`.pci`), and which devices a
new node gets (:mod:`.assignment`).
"""

from .assignment import assign
from .pci import MAX_NODE_DEVICES, PCI_ADDRESS_PATTERN, PciHost, normalise_address

__all__ = ["MAX_NODE_DEVICES", "PCI_ADDRESS_PATTERN", "PciHost", "assign", "normalise_address"]
