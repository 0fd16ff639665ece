"""The house in wings (docs/layout.md): every module of ``harness`` stands on a
floor, nothing imports a module of a higher floor, and no modules import each
other, directly or round a circle, on one floor either.

``FLOORS`` below is the one statement of the rule. Imports count wherever they
are written: at the top, inside a function (the lazy ones), relative (``from .
import x``), or as ``importlib.import_module("harness.…")`` with a literal name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "harness"

#: The floors, ground up. A key names a module, and a package with every module
#: in it; the root, ``harness``, names its ``__init__.py`` alone (the public
#: API), so a module added at the top must be given a floor here.
FLOORS: dict[str, int] = {
    "harness.contract": 0,  # the API under test and its errors (SPEC.md)
    "harness.system": 0,  # what a process holds and how to look: leaks, GPUs, stacks, environment
    "harness.run_options": 0,  # the options of a run, one table: the plugin's and conform's
    "harness.verdicts": 0,  # outcomes, the skip reasons that say them, the test properties' keys
    "harness.executors": 1,  # the built-in executors: uni, mp, ray, and vLLM's adapter
    "harness.backends": 2,  # the loader: a backend's name or "module:attr" to its factory
    "harness": 3,  # the public API (harness/__init__.py)
    "harness.conformance": 4,  # the suite: it reaches executors through the contract and the loader
    "harness.report": 5,  # the clause matrix and its renderings
    "harness.perf": 5,  # benchmarks and their baselines
    "harness.chaos": 5,  # the seeded chaos run and its soak: the suite's probes, judged by a model of SPEC.md
    "harness.pytest_plugin": 6,  # hooks, fixtures, isolation, the outcomes into the matrix (the report's cells)
    "harness.__main__": 7,  # the command line
}


def floor_of(module: str) -> int | None:
    if module == "harness":
        return FLOORS["harness"]
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        floor = FLOORS.get(".".join(parts[:end]))
        if floor is not None:
            return floor
    return None


def modules_of(root: Path = HARNESS) -> dict[str, Path]:
    """Every module under harness/, by its dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports_of(module: str, source: str, known: set[str], is_package: bool = False) -> list[tuple[int, str]]:
    """(line, imported module) for every import of a harness module in ``source``,
    the text of ``module`` (a package's ``__init__.py`` where ``is_package``)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.append((node.lineno, submodule if submodule in known else base))
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name == "harness" or name.startswith("harness.")]


def upward_imports(module: str, source: str, known: set[str], path: Path | None = None) -> list[str]:
    """Each import in ``source`` (the text of ``module``, read from ``path``) of a
    module on a higher floor, named with its line and both floors."""
    floor = floor_of(module)
    assert floor is not None, f"{module} is on no floor"
    where = str(path.relative_to(HARNESS.parent)) if path else module
    wrong = []
    for line, imported in imports_of(module, source, known, path is not None and path.name == "__init__.py"):
        above = floor_of(imported)
        if above is not None and above > floor:
            wrong.append(f"{where}:{line}: {module} (floor {floor}) imports {imported} (floor {above}), a higher floor")
    return wrong


def test_every_module_stands_on_a_floor() -> None:
    assert [m for m in modules_of() if floor_of(m) is None] == []


def test_every_floor_names_a_module_that_exists() -> None:
    assert [key for key in FLOORS if key not in modules_of()] == []


def test_nothing_imports_a_module_of_a_higher_floor() -> None:
    modules = modules_of()
    wrong = []
    for module, path in modules.items():
        wrong += upward_imports(module, path.read_text(), set(modules), path)
    assert wrong == []


def test_the_suite_reaches_executors_only_through_the_contract_and_the_loader() -> None:
    modules = modules_of()
    wrong = [
        f"{path.relative_to(HARNESS.parent)}:{line}: the suite imports {imported}"
        for module, path in modules.items()
        if module.startswith("harness.conformance")
        for line, imported in imports_of(module, path.read_text(), set(modules), path.name == "__init__.py")
        if imported.startswith("harness.executors")
    ]
    assert wrong == []


@pytest.mark.parametrize(
    "source",
    [
        "from harness.pytest_plugin import options\n",
        "import harness.conformance.probes\n",
        "def later():\n    from ..pytest_plugin.options import Options\n",
        "import importlib\n\nimportlib.import_module('harness.report')\n",
        "from harness import load_backend\n",
    ],
    ids=["from-import", "import", "relative-and-lazy", "import_module", "the-public-api"],
)
def test_the_check_names_an_executor_that_imports_upward(source: str) -> None:
    known = set(modules_of())
    wrong = upward_imports("harness.executors.uniproc", source, known)
    assert len(wrong) == 1, wrong
    assert wrong[0].startswith("harness.executors.uniproc:")
    assert "(floor 1) imports harness" in wrong[0]
    assert wrong[0].endswith("a higher floor")


def test_the_check_lets_a_module_import_its_own_floor_and_below() -> None:
    known = set(modules_of())
    source = "from harness.contract import ExecutorConfig\nfrom harness.system import leaks\nfrom . import _group\n"
    assert upward_imports("harness.executors.uniproc", source, known) == []


def test_every_package_says_what_it_holds_and_what_it_may_import() -> None:
    silent = [
        str(path.relative_to(HARNESS.parent))
        for path in sorted(HARNESS.rglob("__init__.py"))
        if path.parent != HARNESS and "may import" not in (ast.get_docstring(ast.parse(path.read_text())) or "")
    ]
    assert silent == [], "packages whose docstring does not say what they may import"


def test_docs_layout_shows_the_floors_of_this_table() -> None:
    text = (HARNESS.parent / "docs" / "layout.md").read_text()
    shown: dict[str, int] = {}
    for row in re.findall(r"^\| (\d+) \|(.*)\|$", text, re.M):
        shown |= {name: int(row[0]) for name in re.findall(r"`(harness[\w.]*)`", row[1])}
    assert shown == FLOORS


def import_graph(root: Path = HARNESS) -> dict[str, set[str]]:
    """module -> the harness modules it imports (anywhere in its text, as ``imports_of`` reads them)."""
    modules = modules_of(root)
    known = set(modules)
    return {
        module: {name for _, name in imports_of(module, path.read_text(), known, path.name == "__init__.py")}
        & known - {module}
        for module, path in modules.items()
    }


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another round a circle (a strongly
    connected component of two or more), sorted; Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return sorted(circles)


def test_no_modules_of_harness_import_one_another_round_a_circle() -> None:
    # Lazy imports and those under TYPE_CHECKING count: each still ties the two
    # modules' designs together, whatever order Python happens to load them in.
    assert import_circles(import_graph()) == []


def test_the_circle_check_finds_a_circle_of_two_and_of_three_and_nothing_in_a_chain() -> None:
    graph = {
        "a": {"b"},
        "b": {"a", "c"},
        "c": {"d"},
        "d": {"e"},
        "e": {"c"},
        "f": {"a"},
        "g": set(),
    }
    assert import_circles(graph) == [["a", "b"], ["c", "d", "e"]]
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


#: The longest a function in harness/ may be, in lines (its decorators left out).
LONGEST_FUNCTION = 120


def long_functions(root: Path = HARNESS, limit: int = LONGEST_FUNCTION) -> list[str]:
    """Each function of ``root`` over ``limit`` lines, named with its file, line and length."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {node.name} is {length} lines")
    return found


def test_no_function_in_harness_is_over_120_lines() -> None:
    assert long_functions() == []


def test_the_length_check_names_a_long_function(tmp_path: Path) -> None:
    package = tmp_path / "harness"
    package.mkdir()
    (package / "long.py").write_text("def long():\n" + "    x = 1\n" * 120 + "\n\ndef short():\n    pass\n")
    assert long_functions(package) == ["harness/long.py:1: long is 121 lines"]


def private_imports_across_packages(modules: dict[str, Path]) -> list[str]:
    """Each import of a private name (or from a private module) of another package of harness."""

    def package_of(module: str) -> str:
        return ".".join(module.split(".")[:2])

    found = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness.")):
                continue
            if package_of(node.module) == package_of(module):
                continue
            private = [p for p in node.module.split(".") if p.startswith("_") and not p.startswith("__")]
            private += [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if private:
                found.append(f"{path.relative_to(HARNESS.parent)}:{node.lineno}: {module} imports {', '.join(private)}")
    return found


def test_no_package_imports_another_packages_private_names() -> None:
    # Shared, it is public where it lives: harness.system.watchdog, .processes, conformance.spec_bounds.
    assert private_imports_across_packages(modules_of()) == []
