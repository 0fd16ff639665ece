"""docs/sentences.md covers every sentence of every SPEC.md clause, and names only
tests of the suite and broken backends of tests/meta/broken.py that exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "SPEC.md"
SENTENCES = ROOT / "docs" / "sentences.md"
SUITE = ROOT / "harness" / "conformance"
BROKEN = ROOT / "tests" / "meta" / "broken.py"

#: A sentence ends at ".", "!" or "?" followed by a space and a capital, a backquote or a parenthesis.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")
_NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")


def clauses(text: str) -> list[tuple[str, str]]:
    """(id, text) of each row of SPEC.md's clause table."""
    return re.findall(r"^\| (C\d+) \| (.+) \|$", text, re.MULTILINE)


def sentences(clause: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(clause) if s.strip()]


def normalised(text: str) -> str:
    """Whitespace collapsed, markdown's escaped pipes and trailing spaces undone."""
    return " ".join(text.replace("\\|", "|").split())


#: The heading of the section after the sentence table: the cases each word of a sentence ranges over.
WORDS_HEADING = "## What the words of each sentence range over"


def _sections() -> tuple[str, str]:
    """docs/sentences.md's sentence table, and the section on what the words range over."""
    text = SENTENCES.read_text(encoding="utf-8")
    assert WORDS_HEADING in text, f"docs/sentences.md has no section {WORDS_HEADING!r}"
    head, _, words = text.partition(WORDS_HEADING)
    return head, words


def _cells(line: str) -> list[str]:
    """The cells of a table row, split at pipes that markdown does not escape."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def table() -> list[tuple[str, str, str, str]]:
    """(clause, sentence, tests, broken backends) of each row of docs/sentences.md."""
    rows = []
    for line in _sections()[0].splitlines():
        if not re.match(r"^\| C\d+ \|", line):
            continue
        cells = _cells(line)
        assert len(cells) == 4, f"docs/sentences.md: a row of {len(cells)} cells, expected 4: {line}"
        rows.append((cells[0], cells[1], cells[2], cells[3]))
    return rows


def suite_tests() -> set[str]:
    names = set()
    for path in SUITE.glob("test_*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names.add(node.name)
    return names


def broken_backends() -> set[str]:
    """Every top-level name of tests/meta/broken.py (functions, classes, aliases)."""
    names = set()
    for node in ast.parse(BROKEN.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def test_the_splitter_splits_at_sentence_ends_only() -> None:
    got = sentences("A call works (see `x.y()`), e.g. 0..n-1. A second `shutdown()` is a no-op. `t` fails.")
    assert got == ["A call works (see `x.y()`), e.g. 0..n-1.", "A second `shutdown()` is a no-op.", "`t` fails."]


def test_every_sentence_of_every_clause_has_a_row() -> None:
    found = clauses(SPEC.read_text(encoding="utf-8"))
    assert len(found) == 25, f"SPEC.md's clause table: {len(found)} clauses found, expected C1..C25"
    rows = {(clause, normalised(sentence)) for clause, sentence, _, _ in table()}
    missing = [
        f"{clause}: {sentence}"
        for clause, text in found
        for sentence in sentences(text)
        if (clause, normalised(sentence)) not in rows
    ]
    assert not missing, "sentences of SPEC.md without a row in docs/sentences.md:\n" + "\n".join(missing)
    spec = {(clause, normalised(s)) for clause, text in found for s in sentences(text)}
    stale = sorted(rows - spec)
    assert not stale, f"rows of docs/sentences.md for sentences SPEC.md no longer has: {stale}"


def test_every_test_named_exists_in_the_suite() -> None:
    known = suite_tests()
    for clause, sentence, tests, _ in table():
        names = _NAME.findall(tests)
        assert names, f"{clause}: {sentence!r} names no test"
        unknown = [n for n in names if n not in known]
        assert not unknown, f"{clause}: tests {unknown} are not in harness/conformance/test_*.py"
        wrong = [n for n in names if not n.startswith(f"test_{clause.lower()}_")]
        assert not wrong, f"{clause}: tests {wrong} are another clause's"


def test_every_broken_backend_named_exists_and_gaps_say_so() -> None:
    known = broken_backends()
    for clause, sentence, _, backends in table():
        names = _NAME.findall(backends)
        unknown = [n for n in names if n not in known]
        assert not unknown, f"{clause}: broken backends {unknown} are not in tests/meta/broken.py"
        assert names or backends.startswith("none yet: "), (
            f"{clause}: {sentence!r} names no broken backend and does not say 'none yet: <why>'"
        )


def word_rows() -> list[list[str]]:
    """(clause, words, cases, checked by, left out) of each row of the words section."""
    rows = []
    for line in _sections()[1].splitlines():
        if re.match(r"^\| C\d+ \|", line):
            cells = _cells(line)
            assert len(cells) == 5, f"docs/sentences.md, words section: a row of {len(cells)} cells, expected 5: {line}"
            rows.append(cells)
    return rows


def test_the_words_of_every_clause_are_ranged_over_with_tests_and_backends_that_exist() -> None:
    """Every clause has a row in the section on what its words range over, and
    every test it names (in backquotes) is a test of the suite."""
    rows = word_rows()
    ids = [c for c, _ in clauses(SPEC.read_text(encoding="utf-8"))]
    assert sorted({r[0] for r in rows}, key=lambda c: int(c[1:])) == ids, "a clause without a row in the words section"
    known_tests = suite_tests()
    for clause, words, *rest in rows:
        for name in _NAME.findall(" ".join(rest)):
            if name.startswith("test_c"):
                assert name in known_tests, f"{clause} {words}: {name} is not a test of harness/conformance"
