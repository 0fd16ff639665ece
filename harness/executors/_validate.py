"""Argument checks shared by the built-in executors: bad input fails before anything is sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.contract import method_name


def validate_call(
    method: str | Callable[..., Any],
    timeout: float | None,
    args: Any,
    kwargs: Any,
    unique_reply_rank: Any,
    world_size: int,
) -> tuple[Any, ...]:
    """Check one ``collective_rpc`` call; returns ``args`` as a tuple."""
    if (
        type(args) is tuple
        and kwargs is None
        and timeout is None
        and unique_reply_rank is None
        and (type(method) is str or callable(method))
    ):
        return args  # the common call: every check below passes (checked once per call)
    if not (isinstance(method, str) or callable(method)):
        raise TypeError(f"collective_rpc: method must be a str or a callable, got {method!r}")
    name = method_name(method)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError(f"collective_rpc({name!r}): timeout must be None or a number > 0, got {timeout!r}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"collective_rpc({name!r}): args must be a tuple, got {type(args).__name__}: {args!r}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"collective_rpc({name!r}): kwargs must be a dict or None, got {kwargs!r}")
    if unique_reply_rank is not None and (
        isinstance(unique_reply_rank, bool)
        or not isinstance(unique_reply_rank, int)
        or not 0 <= unique_reply_rank < world_size
    ):
        raise ValueError(
            f"collective_rpc({name!r}): unique_reply_rank must be in [0, {world_size}), got {unique_reply_rank!r}"
        )
    return tuple(args)
