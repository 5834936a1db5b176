# -*- test-case-name: tests.images.test_accounts -*-
"""
The login accounts a recipe names (its ``[[users]]``, :class:`vmservice.images.recipe.Account`), made in
the image's tree the way ``adduser`` would have: lines in ``/etc/passwd``, ``/etc/group`` and
``/etc/shadow`` (a password that nothing matches: ``*``), a home directory from ``/etc/skel`` owned by
the account, and, for an account with ``sudo``, a drop-in in ``/etc/sudoers.d`` letting it run anything
without a password.

The tree is built as root and ``mkfs.ext4 -d`` copies each file's owner, so the ``chown`` done here is
what the guest sees. Nothing in the tree is followed out of it: a home whose path meets a symbolic link
is refused.
"""

from __future__ import annotations

import os
import shutil
from typing import Sequence

from vmservice.images.recipe import Account

__all__ = ["AccountError", "HOME_MODE", "SUDOERS_DIR", "add_accounts"]

#: A home directory's mode: its owner's, readable by its group, closed to others.
HOME_MODE = 0o750
#: Where a ``sudo`` account's drop-in goes, relative to the root (``/etc/sudoers`` includes it).
SUDOERS_DIR = "etc/sudoers.d"
_SKEL = "etc/skel"
#: The day of the last password change written to ``/etc/shadow``, as for the image's other accounts.
_CHANGED = 19000


class AccountError(Exception):
    """
    An account cannot be made in the tree: its name, id or group is taken, its shell is missing, its home
    meets a symbolic link, or it wants ``sudo`` in a tree without it.
    """


def _entries(path: str) -> list[list[str]]:
    with open(path) as stream:
        return [line.split(":") for line in stream.read().splitlines() if line]


def _append(path: str, line: str) -> None:
    with open(path, "a") as stream:
        stream.write(line + "\n")


def _check_free(root: str, account: Account) -> bool:
    """
    Refuse an account whose name or user id is taken, or whose group id belongs to another group.

    :return: whether its group must be added (False: a group of its name and id is there already).
    """
    passwd = _entries(os.path.join(root, "etc/passwd"))
    if any(fields[0] == account.name for fields in passwd):
        raise AccountError(f"user {account.name} already exists in /etc/passwd")
    if any(len(fields) > 2 and fields[2] == str(account.uid) for fields in passwd):
        raise AccountError(f"user id {account.uid} of {account.name} is taken in /etc/passwd")
    for fields in _entries(os.path.join(root, "etc/group")):
        same_name, same_id = fields[0] == account.name, len(fields) > 2 and fields[2] == str(account.gid)
        if same_name and same_id:
            return False
        if same_name or same_id:
            raise AccountError(f"group {account.name} ({account.gid}) clashes with {':'.join(fields[:3])} "
                               "in /etc/group")
    return True


def _make_home(root: str, account: Account) -> str:
    """Make the home directory (and any missing parent, as root's, 0755); refuse a symbolic link on its way."""
    path = root
    for part in account.home.strip("/").split("/"):
        path = os.path.join(path, part)
        if os.path.islink(path):
            raise AccountError(f"home {account.home} of {account.name}: /{os.path.relpath(path, root)} "
                               "is a symbolic link")
        if not os.path.isdir(path):
            os.mkdir(path, 0o755)
    skel = os.path.join(root, _SKEL)
    if os.path.isdir(skel) and not os.path.islink(skel):
        shutil.copytree(skel, path, symlinks=True, dirs_exist_ok=True)
    for directory, folders, files in os.walk(path):
        for name in folders + files:
            os.lchown(os.path.join(directory, name), account.uid, account.gid)
    os.lchown(path, account.uid, account.gid)
    os.chmod(path, HOME_MODE)
    return path


def _check_sudoers(root: str, account: Account) -> None:
    """Refuse ``sudo`` for an account of a tree whose ``/etc/sudoers`` is missing or reads no drop-ins."""
    sudoers = os.path.join(root, "etc/sudoers")
    if not os.path.isfile(sudoers) or os.path.islink(sudoers):
        raise AccountError(f"{account.name} has sudo, but the tree has no /etc/sudoers (add the sudo package)")
    with open(sudoers) as stream:
        if f"includedir /{SUDOERS_DIR}" not in stream.read():
            raise AccountError(f"/etc/sudoers does not include /{SUDOERS_DIR}")
    if os.path.islink(os.path.join(root, SUDOERS_DIR)):
        raise AccountError(f"/{SUDOERS_DIR} is a symbolic link")


def _allow_sudo(root: str, account: Account) -> None:
    """Write ``/etc/sudoers.d/<name>`` (0440): the account runs anything as anyone, without a password."""
    directory = os.path.join(root, SUDOERS_DIR)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    drop_in = os.path.join(directory, account.name)
    if os.path.lexists(drop_in):
        os.unlink(drop_in)
    descriptor = os.open(drop_in, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o440)
    with os.fdopen(descriptor, "w") as stream:
        stream.write(f"# Made when the image was built (its recipe's [[users]]).\n"
                     f"{account.name} ALL=(ALL:ALL) NOPASSWD: ALL\n")
    os.chmod(drop_in, 0o440)


def add_accounts(root: str, accounts: Sequence[Account]) -> list[str]:
    """
    Make each account in the tree at ``root``: its group (unless one of its name and id is there), its
    ``/etc/passwd`` and ``/etc/shadow`` lines, its home (see :data:`HOME_MODE`) and its sudo drop-in.

    :return: the names of the accounts made.
    :raises AccountError: if one cannot be made; the tree is then unusable.
    """
    made = []
    for account in accounts:
        if not os.path.exists(os.path.join(root, account.shell.lstrip("/"))):
            raise AccountError(f"shell {account.shell} of {account.name} is not in the tree")
        if account.sudo:
            _check_sudoers(root, account)
        if _check_free(root, account):
            _append(os.path.join(root, "etc/group"), f"{account.name}:x:{account.gid}:")
        _append(os.path.join(root, "etc/passwd"),
                f"{account.name}:x:{account.uid}:{account.gid}::{account.home}:{account.shell}")
        _append(os.path.join(root, "etc/shadow"), f"{account.name}:*:{_CHANGED}:0:99999:7:::")
        _make_home(root, account)
        if account.sudo:
            _allow_sudo(root, account)
        made.append(account.name)
    return made
