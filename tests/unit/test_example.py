"""The example backend (examples/pipes.py) stays small and loadable, and the guide that
walks through it (docs/implementers.md) stays whole in the wheel and names every declaration."""

from __future__ import annotations

import re
from pathlib import Path

from harness import load_backend

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pipes.py"
GUIDE = ROOT / "docs" / "implementers.md"
#: The example is written to be read in one sitting: it passes every clause in
#: about 300 lines (docstring, blank lines and ruff's formatting included).
MAX_LINES = 330


def test_the_example_stays_small_enough_to_read() -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"examples/pipes.py has {len(lines)} lines, over {MAX_LINES}"
    assert lines[0].startswith('"""'), "examples/pipes.py opens with the docstring that draws its data flow"


def test_the_example_loads_as_a_backend_from_the_repository_root() -> None:
    loaded = load_backend("examples.pipes:factory")
    assert loaded.start_methods == ("fork",)
    assert dict(loaded.unsupported) == {}, "a declared clause needs its reason in docs/implementers.md too"


def _declarations_the_loader_reads() -> set[str]:
    source = (ROOT / "harness" / "backends.py").read_text(encoding="utf-8")
    return set(re.findall(r'getattr\(factory, "(\w+)"', source))


def test_the_guide_has_one_table_of_every_declaration_the_loader_reads() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("### Every declaration", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE))
    read = _declarations_the_loader_reads()
    assert len(read) >= 8, read
    assert rows == read, f"the table names {sorted(rows)}; the loader reads {sorted(read)}"


def test_the_guide_links_only_what_the_wheel_ships() -> None:
    # setup.py ships SPEC.md and implementers.md alone (harness/_docs): any other link breaks there.
    text = re.sub(r"^```.*?^```", "", GUIDE.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?\s*\)", text)
    assert targets, "the guide links SPEC.md"
    bad = [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and t.partition("#")[0] not in ("", "SPEC.md")]
    assert bad == [], f"docs/implementers.md links files the wheel lacks: {bad}"
