"""Running a workload: the executors of each side, warm-up, batches, progress.

A side is a backend spec as the suite accepts it (``mp``, ``ray``,
``module:attr``), optionally with settings of its ``ExecutorConfig`` after an
``@``: ``mp@start_method=spawn``, ``mp@env.OMP_NUM_THREADS=1``. Two sides of
one backend with two settings are an A/B run of that setting.

``run_rounds`` measures the executors it is handed in alternating batches
(A B, then B A, ...). An A/B run (``harness.perf.ab``) hands it one side's
executor at a time, started afresh each round, so that what the machine does
meanwhile (another job, a frequency change) falls on both sides alike while
what one side does beside its calls falls on that side only. A run against a
stored baseline has one side.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.backends import load_backend, open_session
from harness.contract import ExecutorConfig
from harness.perf._quiet import wait_for_quiet
from harness.perf.workloads import Samples, Workload, merge

__all__ = ["Side", "open_side", "parse_side", "run_rounds"]

_CONFIG_FIELDS = ("device", "dist_backend", "start_method", "init_timeout_s")


@dataclass(frozen=True)
class Side:
    """One side of a run: what the user wrote, the backend spec, and the config settings."""

    text: str
    spec: str
    settings: Mapping[str, Any]

    def config(self, world_size: int) -> ExecutorConfig:
        env = {k[4:]: v for k, v in self.settings.items() if k.startswith("env.")}
        fields = {k: v for k, v in self.settings.items() if not k.startswith("env.")}
        try:
            return ExecutorConfig(world_size, env=env, **fields)
        except ValueError as exc:
            raise ValueError(f"side {self.text!r}: {exc}") from None


def parse_side(text: str, where: str = "the command line") -> Side:
    """``SPEC[@key=value,...]``; a ValueError names the side, the setting and where it came from."""
    spec, _, rest = text.partition("@")
    if not spec.strip():
        raise ValueError(f"side {text!r} from {where}: no backend before '@'")
    settings: dict[str, Any] = {}
    for item in [i for i in rest.split(",") if i.strip()] if rest else []:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise ValueError(f"side {text!r} from {where}: setting {item!r} is not KEY=VALUE")
        if key.startswith("env.") and len(key) > 4:
            settings[key] = value
        elif key in _CONFIG_FIELDS:
            settings[key] = float(value) if key == "init_timeout_s" else value
        else:
            raise ValueError(
                f"side {text!r} from {where}: unknown setting {key!r}: expected one of "
                f"{', '.join(_CONFIG_FIELDS)} or env.NAME"
            )
    return Side(text, spec.strip(), settings)


def split_sides(text: str) -> list[str]:
    """A comma-separated list of sides, where a side's own settings are
    comma-separated too: ``mp,mp@start_method=spawn,device=cuda`` is two sides.
    A part with ``=`` and no ``@`` continues the side before it."""
    sides: list[str] = []
    for part in text.split(","):
        if sides and "=" in part and "@" not in part and "@" in sides[-1]:
            sides[-1] += "," + part
        else:
            sides.append(part)
    return [s.strip() for s in sides if s.strip()]


@contextlib.contextmanager
def open_side(side: Side, world_size: int) -> Iterator[Any]:
    """The side's executor, its backend opened (``harness.backends.open_session``:
    torch and its preloads imported, so workers forked from here inherit them
    where an A/B run that starts executors every round would import them twenty
    times; its run-wide session entered, ``ray``'s local cluster), shut down on exit."""
    loaded = load_backend(side.spec)
    config = side.config(world_size)
    with open_session(loaded):
        ex = loaded.factory(config)
        try:
            yield ex
        finally:
            ex.shutdown()


def _stderr_progress(text: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{text:<78}")
        sys.stderr.flush()


#: The caller's pause before each batch, for the workers of the batch before to go quiet...
SETTLE_S = 0.05
#: ... and the longest it waits for the machine's CPUs to go quiet (harness.perf._quiet).
QUIET_MAX_S = 2.0


def run_rounds(
    sides: Mapping[str, Any],
    workload: Workload | Mapping[str, Workload],
    world_size: int,
    *,
    rounds: int,
    reps: int,
    warmup: int,
    progress: Callable[[str], None] = _stderr_progress,
    settle_s: float = SETTLE_S,
    quiet_max_s: float = QUIET_MAX_S,
) -> dict[str, Samples]:
    """Measure ``workload`` on each side's executor (label -> executor): a
    warm-up of ``warmup`` steps each, then ``rounds`` rounds of one batch of
    ``reps`` steps per side, the order alternating. Samples by label.

    Before each batch the caller sleeps ``settle_s``, and then waits, up to
    ``quiet_max_s`` in all, until the machine's CPUs are quiet: workers that
    spin for a while after their last call (``mp``'s for 10 ms, vLLM's for
    1 s) would otherwise share the cores with the next batch, and the batch
    measured after another side's would be slower for it (measured: the first
    15-20 steps of every batch at world size 1, by 40 %; ``mp`` against vLLM,
    by half).

    ``workload`` may be one per label (its state, as a calibration, stays its
    side's); one workload shared by the sides gives both the same work."""
    if rounds < 1 or reps < 1 or warmup < 0:
        raise ValueError(f"rounds and reps must be at least 1 and warmup at least 0, got {rounds}, {reps}, {warmup}")
    labels = list(sides)
    of = workload if isinstance(workload, Mapping) else dict.fromkeys(labels, workload)
    out: dict[str, Samples] = {label: {} for label in labels}
    for label in labels:
        of[label].prepare(sides[label], world_size)
        if warmup:
            of[label].measure(sides[label], world_size, warmup)
    started = time.monotonic()
    for r in range(rounds):
        order = labels if r % 2 == 0 else labels[::-1]
        for label in order:
            if settle_s > 0:
                wait_for_quiet(settle_s, max(settle_s, quiet_max_s))
            merge(out[label], of[label].measure(sides[label], world_size, reps))
        progress(f"{of[labels[0]].name} ws={world_size}: round {r + 1}/{rounds}, {time.monotonic() - started:.0f} s")
    for label in labels:
        of[label].finish(sides[label])
    return out


def labels_for(texts: Sequence[str]) -> list[str]:
    """Labels for the sides: their text, with A/B prefixes where two are the same."""
    if len(set(texts)) == len(texts):
        return list(texts)
    return [f"{chr(ord('A') + i)}: {t}" for i, t in enumerate(texts)]
