"""How the built-in executors pickle a call: plain pickle first (fast, by
reference), cloudpickle for what pickle refuses (lambdas, closures) when it is
installed (Ray brings it)."""

from __future__ import annotations

import pickle
from typing import Any

__all__ = ["dumps_call"]


def dumps_call(obj: Any) -> bytes:
    """Pickle a call's (method, args, kwargs, unique_reply_rank); raises what pickle raises."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        fallback = _cloudpickle()
        if fallback is None:
            raise
        data: bytes = fallback.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return data


def _cloudpickle() -> Any:
    try:
        import cloudpickle  # type: ignore[import-not-found,unused-ignore]

        return cloudpickle
    except ImportError:
        pass
    try:
        from ray import cloudpickle as ray_cloudpickle  # type: ignore[import-not-found,unused-ignore]

        return ray_cloudpickle
    except ImportError:
        return None
