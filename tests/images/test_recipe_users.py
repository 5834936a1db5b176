# -*- test-case-name: tests.images.test_recipe_users -*-
"""
Tests for a recipe's ``[[users]]`` (:class:`vmservice.images.recipe.Account`): parsing, the errors of bad
accounts, inheritance through ``extends``, and the hash of a recipe without any.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from vmservice.images.recipe import Account, RecipeError, load_recipe, recipe_hash

_BASE = 'kernel_metapackage = "k"\npackages = ["a", "b"]\ninitramfs_modules = ["m"]\nrootfs_headroom_mib = 8\n'
_USER = '[[users]]\nname = "user"\nuid = 1000\ngid = 1000\nhome = "/home/user"\nshell = "/bin/bash"\n'


class RecipeUsersTests(SynchronousTestCase):
    """
    Recipes in a small package tree of their own: the recipe directory and the package's ``__init__.py``.
    """

    def setUp(self) -> None:
        self.root = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(self.root, "images/recipes"))
        with open(os.path.join(self.root, "__init__.py"), "w"):
            pass

    def write(self, name: str, text: str) -> None:
        with open(os.path.join(self.root, f"images/recipes/{name}.toml"), "w") as stream:
            stream.write(text)

    def refused(self, text: str) -> str:
        self.write("bad", _BASE + text)
        return str(self.assertRaises(RecipeError, load_recipe, "bad", self.root))

    def test_parsed(self) -> None:
        """Each ``[[users]]`` table is an Account, in order; ``sudo`` defaults to false."""
        self.write("one", _BASE + _USER + "sudo = true\n"
                   + _USER.replace('"user"', '"build"').replace("1000", "1001").replace("/home/user", "/srv/b"))
        self.assertEqual(load_recipe("one", self.root).users, (
            Account("user", 1000, 1000, "/home/user", "/bin/bash", True),
            Account("build", 1001, 1001, "/srv/b", "/bin/bash", False),
        ))
        self.write("none", _BASE)
        self.assertEqual(load_recipe("none", self.root).users, ())

    def test_shipped_e2b_recipe(self) -> None:
        """The e2b recipe extends default with sudo, PAM and tput, and the account ``user`` that has sudo."""
        e2b, default = load_recipe("e2b"), load_recipe("default")
        self.assertEqual(e2b.packages[:len(default.packages)], default.packages)
        for package in ("sudo", "libpam-modules", "libpam-runtime", "ncurses-bin", "ncurses-base"):
            self.assertIn(package, e2b.packages)
        self.assertEqual(e2b.users, (Account("user", 1000, 1000, "/home/user", "/bin/bash", True),))
        self.assertEqual(default.users, ())

    def test_inherited(self) -> None:
        """A recipe that extends another has the other's accounts, then its own."""
        self.write("base", _BASE + _USER)
        self.write("more", 'extends = "base"\n' + _USER.replace('"user"', '"two"').replace("1000", "1002"))
        self.assertEqual([account.name for account in load_recipe("more", self.root).users], ["user", "two"])
        self.write("again", 'extends = "base"\n' + _USER.replace("1000", "1003"))
        self.assertIn("name user given twice", str(self.assertRaises(RecipeError, load_recipe, "again", self.root)))

    def test_bad_names(self) -> None:
        """A name that is not a short lowercase login name (nor one a sudoers drop-in would skip) is refused."""
        for name in ("", "User", "1user", "-user", "us.er", "us:er", "a" * 33, "user\\n"):
            self.assertIn("name must be", self.refused(_USER.replace('"user"', f'"{name}"')))
        self.assertIn("name must be", self.refused(_USER.replace('name = "user"', "name = 7")))

    def test_bad_ids(self) -> None:
        """A user or group id that is not an integer from 1 to 65533 is refused."""
        for value in ("0", "65534", "-1", "70000", "true", '"1000"', "1.5"):
            self.assertIn("uid must be an integer", self.refused(_USER.replace("uid = 1000", f"uid = {value}")))
            self.assertIn("gid must be an integer", self.refused(_USER.replace("gid = 1000", f"gid = {value}")))
        self.assertIn("uid must be", self.refused(_USER.replace("uid = 1000\n", "")))

    def test_bad_paths(self) -> None:
        """A home or shell that is relative, not normal, escapes with ``..`` or holds a ``:`` is refused."""
        for value in ("home/user", "/", "/home/../etc", "/home/./user", "/home//user", "//home", "/home/user/",
                      "/home/us:er", "/home/us er", "/home/user\\n"):
            self.assertIn("home must be", self.refused(_USER.replace('"/home/user"', f'"{value}"')))
        self.assertIn("shell must be", self.refused(_USER.replace('"/bin/bash"', '"/bin/../tmp/x"')))
        self.assertIn("shell must be", self.refused(_USER.replace('shell = "/bin/bash"\n', "")))

    def test_bad_tables(self) -> None:
        """Duplicates, unknown keys, a non-boolean sudo and a users that is not an array of tables are refused."""
        self.assertIn("name user given twice", self.refused(_USER + _USER.replace("1000", "1001")))
        self.assertIn("uid 1000 given twice", self.refused(_USER + _USER.replace('"user"', '"other"')))
        self.assertIn("unknown key password", self.refused(_USER + 'password = "x"\n'))
        self.assertIn("sudo must be", self.refused(_USER + 'sudo = "yes"\n'))
        self.assertIn("users must be an array", self.refused('users = "user"\n'))
        self.assertIn("must be a table", self.refused('users = ["user"]\n'))

    def test_hash_without_users(self) -> None:
        """
        A recipe without ``[[users]]`` hashes as it did before the key existed (the value the builder gave
        this tree then), so no cached image rebuilds for it; accounts change the hash.
        """
        self.write("plain", _BASE)
        self.assertEqual(recipe_hash(load_recipe("plain", self.root), self.root), "02b54bb86ab96bbe")
        before = recipe_hash(load_recipe("plain", self.root), self.root)
        self.write("plain", _BASE + _USER)
        with_user = recipe_hash(load_recipe("plain", self.root), self.root)
        self.assertNotEqual(with_user, before)
        self.write("plain", _BASE + _USER + "sudo = true\n")
        self.assertNotIn(recipe_hash(load_recipe("plain", self.root), self.root), (before, with_user))
