"""Typed reads from parsed JSON that name the field they read (``entries[3].metrics.latency.summary.median``),
so that a bad stored file is reported by its place in the document, not by a ``KeyError``."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["FieldError", "integer", "items", "join", "member", "number", "numbers", "obj", "text", "value"]


class FieldError(ValueError):
    """A field of a JSON document is missing or of the wrong type."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def join(where: str, key: str | int) -> str:
    """The path of ``key`` inside the field at ``where`` ("" for the top level)."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def _kind(got: Any) -> str:
    return "null" if got is None else type(got).__name__


def _is_number(got: Any) -> bool:
    # bool is an int to Python, never a measurement to us.
    return not isinstance(got, bool) and isinstance(got, int | float) and math.isfinite(got)


def obj(got: Any, where: str) -> dict[str, Any]:
    if not isinstance(got, dict):
        raise FieldError(where or "(top level)", f"expected an object, got {_kind(got)}")
    return got


def value(d: dict[str, Any], key: str, where: str) -> Any:
    """``d[key]``, or a FieldError saying it is missing."""
    if key not in d:
        raise FieldError(join(where, key), "missing")
    return d[key]


def member(d: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """``d[key]``, an object."""
    return obj(value(d, key, where), join(where, key))


def number(d: dict[str, Any], key: str, where: str) -> float:
    got = value(d, key, where)
    if not _is_number(got):
        raise FieldError(join(where, key), f"expected a finite number, got {got!r}")
    return float(got)


def integer(d: dict[str, Any], key: str, where: str) -> int:
    got = value(d, key, where)
    if isinstance(got, bool) or not isinstance(got, int):
        raise FieldError(join(where, key), f"expected an integer, got {got!r}")
    return got


def text(d: dict[str, Any], key: str, where: str) -> str:
    got = value(d, key, where)
    if not isinstance(got, str):
        raise FieldError(join(where, key), f"expected a string, got {_kind(got)}")
    return got


def items(d: dict[str, Any], key: str, where: str) -> list[Any]:
    got = value(d, key, where)
    if not isinstance(got, list):
        raise FieldError(join(where, key), f"expected a list, got {_kind(got)}")
    return got


def numbers(d: dict[str, Any], key: str, where: str) -> list[float]:
    out = []
    for i, got in enumerate(items(d, key, where)):
        if not _is_number(got):
            raise FieldError(join(join(where, key), i), f"expected a finite number, got {got!r}")
        out.append(float(got))
    return out
