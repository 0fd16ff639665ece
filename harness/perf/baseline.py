"""Stored baselines: what a metric measured on one kind of machine, to compare a later run with.

One JSON file per machine kind, ``<folder>/<fingerprint id>.json``
(``tests/perf/baselines/`` in this repository)::

    {"schema": 1,
     "fingerprint": {"id": "...", "cpu_model": ..., "cpu_count": ..., "gpu_model": ..., "gpu_count": ...,
                     "torch": ..., "vllm": ..., "python": ...},
     "date": "2026-11-30T12:00:00Z", "commit": "abc123...",          # the last update
     "entries": [{"backend": "mp", "workload": "empty-call", "world_size": 2, "device": "cpu",
                  "date": ..., "commit": ...,                           # when this entry was measured
                  "metrics": {"latency": {"summary": {"n": ..., "median": ..., ...}, "samples": [...]}}}]}

An entry is one (backend, workload, world size, device); it holds each of the
workload's metrics (seconds) as a ``Distribution``: the summary of every
sample measured, and the samples themselves, at most ``MAX_STORED_SAMPLES`` of
them, so that ``harness.perf.stats.compare`` runs the same test against a
baseline as in an A/B run.

A file that cannot be read, was written by another schema version, lacks a
field or holds one of the wrong type, or belongs to another machine kind is a
``BaselineError`` naming the file and the field: never a silent pass. A
missing file is ``None`` from ``find_baseline``, for the caller to skip with
the command that records one. ``store_baseline`` writes atomically: a crash
mid-write leaves the old file as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.perf import _fields
from harness.perf._fields import FieldError
from harness.perf.machine import FINGERPRINT_FIELDS, Fingerprint, git_commit, machine_fingerprint, now
from harness.perf.stats import Summary, summary

__all__ = [
    "BASELINE_FOLDER",
    "FINGERPRINT_FIELDS",
    "MAX_STORED_SAMPLES",
    "SCHEMA_VERSION",
    "Baseline",
    "BaselineError",
    "Distribution",
    "Entry",
    "Fingerprint",
    "baseline_path",
    "find_baseline",
    "git_commit",
    "load_baseline",
    "machine_fingerprint",
    "store_baseline",
]

#: The layout ``load_baseline`` reads and ``store_baseline`` writes; a file of another is an error.
SCHEMA_VERSION = 1
#: Where this repository keeps its baselines, relative to its root.
BASELINE_FOLDER = Path("tests") / "perf" / "baselines"
#: Samples kept per metric: enough for the U test and the bootstrap to resolve a
#: few per cent, few enough that a file of a dozen entries stays small in git.
MAX_STORED_SAMPLES = 2000


class BaselineError(Exception):
    """A baseline file that cannot be used: the file, the field (a JSON path) and what is wrong."""

    def __init__(self, path: Path | str, field: str, problem: str) -> None:
        super().__init__(f"baseline {path}: {field}: {problem}")
        self.path = Path(path)
        self.field = field
        self.problem = problem


# --------------------------------------------------------------------------- entries


def _downsampled(values: np.ndarray[Any, Any], limit: int) -> list[float]:
    """At most ``limit`` of ``values``: all of them, or ``limit`` evenly spaced order
    statistics (min and max included), so the stored sample keeps the shape and
    the tails of the distribution and the same input always stores the same floats."""
    if values.size > limit:
        values = np.sort(values)[np.round(np.linspace(0, values.size - 1, limit)).astype(int)]
    # Six significant digits: far finer than a timer's noise, and half the bytes of repr().
    return [float(f"{v:.6g}") for v in values]


@dataclass(frozen=True)
class Distribution:
    """One metric of an entry: the summary of all samples measured, and at most
    ``MAX_STORED_SAMPLES`` of the samples (seconds)."""

    summary: Summary
    samples: tuple[float, ...]

    @classmethod
    def of(
        cls, samples: Sequence[float], metric: str = "samples", max_samples: int = MAX_STORED_SAMPLES
    ) -> Distribution:
        values = np.asarray(samples, dtype=float)
        return cls(summary(values, metric), tuple(_downsampled(values, max_samples)))

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary.to_dict(), "samples": list(self.samples)}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Distribution:
        d = _fields.obj(data, where)
        stats = Summary.from_dict(_fields.value(d, "summary", where), _fields.join(where, "summary"))
        samples = _fields.numbers(d, "samples", where)
        for i, value in enumerate(samples):
            if value < 0:
                raise FieldError(_fields.join(_fields.join(where, "samples"), i), f"is {value!r}, expected >= 0")
        if not 0 < len(samples) <= stats.n:
            raise FieldError(
                _fields.join(where, "samples"), f"holds {len(samples)} samples, expected 1 to summary.n = {stats.n}"
            )
        return cls(stats, tuple(samples))


@dataclass(frozen=True)
class Entry:
    """What one workload measured for one backend at one world size on one device."""

    backend: str
    workload: str
    world_size: int
    device: str
    #: Metric name ("latency", "caller_cpu") -> its distribution.
    metrics: Mapping[str, Distribution]
    date: str
    commit: str
    #: The workload's parameters as measured (``EngineStep``: its calibrated
    #: ``iterations``): a comparison runs the very same work. Optional in a file.
    params: Mapping[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.backend, self.workload, self.world_size, self.device)

    @classmethod
    def measured(
        cls,
        backend: str,
        workload: str,
        world_size: int,
        device: str,
        metrics: Mapping[str, Sequence[float]],
        *,
        commit: str | None = None,
        max_samples: int = MAX_STORED_SAMPLES,
        params: Mapping[str, float] | None = None,
    ) -> Entry:
        """An entry for samples measured now, at ``commit`` (default: ``git_commit()``)."""
        if not metrics:
            raise ValueError(f"{backend} {workload} ws{world_size} {device}: no metrics to record")
        return cls(
            backend,
            workload,
            world_size,
            device,
            {name: Distribution.of(values, name, max_samples) for name, values in metrics.items()},
            now(),
            commit if commit is not None else git_commit(),
            dict(params or {}),
        )

    def against(self, path: Path | str) -> str:
        """What a comparison with this entry names as A: "baseline PATH, recorded DATE at COMMIT"."""
        return f"baseline {path}, recorded {self.date[:10]} at {self.commit[:12]}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "workload": self.workload,
            "world_size": self.world_size,
            "device": self.device,
            "date": self.date,
            "commit": self.commit,
            "metrics": {name: d.to_dict() for name, d in sorted(self.metrics.items())},
            **({"params": dict(sorted(self.params.items()))} if self.params else {}),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Entry:
        d = _fields.obj(data, where)
        metrics_where = _fields.join(where, "metrics")
        metrics = _fields.member(d, "metrics", where)
        if not metrics:
            raise FieldError(metrics_where, "holds no metric")
        return cls(
            backend=_fields.text(d, "backend", where),
            workload=_fields.text(d, "workload", where),
            world_size=_fields.integer(d, "world_size", where),
            device=_fields.text(d, "device", where),
            metrics={name: Distribution.from_dict(m, _fields.join(metrics_where, name)) for name, m in metrics.items()},
            date=_fields.text(d, "date", where),
            commit=_fields.text(d, "commit", where),
            params=(
                {
                    k: _fields.number(d["params"], k, _fields.join(where, "params"))
                    for k in _fields.member(d, "params", where)
                }
                if "params" in d
                else {}
            ),
        )


# --------------------------------------------------------------------------- the file


@dataclass(frozen=True)
class Baseline:
    """The entries measured on one kind of machine; ``date`` and ``commit`` are those of the last update."""

    fingerprint: Fingerprint
    entries: tuple[Entry, ...] = ()
    date: str = field(default_factory=now)
    commit: str = "unknown"

    def lookup(self, backend: str, workload: str, world_size: int, device: str) -> Entry | None:
        """The entry for this key, or None if it was never recorded."""
        key = (backend, workload, world_size, device)
        return next((e for e in self.entries if e.key == key), None)

    def with_entry(self, entry: Entry) -> Baseline:
        """This baseline with ``entry`` added or replacing the one of the same key; the others kept."""
        others = [e for e in self.entries if e.key != entry.key]
        return replace(
            self, entries=tuple(sorted([*others, entry], key=lambda e: e.key)), date=now(), commit=entry.commit
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "fingerprint": self.fingerprint.to_dict(),
            "date": self.date,
            "commit": self.commit,
            "entries": [e.to_dict() for e in sorted(self.entries, key=lambda e: e.key)],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Baseline:
        d = _fields.obj(data, "")
        if "schema" not in d:
            raise FieldError("schema", f"missing: no schema version (this harness reads {SCHEMA_VERSION})")
        schema = _fields.integer(d, "schema", "")
        if schema != SCHEMA_VERSION:
            raise FieldError("schema", f"written by schema {schema}, this harness reads {SCHEMA_VERSION}")
        fingerprint = Fingerprint.from_dict(_fields.value(d, "fingerprint", ""), "fingerprint")
        entries = [Entry.from_dict(e, f"entries[{i}]") for i, e in enumerate(_fields.items(d, "entries", ""))]
        seen: dict[tuple[str, str, int, str], int] = {}
        for i, e in enumerate(entries):
            if e.key in seen:
                raise FieldError(f"entries[{i}]", f"repeats the key {e.key} of entries[{seen[e.key]}]")
            seen[e.key] = i
        return cls(fingerprint, tuple(entries), _fields.text(d, "date", ""), _fields.text(d, "commit", ""))


def baseline_path(folder: Path | str, fingerprint: Fingerprint) -> Path:
    """Where the baseline of ``fingerprint``'s machine kind lives in ``folder``."""
    return Path(folder) / f"{fingerprint.id}.json"


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def load_baseline(path: Path | str, expect: Fingerprint | None = None) -> Baseline:
    """The baseline stored at ``path``; with ``expect``, also a check that it is that machine kind's.

    Anything wrong with the file is a ``BaselineError`` naming it and the field.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(path, "(file)", f"cannot be read: {exc}") from exc
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise BaselineError(path, f"line {exc.lineno}, column {exc.colno}", f"not valid JSON: {exc.msg}") from exc
    except ValueError as exc:  # NaN or Infinity, which json.dump writes unless told not to
        raise BaselineError(path, "(file)", f"not valid JSON: {exc}") from exc
    try:
        baseline = Baseline.from_dict(data)
    except FieldError as exc:
        raise BaselineError(path, exc.field, exc.problem) from exc
    if expect is not None and baseline.fingerprint.id != expect.id:
        diffs = "; ".join(expect.differences(baseline.fingerprint))
        raise BaselineError(path, "fingerprint", f"recorded on another kind of machine ({diffs})")
    return baseline


def find_baseline(folder: Path | str, fingerprint: Fingerprint) -> Baseline | None:
    """The baseline of ``fingerprint``'s machine kind in ``folder``, or None if none was recorded."""
    path = baseline_path(folder, fingerprint)
    if not path.exists():
        return None
    return load_baseline(path, expect=fingerprint)


def _render(data: dict[str, Any]) -> str:
    """``data`` as indented JSON, but each list of samples on one line: a reviewer reads
    the summaries, and a file of a dozen entries stays a few hundred lines long."""
    plain = json.dumps(data, allow_nan=False)
    # A marker found nowhere in the document, so a placeholder cannot be mistaken for a value.
    marker = "@"
    while marker in plain:
        marker += "@"
    compact: dict[str, str] = {}
    for entry in data["entries"]:
        for metric in entry["metrics"].values():
            token = f"{marker}{len(compact)}{marker}"
            compact[json.dumps(token)] = json.dumps(metric["samples"], allow_nan=False, separators=(",", ":"))
            metric["samples"] = token
    text = json.dumps(data, indent=1, allow_nan=False)
    for token, samples in compact.items():
        text = text.replace(token, samples, 1)
    return text + "\n"


def store_baseline(path: Path | str, baseline: Baseline) -> None:
    """Write ``baseline`` to ``path`` atomically (creating its folder): a temporary file in the
    same folder, flushed to disk, then renamed over the old one, so a crash at any point
    leaves either the old file or the new one, and no temporary file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = _render(baseline.to_dict())
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    # The rename is durable only once the folder's entry is on disk too.
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
