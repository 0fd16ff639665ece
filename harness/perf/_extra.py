"""The optional ``perf`` extra: scipy and matplotlib are imported where they are
used, so that ``harness.perf`` (baselines, fingerprints) loads without them and
a missing one fails with the command that installs it."""

from __future__ import annotations

from harness.backends import DISTRIBUTION

__all__ = ["INSTALL_HINT", "missing"]

INSTALL_HINT = f"pip install '{DISTRIBUTION}[perf]'"


def missing(module: str, purpose: str) -> ImportError:
    """The error to raise when ``module``, needed for ``purpose``, is not installed."""
    return ImportError(f"{purpose} needs {module}, which is not installed: {INSTALL_HINT}")
