"""The HTML report in a real browser (headless Chromium): the page of a real run
holds every cell of its JSON report with the same outcome; a click, or Enter on
a focused cell, shows that cell's evidence and no other; the arrow keys move
between cells; a narrow window scrolls the matrix, not the page.

The pages are of real runs: ``mp`` beside a broken backend (a FAIL, blocked
cells and a declared one), ``ray``, and any JSON reports named in
``HARNESS_PAGE_REPORTS`` (make test-vllm names vllm-mp's)."""

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


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """name -> (JSON report, HTML page) of each real run."""
    folder = tmp_path_factory.mktemp("pages")
    out = {
        "mp and a broken backend": conform(folder, "showcase", *SHOWCASE),
        "ray": conform(folder, "ray", "--backend", "ray", "--world-size", "2", "--clause", "C1,C4,C23"),
    }
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from browser_session()


def cells_in_the_browser(browser: Any) -> dict[tuple[str, str], str]:
    from selenium.webdriver.common.by import By

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
    assert {"mp and a broken backend", "ray"} <= set(pages)
    for name, (report, page) in pages.items():
        data = json.loads(report.read_text())
        expected = {(cl, col): cell["outcome"] for cl, cols in data["clauses"].items() for col, cell in cols.items()}
        browser.get(page.as_uri())
        assert cells_in_the_browser(browser) == expected, f"the page of {name} differs from its report"
        assert shown_evidence(browser) == [], "no evidence before a cell is chosen"


def test_the_pages_of_the_reports_named_in_harness_page_reports_show_every_cell(tmp_path: Path, browser: Any) -> None:
    named = [Path(p) for p in os.environ.get("HARNESS_PAGE_REPORTS", "").split(os.pathsep) if p]
    if not named:
        pytest.skip("HARNESS_PAGE_REPORTS names no report (make test-vllm names vllm-mp's)")
    for report in named:
        page = tmp_path / (report.stem + ".html")
        write_page(read_report(report), str(page))
        data = json.loads(report.read_text())
        expected = {(cl, col): cell["outcome"] for cl, cols in data["clauses"].items() for col, cell in cols.items()}
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
    first = browser.find_element(By.CSS_SELECTOR, "button.cell")
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


def test_the_readmes_picture_is_a_page_with_a_fail_a_blocked_and_a_declared_cell() -> None:
    root = Path(__file__).resolve().parents[2]
    picture = root / "docs" / "report-page.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "make screenshot writes it"
    assert "docs/report-page.png" in (root / "README.md").read_text()
