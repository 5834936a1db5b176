# -*- test-case-name: tests.images.test_postinst -*-
"""
What the packages' maintainer scripts would have done, for the packages whose result a guest needs.

The builder unpacks packages with ``dpkg-deb -x``: no ``postinst`` runs, so nothing a script would have
made exists. Most of it does not matter in a guest (dpkg triggers, init-system registration, debconf
answers), but a few results do, and they are made here, each only when the tree holds the package it
belongs to, so one builder serves every recipe:

- the names Debian manages with ``update-alternatives`` (``cc``, ``c++``, ``awk``...), as plain relative
  symbolic links to the first candidate present (:func:`install_alternatives`);
- the system users services need, such as ``sshd`` for the SSH server's privilege separation
  (:func:`add_system_users`);
- ``/etc/ca-certificates.conf`` selecting every certificate, as ``ca-certificates``'s default debconf
  answer does (:func:`select_ca_certificates`); the builder then runs ``update-ca-certificates`` in the
  tree, which writes ``/etc/ssl/certs/ca-certificates.crt`` and the hash links OpenSSL looks up.
"""

from __future__ import annotations

import os

__all__ = [
    "ALTERNATIVES",
    "CA_BUNDLE",
    "SYSTEM_USERS",
    "add_system_users",
    "install_alternatives",
    "select_ca_certificates",
]

#: ``update-alternatives`` names: the link and its candidates, the preferred first (Debian's priorities).
ALTERNATIVES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("usr/bin/cc", ("usr/bin/gcc", "usr/bin/clang")),
    ("usr/bin/c++", ("usr/bin/g++", "usr/bin/clang++")),
    ("usr/bin/c89", ("usr/bin/c89-gcc",)),
    ("usr/bin/c99", ("usr/bin/c99-gcc",)),
    ("usr/bin/awk", ("usr/bin/gawk", "usr/bin/mawk")),
    ("usr/bin/nawk", ("usr/bin/gawk", "usr/bin/mawk")),
    ("usr/bin/editor", ("usr/bin/vim.basic", "usr/bin/nano", "usr/bin/vim.tiny")),
    ("usr/bin/pager", ("usr/bin/less",)),
)

#: System users a package's ``postinst`` makes (with ``adduser --system``): the program that needs one,
#: the user, its home and its shell.
SYSTEM_USERS: tuple[tuple[str, str, str], ...] = (
    ("usr/sbin/sshd", "sshd", "/run/sshd"),
)

#: The bundle ``update-ca-certificates`` writes, which curl, git and OpenSSL read.
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"

_CA_SOURCE = "usr/share/ca-certificates"
_CA_CONF = "etc/ca-certificates.conf"
#: The group system users get (``nogroup``, which :func:`vmservice.images.rootfs.add_base_files` makes).
_NOGROUP = 65534


def install_alternatives(root: str) -> list[str]:
    """
    Link each :data:`ALTERNATIVES` name that is missing to its first candidate in the tree (a relative
    link, so it resolves in a ``chroot`` and in the guest alike). A name a package ships itself, or one
    no candidate of is present, is left alone.

    :return: the links made, as ``name -> target`` relative to the root.
    """
    made = []
    for link, candidates in ALTERNATIVES:
        path = os.path.join(root, link)
        if os.path.lexists(path):
            continue
        for candidate in candidates:
            if os.path.lexists(os.path.join(root, candidate)):
                os.symlink(os.path.relpath(candidate, os.path.dirname(link)), path)
                made.append(f"{link} -> {candidate}")
                break
    return made


def _lines(path: str) -> list[str]:
    with open(path) as stream:
        return stream.read().splitlines()


def add_system_users(root: str) -> list[str]:
    """
    Add each :data:`SYSTEM_USERS` user whose program is in the tree and who is not in ``/etc/passwd`` yet:
    the lowest free user id from 100, group ``nogroup``, a locked password, ``nologin`` as shell (or
    ``/bin/false`` without it).

    :return: the users added.
    """
    passwd_path, shadow_path = os.path.join(root, "etc/passwd"), os.path.join(root, "etc/shadow")
    added = []
    for program, user, home in SYSTEM_USERS:
        if not os.path.lexists(os.path.join(root, program)):
            continue
        passwd = _lines(passwd_path)
        if any(line.split(":", 1)[0] == user for line in passwd):
            continue
        used = {int(fields[2]) for fields in (line.split(":") for line in passwd)
                if len(fields) > 2 and fields[2].isdigit()}
        uid = next(candidate for candidate in range(100, 1000) if candidate not in used)
        shell = "/usr/sbin/nologin" if os.path.lexists(os.path.join(root, "usr/sbin/nologin")) else "/bin/false"
        with open(passwd_path, "a") as stream:
            stream.write(f"{user}:x:{uid}:{_NOGROUP}::{home}:{shell}\n")
        with open(shadow_path, "a") as stream:
            stream.write(f"{user}:!:19000::::::\n")
        added.append(user)
    return added


def select_ca_certificates(root: str) -> int:
    """
    Write ``/etc/ca-certificates.conf`` naming every certificate below ``/usr/share/ca-certificates`` (the
    default answer of ``ca-certificates``'s debconf question), unless the tree has no certificates.

    :return: how many certificates it names (0: nothing to do, no file written).
    """
    source = os.path.join(root, _CA_SOURCE)
    if not os.path.isdir(source):
        return 0
    names = sorted(
        os.path.relpath(os.path.join(directory, name), source)
        for directory, _dirs, files in os.walk(source) for name in files if name.endswith(".crt")
    )
    if not names:
        return 0
    with open(os.path.join(root, _CA_CONF), "w") as stream:
        stream.write("# Every certificate of /usr/share/ca-certificates, selected when the image was built.\n")
        stream.write("".join(f"{name}\n" for name in names))
    return len(names)
