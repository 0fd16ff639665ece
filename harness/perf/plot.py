"""Pictures of a comparison, so a reviewer sees a shift at a glance.

- ``plot_comparison``: per metric, the empirical CDFs of both samples (A: the
  baseline or the A side; B: the current run or the B side), their medians
  marked, and the verdict's message under the metric's name;
- ``plot_curves``: how a cost grows with the work (round trip against payload
  size, against world size), one line per series.

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas, never
through pyplot: pyplot's global backend and figure list belong to the user
(an interactive session stays as it was). matplotlib is imported when a
function draws: ``harness.perf`` loads without it.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.perf._extra import missing

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_comparison", "plot_curves"]

#: More than this ratio between the largest and smallest value (two decades) is drawn on a log axis.
_LOG_SPAN = 100.0


def _figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise missing("matplotlib", "plotting") from exc
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _target(path: Path | str) -> Path:
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write the plot {path}: the folder {path.parent} does not exist")
    return path


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, format="png", dpi=100)


def _ecdf(ax: Axes, seconds: Sequence[float], label: str, metric: str) -> None:
    us = np.sort(np.asarray(seconds, dtype=float)) * 1e6
    if us.size == 0:
        raise ValueError(f"plot of {metric!r}: the {label} side has no samples")
    if not np.all(np.isfinite(us)):
        raise ValueError(f"plot of {metric!r}: the {label} side holds a value that is not finite")
    median = float(np.median(us))
    (line,) = ax.step(us, np.arange(1, us.size + 1) / us.size, where="post", label=f"{label}: median {median:.4g} us")
    ax.axvline(median, color=line.get_color(), linestyle="--", linewidth=1)


def plot_comparison(
    path: Path | str,
    metric_samples: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    labels: tuple[str, str] = ("baseline", "current"),
    title: str | None = None,
    verdicts: Mapping[str, str] | None = None,
) -> Path:
    """Draw, per metric, the CDFs of its two samples (seconds, drawn in microseconds) to the PNG ``path``.

    ``metric_samples`` maps a metric to its (A, B) samples; ``labels`` names A
    and B; ``verdicts`` maps a metric to the text shown with it (a
    ``Verdict.message``). Returns ``path``.
    """
    target = _target(path)
    if not metric_samples:
        raise ValueError(f"plot {target}: no metric to draw")
    verdicts = verdicts or {}
    fig = _figure(9.0, 3.4 * len(metric_samples) + (0.4 if title else 0.0))
    if title:
        fig.suptitle(title)
    axes = fig.subplots(len(metric_samples), 1, squeeze=False)[:, 0]
    for ax, (metric, (a, b)) in zip(axes, metric_samples.items(), strict=True):
        _ecdf(ax, a, labels[0], metric)
        _ecdf(ax, b, labels[1], metric)
        values = np.concatenate([np.asarray(a, dtype=float), np.asarray(b, dtype=float)])
        if values.min() > 0 and values.max() / values.min() > _LOG_SPAN:
            ax.set_xscale("log")
        heading = metric
        if metric in verdicts:
            heading += "\n" + textwrap.fill(verdicts[metric], 110)
        ax.set_title(heading, fontsize=9, loc="left")
        ax.set_xlabel("microseconds")
        ax.set_ylabel("fraction of samples <= x")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    _save(fig, target)
    return target


def plot_curves(
    path: Path | str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    xlabel: str,
    ylabel: str,
    log_x: bool = True,
    log_y: bool = False,
    title: str | None = None,
) -> Path:
    """Draw each series of (x, y) points as a line with markers to the PNG ``path``;
    for cost against payload size or world size. Returns ``path``."""
    target = _target(path)
    if not series:
        raise ValueError(f"plot {target}: no series to draw")
    fig = _figure(8.0, 5.0)
    ax = fig.subplots()
    for name, points in series.items():
        if not points:
            raise ValueError(f"plot {target}: the series {name!r} has no points")
        for x, y in points:
            if not (math.isfinite(x) and math.isfinite(y)) or (log_x and x <= 0) or (log_y and y <= 0):
                raise ValueError(
                    f"plot {target}: the series {name!r} has the point ({x!r}, {y!r}), which cannot be drawn "
                    f"(log x: {log_x}, log y: {log_y})"
                )
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", label=name)
    if log_x:
        ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, target)
    return target
