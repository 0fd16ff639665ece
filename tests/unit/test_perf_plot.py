"""harness.perf.plot: PNGs of a comparison and of cost curves, drawn without pyplot."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.perf.plot import plot_comparison, plot_curves

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def latencies(seed: int, scale: float = 1.0, n: int = 100) -> list[float]:
    return list(40e-6 * scale * np.random.default_rng(seed).lognormal(0.0, 0.1, n))


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} starts with {data[:8]!r}, not a PNG's signature"
    assert len(data) > 1000


def test_a_comparison_is_a_png_with_one_plot_per_metric(tmp_path: Path) -> None:
    path = tmp_path / "cmp.png"
    metrics = {
        "step latency": (latencies(1), latencies(2, 1.15)),
        # Over two decades: drawn on a log axis.
        "caller CPU per step": (latencies(3), [x * 1000 for x in latencies(4)]),
    }
    verdicts = {"step latency": "step latency: slower, +15.2 % [+12.1 %, +18.0 %], p=3e-9"}
    assert plot_comparison(path, metrics, labels=("mp", "mp-spin"), title="A/B", verdicts=verdicts) == path
    assert_png(path)


def test_curves_are_a_png(tmp_path: Path) -> None:
    path = tmp_path / "curves.png"
    series = {
        "mp": [(1024.0, 4e-5), (65536.0, 6e-5), (64 * 2**20, 2e-2)],
        "memcpy floor": [(65536.0, 1e-6), (1024.0, 1e-7), (64 * 2**20, 5e-3)],
    }
    plot_curves(path, series, "payload (bytes)", "round trip (s)", log_y=True, title="cost against payload")
    assert_png(path)


def test_plotting_leaves_pyplot_alone(tmp_path: Path) -> None:
    before = sys.modules.get("matplotlib.pyplot")
    plot_curves(tmp_path / "c.png", {"mp": [(1.0, 1.0), (2.0, 2.0)]}, "world size", "us", log_x=False)
    assert sys.modules.get("matplotlib.pyplot") is before


def test_a_missing_folder_is_an_error_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "no-such-folder" / "cmp.png"
    with pytest.raises(FileNotFoundError, match=f"cannot write the plot {path}: the folder .*no-such-folder does not"):
        plot_comparison(path, {"m": (latencies(1), latencies(2))})
    with pytest.raises(FileNotFoundError, match="no-such-folder"):
        plot_curves(path, {"mp": [(1.0, 1.0)]}, "x", "y")
    assert not path.parent.exists()


def test_empty_or_undrawable_input_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "x.png"
    with pytest.raises(ValueError, match="no metric to draw"):
        plot_comparison(path, {})
    with pytest.raises(ValueError, match="'step latency': the current side has no samples"):
        plot_comparison(path, {"step latency": (latencies(1), [])})
    with pytest.raises(ValueError, match=r"series 'mp' has the point \(0\.0, 1\.0\)"):
        plot_curves(path, {"mp": [(0.0, 1.0), (1.0, 2.0)]}, "bytes", "s")
    assert not path.exists()


def test_without_matplotlib_the_error_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match=r"plotting needs matplotlib.*pip install 'executor-harness\[perf\]'"):
        plot_curves(tmp_path / "x.png", {"mp": [(1.0, 1.0)]}, "x", "y")
