"""Which modules this process can import, found without importing them."""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["module_installed"]


def module_installed(name: str) -> bool:
    """Whether ``name`` can be imported, found without importing it (an optional
    dependency may read its settings when imported)."""
    if name in sys.modules:
        return sys.modules[name] is not None  # None: marked missing, as tests do
    return importlib.util.find_spec(name) is not None
