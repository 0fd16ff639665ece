#!/usr/bin/env python3
"""Re-apply issue 24's layout (docs/layout.md) mechanically, on any checkout of main.

    python tools/relayout.py            # from the repository's root, on a clean tree

1. ``git mv`` every moved file (its content untouched, so history follows it);
2. create the one new package, ``harness/system/`` (its ``__init__.py``);
3. move ``module_installed`` from ``harness/backends.py`` to
   ``harness/system/modules.py`` (backends.py imports it from there, and keeps
   exporting it);
4. rewrite, in every tracked text file, the old module paths (``harness.plugin``),
   file paths (``harness/_expected.py``), ``from harness import leaks`` style
   imports of moved modules (an underscore dropped from a name is kept as an
   alias: ``from harness.pytest_plugin import residue as _residue``), and the
   few strings that name a moved file in pieces;
5. sort the imports it touched (``ruff check --fix --select I001,F401``), and fix
   the two lines that sort leaves to ruff's dislike (``FIXUPS``).

What it cannot do by rule (the handwritten commits after the one it made on
branch ``layout``): the README's "Development" section, the docstrings of the
packages, ``register_stacks`` in ``harness/__init__.py``, a sentence on it in
docs/implementers.md, docs/layout.md and tests/unit/test_layout.py.
Run twice, it changes nothing the second time.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

#: old path -> new path, all under harness/.
MOVES: list[tuple[str, str]] = [
    # system: what a process holds and how to look
    ("harness/_stacks.py", "harness/system/stacks.py"),
    ("harness/_environ.py", "harness/system/environ.py"),
    ("harness/leaks.py", "harness/system/leaks.py"),
    ("harness/gpus.py", "harness/system/gpus.py"),
    # The reaper runs as ``python -m <its module>``: in pytest_plugin/, whose
    # __init__ imports it, runpy would warn and the reaper would load pytest.
    ("harness/_reaper.py", "harness/system/reaper.py"),
    # executors
    ("harness/futures.py", "harness/executors/futures.py"),
    ("harness/executors/multiproc.py", "harness/executors/mp/__init__.py"),
    ("harness/shm.py", "harness/executors/mp/shm.py"),
    ("harness/worker.py", "harness/executors/mp/worker.py"),
    ("harness/executors/ray.py", "harness/executors/ray/__init__.py"),
    ("harness/executors/_ray_executor.py", "harness/executors/ray/executor.py"),
    ("harness/executors/_ray_cluster.py", "harness/executors/ray/cluster.py"),
    ("harness/executors/vllm.py", "harness/executors/vllm/__init__.py"),
    ("harness/executors/_vllm_workers.py", "harness/executors/vllm/workers.py"),
    # The report's notes name this file by its name ("vllm_known_failures.txt:8"): it keeps it.
    ("harness/executors/vllm_known_failures.txt", "harness/executors/vllm/vllm_known_failures.txt"),
    # conformance: the suite
    ("harness/probes.py", "harness/conformance/probes.py"),
    ("harness/models.py", "harness/conformance/models.py"),
    # pytest_plugin
    ("harness/plugin.py", "harness/pytest_plugin/__init__.py"),
    ("harness/_plugin_options.py", "harness/pytest_plugin/options.py"),
    ("harness/_isolation.py", "harness/pytest_plugin/isolation.py"),
    ("harness/_parallel.py", "harness/pytest_plugin/parallel.py"),
    ("harness/_outcomes.py", "harness/pytest_plugin/outcomes.py"),
    ("harness/_expected.py", "harness/pytest_plugin/expected.py"),
    ("harness/_residue.py", "harness/pytest_plugin/residue.py"),
    # report, perf
    ("harness/report.py", "harness/report/__init__.py"),
    ("harness/bench.py", "harness/perf/bench.py"),
]

#: Bare names of moved modules as the docstrings write them (``_isolation``).
BARE_NAMES = {
    "_plugin_options": "options",
    "_isolation": "isolation",
    "_parallel": "parallel",
    "_outcomes": "outcomes",
    "_expected": "expected",
    "_reaper": "system.reaper",
    "_residue": "residue",
    "_stacks": "system.stacks",
    "_environ": "system.environ",
    "_ray_executor": "ray.executor",
    "_ray_cluster": "ray.cluster",
    "_vllm_workers": "vllm.workers",
}

SYSTEM_INIT = '''"""What a process holds, and how to look at it: its processes, threads,
shared-memory segments and sockets (``leaks``), its GPUs (``gpus``), its
stacks at a hang (``stacks``), its environment (``environ``), which modules
it can import (``modules``); and the reaper (``reaper``), the process that
ends what a dying test run leaves behind (it runs as ``python -m``, so it
lives where no ``__init__.py`` imports it before runpy does).

The ground floor, beside ``harness.contract``: it may import nothing of harness's.
"""
'''

MODULES_PY = '''"""Which modules this process can import, found without importing them."""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["module_installed"]


'''

#: What the rewrites leave that ruff refuses: (file, text, replacement), after the import sort.
FIXUPS: list[tuple[str, str, str]] = [
    # A comment the longer module path takes past 120 columns.
    (
        "harness/pytest_plugin/outcomes.py",
        "# A known failure (harness.pytest_plugin.expected) is a failure",
        "# A known failure (pytest_plugin.expected) is a failure",
    ),
    # Two imports after importorskip, each with its noqa, that the sort joins.
    (
        "tests/unit/test_decoder.py",
        "from harness.conformance import (\n    _tensor_parallel,  # noqa: E402\n    models,  # noqa: E402\n)\n",
        "from harness.conformance import _tensor_parallel, models  # noqa: E402\n",
    ),
]

SKIP = {"tools/relayout.py"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".sh", ".yml", ".yaml", ".cfg", ".ini", ""}


def module_of(path: str) -> str:
    name = path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def module_renames() -> list[tuple[str, str]]:
    pairs = [(module_of(a), module_of(b)) for a, b in MOVES if a.endswith(".py")]
    pairs = [(a, b) for a, b in pairs if a != b]
    return sorted(pairs, key=lambda p: -len(p[0]))


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def move_files() -> None:
    for old, new in MOVES:
        if not Path(old).exists():
            if not Path(new).exists():
                sys.exit(f"relayout: neither {old} nor {new} exists")
            continue
        Path(new).parent.mkdir(parents=True, exist_ok=True)
        git("mv", old, new)
        print(f"moved {old} -> {new}")


def make_system_package() -> None:
    init = Path("harness/system/__init__.py")
    if not init.exists():
        init.write_text(SYSTEM_INIT)
        git("add", str(init))
    modules = Path("harness/system/modules.py")
    backends = Path("harness/backends.py")
    text = backends.read_text()
    found = re.search(r"\ndef module_installed\(.*?(?=\n\n\n)", text, re.S)
    if found is None:
        return  # moved already
    function = found.group(0).lstrip("\n")
    modules.write_text(MODULES_PY + function + "\n")
    git("add", str(modules))
    text = text[: found.start()] + text[found.end() + 2 :]
    text = text.replace(
        "from harness.contract import CLAUSES, START_METHODS, Backend\n",
        "from harness.contract import CLAUSES, START_METHODS, Backend\n"
        "from harness.system.modules import module_installed\n",
        1,
    )
    backends.write_text(text)
    print("moved module_installed -> harness/system/modules.py")


def _from_harness_import(renames: dict[str, str]) -> Callable[[re.Match[str]], str]:
    """``from harness import A, leaks, _residue`` -> one statement per package."""

    def rewrite(m: re.Match[str]) -> str:
        line_start = m.string.rfind("\n", 0, m.start()) + 1
        before = m.string[line_start : m.start()]
        in_string = (before.count('"') + before.count("'")) % 2 == 1
        groups: dict[str, list[str]] = {}
        for raw in m.group("names").split(","):
            item = raw.strip()
            name, _, alias = item.partition(" as ")
            name, alias = name.strip(), alias.strip()
            new = renames.get(f"harness.{name}")
            if new is None:
                groups.setdefault("harness", []).append(item)
                continue
            package, _, short = new.rpartition(".")
            shown = alias or name
            groups.setdefault(package, []).append(short if short == shown else f"{short} as {shown}")
        if list(groups) == ["harness"]:
            return m.group(0)
        statements = [f"from {package} import {', '.join(names)}" for package, names in groups.items()]
        return ("; " if in_string or before.strip() else "\n" + before).join(statements)

    return rewrite


def _import_cluster_lazily(text: str) -> str:
    top = re.compile(r"^from harness\.executors\.ray\.cluster import LocalCluster\n", re.M)
    if not top.search(text):
        return text
    text = top.sub("", text, count=1)
    use = "    cluster = LocalCluster.start("
    lazy = (
        "    # Here, not at the top: the cluster's keeper runs that module with -m.\n"
        "    from harness.executors.ray.cluster import LocalCluster\n\n"
    )
    return text.replace(use, lazy + use, 1)


def rewrite_text() -> list[str]:
    renames = module_renames()
    rename_map = dict(renames)
    path_moves = sorted(MOVES, key=lambda p: -len(p[0]))
    dotted = [(re.compile(r"(?<![\w.])" + re.escape(old) + r"(?!\w)"), new) for old, new in renames]
    paths = [(re.compile(r"(?<![\w.])" + re.escape(old) + r"(?![\w])"), new) for old, new in path_moves]
    bare = [(re.compile(r"``" + re.escape(old) + r"``"), f"``{new}``") for old, new in BARE_NAMES.items()]
    from_import = re.compile(
        r"(?<![\w.])from harness import (?P<names>[A-Za-z_]\w*(?: as \w+)?(?:, [A-Za-z_]\w*(?: as \w+)?)*)"
    )
    rewrite_from = _from_harness_import(rename_map)
    changed_py: list[str] = []
    for name in git("ls-files").splitlines():
        path = Path(name)
        if name in SKIP or name.startswith("tests/perf/baselines"):
            continue
        if path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = text
        for pattern, repl in paths:
            new = pattern.sub(repl, new)
        for pattern, repl in dotted:
            new = pattern.sub(repl, new)
        new = from_import.sub(rewrite_from, new)
        if name.startswith("harness/"):
            for pattern, repl in bare:
                new = pattern.sub(repl, new)
        # The executors take module_installed from its new home, not from the loader above them.
        new = new.replace(
            "from harness.backends import module_installed\n", "from harness.system.modules import module_installed\n"
        )
        # The cluster's keeper runs as ``python -m harness.executors.ray.cluster``:
        # the package must not import it before runpy does.
        if name == "harness/executors/ray/__init__.py":
            new = _import_cluster_lazily(new)
        # Paths built in pieces, and the package data.
        new = new.replace('"executors" / "vllm_known_failures.txt"', '"executors" / "vllm" / "vllm_known_failures.txt"')
        if name == "pyproject.toml":
            new = new.replace('harness = ["executors/*.txt"]', 'harness = ["executors/vllm/*.txt"]')
        if new != text:
            path.write_text(new)
            print(f"rewrote {name}")
            if name.endswith(".py"):
                changed_py.append(name)
    return changed_py


def sort_imports(files: list[str]) -> None:
    ruff = Path(".venv/bin/ruff")
    command = [str(ruff)] if ruff.exists() else [sys.executable, "-m", "ruff"]
    if files:
        subprocess.run([*command, "check", "--fix", "--select", "I001,F401", "--quiet", *files], check=False)


#: tests/perf/ab_commits.py measures two commits, the older of which may predate the layout.
_AB_IMPORT = re.compile(
    r"    import harness\n(?:    try:\n        from harness\.perf\.bench import measure_backend\n"
    r"    except ImportError:.*\n        from harness\.(?:perf\.)?bench import measure_backend\n"
    r"|    from harness\.perf\.bench import measure_backend\n)"
)
_AB_FALLBACK = (
    "    import harness\n"
    "    try:\n"
    "        from harness.perf.bench import measure_backend\n"
    "    except ImportError:  # a commit before the layout of docs/layout.md\n"
    "        from harness.bench import measure_backend\n"
)


def fixups() -> None:
    for name, old, new in FIXUPS:
        path = Path(name)
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, new))
            print(f"fixed {name}")
    path = Path("tests/perf/ab_commits.py")
    text = path.read_text()
    fixed = _AB_IMPORT.sub(lambda _: _AB_FALLBACK, text)
    if fixed != text:
        path.write_text(fixed)


def main() -> None:
    if not Path("harness/contract.py").exists():
        sys.exit("relayout: run it from the repository's root")
    move_files()
    make_system_package()
    changed = rewrite_text()
    sort_imports(sorted({*changed, "harness/backends.py", "harness/system/modules.py"}))
    fixups()
    git("add", "-A", "harness", "tests", "docs", "ci", "README.md", "Makefile", "pyproject.toml", "conftest.py")


if __name__ == "__main__":
    main()
