# -*- test-case-name: tests.images.test_elf -*-
"""
Just enough ELF reading for the image builder: is this a complete x86-64 executable, and which shared
libraries does it need.

The builder uses the first to accept a ``vmlinux`` decompressed from a kernel image (the decompressor
complains about trailing bytes even when it succeeded, so its exit status cannot be trusted) and the second
to check that every program and Python extension in the root file system finds its libraries, without
running a dynamic loader from a foreign tree.
"""

from __future__ import annotations

import struct

from attrs import frozen

__all__ = ["ElfError", "ElfInfo", "parse_elf"]

_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64 = 2
_ELFDATA2LSB = 1
EM_X86_64 = 62
_PT_LOAD = 1
_PT_DYNAMIC = 2
_DT_NULL = 0
_DT_NEEDED = 1
_DT_STRTAB = 5
_DT_RPATH = 15
_DT_RUNPATH = 29

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_DYN = struct.Struct("<qQ")


class ElfError(ValueError):
    """
    The bytes are not a complete 64-bit little-endian ELF file.
    """


@frozen
class ElfInfo:
    """
    What the builder wants to know about an ELF file.

    :ivar type: ``e_type``: 2 for an executable, 3 for a shared object or PIE.
    :ivar machine: ``e_machine``; 62 is x86-64.
    :ivar entry: the entry point address.
    :ivar needed: the ``DT_NEEDED`` sonames, in order; empty for a static binary.
    :ivar runpath: the directories of its ``DT_RUNPATH`` (or, without one, ``DT_RPATH``), in order, as
        written (``$ORIGIN`` unexpanded): where the dynamic loader looks before the default directories.
    """

    type: int
    machine: int
    entry: int
    needed: tuple[str, ...]
    runpath: tuple[str, ...] = ()


def _check_within(size: int, offset: int, length: int, what: str) -> None:
    if offset < 0 or length < 0 or offset + length > size:
        raise ElfError(f"{what} at {offset}+{length} lies beyond the end of the file ({size} bytes)")


def parse_elf(data: bytes | memoryview) -> ElfInfo:
    """
    Parse the header, program headers and dynamic section of a 64-bit little-endian ELF file.

    Every program header, every loadable segment and the section header table must lie inside ``data``:
    that is how a truncated file is told from a complete one.

    :raises ElfError: if ``data`` is not a complete ELF64 LSB file.
    """
    view = memoryview(data)
    size = len(view)
    if size < _HEADER.size or bytes(view[:4]) != _ELF_MAGIC:
        raise ElfError("no ELF magic")
    (ident, e_type, e_machine, _version, e_entry, e_phoff, e_shoff, _flags, _ehsize, e_phentsize, e_phnum,
     e_shentsize, e_shnum, _shstrndx) = _HEADER.unpack_from(view)
    if ident[4] != _ELFCLASS64 or ident[5] != _ELFDATA2LSB:
        raise ElfError("not a 64-bit little-endian ELF file")
    if e_phnum and e_phentsize < _PHDR.size:
        raise ElfError(f"program header entries too small ({e_phentsize} bytes)")
    _check_within(size, e_phoff, e_phnum * e_phentsize, "program header table")
    _check_within(size, e_shoff, e_shnum * e_shentsize, "section header table")
    segments = []
    for index in range(e_phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _align = _PHDR.unpack_from(
            view, e_phoff + index * e_phentsize)
        if p_type in (_PT_LOAD, _PT_DYNAMIC):
            _check_within(size, p_offset, p_filesz, f"segment {index}")
        segments.append((p_type, p_offset, p_vaddr, p_filesz))
    needed, runpath = _dynamic(view, segments)
    return ElfInfo(type=e_type, machine=e_machine, entry=e_entry, needed=needed, runpath=runpath)


def _dynamic(view: memoryview, segments: list[tuple[int, int, int, int]]
             ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ``DT_NEEDED`` names and the search path (``DT_RUNPATH``, else ``DT_RPATH``) of the dynamic section."""
    dynamic = [s for s in segments if s[0] == _PT_DYNAMIC]
    if not dynamic:
        return (), ()
    _type, offset, _vaddr, filesz = dynamic[0]
    strtab_address = None
    offsets: dict[int, list[int]] = {_DT_NEEDED: [], _DT_RUNPATH: [], _DT_RPATH: []}
    for position in range(offset, offset + filesz - _DYN.size + 1, _DYN.size):
        tag, value = _DYN.unpack_from(view, position)
        if tag == _DT_NULL:
            break
        if tag in offsets:
            offsets[tag].append(value)
        elif tag == _DT_STRTAB:
            strtab_address = value
    if not any(offsets.values()):
        return (), ()
    if strtab_address is None:
        raise ElfError("DT_NEEDED without a string table")
    strtab = _address_to_offset(segments, strtab_address)
    names = tuple(_string(view, strtab + name) for name in offsets[_DT_NEEDED])
    paths = [_string(view, strtab + path) for path in offsets[_DT_RUNPATH] or offsets[_DT_RPATH]]
    return names, tuple(directory for path in paths for directory in path.split(":") if directory)


def _string(view: memoryview, start: int) -> str:
    """The NUL-terminated string of the string table at ``start`` (at most 4096 bytes)."""
    end = bytes(view[start:start + 4096]).find(b"\x00")
    if end < 0:
        raise ElfError("unterminated DT_NEEDED name")
    return bytes(view[start:start + end]).decode("utf-8", "replace")


def _address_to_offset(segments: list[tuple[int, int, int, int]], address: int) -> int:
    for p_type, offset, vaddr, filesz in segments:
        if p_type == _PT_LOAD and vaddr <= address < vaddr + filesz:
            return offset + (address - vaddr)
    raise ElfError(f"address {address:#x} is in no loadable segment")
