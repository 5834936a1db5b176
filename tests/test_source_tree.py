"""
The source tree's house rules, read from the files themselves: the size of the
modules and functions of the packages most work lands in, their place in the
module list of docs/architecture.md, ``test-case-name`` headers that name
test modules that exist, reactor parameters typed with interfaces, and no
test module imported by another module (what tests share lives in harness
modules).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

ROOT = Path(__file__).resolve().parent.parent

#: The packages held to the size limits: all of the daemon, its guest agent, its client and its plugin.
SIZED_PACKAGES = ("vmservice", "twisted/plugins")
#: The packages whose every module docs/architecture.md names: all of them.
MAPPED_PACKAGES = ("vmservice", "twisted/plugins")
#: The most lines a module of those packages may have.
MAX_MODULE_LINES = 400
#: The most lines (``def`` to its last line) a function of those packages may have.
MAX_FUNCTION_LINES = 60

#: Functions over the limit for now, as (module path, function name).  Each is
#: a debt to pay, not a licence: shorten it and take it off this list (the test
#: fails while a listed function is within the limit, so the list cannot go stale).
OVER_LIMIT_FOR_NOW: set[tuple[str, str]] = set()


#: Modules over the limit for now, on the same terms as OVER_LIMIT_FOR_NOW.
MODULES_OVER_LIMIT_FOR_NOW: set[str] = set()


def _modules(packages: tuple[str, ...]) -> list[Path]:
    return sorted(path for package in packages for path in (ROOT / package).rglob("*.py"))


def _functions(path: Path) -> list[tuple[str, int]]:
    """Every function of ``path`` (nested ones too) with its length in lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [
        (node.name, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


class SizeTests(SynchronousTestCase):
    def test_packages_present(self) -> None:
        """The limits are checked on real files (a moved package would make the other tests vacuous)."""
        self.assertGreater(len(_modules(("vmservice",))), 150)
        self.assertEqual(len(_modules(("twisted/plugins",))), 1)

    def test_modules(self) -> None:
        """No module of vmservice/ or twisted/plugins/ is over 400 lines, but those listed for now."""
        over = {
            str(path.relative_to(ROOT)): lines
            for path in _modules(SIZED_PACKAGES)
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
        }
        self.assertEqual(set(over), MODULES_OVER_LIMIT_FOR_NOW, over)

    def test_fleet(self) -> None:
        """The node layer's facade stays a facade: nodes/fleet.py under 300 lines (the work is in the modules it names)."""
        lines = len((ROOT / "vmservice" / "nodes" / "fleet.py").read_text(encoding="utf-8").splitlines())
        self.assertLess(lines, 300)

    def test_functions(self) -> None:
        """No function of vmservice/ or twisted/plugins/ is over 60 lines, but those listed for now."""
        over = {
            (str(path.relative_to(ROOT)), name): lines
            for path in _modules(SIZED_PACKAGES)
            for name, lines in _functions(path)
            if lines > MAX_FUNCTION_LINES
        }
        self.assertEqual(set(over), OVER_LIMIT_FOR_NOW, over)

    def test_function_length(self) -> None:
        """A function's length counts from its ``def`` to its last line."""
        path = Path(self.mktemp())
        path.write_text("def f():\n    a = 1\n\n    return a\n\n\nx = 2\n", encoding="utf-8")
        self.assertEqual(_functions(path), [("f", 4)])


#: ``# -*- test-case-name: a.b,c.d -*-`` in the first lines of a file.
TEST_CASE_NAME = re.compile(r"test-case-name:\s*([\w.,]+)")


class TestCaseNameTests(SynchronousTestCase):
    def test_headers_name_test_modules(self) -> None:
        """Every ``test-case-name`` header names test modules (or packages) that exist."""
        named = 0
        missing = []
        for path in _modules(("vmservice", "tests", "bench", "twisted")):
            with path.open(encoding="utf-8", errors="replace") as lines:
                head = "".join(lines.readline() for _ in range(3))
            found = TEST_CASE_NAME.search(head)
            if found is None:
                continue
            for name in filter(None, found.group(1).split(",")):
                named += 1
                target = ROOT / name.replace(".", "/")
                if not (target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()):
                    missing.append(f"{path.relative_to(ROOT)}: {name}")
        self.assertGreater(named, 50)
        self.assertEqual(missing, [])


class ArchitectureTests(SynchronousTestCase):
    def test_module_list(self) -> None:
        """docs/architecture.md names every module of vmservice/ and the plugin (its module list is the map)."""
        doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
        missing = [
            str(path.relative_to(ROOT))
            for path in _modules(MAPPED_PACKAGES)
            if path.name != "__init__.py"
            and not re.search(r"(?<![\w/])" + re.escape(path.name), doc)
            and str(path.relative_to(ROOT)) not in doc
        ]
        self.assertEqual(missing, [])


class ReactorTypeTests(SynchronousTestCase):
    def test_reactors_typed(self) -> None:
        """No ``reactor`` or ``clock`` parameter in vmservice is typed ``Any``: each names the interfaces it needs."""
        untyped = []
        for path in _modules(("vmservice",)):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for arg in node.args.args + node.args.kwonlyargs:
                        if arg.arg in ("reactor", "clock") and (
                            arg.annotation is None or ast.unparse(arg.annotation).strip("'\"") == "Any"
                        ):
                            untyped.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({arg.arg})")
        self.assertEqual(untyped, [])


def _module_name(path: Path, root: Path) -> tuple[str, ...]:
    """The dotted name of the module at ``path`` under ``root``, as its parts."""
    parts = path.relative_to(root).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def imports_of_test_modules(path: Path, root: Path = ROOT) -> list[str]:
    """
    Every import in ``path`` (nested ones too) of a test module, one whose
    name's last part starts with ``test_``, as ``"<path>:<line> <module>"``.
    Relative imports are resolved against the module's package; ``from a
    import test_b`` counts when ``a/test_b.py`` exists under ``root``.
    """
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] if node.level else ())
            target = ".".join(filter(None, [base, node.module or ""]))
            names = [target] + [
                f"{target}.{alias.name}" for alias in node.names
                if (root.joinpath(*target.split("."), alias.name).with_suffix(".py")).is_file()
            ]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.rsplit(".", 1)[-1].startswith("test_")]
    return [f"{path.relative_to(root)}:{line} {name}" for line, name in sorted(found)]


class HarnessTests(SynchronousTestCase):
    def test_no_test_module_imported(self) -> None:
        """
        No module under tests/ or bench/ imports a test module: what several
        test modules share (fakes, base test cases, sample data) lives in a
        harness module named after what it holds.
        """
        paths = _modules(("tests", "bench"))
        self.assertGreater(len(paths), 200)
        self.assertEqual([found for path in paths for found in imports_of_test_modules(path)], [])

    def test_imports_found(self) -> None:
        """Absolute, relative, nested and ``from package import test_module`` imports of test modules are found."""
        root = Path(self.mktemp())
        (root / "tests" / "a").mkdir(parents=True)
        (root / "tests" / "a" / "test_e.py").write_text("", encoding="utf-8")
        source = root / "tests" / "a" / "b.py"
        source.write_text(
            "from tests.a.test_c import helper\n"
            "from .test_d import Case\n"
            "from . import test_e, fakes\n"
            "import tests.test_f\n"
            "def f():\n"
            "    from tests.a.test_g import x\n"
            "from tests.a.fakes import test_helper\n"
            "from tests.a.harness import thing\n",
            encoding="utf-8",
        )
        self.assertEqual(imports_of_test_modules(source, root), [
            "tests/a/b.py:1 tests.a.test_c",
            "tests/a/b.py:2 tests.a.test_d",
            "tests/a/b.py:3 tests.a.test_e",
            "tests/a/b.py:4 tests.test_f",
            "tests/a/b.py:6 tests.a.test_g",
        ])



def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """
    The modules of ``modules`` that ``path`` imports: every import statement
    counted, those under ``if TYPE_CHECKING:`` and inside functions too (a
    type in the wrong module is still an arrow), each resolved to the deepest
    module that exists (``from a import b`` names ``a.b`` when it is a module).
    """
    module = _module_name(path, ROOT)
    package = module if path.name == "__init__.py" else module[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] if node.level else ())
            target = ".".join(filter(None, [base, node.module or ""]))
            targets = [target] + [f"{target}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    found.discard(".".join(module))
    return found


def import_graph() -> dict[str, set[str]]:
    """The import graph of vmservice/: each module's name to the names of the vmservice modules it imports."""
    modules = {".".join(_module_name(path, ROOT)): path for path in _modules(("vmservice",))}
    return {name: _imports(path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The import circles of ``graph`` (its strongly connected components of more than one module, sorted)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[tuple[str, ...]] = set()

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in sorted(graph.get(name, ())):
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == name:
                    break
            if len(component) > 1:
                found.add(tuple(sorted(component)))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


#: The layers of vmservice/, lowest first: a module imports from its own
#: layer and those below, never from one above.  Each layer is a list of
#: module names, a name standing for itself and every module below it.
LAYERS: list[tuple[str, ...]] = [
    ("vmservice.__init__", "vmservice.version", "vmservice.wire", "vmservice.errors", "vmservice.private_files",
     "vmservice.durable", "vmservice.structuring", "vmservice.durations", "vmservice.observer",
     "vmservice.buffer_budget", "vmservice.devices", "vmservice._duplex", "vmservice.sshkeys",
     "vmservice.bounded_body", "vmservice.quiet_pool"),
    ("vmservice.guest", "vmservice.client"),
    ("vmservice.config", "vmservice.hypervisors", "vmservice.storage", "vmservice.images", "vmservice.network",
     "vmservice.auth", "vmservice.audit"),
    ("vmservice.guestport",),
    ("vmservice.agent",),
    ("vmservice.nodes",),
    # Warm start above the node core, which asks for it through nodes.warm_port (never imports it).
    ("vmservice.nodes.warm",),
    ("vmservice.secretstore", "vmservice.codehost", "vmservice.metrics", "vmservice.nodestats_metrics"),
    ("vmservice.api", "vmservice.cluster", "vmservice.e2b"),
    ("vmservice.service", "vmservice.listening"),
    ("vmservice.tap", "vmservice.cli", "vmservice.devcluster"),
]


def layer_of(name: str) -> int:
    """The index in LAYERS of the layer module ``name`` belongs to (the longest name that covers it)."""
    name = "vmservice.__init__" if name == "vmservice" else name
    covering = [
        (len(prefix), number)
        for number, layer in enumerate(LAYERS)
        for prefix in layer
        if name == prefix or name.startswith(prefix + ".")
    ]
    if not covering:
        raise KeyError(f"{name} is in no layer of LAYERS")
    return max(covering)[1]


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def core_to_warm(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The imports of ``graph`` from the node core (vmservice/nodes/ but nodes/warm/) of warm start (nodes/warm/)."""
    warm = "vmservice.nodes.warm"
    return {(name, other) for name, imported in graph.items() for other in imported
            if _under(name, "vmservice.nodes") and not _under(name, warm) and _under(other, warm)}


#: Import circles still to break, as sorted tuples of module names, on the
#: terms of OVER_LIMIT_FOR_NOW (the test fails once one is gone, so it comes off).
CIRCLES_FOR_NOW: set[tuple[str, ...]] = set()

#: Imports that run from a lower layer up, still to turn around, as
#: (importer, imported) on the same terms.
UPWARD_FOR_NOW: set[tuple[str, str]] = set()


#: Imports of the daemon's layers by the client side, on the same terms.
CLIENT_TO_DAEMON_FOR_NOW: set[tuple[str, str]] = set()


class BenchImportTests(SynchronousTestCase):
    """The benchmarks name the daemon's code where it is: they run outside the unit suite, so a move is caught here."""

    def test_bench_imports_resolve(self) -> None:
        """Every ``from vmservice... import name`` of bench/ (in functions too) names a module and a name that exist."""
        missing = []
        for path in sorted((ROOT / "bench").glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("vmservice"):
                    assert node.module is not None
                    try:
                        module = importlib.import_module(node.module)
                    except ImportError:
                        missing.append(f"{path.name}:{node.lineno} {node.module}")
                        continue
                    missing += [f"{path.name}:{node.lineno} {node.module}.{alias.name}" for alias in node.names
                                if not hasattr(module, alias.name) and not (
                                    hasattr(module, "__path__")
                                    and importlib.util.find_spec(f"{node.module}.{alias.name}") is not None)]
        self.assertEqual(missing, [])


class ImportGraphTests(SynchronousTestCase):
    def test_no_circles(self) -> None:
        """No module of vmservice/ imports, directly or not, a module that imports it (but those listed for now)."""
        self.assertEqual(circles(import_graph()), CIRCLES_FOR_NOW)

    def test_layers(self) -> None:
        """Every import of vmservice/ points to the importer's own layer or one below (but those listed for now)."""
        graph = import_graph()
        self.assertGreater(len(graph), 150)
        upward = {(name, other) for name, imported in graph.items() for other in imported
                  if layer_of(other) > layer_of(name)}
        self.assertEqual(upward, UPWARD_FOR_NOW)

    def test_client_side_apart(self) -> None:
        """The CLI and the client reach the daemon over HTTP only: they import none of its node, agent or API layers."""
        daemon = ("vmservice.guestport", "vmservice.agent", "vmservice.nodes", "vmservice.api", "vmservice.service")
        client = ("vmservice.cli", "vmservice.client")
        found = {(name, other) for name, imported in import_graph().items() for other in imported
                 if name.startswith(client) and other.startswith(daemon)}
        self.assertEqual(found, CLIENT_TO_DAEMON_FOR_NOW)

    def test_node_core_apart_from_warm_start(self) -> None:
        """No module of vmservice/nodes/ outside nodes/warm/ imports nodes/warm/ (TYPE_CHECKING and in-function imports count)."""
        self.assertEqual(core_to_warm(import_graph()), set())

    def test_core_to_warm_found(self) -> None:
        """An import of nodes/warm/ by a core module of nodes/ is found; one by warm start or by the service is not."""
        graph = {"vmservice.nodes.runtime": {"vmservice.nodes.warm.spare", "vmservice.nodes.model"},
                 "vmservice.nodes.warm.cloning": {"vmservice.nodes.runtime", "vmservice.nodes.warm.spare"},
                 "vmservice.service.assembly": {"vmservice.nodes.warm.starts"}}
        self.assertEqual(core_to_warm(graph), {("vmservice.nodes.runtime", "vmservice.nodes.warm.spare")})

    def test_every_module_layered(self) -> None:
        """Every module of vmservice/ is in a layer (a new package must be placed)."""
        for name in import_graph():
            layer_of(name)

    def test_circles_found(self) -> None:
        """Circles of two and three modules are found, each once; a chain is none."""
        graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
        self.assertEqual(circles(graph), {("a", "b"), ("c", "d", "e")})

    def test_imports_resolved(self) -> None:
        """Relative, nested and TYPE_CHECKING imports are resolved to the deepest module that exists."""
        path = ROOT / "vmservice" / "nodes" / "fleet.py"
        modules = {name: ROOT for name in ("vmservice.nodes.model", "vmservice.nodes", "vmservice.errors")}
        found = _imports(path, modules)
        self.assertIn("vmservice.nodes.model", found)
        self.assertIn("vmservice.errors", found)
