"""What a new user reads and runs first: the distribution's name in every
install hint, the contract in the repository (docs/SPEC.md) in step with
``harness.contract``, links that stay inside the repository, and the quick
start's commands as make and pip really run them."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.backends import BUILTIN_BACKENDS, DISTRIBUTION
from harness.contract import CLAUSES, SHIPPED_DOCS, SHIPPED_SOURCES, SPEC_VERSION

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "SPEC.md"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

#: Folders that are not the project's own text (environments, caches, builds).
_NOT_OURS = {
    ".git",
    ".venv",
    ".venv-vllm",
    "venv",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "build",
    "dist",
}


def _repo_files(*suffixes: str) -> list[Path]:
    """The repository's files (tracked or new, not ignored) ending in one of ``suffixes``."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.splitlines()
        paths = [ROOT / name for name in listed]
    else:  # an unpacked sdist: walk it
        paths = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in _NOT_OURS and not d.endswith(".egg-info")]
            paths += [Path(folder) / f for f in files]
    return sorted(p for p in paths if p.name.endswith(suffixes) and p.is_file())


def _pyproject_field(pattern: str) -> list[str]:
    # A regex, not tomllib: Python 3.10, which the project supports, has no tomllib.
    return re.findall(pattern, (ROOT / "pyproject.toml").read_text(encoding="utf-8"), flags=re.MULTILINE)


# --------------------------------------------------------------------------- finding 1: the distribution's name


def test_the_distribution_name_is_ours_not_the_unrelated_harness_on_pypi() -> None:
    assert _pyproject_field(r'^name = "([^"]+)"$') == [DISTRIBUTION]
    assert DISTRIBUTION != "harness"


def test_the_installed_distribution_provides_the_harness_package_plugin_and_command() -> None:
    providers = importlib.metadata.packages_distributions().get("harness")
    if not providers:
        pytest.skip("harness is not installed (taken from PYTHONPATH)")
    # A .venv made before the rename may still hold the old name: `make install` removes it.
    assert set(providers) == {DISTRIBUTION}, f"the package harness comes from {sorted(set(providers))}"
    entry_points = importlib.metadata.distribution(DISTRIBUTION).entry_points
    assert {(ep.group, ep.name) for ep in entry_points} >= {("pytest11", "harness"), ("console_scripts", "harness")}


def _requirements_in_install_hints(text: str) -> Iterator[str]:
    """Each requirement (not an option, not a path) a ``pip install`` in ``text`` names."""
    for line in re.findall(r"pip install ([^\n`|;&)]*)", text):
        try:
            words = shlex.split(line)
        except ValueError:  # a quote closed beyond the match (a string in code)
            words = [w.strip("'\"") for w in line.split()]
        for word in words:
            # Options, paths, and placeholders ($VAR, an f-string's {NAME}) filled in elsewhere.
            if word.startswith(("-", ".", "/", "$", "{")):
                continue
            yield word


def _wrong_install_hints(text: str) -> list[str]:
    """Requirements in ``text`` that would install the wrong project: the name
    ``harness``, or this project's extras under any name but the distribution's."""
    extras = {"ray", "vllm", "vllm-cpu", "perf", "dev"}
    wrong = []
    for req in _requirements_in_install_hints(text):
        name = re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0]
        named_extras = set(re.findall(r"\[([^\]]*)\]", req)[0].split(",")) if "[" in req else set()
        if name.lower() == "harness" or (named_extras & extras and name != DISTRIBUTION):
            wrong.append(req)
    return wrong


def test_the_hint_checker_catches_the_old_hint() -> None:
    assert _wrong_install_hints("install it with: pip install 'harness[ray]'") == ["harness[ray]"]
    assert _wrong_install_hints("`pip install harness`") == ["harness"]
    assert _wrong_install_hints(f"pip install '{DISTRIBUTION}[ray]' torch==2.13.0 -e '.[dev]'") == []


def test_every_builtin_backends_install_hint_names_the_distribution() -> None:
    hints = {name: hint for name, (_, hint) in BUILTIN_BACKENDS.items() if hint}
    assert hints, "no built-in backend has an install hint to check"
    for name, hint in hints.items():
        assert hint.startswith(f"pip install '{DISTRIBUTION}["), f"backend {name!r}: got {hint!r}"
        assert _wrong_install_hints(hint) == [], f"backend {name!r}: got {hint!r}"


def test_no_install_hint_in_the_code_or_docs_names_another_project() -> None:
    # tests/ is left out: its fake backends carry fake hints on purpose.
    files = _repo_files(".py", ".md", ".yml", ".sh", "Makefile")
    files = [p for p in files if "tests" not in p.relative_to(ROOT).parts]
    wrong = {
        str(p.relative_to(ROOT)): bad for p in files if (bad := _wrong_install_hints(p.read_text(encoding="utf-8")))
    }
    assert wrong == {}


# --------------------------------------------------------------------------- finding 2: the spec in the repository


def test_the_specs_clauses_are_contract_clauses_in_order() -> None:
    ids = re.findall(r"^\| (C\d+) \|", SPEC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert ids == list(CLAUSES)


def test_the_specs_version_is_spec_version() -> None:
    versions = re.findall(r"Spec version: (\S+?)\.?\*\*", SPEC.read_text(encoding="utf-8"))
    assert versions == [SPEC_VERSION]


def _without_code(markdown: str) -> str:
    """``markdown`` with fenced blocks and inline code blanked (a `](x)` there is no link)."""
    markdown = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", markdown)


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of ``markdown``."""
    out = set()
    # Fenced blocks hold no headings; a heading's inline code is part of its anchor.
    without_blocks = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", without_blocks, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def _bad_links(root: Path, files: list[Path]) -> list[str]:
    """Links in ``files`` that leave ``root``, name a file that does not exist,
    or an anchor that its file does not have. Web addresses are not checked."""
    bad = []
    root = root.resolve()
    for md in files:
        text = _without_code(md.read_text(encoding="utf-8"))
        targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
        targets += re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", text, flags=re.MULTILINE)
        for target in targets:
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            where = f"{md.relative_to(root)}: ({target})"
            dest = (md.parent / path).resolve() if path else md.resolve()
            if not dest.is_relative_to(root):
                bad.append(f"{where} leaves the repository")
            elif not dest.exists():
                bad.append(f"{where} names no file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8")):
                bad.append(f"{where} names no heading of {dest.relative_to(root)}")
    return bad


def test_the_link_checker_catches_a_link_out_of_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "SPEC.md").write_text("# spec\n")
    (repo / "docs" / "a.md").write_text(
        "# A b\n\n## The `x-y` one\n\n[top](../README.md) [here](#a-b) [code](#the-x-y-one) `[no](../../x)`\n"
    )
    readme = repo / "README.md"
    readme.write_text(
        "[SPEC.md](../shared/SPEC.md) [gone](docs/none.md) [a](docs/a.md#nope) [ok](docs/a.md#a-b) [web](https://x.org)\n"
    )
    assert _bad_links(repo, [readme, repo / "docs" / "a.md"]) == [
        "README.md: (../shared/SPEC.md) leaves the repository",
        "README.md: (docs/none.md) names no file",
        "README.md: (docs/a.md#nope) names no heading of docs/a.md",
    ]


def test_no_markdown_link_leaves_the_repository_or_dangles() -> None:
    files = _repo_files(".md")
    assert ROOT / "README.md" in files
    assert SPEC in files
    assert _bad_links(ROOT, files) == []


def test_the_readme_links_the_spec_in_the_repository() -> None:
    assert "](docs/SPEC.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](SPEC.md" in (ROOT / "docs" / "implementers.md").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- the README: short, and a map of docs/

#: The README is also the package's page on PyPI: what it is, install, the quick
#: start, the one-line run, the outcomes, the commands, and links to docs/.
README_MAX_LINES = 200


def _link_targets(markdown: str) -> list[str]:
    """The targets of the inline links and images of ``markdown``, outside code."""
    return re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", _without_code(markdown))


def test_the_readme_reads_in_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, over {README_MAX_LINES}: move the detail to a page of docs/ and link it"
    )


def test_every_docs_page_is_linked_from_the_readme_and_every_linked_page_exists() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for target in _link_targets(readme)}
    linked_pages = {t for t in linked if t.startswith("docs/") and t.endswith(".md")}
    missing = sorted(t for t in linked_pages if not (ROOT / t).is_file())
    assert missing == [], f"the README links docs pages that do not exist: {missing}"
    pages = {str(p.relative_to(ROOT)) for p in _repo_files(".md") if p.parent == ROOT / "docs"}
    assert sorted(pages - linked_pages) == [], "docs pages the README does not link"


def test_the_readme_names_only_documents_that_harness_docs_prints() -> None:
    # On PyPI the README's relative links lead nowhere; an installed harness
    # shows its shipped documents with `python -m harness docs NAME`.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = re.findall(r"python -m harness docs ([\w.]+)", readme)
    assert named, "the README does not say how an installed harness shows its documents"
    assert sorted(set(named) - set(SHIPPED_DOCS)) == []
    for name, source in SHIPPED_SOURCES.items():
        assert f"]({source})" in readme and name in named, f"the README: {source}, and how to print it"


def test_every_build_and_the_sdist_carry_the_documents_harness_docs_prints() -> None:
    # setup.py copies them into harness/_docs/ of each build; an sdist without them could not build a wheel.
    setup = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    shipped = next(
        ast.literal_eval(node.value)
        for node in ast.walk(setup)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SHIPPED" for t in node.targets)
    )
    assert sorted(shipped) == sorted(SHIPPED_SOURCES.values())
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8").split()
    assert sorted(set(shipped) - set(manifest)) == [], "MANIFEST.in leaves them out of the sdist"
    assert all((ROOT / source).is_file() for source in shipped)


# --------------------------------------------------------------------------- finding 10: the quick start


def _make_dry_run(*args: str) -> list[str]:
    """The commands ``make`` would run for ``args``, every rule remade (-B), nothing run (-n)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TORCH", "TORCH_INDEX"}}
    done = subprocess.run(
        ["make", "-n", "-B", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.splitlines()


def _torch_install(commands: list[str]) -> list[str]:
    """The arguments, as the shell splits them, of the pip install that installs torch."""
    for line in commands:
        words = shlex.split(line)
        if words[1:4] == ["-m", "pip", "install"] and any("torch" in w for w in words[4:]):
            return words[4:]
    raise AssertionError(f"no pip install of torch in {commands}")


def _one_argument_per_word(pip_args: list[str]) -> list[str]:
    """pip arguments that hold a space: options glued to a requirement, which pip rejects."""
    return [a for a in pip_args if re.search(r"\s", a)]


def test_the_old_ci_line_glued_the_index_to_the_requirement() -> None:
    # The finding: TORCH="torch==2.13.0 --index-url ..." reached pip as one argument.
    old = shlex.split(f'.venv/bin/python -m pip install -q "torch==2.13.0 --index-url {CPU_INDEX}"')
    assert _one_argument_per_word(_torch_install([shlex.join(old)])) == [f"torch==2.13.0 --index-url {CPU_INDEX}"]


def test_make_passes_the_torch_index_as_its_own_pip_arguments() -> None:
    args = _torch_install(_make_dry_run("install", f"TORCH_INDEX={CPU_INDEX}"))
    assert args == ["-q", "torch==2.13.0", "--index-url", CPU_INDEX]


def test_make_without_a_torch_index_uses_the_usual_indexes() -> None:
    assert _torch_install(_make_dry_run("install")) == ["-q", "torch==2.13.0"]
    assert _torch_install(_make_dry_run("install", "TORCH=torch")) == ["-q", "torch"]


def _workflow_make_lines() -> list[tuple[str, list[str]]]:
    out = []
    for wf in sorted((ROOT / "ci" / "github" / "workflows").glob("*.yml")):
        for line in re.findall(r"^\s*-?\s*run:\s*(make .*)$", wf.read_text(encoding="utf-8"), flags=re.MULTILINE):
            # A matrix value stands for one of its values.
            out.append((wf.name, shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "1", line))[1:]))
    return out


def test_every_ci_make_line_installs_torch_with_one_argument_per_word() -> None:
    lines = _workflow_make_lines()
    first = {}
    for name, args in lines:
        pip_args = _torch_install(_make_dry_run(*args))
        assert _one_argument_per_word(pip_args) == [], f"{name}: make {shlex.join(args)}"
        first.setdefault(name, pip_args)
    # A job's first make creates .venv; the later ones reuse it.
    assert first["cpu.yml"][-2:] == ["--index-url", CPU_INDEX], f"cpu.yml: not the CPU build: {first['cpu.yml']}"


def test_the_readme_quick_start_gets_the_cpu_build() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    make_lines = re.findall(r"^make (\w+) +(.*?)(?:  +#.*)?$", quick_start, flags=re.MULTILINE)
    assert [target for target, _ in make_lines] == ["conform", "test"]
    for target, args in make_lines:
        assert _torch_install(_make_dry_run(target, *shlex.split(args)))[-2:] == ["--index-url", CPU_INDEX]
    assert f'pip install "torch==2.13.0" --index-url {CPU_INDEX}' in quick_start


def test_the_supported_platforms_are_what_ci_runs() -> None:
    classified = _pyproject_field(r'"Programming Language :: Python :: (3\.\d+)"')
    cpu_yml = (ROOT / "ci" / "github" / "workflows" / "cpu.yml").read_text(encoding="utf-8")
    in_ci = re.findall(r'"(3\.\d+)"', re.findall(r"^\s*python: \[(.*)\]$", cpu_yml, flags=re.MULTILINE)[0])
    assert in_ci == classified
    assert _pyproject_field(r'^requires-python = ">=(3\.\d+)"$') == [classified[0]]
    assert _pyproject_field(r'"Operating System :: (.*)"') == ["POSIX :: Linux"]
    assert "runs-on: ubuntu-latest" in cpu_yml
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"Linux on x86-64, Python {classified[0]}\N{EN DASH}{classified[-1]}" in readme
    assert "macOS and\nWindows are not supported" in readme
