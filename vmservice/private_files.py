# -*- test-case-name: tests.test_private_files -*-
"""
The daemon's files, kept from the other users of the host.

The daemon runs as root and keeps guest memory, disks, snapshots, secrets
and its API token in files: no other user may read, write or replace any of
them, nor make the daemon write through a link of theirs.  Three tools keep
it so:

- :func:`private_directory`: a directory of this daemon alone, made 0700 or,
  when it is there already, checked without following a link: a directory
  (not a link to one), owned by the daemon's user, that no other user may
  enter.  The daemon's directories in a tmpfs that other users may write in
  (``/dev/shm``) have names it must find again after a restart (QEMUs that
  outlive a ``kill -9`` still map the files in them), so they are
  predictable: anything else found under such a name is
  :class:`NotPrivate`, since another user may have made it first, to read
  or replace what the daemon would put there.
- :func:`create_private`: a new file, 0600 (or the mode asked for) whatever
  the umask; never a file that exists, never through a link.
- :func:`tighten`: every directory of a tree 0700, every file without
  group or other permission bits, links neither followed nor changed (the
  state directory and the tmpfs directories at each start: what an older
  version or another umask left).
"""

from __future__ import annotations

import os
import stat

from .errors import Internal

#: Everything a file of the daemon may allow: its owner's bits only.
OWNER_ONLY = 0o700


class NotPrivate(Internal):
    """
    A directory the daemon must have to itself is not its own.

    :ivar path: the directory.
    :ivar problem: what is wrong with it.
    """

    code = "not_private"

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path} {problem}")
        self.path = path
        self.problem = problem


def private_directory(path: str, repair: bool = False) -> None:
    """
    Make the directory ``path`` (0700; its missing parents as usual) or, when
    it exists, check that it is this daemon's alone.

    :param repair: for a directory only the daemon could have made (the
        state directory, whose parent the operator chose): one that others
        may enter but not write in is made 0700 instead of refused.
    :raise NotPrivate: ``path`` is a link, not a directory, owned by another
        user, or others may enter it (write in it, with ``repair``), or it
        cannot be made; the message says which.
    """
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    except OSError as error:
        raise NotPrivate(path, f"cannot be made: {error}") from None
    try:
        os.mkdir(path, OWNER_ONLY)  # never through a link: a link there is EEXIST
        made = True
    except FileExistsError:
        made = False
    except OSError as error:
        raise NotPrivate(path, f"cannot be made: {error.strerror}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise NotPrivate(path, _unopenable(path, error)) from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise NotPrivate(path, f"is owned by uid {info.st_uid}, not by the daemon's user (uid {os.geteuid()})")
        mode = stat.S_IMODE(info.st_mode)
        if mode != OWNER_ONLY and not made:
            if not repair:
                raise NotPrivate(path, f"has mode {mode:04o}, not 0700: other users may enter it")
            if mode & 0o022:
                raise NotPrivate(path, f"has mode {mode:04o}: other users may write in it")
        if mode != OWNER_ONLY:
            os.fchmod(fd, OWNER_ONLY)
    finally:
        os.close(fd)


def _unopenable(path: str, error: OSError) -> str:
    """Why ``path`` cannot be opened as a directory without following a link."""
    try:
        info = os.lstat(path)
    except OSError:
        return f"cannot be opened: {error.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    return f"cannot be opened: {error.strerror}"


def create_private(path: str, mode: int = 0o600) -> int:
    """
    Create the file ``path`` with ``mode`` (whatever the umask), open for
    writing: the descriptor, the caller's to close.

    :raise FileExistsError: something is at ``path`` already (a file, or a
        link, which is never followed).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def tighten(top: str) -> int:
    """
    Make every directory of the tree ``top`` 0700 and take the group and
    other permission bits (and set-id bits) off every other file in it;
    links are left as they are and never followed (not even ``top``).

    :return: how many modes were changed.
    """
    changed = 0
    for _, _, names, fd in os.fwalk(top, follow_symlinks=False):
        if stat.S_IMODE(os.fstat(fd).st_mode) != OWNER_ONLY:
            os.fchmod(fd, OWNER_ONLY)
            changed += 1
        for name in names:
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                mode = stat.S_IMODE(info.st_mode)
                if stat.S_ISLNK(info.st_mode) or mode == mode & OWNER_ONLY:
                    continue
                # fchmodat(AT_SYMLINK_NOFOLLOW): a link put there meanwhile is refused, never followed.
                os.chmod(name, mode & OWNER_ONLY, dir_fd=fd, follow_symlinks=False)
                changed += 1
            except FileNotFoundError:
                continue  # gone meanwhile (a socket of a VM that ended)
            except (ValueError, NotImplementedError):
                continue  # a link put there meanwhile: Python's answer to fchmodat refusing it
    return changed


__all__ = ["NotPrivate", "OWNER_ONLY", "create_private", "private_directory", "tighten"]
