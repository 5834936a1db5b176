# -*- test-case-name: tests.images.test_main -*-
"""
``python -m vmservice.images``: build guest images and show where they are.

Usage::

    python -m vmservice.images build [--image-dir DIR] [--name default] [--force]
    python -m vmservice.images show [--image-dir DIR] [--name default]
    python -m vmservice.images import [--image-dir DIR] [--ref REF] [--force] NAME FILE

``--image-dir`` defaults to ``$VMSERVICE_IMAGE_DIR`` or ``/var/cache/vmservice/images``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from vmservice.images.build import BuildError, build_image
from vmservice.images.imported import ImportFailed, import_image
from vmservice.images.recipe import RecipeError
from vmservice.images.store import ImageNotFound, default_image_dir, resolve_image

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m vmservice.images", description="vmservice guest images")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build an image unless it is up to date")
    show = commands.add_parser("show", help="print the manifest of the current build of an image")
    for command in (build, show):
        command.add_argument("--image-dir", default=None,
                             help="where images live (default: $VMSERVICE_IMAGE_DIR or /var/cache/vmservice/images)")
        command.add_argument("--name", default="default", help="the image (recipe) name")
    build.add_argument("--force", action="store_true", help="rebuild even if an up-to-date build exists")
    imported = commands.add_parser("import", help="make an image of an OCI image layout or a docker save tar file")
    imported.add_argument("--image-dir", default=None,
                          help="where images live (default: $VMSERVICE_IMAGE_DIR or /var/cache/vmservice/images)")
    imported.add_argument("--ref", default="", help="the image to take when FILE holds several (ref name or tag)")
    imported.add_argument("--force", action="store_true", help="import again even if up to date")
    imported.add_argument("image_name", metavar="NAME", help="the name of the new image")
    imported.add_argument("file", metavar="FILE", help="an OCI image layout directory, or a tar file of one or of docker save")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the command line; return the process exit status (0 on success, 1 on a failed build or a missing
    image).

    :param argv: the arguments after the program name (``sys.argv[1:]`` by default).
    """
    options = _parser().parse_args(argv)
    image_dir = options.image_dir or default_image_dir()
    try:
        if options.command == "build":
            build_image(image_dir, options.name, force=options.force, out=lambda line: print(line, flush=True))
        elif options.command == "import":
            import_image(image_dir, options.image_name, options.file, ref=options.ref, force=options.force,
                         out=lambda line: print(line, flush=True))
        else:
            image = resolve_image(image_dir, options.name)
            print(json.dumps({"path": image.path.path, **image.manifest}, indent=2, sort_keys=True))
    except (BuildError, RecipeError, ImageNotFound, ImportFailed) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
