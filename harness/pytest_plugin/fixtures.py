"""The plugin's fixtures: what a suite test asks for.

``harness_variant`` (one backend at one world size, start method and node
count: the parameter every backend test runs once per) gives ``backend`` (its
factory, checked, with its run-wide session's environment), ``world_size``,
``start_method``, ``executor_config``, ``harness_seed``, and ``executor``: an
executor shut down after the test within SPEC's bound and checked for leaks
(``leak_check``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from harness.backends import LoadedBackend
from harness.contract import Executor, ExecutorConfig
from harness.pytest_plugin.expected import leak_key
from harness.pytest_plugin.keys import options_key, sessions_key
from harness.pytest_plugin.leak_check import judge_leaks
from harness.pytest_plugin.options import Variant
from harness.system.load import start_up_scale
from harness.system.watchdog import bounded
from harness.verdicts import LEAK_CLAUSE, Prop

__all__ = [
    "backend",
    "executor",
    "executor_config",
    "harness_seed",
    "harness_variant",
    "start_method",
    "variant_config",
    "world_size",
]

#: SPEC's bound on shutdown (C9), the fixture's wait on it.
_SHUTDOWN_S = 30.0


@pytest.fixture
def harness_variant(request: pytest.FixtureRequest) -> Variant:
    variant: Variant = request.param
    return variant


@pytest.fixture
def backend(harness_variant: Variant, request: pytest.FixtureRequest) -> Iterator[LoadedBackend]:
    """The backend under test (factory plus its declarations), with its
    run-wide session's environment set for the test. Its factory is checked:
    what it returns must have ``collective_rpc``, and a failure with the
    variant's own config is remembered, so that the variant's later tests are
    not run (one failing factory is reported once per variant, not per test)."""
    loaded = harness_variant.backend
    sessions = request.config.stash[sessions_key]
    env = sessions.nodes_env(harness_variant.nodes) if harness_variant.nodes > 1 else sessions.env(loaded)
    if harness_variant.nodes > 1:
        from harness.system import leaks

        # C9/C10 across nodes: each node's /dev/shm is checked as this machine's is.
        leaks.watch_nodes(sessions.node_inits(harness_variant.nodes))
    plain = variant_config(harness_variant, scale=1.0)
    checked = _CheckedFactory(loaded, plain, request.node)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield dataclasses.replace(loaded, factory=checked)


def _not_started_on_nodes(name: str, config: ExecutorConfig, exc: Exception) -> RuntimeError:
    """A start-up failure across nodes, with what nodes do not share: the usual
    reason a backend that starts on one machine does not start on several."""
    return RuntimeError(
        f"{name}: the executor did not start on {config.nodes} nodes (world_size={config.world_size}): "
        f"{type(exc).__name__}: {exc}. Each node has its own /tmp and /dev/shm, and its own loopback, as "
        "separate machines do: a process group that meets through a file or an address there is never "
        "reached from the other nodes"
    )


class _CheckedFactory:
    """A backend's factory, as tests call it."""

    def __init__(self, loaded: LoadedBackend, plain: ExecutorConfig, node: pytest.Item) -> None:
        self._loaded, self._plain, self._node = loaded, plain, node

    def __call__(self, config: ExecutorConfig) -> Executor:
        try:
            ex = self._loaded.factory(config)
        except Exception as exc:
            own = self._is_plain(config)
            if own:
                self._node.user_properties.append((Prop.FACTORY_FAILED, f"{type(exc).__name__}: {exc}"))
            # Only the variant's own config: a test that changes it (C20's
            # world_size=0) checks the error of that input, which stays as raised.
            if config.nodes > 1 and own:
                raise _not_started_on_nodes(self._loaded.name, config, exc) from exc
            raise
        if not callable(getattr(ex, "collective_rpc", None)):
            message = (
                f"backend {self._loaded.name!r}: the factory returned {type(ex).__name__} {ex!r:.80}, "
                "which has no collective_rpc: a factory must return an executor (SPEC.md, the API under test; "
                "`python -m harness docs SPEC.md` prints it)"
            )
            if self._is_plain(config):
                self._node.user_properties.append((Prop.FACTORY_FAILED, message))
            raise TypeError(message)
        return ex

    def _is_plain(self, config: ExecutorConfig) -> bool:
        """The variant's own config, whatever start-up bound the load gave it."""
        return dataclasses.replace(config, init_timeout_s=self._plain.init_timeout_s) == self._plain


@pytest.fixture
def world_size(harness_variant: Variant) -> int:
    return harness_variant.world_size


@pytest.fixture
def start_method(harness_variant: Variant) -> str:
    return harness_variant.start_method


@pytest.fixture
def harness_seed(request: pytest.FixtureRequest) -> int:
    """The seed of the tensor-parallel checks (``--harness-seed``)."""
    return request.config.stash[options_key].seed


def variant_config(variant: Variant, scale: float | None = None) -> ExecutorConfig:
    """The variant's config. Its start-up bound is the suite's own wait here (C22
    checks start-up failures with configs of its own), so a loaded machine
    stretches it (``scale``: by default :func:`start_up_scale`, the whole stretch
    on a machine loaded at all): CI's side jobs at 10 runnable per CPU timed out
    three correct starts across nodes at 120 s, and later two at 237 s, a bound
    read from the load at their start, before their own workers loaded it."""
    return ExecutorConfig(
        world_size=variant.world_size,
        start_method=variant.start_method,
        nodes=variant.nodes,
        init_timeout_s=ExecutorConfig.init_timeout_s * (start_up_scale() if scale is None else scale),
    )


@pytest.fixture
def executor_config(harness_variant: Variant) -> ExecutorConfig:
    return variant_config(harness_variant)


@pytest.fixture
def executor(
    backend: LoadedBackend, executor_config: ExecutorConfig, harness_variant: Variant, request: pytest.FixtureRequest
) -> Iterator[Executor]:
    """An executor for this test; shut down after it, and checked for leaks.

    A leak is a C9 finding, reported under C9 with this test's name; the
    test's own clauses keep their verdict. What a backend's first start leaves
    for good (a library's monitor thread, a runtime connection) is told apart
    from a leak the way C10 does it: a second executor, started and shut down
    after the first, must leave nothing more."""
    from harness.system import leaks

    before = leaks.baseline()
    ex = backend.factory(executor_config)
    try:
        yield ex
    finally:
        try:
            # SPEC's own bound (C9): a shutdown that hangs fails here, not at the test's timeout.
            bounded(ex.shutdown, _SHUTDOWN_S, f"{backend.name}: shutdown() after the test")
        except AssertionError:
            request.node.user_properties.append((Prop.LEAK, LEAK_CLAUSE))
            raise
    # Processes, threads, shared memory, sockets; descriptors are C10's to judge.
    verdict = judge_leaks(
        before,
        lambda: backend.factory(executor_config).shutdown(),
        harness_variant.id,
        request.node.stash.get(leak_key, None),
    )
    request.node.user_properties += verdict.properties
    if verdict.leaked:
        pytest.fail(f"{backend.name}: the executor leaked after shutdown: " + "; ".join(verdict.leaked), pytrace=False)
