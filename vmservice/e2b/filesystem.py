# -*- test-case-name: tests.e2b.test_filesystem -*-
"""
envd's ``filesystem.Filesystem`` unary methods over a sandbox's guest:
``Stat``, ``MakeDir``, ``Move``, ``ListDir`` and ``Remove``.

Each resolves its paths for the calling user (:func:`.entries.resolve`) and
acts as envd does: as root, with what it makes owned by the user
(``MakeDir``'s directories, ``Move``'s missing parents).  ``MakeDir`` of an
existing directory is ``already_exists`` (the SDK then answers False), of an
existing file ``invalid_argument``; ``Remove`` removes a whole tree and
succeeds when nothing is there (``os.RemoveAll``); ``ListDir`` follows a
symlink it is given, lists down to ``depth`` (1 by default) in the order a
walk of the tree meets the entries (each directory's entries by name, each
followed by its own), without following the symlinks below, and at most
:data:`MAX_LISTED` entries in all.  The guest's failures are answered by
:func:`~.envd_failures.connect_error_of`.
"""

from __future__ import annotations

import posixpath
from typing import Any, Mapping

from ..errors import AgentError, GuestErrorKind
from ..guestport.files import FsEntry
from ..guestport.guest import IGuest
from .connect import Code, ConnectError
from .data_plane import EnvdCall, RpcMethod
from .entries import entry_info, resolve

#: The service's name in its methods' paths.
SERVICE = "filesystem.Filesystem"
#: The most entries one ``ListDir`` answers.
MAX_LISTED = 100_000
#: The deepest ``ListDir`` walks (deeper asks are walked this deep).
MAX_DEPTH = 256
#: The mode of a directory ``MakeDir`` makes.
DIRECTORY_MODE = 0o755


def text_field(message: Mapping[str, Any], name: str) -> str:
    """Field ``name`` of a request's message: text, ``""`` when absent."""
    value = message.get(name, "")
    if not isinstance(value, str):
        raise ConnectError(Code.INVALID_ARGUMENT, f"{name} is not a string")
    return value


def path_of(call: EnvdCall, message: Mapping[str, Any], name: str = "path") -> str:
    """The path field ``name`` of ``message``, resolved for the call's user."""
    return resolve(text_field(message, name), call.user)


async def stat(call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
    """``Stat``: the entry itself (a symlink is described, not followed)."""
    path = path_of(call, message)
    return {"entry": entry_info(await call.guest.stat(path, details=True), path)}


async def make_dir(call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
    """``MakeDir``: the directory and its missing parents, owned by the user."""
    path = path_of(call, message)
    try:
        entry = await call.guest.make_directory(path, DIRECTORY_MODE, call.user.uid, call.user.gid)
    except AgentError as error:
        if error.kind is GuestErrorKind.EXISTS:
            raise ConnectError(Code.ALREADY_EXISTS, f"directory already exists: {path}") from None
        if error.kind is GuestErrorKind.NOT_A_DIRECTORY:
            raise ConnectError(Code.INVALID_ARGUMENT,
                               f"path already exists but it is not a directory: {path}") from None
        raise
    return {"entry": entry_info(entry, path)}


async def move(call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
    """``Move``: ``source`` renamed to ``destination``, missing parents made owned by the user."""
    source, destination = path_of(call, message, "source"), path_of(call, message, "destination")
    entry = await call.guest.rename(source, destination, call.user.uid, call.user.gid)
    return {"entry": entry_info(entry, destination)}


async def remove(call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
    """``Remove``: the entry, a whole tree for a directory; nothing there is fine."""
    path = path_of(call, message)
    try:
        await call.guest.remove(path, True)
    except AgentError as error:
        if error.kind is not GuestErrorKind.NOT_FOUND:
            raise
    return {}


def _depth(message: Mapping[str, Any]) -> int:
    depth = message.get("depth", 0)
    if type(depth) is not int or depth < 0:
        raise ConnectError(Code.INVALID_ARGUMENT, "depth is not a count")
    return min(depth or 1, MAX_DEPTH)


async def list_dir(call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
    """``ListDir``: the entries under the directory down to ``depth``."""
    path, depth = path_of(call, message), _depth(message)
    top = await call.guest.stat(path, details=True)
    kind = top.details.target_type if top.type == "symlink" and top.details is not None else top.type
    if kind != "directory":
        raise ConnectError(Code.INVALID_ARGUMENT, f"path is not a directory: {path}")
    listed: list[dict[str, Any]] = []
    walked = top.details.symlink_target if top.type == "symlink" and top.details is not None else None
    await _walk(call.guest, walked or path, path, depth, listed)
    return {"entries": listed}


async def _walk(guest: IGuest, directory: str, shown: str, depth: int, listed: list[dict[str, Any]]) -> None:
    """Add the entries of ``directory`` (their paths under ``shown``) and, ``depth`` allowing, of its own."""
    try:
        entries: list[FsEntry] = await guest.readdir(directory, details=True)
    except AgentError as error:
        if error.kind is GuestErrorKind.NOT_FOUND and directory != shown:
            return  # went while the walk ran
        raise
    for entry in entries:
        if len(listed) >= MAX_LISTED:
            raise ConnectError(Code.RESOURCE_EXHAUSTED, f"the listing is over {MAX_LISTED} entries")
        path = posixpath.join(shown, entry.name)
        listed.append(entry_info(entry, path))
        if depth > 1 and entry.type == "directory":
            await _walk(guest, posixpath.join(directory, entry.name), path, depth - 1, listed)


def filesystem_methods() -> dict[str, RpcMethod]:
    """The unary methods of ``filesystem.Filesystem``, by ``package.Service/Method``."""
    return {f"{SERVICE}/{name}": RpcMethod(unary=method) for name, method in (
        ("Stat", stat), ("MakeDir", make_dir), ("Move", move), ("ListDir", list_dir), ("Remove", remove))}


__all__ = ["MAX_DEPTH", "MAX_LISTED", "SERVICE", "filesystem_methods", "path_of", "text_field"]
