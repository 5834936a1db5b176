# -*- test-case-name: tests.images.test_recipe -*-
"""
Recipes say what goes into a guest image; the recipe hash says when an image must be rebuilt.

A recipe is a TOML file in ``vmservice/images/recipes/``. The hash covers everything that decides the
image's content and is under our control: the recipe itself (so its package list), the builder's own
source, and every guest-side file copied into the image (``vmservice/guest/files/*``, the ``*.py`` of
``vmservice/guest/`` and ``vmservice/wire/`` at any depth). It leaves out the package versions on purpose: a
Debian point release should not force every host to rebuild, and the versions used are in the manifest.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Mapping

from attrs import frozen

__all__ = [
    "Account",
    "Recipe",
    "RecipeError",
    "builder_sources",
    "guest_sources",
    "load_recipe",
    "package_root",
    "recipe_hash",
    "recipe_names",
    "recipes_dir",
]


class RecipeError(Exception):
    """
    A recipe file is missing or malformed.
    """


@frozen
class Account:
    """
    A login account the image has, with a group of its own name (a ``[[users]]`` table of a recipe).

    :ivar name: the user and group name (``user``): lowercase letters, digits, ``_`` and ``-``, at most 32.
    :ivar uid: its user id, 1 to 65533 (0 is root, 65534 nobody).
    :ivar gid: the id of its group, named after it, 1 to 65533.
    :ivar home: its home directory, absolute and normal (``/home/user``), made in the tree and owned by it.
    :ivar shell: its login shell, an absolute path (``/bin/bash``) the tree must have.
    :ivar sudo: whether it may run anything as anyone through ``sudo`` without a password (the tree must
        have ``/etc/sudoers``).
    """

    name: str
    uid: int
    gid: int
    home: str
    shell: str
    sudo: bool = False


@frozen
class Recipe:
    """
    What one guest image is made of.

    :ivar name: the image name, also the recipe file's stem (``default`` from ``default.toml``).
    :ivar kernel_metapackage: the Debian metapackage naming the current kernel package.
    :ivar packages: the other Debian packages unpacked into the root file system.
    :ivar initramfs_modules: kernel modules the initramfs loads before it mounts the root disk.
    :ivar rootfs_headroom_mib: free space left in ``rootfs.ext4`` beyond its content.
    :ivar resolve_dependencies: whether ``packages`` are only the wanted ones, to be completed with
        everything they depend on (``Depends`` and ``Pre-Depends``, see
        :func:`vmservice.images.debian.resolve_dependencies`); otherwise they are the complete list.
    :ivar exclude_packages: packages the dependency resolution leaves out, with whatever only they
        would have brought in: those needed only by maintainer scripts, which the builder never runs.
    :ivar users: the accounts made in the image besides the system ones (see
        :func:`vmservice.images.accounts.add_accounts`).
    """

    name: str
    kernel_metapackage: str
    packages: tuple[str, ...]
    initramfs_modules: tuple[str, ...]
    rootfs_headroom_mib: int
    resolve_dependencies: bool = False
    exclude_packages: tuple[str, ...] = ()
    users: tuple[Account, ...] = ()


def package_root() -> str:
    """
    The directory of the ``vmservice`` package whose files go into images (this source tree).
    """
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _string_list(data: Mapping[str, object], key: str, path: str) -> tuple[str, ...]:
    value = data.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise RecipeError(f"{path}: {key} must be a list of non-empty strings")
    return tuple(value)


def recipes_dir(root: str | None = None) -> str:
    """
    The directory of the recipe files, ``<root>/images/recipes``.
    """
    return os.path.join(root or package_root(), "images", "recipes")


def recipe_names(root: str | None = None) -> list[str]:
    """
    The names of the recipes there are (the stems of ``images/recipes/*.toml``), sorted.
    """
    directory = recipes_dir(root)
    if not os.path.isdir(directory):
        return []
    return sorted(name[:-5] for name in os.listdir(directory) if name.endswith(".toml") and not name.startswith("."))


def _read(name: str, root: str | None) -> tuple[str, dict[str, object]]:
    if not name or "/" in name or name.startswith("."):
        raise RecipeError(f"bad image name {name!r}")
    path = os.path.join(recipes_dir(root), f"{name}.toml")
    try:
        with open(path, "rb") as stream:
            return path, tomllib.load(stream)
    except FileNotFoundError:
        raise RecipeError(f"no recipe for image {name!r}: {path} does not exist") from None
    except tomllib.TOMLDecodeError as error:
        raise RecipeError(f"{path}: {error}") from None


_KEYS = frozenset({"extends", "kernel_metapackage", "packages", "initramfs_modules", "rootfs_headroom_mib",
                   "resolve_dependencies", "exclude_packages", "users"})
_ACCOUNT_KEYS = frozenset({"name", "uid", "gid", "home", "shell", "sudo"})
_ACCOUNT_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
#: Paths /etc/passwd can hold: no ``:`` or line break, nothing a shell or PAM would read twice.
_ABSOLUTE = re.compile(r"(/[A-Za-z0-9._+-]+)+")


def _id(table: Mapping[str, object], key: str, where: str) -> int:
    value = table.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65533:
        raise RecipeError(f"{where}: {key} must be an integer from 1 to 65533")
    return value


def _absolute(table: Mapping[str, object], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not _ABSOLUTE.fullmatch(value) or os.path.normpath(value) != value:
        raise RecipeError(f"{where}: {key} must be a normal absolute path below / (of A-Z, a-z, 0-9, ., _, + and -)")
    return value


def _account(table: object, where: str) -> Account:
    """One ``[[users]]`` table, checked."""
    if not isinstance(table, dict):
        raise RecipeError(f"{where}: must be a table")
    unknown = sorted(set(table) - _ACCOUNT_KEYS)
    if unknown:
        raise RecipeError(f"{where}: unknown key {', '.join(unknown)}")
    name = table.get("name")
    if not isinstance(name, str) or not _ACCOUNT_NAME.fullmatch(name):
        raise RecipeError(f"{where}: name must be 1 to 32 of a-z, 0-9, _ and -, not starting with a digit or -")
    sudo = table.get("sudo", False)
    if not isinstance(sudo, bool):
        raise RecipeError(f"{where}: sudo must be true or false")
    return Account(name=name, uid=_id(table, "uid", where), gid=_id(table, "gid", where),
                   home=_absolute(table, "home", where), shell=_absolute(table, "shell", where), sudo=sudo)


def _accounts(data: Mapping[str, object], path: str, inherited: tuple[Account, ...]) -> tuple[Account, ...]:
    """The base recipe's accounts, then this one's ``[[users]]``; no name or user id twice."""
    tables = data.get("users", [])
    if not isinstance(tables, list):
        raise RecipeError(f"{path}: users must be an array of tables ([[users]])")
    accounts = inherited + tuple(_account(table, f"{path}: users[{index}]") for index, table in enumerate(tables))
    for key in ("name", "uid"):
        values = [getattr(account, key) for account in accounts]
        twice = sorted({str(value) for value in values if values.count(value) > 1})
        if twice:
            raise RecipeError(f"{path}: users: {key} {', '.join(twice)} given twice")
    return accounts


def load_recipe(name: str, root: str | None = None, _seen: tuple[str, ...] = ()) -> Recipe:
    """
    Read the recipe called ``name`` from ``<root>/images/recipes/<name>.toml``.

    A recipe with ``extends = "other"`` starts from recipe ``other``: its ``packages`` and
    ``exclude_packages`` are added to the other's, its ``[[users]]`` follow the other's, and the keys it
    leaves out are the other's.

    :param root: the ``vmservice`` package directory; defaults to :func:`package_root`.
    :raises RecipeError: if the file is missing, not TOML, lacks a field, has a key no recipe has, or
        extends itself.
    """
    path, data = _read(name, root)
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise RecipeError(f"{path}: unknown key {', '.join(unknown)}")
    base: Recipe | None = None
    extends = data.get("extends")
    if extends is not None:
        if not isinstance(extends, str) or not extends:
            raise RecipeError(f"{path}: extends must be a recipe name")
        if extends in (*_seen, name):
            raise RecipeError(f"{path}: recipe {name!r} extends itself through {extends!r}")
        base = load_recipe(extends, root, (*_seen, name))
    kernel = data.get("kernel_metapackage", base.kernel_metapackage if base else None)
    headroom = data.get("rootfs_headroom_mib", base.rootfs_headroom_mib if base else None)
    resolve = data.get("resolve_dependencies", base.resolve_dependencies if base else False)
    if not isinstance(kernel, str) or not kernel:
        raise RecipeError(f"{path}: kernel_metapackage must be a package name")
    if not isinstance(headroom, int) or isinstance(headroom, bool) or headroom < 0:
        raise RecipeError(f"{path}: rootfs_headroom_mib must be a non-negative integer")
    if not isinstance(resolve, bool):
        raise RecipeError(f"{path}: resolve_dependencies must be true or false")
    packages = _string_list(data, "packages", path) if "packages" in data or base is None else ()
    excluded = _string_list(data, "exclude_packages", path) if "exclude_packages" in data else ()
    modules = (_string_list(data, "initramfs_modules", path) if "initramfs_modules" in data or base is None
               else base.initramfs_modules)
    if base is not None:
        packages = tuple(dict.fromkeys(base.packages + packages))
        excluded = tuple(dict.fromkeys(base.exclude_packages + excluded))
    clash = sorted(set(packages) & set(excluded))
    if clash:
        raise RecipeError(f"{path}: {', '.join(clash)} both wanted and excluded")
    return Recipe(
        name=name,
        kernel_metapackage=kernel,
        packages=packages,
        initramfs_modules=modules,
        rootfs_headroom_mib=headroom,
        resolve_dependencies=resolve,
        exclude_packages=excluded,
        users=_accounts(data, path, base.users if base else ()),
    )


def _files(root: str, subdir: str, suffix: str = "") -> list[str]:
    directory = os.path.join(root, subdir)
    if not os.path.isdir(directory):
        return []
    return sorted(
        f"{subdir}/{name}" for name in os.listdir(directory)
        if name.endswith(suffix) and not name.startswith(".") and os.path.isfile(os.path.join(directory, name))
    )


def _modules(root: str, subdir: str, leave_out: tuple[str, ...] = ()) -> list[str]:
    """
    The ``*.py`` files of ``subdir`` and of every folder below it, relative to ``root``, sorted; hidden
    files and folders, bytecode caches and the folders named in ``leave_out`` (relative to ``subdir``)
    are not code of the package.
    """
    top = os.path.join(root, subdir)
    found = []
    for directory, folders, names in os.walk(top):
        here = os.path.relpath(directory, top)
        folders[:] = [
            name for name in folders
            if not name.startswith(".") and name != "__pycache__"
            and os.path.normpath(os.path.join(here, name)) not in leave_out
        ]
        found += [
            os.path.normpath(os.path.join(subdir, here, name)).replace(os.sep, "/") for name in names
            if name.endswith(".py") and not name.startswith(".")
            and os.path.isfile(os.path.join(directory, name))
        ]
    return sorted(found)


def guest_sources(root: str | None = None) -> list[str]:
    """
    The files, relative to the ``vmservice`` package directory, that are copied into every image:
    the package's ``__init__.py`` (it carries the version the agent reports), the ``*.py`` of ``guest/``
    and its subpackages, those of ``wire/`` (and below), and ``guest/files/*`` (the boot files).
    """
    base = root or package_root()
    return (["__init__.py"] + _modules(base, "guest", leave_out=("files",)) + _modules(base, "wire")
            + _files(base, "guest/files"))


def builder_sources(root: str | None = None) -> list[str]:
    """
    The builder's own files, relative to the ``vmservice`` package directory: its modules (those of its
    subpackages too) and recipes; a change to how images are built is a change to the image.
    """
    base = root or package_root()
    return _module_files(base, "images") + _files(base, "images/recipes")


def _module_files(root: str, subdir: str) -> list[str]:
    """The ``.py`` files of the package ``subdir`` and of its subpackages (``images/oci/``), relative to ``root``."""
    found = _files(root, subdir, ".py")
    directory = os.path.join(root, subdir)
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if not name.startswith((".", "__")) and os.path.isfile(os.path.join(directory, name, "__init__.py")):
            found += _module_files(root, f"{subdir}/{name}")
    return found


def recipe_hash(recipe: Recipe, root: str | None = None) -> str:
    """
    Sixteen hexadecimal digits that change whenever the recipe, the builder or a guest file changes.

    Each file contributes its path and content, framed by their lengths so that no two different sets
    of files hash alike; the order is sorted, so the hash does not depend on the directory listing order.
    """
    base = root or package_root()
    digest = hashlib.sha256()
    digest.update(b"vmservice-image-v1\x00")
    fields: tuple[object, ...] = (recipe.name, recipe.kernel_metapackage, recipe.packages,
                                  recipe.initramfs_modules, recipe.rootfs_headroom_mib,
                                  recipe.resolve_dependencies, recipe.exclude_packages)
    if recipe.users:
        # Only when there are any: a recipe without accounts hashes as it did before they existed.
        fields += (tuple((a.name, a.uid, a.gid, a.home, a.shell, a.sudo) for a in recipe.users),)
    digest.update(repr(fields).encode())
    for relative in sorted(set(builder_sources(base) + guest_sources(base))):
        with open(os.path.join(base, relative), "rb") as stream:
            content = stream.read()
        name = relative.encode()
        digest.update(b"%d:%s%d:" % (len(name), name, len(content)))
        digest.update(content)
    return digest.hexdigest()[:16]
