# -*- test-case-name: tests.cli.test_images,tests.cli.test_main -*-
"""
``vmctl image``: building and importing guest images on this machine (no
daemon involved; the builders imported only when used), and listing the
images a daemon can make nodes from.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from ..client import Client
from . import output
from .commands import Command, CommandGroup, add_json_option
from .context import Context, Failed

__all__ = ["IMAGE"]


async def _image_list(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl image list``: list the images the daemon can make nodes from."""
    out = context.out
    images = await client.images()
    out.write(output.format_listing(images, options.json, output.IMAGE_HEADERS, output.image_rows))
    return 0


def _image_build(options: argparse.Namespace, out: TextIO) -> int:
    """Build an image on this machine (no daemon involved); the builder is imported only here."""
    from ..images.build import BuildError, build_image
    from ..images.recipe import RecipeError
    from ..images.store import ImageNotFound, default_image_dir

    def progress(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    if options.name and options.name_option and options.name != options.name_option:
        raise Failed(f"two image names given: {options.name} and {options.name_option}")
    name = options.name or options.name_option or "default"
    try:
        build_image(options.image_dir or default_image_dir(), name=name, force=options.force, out=progress)
    except (BuildError, RecipeError, ImageNotFound) as error:
        raise Failed(str(error)) from None
    return 0


def _image_import(options: argparse.Namespace, out: TextIO) -> int:
    """Import a container image on this machine (no daemon involved): ``python -m vmservice.images import``."""
    from ..images.imported import ImportFailed, import_image
    from ..images.store import ImageNotFound, default_image_dir

    def progress(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    try:
        import_image(options.image_dir or default_image_dir(), options.image_name, options.file, ref=options.ref,
                     force=options.force, out=progress)
    except (ImportFailed, ImageNotFound) as error:
        raise Failed(str(error)) from None
    return 0

def _image_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image-dir", metavar="DIR",
                        help="where images live (default: $VMSERVICE_IMAGE_DIR or /var/cache/vmservice/images)")


def _build_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl image build``."""
    parser.add_argument("name", nargs="?", metavar="NAME",
                        help="the image (recipe) name: a file vmservice/images/recipes/NAME.toml (default: default)")
    _image_dir_argument(parser)
    parser.add_argument("--name", dest="name_option", metavar="NAME", help="the same as NAME")
    parser.add_argument("--force", action="store_true", help="rebuild even if an up-to-date build exists")


def _import_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl image import``."""
    _image_dir_argument(parser)
    parser.add_argument("--ref", default="", help="the image to take when FILE holds several (ref name or tag)")
    parser.add_argument("--force", action="store_true", help="import again even if up to date")
    parser.add_argument("image_name", metavar="NAME", help="the name of the new image")
    parser.add_argument("file", metavar="FILE", help="an OCI image layout directory, or a tar file")


IMAGE = CommandGroup("image", "guest images on this machine", "Guest images on this machine.", "image_command", (
    Command("build", "build a guest image unless it is up to date", _build_arguments, None, _image_build,
            description="Build a guest image unless it is up to date.", connection=False),
    Command("list", "list the images the daemon can make nodes from", add_json_option, _image_list,
            description="List the images the daemon can make nodes from."),
    Command("import", "make a guest image of an OCI image layout or a docker save tar file", _import_arguments, None,
            _image_import, connection=False,
            description="Make a guest image of a container image (an OCI image layout directory, or a tar file of "
                        "one or of docker save), on this machine: its layers, our init and agent, and a runtime of "
                        "our own."),
), connection=False)
