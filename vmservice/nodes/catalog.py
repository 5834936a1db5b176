# -*- test-case-name: tests.nodes.test_fleet -*-
"""
The host groups and the images nodes are made of: :class:`Catalog` looks
them up by name, with the errors the API answers when there is none.
"""

from __future__ import annotations

from typing import Callable

from ..config import Config, HostGroupConfig
from ..errors import BadRequest, Internal, NotFound
from ..images.store import Image, ImageInfo, ImageNotFound, list_images


class Catalog:
    """
    :param config: the loaded configuration, whose host groups these are.
    :param images: resolves an image name to an :class:`Image`.
    """

    def __init__(self, config: Config, images: Callable[[str], Image]) -> None:
        self.config = config
        self._images = images

    def group(self, name: str) -> HostGroupConfig:
        """
        The host group ``name``.

        :raise NotFound: (``hostgroup_not_found``) there is none.
        """
        group = self.config.group(name)
        if group is None:
            raise NotFound(f"host group {name!r} not found", code="hostgroup_not_found")
        return group

    def image(self, group: HostGroupConfig, name: str = "") -> Image:
        """
        The image ``name``, or ``group``'s when it is empty: the image of a
        node whose record names ``name``.

        :raise Internal: (``image_not_found``) it is not built (any more).
        """
        try:
            return self._images(name or group.image)
        except ImageNotFound as error:
            raise Internal(str(error), code="image_not_found") from error

    def requested_image(self, group: HostGroupConfig, name: str | None) -> Image:
        """
        The image a create asks for: ``name`` (``disk_image``), or
        ``group``'s image when it is ``None``.

        :raise BadRequest: (``unknown_image``) there is no built image
            ``name``; the message names those there are.  (``image_too_large``)
            its root file system is larger than the group's ``storage_size``.
        :raise Internal: (``image_not_found``) the group's image is not built.
        """
        if name is None:
            return self.image(group)
        try:
            image = self._images(name)
        except ImageNotFound:
            built = ", ".join(info.name for info in self.image_list()) or "none"
            raise BadRequest(f"disk_image: no image {name[:64]!r} is built; the images are: {built}",
                             code="unknown_image") from None
        size = image.rootfs.getsize()
        if size > group.storage_size:
            raise BadRequest(f"disk_image: the root file system of image {name!r} ({size} bytes) is larger than "
                             f"host group {group.name!r}'s storage_size ({group.storage_size} bytes)",
                             code="image_too_large")
        return image

    def image_list(self) -> list[ImageInfo]:
        """The images built in the configured image directory (blocking: reads their manifests)."""
        return list_images(self.config.image_dir)


__all__ = ["Catalog"]
