# -*- test-case-name: tests.integration.test_e2b_docs -*-
"""
The examples of ``docs/e2b.md`` run as they are written there against a real
daemon: each code block after a ``<!-- run by tests/integration/test_e2b_docs.py -->``
line, Python with the official Python SDK, JavaScript with the official
JavaScript SDK (:mod:`tests.integration.e2b_js_sdk`); what each prints is
checked against the comments the page gives it (``# 42`` after a
``print``, ``// 42`` after a ``console.log``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from tests.integration.e2b_daemon import E2bDaemonTestCase
from tests.integration.e2b_js_sdk import sdk

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "e2b.md")
MARK = "<!-- run by tests/integration/test_e2b_docs.py -->"
#: The longest an example may take.
EXAMPLE_TIMEOUT = 300


def examples(text: str) -> dict[str, str]:
    """The page's marked code blocks, by language."""
    found = {}
    for match in re.finditer(re.escape(MARK) + r"\n```(\w+)\n(.*?)\n```", text, re.S):
        found[match.group(1)] = match.group(2)
    return found


def expected_lines(code: str, printer: str, comment: str) -> list[str]:
    """What the block's printing lines say they print (their trailing comments), in order."""
    return [line.split(comment, 1)[1].strip() for line in code.splitlines()
            if line.lstrip().startswith(printer) and comment in line]


class DocsExampleTests(E2bDaemonTestCase):
    """docs/e2b.md's examples, in both languages."""

    timeout = 600

    def setUp(self) -> None:
        super().setUp()
        with open(PAGE) as stream:
            self.examples = examples(stream.read())

    def run_example(self, command: list[str], cwd: str) -> list[str]:
        environment = {key: value for key, value in os.environ.items() if key != "E2B_DEBUG"}
        result = subprocess.run(command, env=environment, capture_output=True, timeout=EXAMPLE_TIMEOUT, cwd=cwd)
        self.assertEqual(result.returncode, 0, result.stderr.decode(errors="replace")[-4000:])
        return [line.strip() for line in result.stdout.decode().splitlines() if line.strip()]

    def test_python(self) -> None:
        """The Python example prints what its comments say."""
        code = self.examples["python"]
        with tempfile.TemporaryDirectory() as directory:
            printed = self.run_example([sys.executable, "-c", code], directory)
        self.assertEqual(printed, expected_lines(code, "print(", "# "))

    def test_javascript(self) -> None:
        """The JavaScript example, its ``import`` of ``e2b`` found in the installed SDK, prints what it says."""
        installed = sdk()
        if installed is None:
            self.fail("the E2B JavaScript SDK is not installed: `make e2b-js` (which `make test` runs) installs it")
        code = self.examples["js"]
        with tempfile.TemporaryDirectory() as directory:
            os.symlink(os.path.dirname(os.path.dirname(os.path.dirname(installed.entry))),
                       os.path.join(directory, "node_modules"))
            script = os.path.join(directory, "example.mjs")
            with open(script, "w") as stream:
                stream.write(code + "\n")
            printed = self.run_example([installed.node, script], directory)
        wanted = expected_lines(code, "console.log(", "// ")
        self.assertEqual([line for line in printed if line in wanted], wanted)
