"""What a backend's first start leaves for good, proven once and reused
(harness.pytest_plugin.residue): compared by kind and count, never lenient about processes,
sockets, or a kind or a repeat the proof did not have."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.pytest_plugin import residue as _residue
from harness.pytest_plugin.residue import Residue, shape
from harness.system import leaks

# Each test diffs a temporary folder of its own (tests/unit/conftest.py).
pytestmark = pytest.mark.usefixtures("own_temporary_folder")


def test_shape_hides_the_parts_that_vary_between_starts() -> None:
    assert shape("sem.mp-zeal5g28") == "sem.mp-*"
    assert shape("Thread-12 (worker)") == "Thread-* (worker)"
    assert shape("tqdm_monitor") == "tqdm_monitor"
    assert shape("vllm_dist_0267d7b7-tp:0-[0-1]-cpushm_0") != shape("sem.mp-zeal5g28")
    # A UUID is one varying part, also where a group of it holds no digit.
    assert shape("11fc3c4b-7f14-4ba5-9b36-ef4e94cb8bb0") == shape("a759534c-abcd-4ba5-9b36-ef4e94cb8bb0") == "*"


def test_a_residue_covers_no_more_than_it_holds() -> None:
    proven = Residue(("monitor",), ("sem.mp-*", "sem.mp-*"))
    assert proven.covers(Residue(("monitor",), ("sem.mp-*",)))
    assert proven.covers(Residue((), ()))
    assert not proven.covers(Residue(("monitor", "monitor"), ()))  # one more of a kind
    assert not proven.covers(Residue(("monitor",), ("sem.mp-*",) * 3))
    assert not proven.covers(Residue(("leaked",), ()))  # another kind
    assert not proven.covers(Residue((), ("psm_*",)))
    # Files and named semaphores are kinds too: a proof without them covers none.
    assert not proven.covers(Residue((), (), files=("*",)))
    assert not proven.covers(Residue((), (), semaphores=("sem.*",)))
    assert Residue((), (), ("sem.*",), ("*", "*")).covers(Residue((), (), ("sem.*",), ("*",)))
    assert Residue.from_json(Residue(("t",), ("s",), ("m",), ("f",)).to_json()) == Residue(
        ("t",), ("s",), ("m",), ("f",)
    )


@pytest.fixture
def clean_registry() -> Iterator[None]:
    saved = dict(_residue.PROVEN), dict(_residue.LEAKED)
    _residue.PROVEN.clear()
    _residue.LEAKED.clear()
    yield
    for registry, kept in zip((_residue.PROVEN, _residue.LEAKED), saved, strict=True):
        registry.clear()
        registry.update(kept)


def test_a_leak_proof_is_kept_apart_from_the_residue_proofs(clean_registry: None) -> None:
    leaked = Residue((), (), files=("*",) * 8)
    _residue.remember("vllm-mp-ws2-spawn", leaked.to_json(), "test_a[vllm-mp-ws2-spawn]", _residue.LEAKED)
    assert _residue.PROVEN == {}
    assert _residue.proven_for("vllm-mp-ws2-spawn", Residue((), (), files=("*",) * 8)) is None
    found = _residue.proven_for("vllm-mp-ws2-spawn", Residue((), (), files=("*",) * 8), _residue.LEAKED)
    assert found == "test_a[vllm-mp-ws2-spawn]"
    # More of a kind a second start left again is a leak of that kind too.
    assert _residue.proven_for("vllm-mp-ws2-spawn", Residue((), (), files=("*",) * 9), _residue.LEAKED) == found
    # Another kind: a second start of its own.
    assert _residue.proven_for("vllm-mp-ws2-spawn", Residue(("monitor",), (), files=("*",)), _residue.LEAKED) is None
    assert _residue.proven_for("vllm-mp-ws2-spawn", Residue((), (), files=("*.lock",)), _residue.LEAKED) is None


def test_a_proof_serves_its_own_variant_only_and_is_kept_once(clean_registry: None) -> None:
    residue = Residue(("monitor",), ())
    _residue.remember("mp-ws2-fork", residue.to_json(), "test_a[mp-ws2-fork]")
    _residue.remember("mp-ws2-fork", residue.to_json(), "test_b[mp-ws2-fork]")
    assert _residue.PROVEN["mp-ws2-fork"] == [(residue, "test_a[mp-ws2-fork]")]
    assert _residue.proven_for("mp-ws2-fork", Residue(("monitor",), ())) == "test_a[mp-ws2-fork]"
    assert _residue.proven_for("mp-ws4-fork", Residue(("monitor",), ())) is None
    assert _residue.proven_for("mp-ws2-fork", None) is None


def test_residue_since_names_the_temporary_folders_new_entries_by_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    before = leaks.baseline()
    (tmp_path / "11fc3c4b-7f14-4ba5-9b36-ef4e94cb8bb0").touch()
    assert _residue.residue_since(before) == Residue((), (), files=("*",))


def test_residue_since_names_threads_and_segments_by_kind() -> None:
    before = leaks.baseline()
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="monitor-7", daemon=True)
    t.start()
    try:
        assert _residue.residue_since(before) == Residue(("monitor-*",), ())
    finally:
        stop.set()
        t.join()


def test_a_process_or_a_listening_socket_left_is_never_a_residue() -> None:
    before = leaks.baseline()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _residue.residue_since(before) is None
    finally:
        child.kill()
        child.wait()
    before = leaks.baseline()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert _residue.residue_since(before) is None
