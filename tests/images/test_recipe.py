# -*- test-case-name: tests.images.test_recipe -*-
"""
Tests for :mod:`vmservice.images.recipe`: loading recipes and the recipe hash.
"""

from __future__ import annotations

import os
import shutil

from twisted.trial.unittest import SynchronousTestCase

from vmservice.images.recipe import (RecipeError, builder_sources, guest_sources, load_recipe, package_root,
                                     recipe_hash, recipe_names)


class RecipeTests(SynchronousTestCase):
    """
    Recipes and their hash, on a private copy of the package so files can be changed.
    """

    def setUp(self) -> None:
        self.root = os.path.abspath(self.mktemp())
        shutil.copytree(package_root(), self.root, ignore=shutil.ignore_patterns("__pycache__"))

    def hash(self) -> str:
        return recipe_hash(load_recipe("default", self.root), self.root)

    def edit(self, relative: str, extra: bytes) -> None:
        with open(os.path.join(self.root, relative), "ab") as stream:
            stream.write(extra)

    def test_default_recipe(self) -> None:
        """
        The shipped recipe names the cloud kernel, busybox, bash, tar, Python 3.11 and e2fsprogs, and the
        virtio modules the initramfs must load.
        """
        recipe = load_recipe("default")
        self.assertEqual(recipe.name, "default")
        self.assertEqual(recipe.kernel_metapackage, "linux-image-cloud-amd64")
        for package in ("busybox-static", "bash", "tar", "python3.11-minimal", "libpython3.11-stdlib",
                        "e2fsprogs", "libc6"):
            self.assertIn(package, recipe.packages)
        for module in ("virtio_mmio", "virtio_blk", "virtio_console", "button", "evdev"):
            self.assertIn(module, recipe.initramfs_modules)
        self.assertGreater(recipe.rootfs_headroom_mib, 0)

    def test_hash_is_stable(self) -> None:
        """
        The hash is 16 hex digits and the same for the same files, wherever the tree lives.
        """
        first = self.hash()
        self.assertRegex(first, "^[0-9a-f]{16}$")
        self.assertEqual(first, self.hash())
        self.assertEqual(first, recipe_hash(load_recipe("default")))

    def test_guest_file_changes_hash(self) -> None:
        """
        Changing an init script, a guest module, a wire module, the builder or the recipe changes the
        hash; each change gives a new value.
        """
        seen = {self.hash()}
        for relative in ("guest/files/inittab", "guest/powerbutton.py", "wire/__init__.py",
                         "images/build.py", "images/oci/layers.py", "images/recipes/default.toml"):
            self.edit(relative, b"\n# changed\n")
            value = self.hash()
            self.assertNotIn(value, seen, relative)
            seen.add(value)

    def test_new_guest_file_changes_hash(self) -> None:
        """
        Adding a module to vmservice/guest (it would be copied into the image) changes the hash.
        """
        before = self.hash()
        self.edit("guest/newmodule.py", b"")
        self.assertNotEqual(before, self.hash())

    def test_guest_subpackage_shipped(self) -> None:
        """
        The modules of a subpackage of vmservice/guest (at any depth) and of vmservice/wire are guest
        sources, and adding or changing one changes the hash.
        """
        seen = {self.hash()}
        for relative in ("guest/newpackage/__init__.py", "guest/newpackage/deeper/module.py",
                         "wire/newpackage/__init__.py"):
            os.makedirs(os.path.join(self.root, os.path.dirname(relative)), exist_ok=True)
            self.edit(relative, b"")
            self.assertIn(relative, guest_sources(self.root))
            value = self.hash()
            self.assertNotIn(value, seen, relative)
            seen.add(value)
        self.edit("guest/newpackage/deeper/module.py", b"\n# changed\n")
        self.assertNotIn(self.hash(), seen)

    def test_guest_sources_leave_out(self) -> None:
        """
        Below vmservice/guest, bytecode caches, hidden files and folders and files not ending in .py are
        no guest code; a .py file among the boot files is not shipped as a module; the list is sorted and
        has each file once.
        """
        for relative in ("guest/.hidden/x.py", "guest/sub/__pycache__/x.py", "guest/sub/notes.txt",
                         "guest/sub/.x.py", "guest/files/sub/stray.py"):
            os.makedirs(os.path.join(self.root, os.path.dirname(relative)), exist_ok=True)
            self.edit(relative, b"")
        guest = guest_sources(self.root)
        for relative in ("guest/.hidden/x.py", "guest/sub/__pycache__/x.py", "guest/sub/notes.txt",
                         "guest/sub/.x.py", "guest/files/sub/stray.py"):
            self.assertNotIn(relative, guest)
        modules = [name for name in guest if name.endswith(".py")]
        self.assertEqual(modules[1:], sorted(set(modules[1:])))
        self.assertEqual(modules[0], "__init__.py")

    def test_unrelated_file_keeps_hash(self) -> None:
        """
        Files that do not go into the image (another package, bytecode caches) leave the hash alone.
        """
        before = self.hash()
        os.makedirs(os.path.join(self.root, "guest", "__pycache__"), exist_ok=True)
        self.edit("guest/__pycache__/x.cpython-311.pyc", b"junk")
        self.edit("config.py", b"\n# changed\n")
        self.assertEqual(before, self.hash())

    def test_source_lists(self) -> None:
        """
        The guest sources are the guest and wire modules and the boot files; the builder's are its own
        modules (its subpackage oci/ too) and recipes.
        """
        guest = guest_sources(self.root)
        self.assertIn("guest/powerbutton.py", guest)
        self.assertIn("guest/files/init", guest)
        self.assertIn("wire/__init__.py", guest)
        self.assertIn("images/recipes/default.toml", builder_sources(self.root))
        self.assertIn("images/build.py", builder_sources(self.root))
        self.assertIn("images/oci/layers.py", builder_sources(self.root))

    def test_missing_recipe(self) -> None:
        """
        An unknown image name, or a name that is a path, is a RecipeError naming it.
        """
        error = self.assertRaises(RecipeError, load_recipe, "nosuch", self.root)
        self.assertIn("nosuch", str(error))
        self.assertRaises(RecipeError, load_recipe, "../default", self.root)

    def test_malformed_recipe(self) -> None:
        """
        A recipe that is not TOML, or whose packages are not a list of names, is refused.
        """
        path = os.path.join(self.root, "images/recipes/bad.toml")
        with open(path, "w") as stream:
            stream.write("packages = [")
        self.assertRaises(RecipeError, load_recipe, "bad", self.root)
        with open(path, "w") as stream:
            stream.write('kernel_metapackage = "k"\npackages = "bash"\ninitramfs_modules = []\n'
                         "rootfs_headroom_mib = 1\n")
        self.assertRaises(RecipeError, load_recipe, "bad", self.root)

    def write(self, name: str, text: str) -> None:
        with open(os.path.join(self.root, f"images/recipes/{name}.toml"), "w") as stream:
            stream.write(text)

    def test_dev_recipe(self) -> None:
        """
        The shipped dev recipe extends default: default's packages, kernel and modules, plus git, curl,
        the CA certificates, make, gcc and the SSH server, resolved with their dependencies.
        """
        default, dev = load_recipe("default"), load_recipe("dev")
        self.assertEqual(dev.packages[:len(default.packages)], default.packages)
        for package in ("git", "curl", "ca-certificates", "make", "gcc", "openssh-server", "openssh-sftp-server",
                        "openssh-client"):
            self.assertIn(package, dev.packages)
        self.assertEqual((dev.kernel_metapackage, dev.initramfs_modules, dev.rootfs_headroom_mib),
                         (default.kernel_metapackage, default.initramfs_modules, default.rootfs_headroom_mib))
        self.assertTrue(dev.resolve_dependencies)
        self.assertFalse(default.resolve_dependencies)
        self.assertIn("dpkg", dev.exclude_packages)
        self.assertEqual(recipe_names(), sorted(set(recipe_names()) | {"default", "dev"}))

    def test_extends(self) -> None:
        """
        A recipe that extends another adds its packages and exclusions to the other's and overrides the
        keys it sets; the new keys default to no resolution and no exclusions.
        """
        self.write("base", 'kernel_metapackage = "k"\npackages = ["a", "b"]\ninitramfs_modules = ["m"]\n'
                           'rootfs_headroom_mib = 8\nexclude_packages = ["x"]\n')
        self.write("more", 'extends = "base"\npackages = ["b", "c"]\nresolve_dependencies = true\n'
                           'exclude_packages = ["y"]\nrootfs_headroom_mib = 16\n')
        base, more = load_recipe("base", self.root), load_recipe("more", self.root)
        self.assertEqual((base.resolve_dependencies, more.resolve_dependencies), (False, True))
        self.assertEqual(more.packages, ("a", "b", "c"))
        self.assertEqual(more.exclude_packages, ("x", "y"))
        self.assertEqual((more.kernel_metapackage, more.initramfs_modules, more.rootfs_headroom_mib),
                         ("k", ("m",), 16))
        self.assertIn("more", recipe_names(self.root))
        before = recipe_hash(more, self.root)
        self.write("more", 'extends = "base"\npackages = ["b", "c"]\nresolve_dependencies = false\n')
        self.assertNotEqual(before, recipe_hash(load_recipe("more", self.root), self.root))

    def test_bad_new_keys(self) -> None:
        """
        An unknown key, a resolve_dependencies that is not a boolean, a package both wanted and
        excluded, and a recipe extending itself are refused with the reason.
        """
        base = 'kernel_metapackage = "k"\npackages = ["a"]\ninitramfs_modules = []\nrootfs_headroom_mib = 1\n'
        for extra, reason in (("packgaes = []\n", "unknown key packgaes"),
                              ('resolve_dependencies = "yes"\n', "resolve_dependencies"),
                              ('exclude_packages = ["a"]\n', "a both wanted and excluded"),
                              ('extends = "bad"\n', "extends itself")):
            self.write("bad", base + extra)
            error = self.assertRaises(RecipeError, load_recipe, "bad", self.root)
            self.assertIn(reason, str(error))
        self.write("loop1", 'extends = "loop2"\n')
        self.write("loop2", 'extends = "loop1"\n')
        self.assertIn("extends itself", str(self.assertRaises(RecipeError, load_recipe, "loop1", self.root)))
