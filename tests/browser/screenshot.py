"""The README's picture of the HTML report (docs/report-page.png): a real run of
``mp`` beside a broken backend (a FAIL, blocked cells, a declared one), its FAIL
cell opened, in headless Chromium. ``make screenshot`` runs it."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.browser.pages import ROOT, SHOWCASE, browser_session, conform

OUT = ROOT / "docs" / "report-page.png"


def main() -> int:
    from selenium.webdriver.common.by import By

    with tempfile.TemporaryDirectory() as folder:
        _, page = conform(Path(folder), "showcase", *SHOWCASE)
        for browser in browser_session(width=1100, height=1500):
            browser.get(page.as_uri())
            browser.find_element(By.ID, "btn-C4--tests.meta.broken-list_of_futures-ws2-cpu").click()
            browser.execute_script("window.scrollTo(0, 0)")
            browser.save_screenshot(str(OUT))
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
