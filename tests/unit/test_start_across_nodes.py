"""A factory's failure on a multi-node variant: the variant's own config that
does not start gets the hint of what nodes do not share; a config a test
changed (C20's bad input, C18's second executor) raises what the backend raised, unchanged."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness import ExecutorConfig
from harness.backends import LoadedBackend
from harness.pytest_plugin import _CheckedFactory


def _refusing(config: ExecutorConfig) -> Any:
    if config.world_size != 4:
        raise ValueError(f"world_size must be 4, got {config.world_size}")
    raise ConnectionError("rank 2 never reached the store at /tmp/store")


class _Item:
    def __init__(self) -> None:
        self.user_properties: list[tuple[str, str]] = []


PLAIN = ExecutorConfig(world_size=4, nodes=2)


def _factory() -> _CheckedFactory:
    return _CheckedFactory(LoadedBackend("refusing", _refusing), PLAIN, _Item())  # type: ignore[arg-type]


def test_the_variants_own_config_failing_to_start_names_the_nodes_and_what_they_do_not_share() -> None:
    with pytest.raises(RuntimeError) as failure:
        _factory()(PLAIN)
    text = str(failure.value)
    assert "refusing: the executor did not start on 2 nodes (world_size=4)" in text
    assert "ConnectionError: rank 2 never reached the store at /tmp/store" in text
    assert "Each node has its own /tmp and /dev/shm" in text


def test_a_config_the_test_changed_raises_the_backends_own_error() -> None:
    with pytest.raises(ValueError, match="world_size must be 4, got 2"):
        _factory()(dataclasses.replace(PLAIN, world_size=2))
