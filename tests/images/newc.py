"""
A minimal ``newc`` (cpio) reader of the tests' own, apart from :mod:`vmservice.images.cpio` (whose
magic only it shares): the archives the image builder writes, read back member by member.
"""

from __future__ import annotations

from vmservice.images.cpio import NEWC_MAGIC


def parse_newc(data: bytes) -> list[dict[str, object]]:
    """
    A minimal independent ``newc`` reader: every member up to the trailer, as a dict of header fields.
    """
    members = []
    offset = 0
    while True:
        assert data[offset:offset + 6] == NEWC_MAGIC, f"bad magic at {offset}"
        fields = [int(data[offset + 6 + 8 * i: offset + 14 + 8 * i], 16) for i in range(13)]
        (ino, mode, uid, gid, nlink, mtime, filesize, _dmaj, _dmin, rmaj, rmin, namesize, check) = fields
        name_start = offset + 110
        name = data[name_start:name_start + namesize - 1].decode()
        assert data[name_start + namesize - 1] == 0
        data_start = name_start + namesize
        data_start += -data_start % 4
        content = data[data_start:data_start + filesize]
        offset = data_start + filesize
        offset += -offset % 4
        if name == "TRAILER!!!":
            assert offset == len(data), "bytes after the trailer"
            return members
        members.append(dict(ino=ino, mode=mode, uid=uid, gid=gid, nlink=nlink, mtime=mtime, data=content,
                            rdev=(rmaj, rmin), name=name, check=check))
