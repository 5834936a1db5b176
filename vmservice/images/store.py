# -*- test-case-name: tests.images.test_store -*-
"""
Finding built guest images: the small, stable interface the daemon uses.

An image directory holds one real directory per build, ``<name>-<recipehash>/``, and a symbolic link
``<name>`` pointing at the current one. :func:`resolve_image` follows the link once and hands back the real
directory, so a node created from it keeps using the same files even after a rebuild moves the link (its
disk overlay names the base image by path).
"""

from __future__ import annotations

import datetime
import json
import os
from attrs import frozen
from twisted.python.filepath import FilePath

__all__ = [
    "DEFAULT_IMAGE_DIR",
    "IMAGE_DIR_VARIABLE",
    "Image",
    "ImageInfo",
    "ImageNotFound",
    "default_image_dir",
    "list_images",
    "resolve_image",
]

IMAGE_DIR_VARIABLE = "VMSERVICE_IMAGE_DIR"
DEFAULT_IMAGE_DIR = "/var/cache/vmservice/images"

KERNEL_FILE = "vmlinux"
INITRD_FILE = "initrd.img"
ROOTFS_FILE = "rootfs.ext4"
MANIFEST_FILE = "manifest.json"


class ImageNotFound(Exception):
    """
    No usable image of that name: never built, or its directory is incomplete.

    :ivar name: the image name asked for.
    :ivar image_dir: the directory that was searched.
    :ivar reason: what exactly was missing.
    """

    def __init__(self, name: str, image_dir: str, reason: str) -> None:
        super().__init__(name, image_dir, reason)
        self.name = name
        self.image_dir = image_dir
        self.reason = reason

    def __str__(self) -> str:
        return (f"guest image {self.name!r} not found in {self.image_dir}: {self.reason} "
                f"(build it with: vmctl image build {self.name} --image-dir {self.image_dir})")


@frozen
class Image:
    """
    A built guest image, ready to boot.

    :ivar name: the image name (``default``).
    :ivar path: the real image directory (``.../default-<hash>``), never the symbolic link.
    :ivar kernel: the uncompressed kernel ELF, for ``-kernel``.
    :ivar initrd: the initramfs, for ``-initrd``.
    :ivar rootfs: the raw ext4 root file system, the backing file of each node's disk.
    :ivar manifest: the parsed ``manifest.json``: recipe hash, kernel release, package versions, sizes.
    """

    name: str
    path: FilePath[str]
    kernel: FilePath[str]
    initrd: FilePath[str]
    rootfs: FilePath[str]
    manifest: dict[str, object]


def default_image_dir() -> str:
    """
    Where images live unless configured otherwise: ``$VMSERVICE_IMAGE_DIR``, else
    ``/var/cache/vmservice/images`` (a cache: everything in it can be rebuilt).
    """
    return os.environ.get(IMAGE_DIR_VARIABLE) or DEFAULT_IMAGE_DIR


def resolve_image(image_dir: str | FilePath[str], name: str) -> Image:
    """
    Find the current build of image ``name`` in ``image_dir``.

    :raises ImageNotFound: if there is no such image, or a file of it is missing, or its manifest is not
        readable JSON.
    """
    base = image_dir.path if isinstance(image_dir, FilePath) else os.fspath(image_dir)
    if not name or "/" in name or name.startswith("."):
        raise ImageNotFound(name, base, "not a valid image name")
    link = os.path.join(base, name)
    if not os.path.lexists(link):
        raise ImageNotFound(name, base, f"{link} does not exist")
    real = os.path.realpath(link)
    if not os.path.isdir(real):
        raise ImageNotFound(name, base, f"{link} points at {real}, which is not a directory")
    path = FilePath(real)
    files = {}
    for file_name in (KERNEL_FILE, INITRD_FILE, ROOTFS_FILE, MANIFEST_FILE):
        child = path.child(file_name)
        if not child.isfile():
            raise ImageNotFound(name, base, f"{child.path} is missing")
        files[file_name] = child
    try:
        manifest = json.loads(files[MANIFEST_FILE].getContent())
    except ValueError as error:
        raise ImageNotFound(name, base, f"{files[MANIFEST_FILE].path} is not valid JSON: {error}") from None
    if not isinstance(manifest, dict):
        raise ImageNotFound(name, base, f"{files[MANIFEST_FILE].path} is not a JSON object")
    return Image(
        name=name,
        path=path,
        kernel=files[KERNEL_FILE],
        initrd=files[INITRD_FILE],
        rootfs=files[ROOTFS_FILE],
        manifest=manifest,
    )


@frozen
class ImageInfo:
    """
    A built image as listed (``GET /images``, ``vmctl image list``).

    :ivar name: the image name (the symbolic link's).
    :ivar path: its current build's directory.
    :ivar size: the bytes of its kernel, initramfs and root file system (apparent sizes).
    :ivar created: when the build was made: the manifest's ``built_at``, else the directory's
        modification time (UTC).
    :ivar source: where it comes from: the manifest's ``source`` (``recipe:<name>``, ``oci:<reference>``),
        else ``recipe:<name>`` (builds from before the key was written).
    :ivar recipe_hash: the manifest's ``recipe_hash`` (the build's key); ``None`` when it has none.
    :ivar ssh_server: whether it has the SSH server (the manifest's ``ssh_server``); ``None`` when the
        manifest does not say.
    """

    name: str
    path: str
    size: int
    created: datetime.datetime
    source: str
    recipe_hash: str | None
    ssh_server: bool | None


def _created(image: Image) -> datetime.datetime:
    built = image.manifest.get("built_at")
    if isinstance(built, str):
        try:
            when = datetime.datetime.fromisoformat(built)
        except ValueError:
            pass
        else:
            return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)
    mtime = os.stat(image.path.path).st_mtime
    return datetime.datetime.fromtimestamp(int(mtime), datetime.timezone.utc)


def list_images(image_dir: str | FilePath[str]) -> list[ImageInfo]:
    """
    Every usable image in ``image_dir``, by name: each ``<name>`` symbolic link that
    :func:`resolve_image` accepts. Links to incomplete builds, build directories, the download cache and
    lock files are not images. A missing directory has none.
    """
    base = image_dir.path if isinstance(image_dir, FilePath) else os.fspath(image_dir)
    try:
        entries = sorted(os.listdir(base))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        if entry.startswith(".") or not os.path.islink(os.path.join(base, entry)):
            continue
        try:
            image = resolve_image(base, entry)
        except ImageNotFound:
            continue
        source = image.manifest.get("source")
        digest = image.manifest.get("recipe_hash")
        ssh = image.manifest.get("ssh_server")
        found.append(ImageInfo(
            name=entry,
            path=image.path.path,
            size=sum(file.getsize() for file in (image.kernel, image.initrd, image.rootfs)),
            created=_created(image),
            source=source if isinstance(source, str) and source else f"recipe:{entry}",
            recipe_hash=digest if isinstance(digest, str) else None,
            ssh_server=ssh if isinstance(ssh, bool) else None,
        ))
    return found
