"""The project's license: the Apache License 2.0 it declares, in full, carried by the wheel."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The SHA-256 of the Apache License 2.0 as apache.org publishes it (LICENSE-2.0.txt),
#: the text every Apache-2.0 package ships.
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_file_is_the_apache_license_2_0_in_full() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == APACHE_2_SHA256, "not the standard text, unchanged"


def test_pyproject_declares_apache_2_0_and_the_file() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib is Python 3.11's")
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    # No license classifier beside an SPDX expression (PEP 639 forbids both).
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]
