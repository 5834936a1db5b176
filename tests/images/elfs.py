# -*- test-case-name: tests.images.test_elf -*-
"""
Synthetic ELF files for the image builder's tests: small, complete and valid where it matters.
"""

from __future__ import annotations

import struct

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_DYN = struct.Struct("<qQ")
BASE = 0x400000


def make_elf(needed: tuple[str, ...] = (), machine: int = 62, e_type: int = 2, payload: bytes = b"",
             with_strtab: bool = True, runpath: str = "", runpath_tag: int = 29) -> bytes:
    """
    An ELF64 little-endian file: header, two program headers (PT_LOAD covering the whole file, and
    PT_DYNAMIC when ``needed`` is given), a string table, a dynamic section (with a ``DT_RUNPATH``, or
    the tag ``runpath_tag``, when ``runpath`` is given) and ``payload``.
    """
    strtab = b"\x00" + b"".join(name.encode() + b"\x00" for name in needed)
    runpath_position = len(strtab)
    if runpath:
        strtab += runpath.encode() + b"\x00"
    phnum = 2 if needed else 1
    header_end = _EHDR.size + phnum * _PHDR.size
    strtab_offset = header_end
    dynamic_offset = strtab_offset + len(strtab)
    dynamic_offset += -dynamic_offset % 8
    entries = []
    position = 1
    for name in needed:
        entries.append(_DYN.pack(1, position))
        position += len(name) + 1
    if needed and runpath:
        entries.append(_DYN.pack(runpath_tag, runpath_position))
    if needed and with_strtab:
        entries.append(_DYN.pack(5, BASE + strtab_offset))
    entries.append(_DYN.pack(0, 0))
    dynamic = b"".join(entries) if needed else b""
    body_end = dynamic_offset + len(dynamic)
    total = body_end + len(payload)
    phdrs = _PHDR.pack(1, 5, 0, BASE, BASE, total, total, 0x1000)
    if needed:
        phdrs += _PHDR.pack(2, 6, dynamic_offset, BASE + dynamic_offset, BASE + dynamic_offset, len(dynamic),
                            len(dynamic), 8)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\x00" * 9
    header = _EHDR.pack(ident, e_type, machine, 1, BASE + 0x1000, _EHDR.size, 0, 0, _EHDR.size, _PHDR.size,
                        phnum, 64, 0, 0)
    data = header + phdrs + strtab
    data += b"\x00" * (dynamic_offset - len(data))
    return data + dynamic + payload
