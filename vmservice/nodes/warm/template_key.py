# -*- test-case-name: tests.nodes.warm.test_templates -*-
"""
What a template depends on (:class:`TemplateKey`): a clone must equal its
template in all of it, and a template is rebuilt when any of it changes.
"""

from __future__ import annotations

import hashlib
import json

from attrs import asdict, frozen


@frozen
class TemplateKey:
    """
    What a template depends on: a clone must equal its template in all of it.

    :ivar image: the image name.
    :ivar build: the image build's directory (named after its recipe hash).
    :ivar qemu: the QEMU version that runs it (and its accelerator).
    :ivar ram_bytes: guest memory.
    :ivar vcpus: virtual CPUs.
    :ivar network: whether it has a network interface.
    :ivar storage_size: its disk's size (the guest grew its file system to it).
    :ivar aslr: whether its guest randomizes address spaces (the group's
        ``guest_aslr``: a clone runs the template's kernel, booted with the
        template's command line).
    :ivar vsock: whether its VM has a vhost-vsock device (and its guest the
        vsock modules): a clone loads the template's devices, so it has the
        same, with a CID of its own (see ``docs/vsock.md``).
    :ivar tunnel_ports: how many tunnel ports its VM has (the group's
        ``tunnel_ports``): a clone loads the template's devices.  A key
        written before they existed had none, and its digest is the one a
        key with none has now, so a template without them is never loaded
        into a VM that has them.
    """

    image: str
    build: str
    qemu: str
    ram_bytes: int
    vcpus: int
    network: bool
    storage_size: int
    aslr: bool = True
    vsock: bool = False
    tunnel_ports: int = 0

    def digest(self) -> str:
        """
        A short, stable name of the key (the same as before ``aslr``, ``vsock``
        and ``tunnel_ports`` existed while they are as then).
        """
        fields = asdict(self)
        if not self.tunnel_ports:
            del fields["tunnel_ports"]
        if self.aslr:
            del fields["aslr"]
        if not self.vsock:
            del fields["vsock"]
        text = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def supersedes(self, other: "TemplateKey") -> bool:
        """Whether ``other`` is the same template of an older image build or QEMU."""
        same = (self.image, self.ram_bytes, self.vcpus, self.network, self.storage_size, self.aslr, self.vsock,
                self.tunnel_ports)
        return same == (other.image, other.ram_bytes, other.vcpus, other.network, other.storage_size,
                        other.aslr, other.vsock, other.tunnel_ports) and self != other


__all__ = ["TemplateKey"]
