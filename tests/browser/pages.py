"""A real browser for the HTML report's tests (headless Chromium driven by
Selenium, both from the machine: nothing is downloaded), and the real runs whose
pages it opens.

Where Chromium, its driver or Selenium is missing the browser tests read
`not run` with the install command; with ``HARNESS_REQUIRE_BROWSER=1`` (make
test as root, which installs them) they fail instead: a check that did not run
must not read green.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "apt-get install chromium chromium-driver (Debian; make install-browser as root), pip install selenium"
REQUIRE = "HARNESS_REQUIRE_BROWSER"


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed"
    for program in ("chromium", "chromedriver"):
        if shutil.which(program) is None:
            return f"{program} is not installed"
    return None


def open_browser(width: int, height: int, folder: str) -> Any:
    """A headless Chromium whose profile and temporary files live in ``folder``, or
    skip (fail where ``HARNESS_REQUIRE_BROWSER`` is set) with the install command."""
    missing = _missing()
    if missing is not None:
        why = f"no browser for the HTML report's checks: {missing}; install: {INSTALL}"
        if os.environ.get(REQUIRE):
            pytest.fail(f"{REQUIRE} is set and {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not look for drivers online
    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    window = f"--window-size={width},{height}"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", window):
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={folder}/profile")
    # Chromium makes org.chromium.Chromium.* folders in TMPDIR and leaves them: a folder of the session's own.
    service = Service(str(shutil.which("chromedriver")), env={**os.environ, "TMPDIR": folder})
    return webdriver.Chrome(service=service, options=options)


def browser_session(width: int = 1280, height: int = 900) -> Iterator[Any]:
    folder = tempfile.mkdtemp(prefix="harness-browser-")
    try:
        driver = open_browser(width, height, folder)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def conform(folder: Path, name: str, *args: str) -> tuple[Path, Path]:
    """A real run's JSON report and HTML page, ``name.json`` and ``name.html`` in ``folder``."""
    json_path, html_path = folder / f"{name}.json", folder / f"{name}.html"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "conform", *args, "-m", "not gpu", "-q",
         "--report-json", str(json_path), "--report-html", str(html_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert html_path.exists(), f"conform {' '.join(args)} wrote no page:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return json_path, html_path


#: A run with a FAIL, a blocked and a declared cell beside mp's passes: the README's picture.
SHOWCASE = ["--backend", "mp,tests.meta.broken:list_of_futures", "--world-size", "2", "--start-method", "fork",
            "--clause", "C1,C2,C3,C4,C5,C12,C21", "--declare", "C12"]  # fmt: skip
