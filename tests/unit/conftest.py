"""Fixtures the unit tests share."""

from __future__ import annotations

import multiprocessing.util
import tempfile

import pytest


@pytest.fixture
def own_temporary_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test diffs a temporary folder of its own: ``make test`` runs the
    suite beside the unit tests, and its tests come and go in the machine's
    /tmp (a fresh-clone run failed the forkserver leak test on ``harness-test-*``)."""
    # multiprocessing keeps its own folder for the life of the process (and
    # removes it at exit): made first, it stays where it always is.
    multiprocessing.util.get_temp_dir()
    folder = tmp_path_factory.mktemp("own-tmp")
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
