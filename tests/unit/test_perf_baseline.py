"""harness.perf.baseline: stored baselines round-trip, every way a file can be wrong is an
error naming the file and the field, and a crash mid-write leaves the old file intact."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.perf import baseline as baseline_module
from harness.perf import machine as machine_module
from harness.perf.baseline import (
    MAX_STORED_SAMPLES,
    SCHEMA_VERSION,
    Baseline,
    BaselineError,
    Distribution,
    Entry,
    Fingerprint,
    baseline_path,
    find_baseline,
    git_commit,
    load_baseline,
    machine_fingerprint,
    store_baseline,
)
from harness.perf.stats import summary

REPO_ROOT = Path(__file__).resolve().parents[2]

HERE = Fingerprint(
    cpu_model="AMD EPYC 7B13",
    cpu_count=2,
    gpu_model="none",
    gpu_count=0,
    torch="2.13.0+cpu",
    vllm="not installed",
    python="3.12.3",
)


def latencies(seed: int, n: int = 50) -> list[float]:
    return list(40e-6 * np.random.default_rng(seed).lognormal(0.0, 0.1, n))


def entry(backend: str = "mp", workload: str = "empty-call", world_size: int = 2, seed: int = 0) -> Entry:
    return Entry.measured(
        backend,
        workload,
        world_size,
        "cpu",
        {"latency": latencies(seed), "caller_cpu": latencies(seed + 1)},
        commit="abc123",
    )


def stored(tmp_path: Path, *entries: Entry) -> Path:
    base = Baseline(HERE)
    for e in entries or (entry(), entry("uni", world_size=1)):
        base = base.with_entry(e)
    path = baseline_path(tmp_path, HERE)
    store_baseline(path, base)
    return path


def rewrite(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


# --------------------------------------------------------------------------- fingerprint


def test_the_fingerprint_id_is_a_slug_and_a_hash_of_the_fields_that_matter() -> None:
    assert re.fullmatch(r"amd-epyc-7b13-2cpu-[0-9a-f]{12}", HERE.id)
    assert Fingerprint(**{**HERE.__dict__, "python": "3.13.0"}).id == HERE.id
    assert Fingerprint(**{**HERE.__dict__, "cpu_count": 4}).id != HERE.id
    gpu = Fingerprint(**{**HERE.__dict__, "gpu_model": "NVIDIA H200", "gpu_count": 4})
    assert re.fullmatch(r"amd-epyc-7b13-2cpu-4xnvidia-h200-[0-9a-f]{12}", gpu.id)


def test_this_machines_fingerprint_has_every_field(monkeypatch: pytest.MonkeyPatch) -> None:
    # No GPU probe here: it may start a child that imports torch.
    monkeypatch.setattr(machine_module, "_gpus", lambda: ("NVIDIA H200", "NVIDIA H200"))
    fp = machine_fingerprint()
    assert fp.cpu_model and fp.cpu_count >= 1
    assert (fp.gpu_model, fp.gpu_count) == ("NVIDIA H200", 2)
    assert fp.torch != "not installed"  # a dependency of the harness
    assert fp.vllm
    assert re.fullmatch(r"3\.\d+\.\d+.*", fp.python)


def test_a_missing_gpu_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine_module, "_gpus", tuple)
    assert (machine_fingerprint().gpu_model, machine_fingerprint().gpu_count) == ("none", 0)


def test_gpus_are_read_from_nvidia_smi_as_cuda_visible_devices_leaves_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\nprintf '0, GPU-aaa, NVIDIA H200\\n1, GPU-bbb, NVIDIA H200\\n2, GPU-ccc, NVIDIA H100\\n'\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    machine_module._gpus.cache_clear()
    try:
        assert machine_module._gpus() == ("NVIDIA H200", "NVIDIA H200", "NVIDIA H100")
        machine_module._gpus.cache_clear()
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
        assert machine_module._gpus() == ("NVIDIA H100",)
    finally:
        machine_module._gpus.cache_clear()


def test_git_commit_is_the_checkouts_or_unknown(tmp_path: Path) -> None:
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", git_commit(REPO_ROOT))
    assert git_commit(tmp_path) == "unknown"


# --------------------------------------------------------------------------- entries


def test_a_long_sample_is_stored_bounded_and_deterministic_with_the_summary_of_all() -> None:
    values = list(np.random.default_rng(0).exponential(1e-5, 5 * MAX_STORED_SAMPLES))
    d = Distribution.of(values)
    assert len(d.samples) == MAX_STORED_SAMPLES
    assert d.summary == summary(values)
    assert d.samples[0] == pytest.approx(min(values), rel=1e-5)
    assert d.samples[-1] == pytest.approx(max(values), rel=1e-5)
    assert float(np.median(d.samples)) == pytest.approx(d.summary.median, rel=0.01)
    assert Distribution.of(values) == d


def test_lookup_finds_an_entry_by_its_key_and_nothing_else() -> None:
    base = Baseline(HERE).with_entry(entry()).with_entry(entry("uni", world_size=1))
    found = base.lookup("mp", "empty-call", 2, "cpu")
    assert found is not None and found.backend == "mp"
    assert base.lookup("mp", "empty-call", 4, "cpu") is None
    assert base.lookup("mp", "empty-call", 2, "cuda") is None


def test_updating_an_entry_replaces_it_and_keeps_the_others(tmp_path: Path) -> None:
    path = stored(tmp_path)
    old = load_baseline(path)
    newer = entry(seed=7)
    store_baseline(path, old.with_entry(newer))
    new = load_baseline(path)
    assert len(new.entries) == 2
    assert new.lookup("mp", "empty-call", 2, "cpu") == newer
    assert new.lookup("uni", "empty-call", 1, "cpu") == old.lookup("uni", "empty-call", 1, "cpu")


def test_entry_against_names_the_file_date_and_commit() -> None:
    e = entry()
    assert (
        e.against("tests/perf/baselines/x.json")
        == f"baseline tests/perf/baselines/x.json, recorded {e.date[:10]} at abc123"
    )


# --------------------------------------------------------------------------- the file


def test_a_baseline_round_trips_through_its_file(tmp_path: Path) -> None:
    path = stored(tmp_path)
    assert path == tmp_path / f"{HERE.id}.json"
    base = load_baseline(path, expect=HERE)
    assert base.fingerprint == HERE
    assert [e.key for e in base.entries] == [("mp", "empty-call", 2, "cpu"), ("uni", "empty-call", 1, "cpu")]
    assert base.entries[0].metrics == entry().metrics  # the stored samples read back exactly
    store_baseline(path, base)
    assert load_baseline(path) == base


def test_an_entry_keeps_the_workloads_parameters_so_a_comparison_does_the_same_work(tmp_path: Path) -> None:
    from harness.perf.workloads import EngineStep

    recorded = EngineStep(iterations=12345)
    e = Entry.measured("mp", "engine-step", 1, "cpu", {"step": latencies(0)}, commit="abc", params=recorded.params())
    path = stored(tmp_path, e)
    back = load_baseline(path).lookup("mp", "engine-step", 1, "cpu")
    assert back is not None and back.params == {"caller_cpu_per_batch": 1.0, "iterations": 12345.0}
    later = EngineStep()
    later.use(back.params)
    assert later.iterations == 12345
    assert "params" not in entry().to_dict()  # optional: files without it read as before


def test_samples_are_stored_one_list_per_line(tmp_path: Path) -> None:
    text = stored(tmp_path).read_text()
    assert len(text.splitlines()) < 100
    assert json.loads(text)["schema"] == SCHEMA_VERSION


def test_find_baseline_is_none_when_none_was_recorded(tmp_path: Path) -> None:
    assert find_baseline(tmp_path, HERE) is None
    stored(tmp_path)
    found = find_baseline(tmp_path, HERE)
    assert found is not None and found.fingerprint == HERE


def test_find_baseline_reports_a_corrupt_file_instead_of_skipping(tmp_path: Path) -> None:
    baseline_path(tmp_path, HERE).write_text('{"schema": 1')
    with pytest.raises(BaselineError, match="not valid JSON"):
        find_baseline(tmp_path, HERE)


def test_another_machines_baseline_names_the_fields_that_differ(tmp_path: Path) -> None:
    path = stored(tmp_path)
    there = Fingerprint(**{**HERE.__dict__, "gpu_model": "NVIDIA H200", "gpu_count": 1})
    with pytest.raises(BaselineError) as info:
        load_baseline(path, expect=there)
    message = str(info.value)
    assert str(path) in message
    assert "fingerprint" in message
    assert "gpu_model: 'NVIDIA H200' here, 'none' there" in message
    assert "gpu_count: 1 here, 0 there" in message
    assert "cpu_model" not in message


def _set(*keys: str | int, to: Any) -> Any:
    def change(data: Any) -> None:
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = to

    return change


def _drop(*keys: str | int) -> Any:
    def change(data: Any) -> None:
        for key in keys[:-1]:
            data = data[key]
        del data[keys[-1]]

    return change


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (_set("schema", to=2), "schema", f"written by schema 2, this harness reads {SCHEMA_VERSION}"),
        (_drop("schema"), "schema", "no schema version"),
        (_set("schema", to="1"), "schema", "expected an integer, got '1'"),
        (_drop("fingerprint"), "fingerprint", "missing"),
        (_set("fingerprint", "cpu_count", to=4), "fingerprint.id", "but the fields give"),
        (_drop("fingerprint", "torch"), "fingerprint.torch", "missing"),
        (_set("entries", to={}), "entries", "expected a list, got dict"),
        (_set("entries", 1, "world_size", to="2"), "entries[1].world_size", "expected an integer"),
        (
            _drop("entries", 0, "metrics", "latency", "summary", "median"),
            "entries[0].metrics.latency.summary.median",
            "missing",
        ),
        (
            _set("entries", 0, "metrics", "latency", "summary", "p99", to=None),
            "entries[0].metrics.latency.summary.p99",
            "got None",
        ),
        (
            _set("entries", 0, "metrics", "latency", "samples", 3, to="x"),
            "entries[0].metrics.latency.samples[3]",
            "got 'x'",
        ),
        (
            _set("entries", 0, "metrics", "latency", "samples", 3, to=-1.0),
            "entries[0].metrics.latency.samples[3]",
            "-1.0",
        ),
        (_set("entries", 0, "metrics", "latency", "samples", to=[]), "entries[0].metrics.latency.samples", "holds 0"),
        (_set("entries", 0, "metrics", to={}), "entries[0].metrics", "holds no metric"),
        (_set("entries", 1, "world_size", to=1), "entries[1]", "repeats the key"),
        (_set("date", to=20261130), "date", "expected a string, got int"),
        (_set("entries", 0, "params", to=[1]), "entries[0].params", "expected an object, got list"),
        (_set("entries", 0, "params", to={"iterations": "many"}), "entries[0].params.iterations", "got 'many'"),
    ],
)
def test_a_bad_field_is_an_error_naming_the_file_and_the_field(
    tmp_path: Path, change: Any, field: str, problem: str
) -> None:
    path = stored(tmp_path, entry(world_size=1), entry(world_size=2))
    rewrite(path, change)
    with pytest.raises(BaselineError) as info:
        load_baseline(path)
    assert (info.value.path, info.value.field) == (path, field)
    assert problem in info.value.problem
    assert str(info.value).startswith(f"baseline {path}: {field}: ")


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        ('{"schema": 1,\n "entries": [}', "line 2, column 14", "not valid JSON"),
        ("", "line 1, column 1", "not valid JSON"),
        ('{"schema": NaN}', "(file)", "NaN is not a number JSON allows"),
        ("[1, 2]", "(top level)", "expected an object, got list"),
    ],
)
def test_a_file_that_is_not_a_baseline_is_an_error_naming_it(
    tmp_path: Path, text: str, field: str, problem: str
) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(BaselineError) as info:
        load_baseline(path)
    assert (info.value.path, info.value.field) == (path, field)
    assert problem in info.value.problem


def test_an_unreadable_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match=r"baseline .*gone\.json: \(file\): cannot be read"):
        load_baseline(tmp_path / "gone.json")
    (tmp_path / "bytes.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(BaselineError, match="cannot be read"):
        load_baseline(tmp_path / "bytes.json")


# --------------------------------------------------------------------------- atomic writes


@pytest.mark.parametrize("where", ["render", "fsync", "replace"])
def test_a_crash_mid_write_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    path = stored(tmp_path)
    before = path.read_bytes()
    newer = load_baseline(path).with_entry(entry("ray", seed=9))

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise OSError(f"crash in {where}")

    if where == "render":  # the serialiser fails before a byte is written
        monkeypatch.setattr(baseline_module.json, "dumps", crash)
    elif where == "fsync":  # the new text is written to the temporary file, not yet on disk
        monkeypatch.setattr(baseline_module.os, "fsync", crash)
    else:  # on disk, not yet renamed over the old file
        monkeypatch.setattr(baseline_module.os, "replace", crash)
    with pytest.raises(OSError, match=f"crash in {where}"):
        store_baseline(path, newer)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [path.name]


def test_storing_creates_the_folder(tmp_path: Path) -> None:
    path = baseline_path(tmp_path / "tests" / "perf" / "baselines", HERE)
    store_baseline(path, Baseline(HERE).with_entry(entry()))
    assert load_baseline(path).lookup("mp", "empty-call", 2, "cpu") is not None


def test_a_baseline_whose_caller_cpu_was_measured_per_step_is_not_judged_on_it() -> None:
    # Recorded before the caller's CPU became one sample per batch: its per-step
    # samples miss the bursts a thread beside the calls burns, and would read a
    # batch's mean as slower.
    from harness.perf.workloads import EngineStep

    work = EngineStep()
    assert work.comparable("caller CPU", {"iterations": 1.0}) is not None
    assert work.comparable("caller CPU", work.params()) is None
    assert work.comparable("step", {"iterations": 1.0}) is None
