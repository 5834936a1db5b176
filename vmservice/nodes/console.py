# -*- test-case-name: tests.nodes.test_console -*-
"""
The tail of a node's serial console log, read from the end.

A console log grows for as long as the node lives; reading all of it to
show its last 20 lines would cost more with every boot.  :func:`tail` reads
backwards in blocks until it has enough line ends, and the fleet runs it off
the reactor.
"""

from __future__ import annotations

import os

from ..errors import Internal

#: Bytes read per step backwards.
BLOCK = 64 * 1024


def _lines(data: bytes, count: int) -> tuple[str, int]:
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    every = text.splitlines(keepends=True)
    chosen = every if count == 0 else every[-count:]
    return "".join(chosen), len(chosen)


def _tail_bytes(fd: int, size: int, count: int) -> bytes:
    """The end of the file ``fd`` from just after its (count+1)-th last newline (or all of it)."""
    data = b""
    position = size
    while position > 0:
        start = max(0, position - BLOCK)
        data = os.pread(fd, position - start, start) + data
        position = start
        if data.count(b"\n") > count:
            # Cut after the newline before the last ``count`` ones: every line
            # break (splitlines knows more than b"\n") of the last lines lies
            # after it, and no character or "\r\n" pair is cut.
            cut = len(data)
            for _ in range(count + 1):
                cut = data.rindex(b"\n", 0, cut)
            return data[cut + 1:]
    return data


def tail(path: str, count: int) -> tuple[str, int]:
    """
    The last ``count`` lines of the console log ``path`` (all of it for 0),
    as text (``\\r\\n`` as ``\\n``, invalid UTF-8 as U+FFFD).

    :return: the text and the number of lines in it; a log not written yet is empty.
    :raise Internal: (``log_read_failed``) it cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return "", 0
    except OSError as error:
        raise Internal(f"cannot read the console log: {error}", code="log_read_failed") from None
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if count == 0 else _tail_bytes(fd, size, count)
    except OSError as error:
        raise Internal(f"cannot read the console log: {error}", code="log_read_failed") from None
    finally:
        os.close(fd)
    return _lines(data, count)


__all__ = ["tail"]
