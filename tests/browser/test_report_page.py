"""The HTML report in a real browser (headless Chromium): the page of a real run
holds every cell of its JSON report with the same label (``pass (1 of 2)``
where the run filtered out some of the cell's tests); a click, or Enter on
a focused cell, shows that cell's evidence and no other; the arrow keys move
between cells; a narrow window scrolls the matrix, not the page; at 1280 px the
page of ``make conform`` without a GPU fits, its unrun columns folded a click
away, and its clause column stays in view as the matrix scrolls.

The pages are of real runs: ``mp`` beside a broken backend (a FAIL, blocked
cells and a declared one), ``uni`` (cells its own declarations skip, and not
applicable ones), and any JSON reports named in ``HARNESS_PAGE_REPORTS`` (make
test-vllm-page names vllm-mp's). ``uni`` runs in the caller's process: a
``ray`` run here (45 s alone) took past its 280 s bound beside make test's first
step, and the page is the same code whatever the backend."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.report.html import write_page
from harness.report.reading import read_report
from tests.browser.pages import SHOWCASE, browser_session, conform

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]


#: uni, some clauses; -k leaves one of C1's tests out, so its cell reads "pass (1 of 2)".
UNI_PARTLY = ["--backend", "uni", "--world-size", "1", "--clause", "C1,C4,C9,C13,C18", "-k", "not rank_order"]


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """name -> (JSON report, HTML page) of each real run."""
    folder = tmp_path_factory.mktemp("pages")
    out = {
        "mp and a broken backend": conform(folder, "showcase", *SHOWCASE),
        "uni": conform(folder, "uni", *UNI_PARTLY),
    }
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from browser_session()


def unfold(browser: Any) -> None:
    """Show the folded columns (those of which no test ran), where the page has any: one click."""
    from selenium.webdriver.common.by import By

    toggle = browser.find_elements(By.ID, "show-folded")
    if toggle and not toggle[0].is_selected():
        browser.find_element(By.CSS_SELECTOR, "label[for=show-folded]").click()
        assert toggle[0].is_selected()


def cells_in_the_browser(browser: Any) -> dict[tuple[str, str], str]:
    from selenium.webdriver.common.by import By

    unfold(browser)
    out = {}
    for row in browser.find_elements(By.CSS_SELECTOR, "#matrix tbody tr"):
        clause = row.get_attribute("data-clause")
        for button in row.find_elements(By.CSS_SELECTOR, "button.cell"):
            out[(clause, button.get_attribute("data-column"))] = button.text
    return out


def shown_evidence(browser: Any) -> list[Any]:
    from selenium.webdriver.common.by import By

    return [e for e in browser.find_elements(By.CSS_SELECTOR, ".cell-evidence") if e.is_displayed()]


def test_the_page_of_a_real_run_shows_every_cell_of_its_report_with_its_outcome(
    pages: dict[str, tuple[Path, Path]], browser: Any
) -> None:
    assert {"mp and a broken backend", "uni"} <= set(pages)
    seen: set[str] = set()
    for name, (report, page) in pages.items():
        data = json.loads(report.read_text())
        expected = {(cl, col): cell["label"] for cl, cols in data["clauses"].items() for col, cell in cols.items()}
        browser.get(page.as_uri())
        assert cells_in_the_browser(browser) == expected, f"the page of {name} differs from its report"
        assert shown_evidence(browser) == [], "no evidence before a cell is chosen"
        seen |= set(expected.values())
    assert {"pass", "FAIL", "declared", "not applicable", "pass (1 of 2)"} <= seen, (
        f"the pages showed only {sorted(seen)}"
    )


def test_the_pages_of_the_reports_named_in_harness_page_reports_show_every_cell(tmp_path: Path, browser: Any) -> None:
    named = [Path(p) for p in os.environ.get("HARNESS_PAGE_REPORTS", "").split(os.pathsep) if p]
    if not named:
        pytest.skip("HARNESS_PAGE_REPORTS names no report (make test-vllm names vllm-mp's)")
    for report in named:
        page = tmp_path / (report.stem + ".html")
        write_page(read_report(report), str(page))
        data = json.loads(report.read_text())
        expected = {(cl, col): cell["label"] for cl, cols in data["clauses"].items() for col, cell in cols.items()}
        assert expected, f"{report} holds no cell"
        browser.get(page.as_uri())
        assert cells_in_the_browser(browser) == expected, f"the page of {report} differs from it"


def test_a_click_on_a_fail_cell_shows_its_tests_failure_and_rerun_command_and_nothing_else(
    pages: dict[str, tuple[Path, Path]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    report, page = pages["mp and a broken backend"]
    column = "tests.meta.broken:list_of_futures ws2 cpu"
    data = json.loads(report.read_text())
    assert data["clauses"]["C4"][column]["outcome"] == "FAIL"
    assert data["clauses"]["C5"][column]["outcome"] == "blocked by C4"
    assert data["clauses"]["C12"][column]["outcome"] == "declared"
    browser.get(page.as_uri())
    browser.find_element(By.ID, "btn-C4--tests.meta.broken-list_of_futures-ws2-cpu").click()
    (evidence,) = shown_evidence(browser)
    text = evidence.text
    failed = [t for t in data["clauses"]["C4"][column]["tests"] if t["outcome"] == "FAIL"]
    assert failed and all(t["test"] in text for t in failed)
    assert "got a list of futures, expected one future" in text
    assert "--backend tests.meta.broken:list_of_futures --world-size 2 --clause C4 -m 'not gpu'" in text
    assert browser.current_url.endswith("#C4--tests.meta.broken-list_of_futures-ws2-cpu"), "a link to the cell"
    details = evidence.find_element(By.TAG_NAME, "details")
    details.find_element(By.TAG_NAME, "summary").click()
    assert "AssertionError" in details.find_element(By.TAG_NAME, "pre").text, "the whole failure, a click away"


def test_the_matrix_works_from_the_keyboard(pages: dict[str, tuple[Path, Path]], browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _, page = pages["mp and a broken backend"]
    browser.get(page.as_uri())
    first = next(b for b in browser.find_elements(By.CSS_SELECTOR, "button.cell") if b.is_displayed())
    first.send_keys(Keys.ENTER)
    (evidence,) = shown_evidence(browser)
    assert evidence.get_attribute("data-cell") == first.get_attribute("data-cell")
    first.send_keys(Keys.ARROW_DOWN)
    below = browser.switch_to.active_element
    assert below.get_attribute("data-cell") != first.get_attribute("data-cell")
    assert below.get_attribute("data-column") == first.get_attribute("data-column"), "down stays in the column"
    below.send_keys(Keys.SPACE)
    assert [e.get_attribute("data-cell") for e in shown_evidence(browser)] == [below.get_attribute("data-cell")]


def test_in_a_narrow_window_the_matrix_scrolls_and_the_page_does_not(pages: dict[str, tuple[Path, Path]]) -> None:
    _, page = pages["mp and a broken backend"]
    for browser in browser_session(width=420, height=900):
        browser.get(page.as_uri())
        page_width = browser.execute_script("return document.documentElement.scrollWidth")
        window = browser.execute_script("return window.innerWidth")
        assert page_width <= window + 1, f"the page is {page_width} px wide in a {window} px window"
        wrap = browser.execute_script(
            "var w = document.querySelector('.matrix-wrap'); return [w.scrollWidth, w.clientWidth]"
        )
        assert wrap[0] > wrap[1], "the matrix is wider than the window: it scrolls inside its frame"


def shown_heads(browser: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#matrix thead th") if th.is_displayed()]


def assert_the_page_fits(browser: Any) -> None:
    width, window = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= window + 1, f"the page is {width} px wide in a {window} px window"


def test_at_1280_px_the_page_without_a_gpu_fits_folds_its_cuda_columns_and_holds_its_clause_column(
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    from tests.unit.test_report_html import CPU, CUDA, without_a_gpu

    page = tmp_path / "conform.html"
    write_page(without_a_gpu(), str(page))
    for browser in browser_session(width=1280, height=900):
        browser.get(page.as_uri())
        assert_the_page_fits(browser)
        assert shown_heads(browser) == ["clause", *CPU, "summary"]
        first = browser.find_element(By.CSS_SELECTOR, "#tally > span").text
        assert not first.startswith("not run"), f"the first badge is {first!r}"
        assert all(c in browser.find_element(By.ID, "fold-note").text for c in CUDA)

        unfold(browser)
        unfolded = sorted(["clause", *CPU, *CUDA, "summary"])
        assert sorted(shown_heads(browser)) == unfolded, "one click shows the folded columns"
        assert_the_page_fits(browser)
        held = (
            "var w = document.querySelector('.matrix-wrap');"
            "var th = document.querySelector('#matrix tbody th.clause'), r = th.getBoundingClientRect();"
            "var cell = document.querySelector('#matrix tbody td');"
            "var top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);"
            "return [w.scrollWidth, w.clientWidth, r.left, w.getBoundingClientRect().left,"
            " cell.getBoundingClientRect().left, th.contains(top)];"
        )
        scroll_width, client_width, left, _, cell, on_top = browser.execute_script(held)
        assert scroll_width > client_width, "unfolded, the matrix is wider than 1280 px: it scrolls in its frame"
        assert on_top
        browser.execute_script("document.querySelector('.matrix-wrap').scrollLeft = 100000")
        _, _, left_after, frame_after, cell_after, on_top_after = browser.execute_script(held)
        assert cell_after < cell - 100, "the cells scrolled"
        assert abs(left_after - left) <= 1 and left_after >= frame_after, "the clause column stayed in view"
        assert on_top_after, "the clause cell is drawn over the cells scrolled under it"
        assert_the_page_fits(browser)


def test_the_readmes_picture_is_a_page_with_a_fail_a_blocked_and_a_declared_cell() -> None:
    root = Path(__file__).resolve().parents[2]
    picture = root / "docs" / "report-page.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "make screenshot writes it"
    assert "docs/report-page.png" in (root / "README.md").read_text()
