"""A backend that names a module to preload: ``tests.meta.preload_marker``,
which writes the importing process's pid to ``$HARNESS_PRELOAD_MARKER``."""

from __future__ import annotations

from harness import ExecutorConfig
from harness.executors.mp import MultiprocExecutor


def create(config: ExecutorConfig) -> MultiprocExecutor:
    import tests.meta.preload_marker  # noqa: F401 - what a test process would import

    return MultiprocExecutor(config)


create.preload = ("tests.meta.preload_marker",)  # type: ignore[attr-defined]
