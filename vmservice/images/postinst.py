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
  tree, which writes ``/etc/ssl/certs/ca-certificates.crt`` and the hash links OpenSSL looks up;
- ``/etc/sudoers`` owned by root and mode 0440, as ``sudo``'s ``postinst`` leaves it (the package ships it
  0644) (:func:`secure_sudoers`);
- the PAM stacks ``/etc/pam.d/common-*`` that ``libpam-runtime``'s ``pam-auth-update`` writes from its
  templates and the profiles of ``/usr/share/pam-configs`` (:func:`write_pam_stacks`), which ``sudo``'s
  PAM configuration includes.
"""

from __future__ import annotations

import os

__all__ = [
    "ALTERNATIVES",
    "CA_BUNDLE",
    "SYSTEM_USERS",
    "add_system_users",
    "install_alternatives",
    "secure_sudoers",
    "select_ca_certificates",
    "write_pam_stacks",
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
_SUDOERS = "etc/sudoers"
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


def secure_sudoers(root: str) -> bool:
    """
    Make ``/etc/sudoers`` root's and mode 0440, as ``sudo``'s ``postinst`` does; nothing in a tree without
    it (a symbolic link there is left alone: no package ships one).

    :return: whether the tree has it.
    """
    path = os.path.join(root, _SUDOERS)
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    info = os.lstat(path)
    if (info.st_uid, info.st_gid) != (0, 0):
        os.lchown(path, 0, 0)
    os.chmod(path, 0o440)
    return True


#: The stacks ``pam-auth-update`` writes: the file ``/etc/pam.d/common-<stack>``, the profiles' field
#: that fills it, and the name of its template's placeholders (``$<name>_primary``, ``$<name>_additional``).
PAM_STACKS: tuple[tuple[str, str, str], ...] = (
    ("auth", "Auth", "auth"),
    ("account", "Account", "account"),
    ("password", "Password", "password"),
    ("session", "Session", "session"),
    ("session-noninteractive", "Session", "session_nonint"),
)
_PAM_TEMPLATES = "usr/share/pam"
_PAM_PROFILES = "usr/share/pam-configs"


def _pam_profile(text: str) -> dict[str, list[str]]:
    """A ``pam-configs`` profile's fields (``Key: value`` with indented continuation lines), as lines."""
    fields: dict[str, list[str]] = {}
    key = None
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and key is not None:
            if line.strip():
                fields[key].append(line.strip())
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = [value.strip()] if value.strip() else []
    return fields


def _priority(profile: dict[str, list[str]]) -> int:
    """A profile's ``Priority`` (0 when absent or not a number)."""
    value = (profile.get("Priority") or ["0"])[0]
    return int(value) if value.isdigit() else 0


def _pam_lines(profiles: list[dict[str, list[str]]], stack: str, field: str, kind: str) -> list[str]:
    """The lines of one stack's ``kind`` (Primary or Additional) block, as ``pam-auth-update`` makes them."""
    chosen = [profile for profile in profiles if profile.get(f"{field}-Type", [""])[0] == kind
              and not (stack == "session-noninteractive"
                       and profile.get("Session-Interactive-Only", ["no"])[0] == "yes")]
    lines = []
    for index, profile in enumerate(chosen):
        variant = field
        if index == 0 and f"{field}-Initial" in profile:
            variant = f"{field}-Initial"
        elif index == len(chosen) - 1 and f"{field}-Final" in profile:
            variant = f"{field}-Final"
        lines += profile.get(variant, [])
    kind_word = stack.split("-")[0]
    if kind == "Primary" and not lines:
        # No primary module: step over the template's pam_deny all the same.
        return [f"{kind_word}\t[default=1]\tpam_permit.so"]
    made = []
    for index, line in enumerate(lines):
        if kind == "Primary":
            line = line.replace("success=end", f"success={len(lines) - index}")
        end = line.find("]") + 1 if line.startswith("[") else 0
        control, rest = (line[:end], line[end:]) if end else (line.split(None, 1) + [""])[:2]
        made.append(f"{kind_word}\t{control.strip()}\t{rest.strip()}")
    return made


def write_pam_stacks(root: str) -> list[str]:
    """
    Write each missing ``/etc/pam.d/common-*`` from ``libpam-runtime``'s template, filled with the lines
    of the profiles enabled by default (``Default: yes``), highest ``Priority`` first: a Primary block whose
    modules skip to past the template's ``pam_deny`` on success, then an Additional one. Nothing happens
    in a tree without the templates.

    :return: the stacks written (``auth``, ``account``...).
    """
    templates, directory = os.path.join(root, _PAM_TEMPLATES), os.path.join(root, _PAM_PROFILES)
    if not os.path.isdir(templates) or not os.path.isdir(directory):
        return []
    profiles = [_pam_profile("\n".join(_lines(os.path.join(directory, name))))
                for name in sorted(os.listdir(directory)) if os.path.isfile(os.path.join(directory, name))]
    profiles = [profile for profile in profiles if profile.get("Default", ["no"])[0] == "yes"]
    profiles.sort(key=lambda profile: -_priority(profile))
    written = []
    for stack, field, placeholder in PAM_STACKS:
        template, target = os.path.join(templates, f"common-{stack}"), os.path.join(root, f"etc/pam.d/common-{stack}")
        if not os.path.isfile(template) or os.path.lexists(target):
            continue
        blocks = {f"${placeholder}_primary": _pam_lines(profiles, stack, field, "Primary"),
                  f"${placeholder}_additional": _pam_lines(profiles, stack, field, "Additional")}
        out = []
        for line in _lines(template):
            out += blocks.get(line.strip(), [line])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as stream:
            stream.write("\n".join(out) + "\n")
        written.append(stack)
    return written
