"""The executor a test gets: its variant's config, its start-up bound stretched by the load."""

from __future__ import annotations

from harness import ExecutorConfig, load_backend
from harness.pytest_plugin import variant_config
from harness.pytest_plugin.options import Variant


def test_a_loaded_machine_stretches_the_start_up_bound_of_the_variants_executor() -> None:
    variant = Variant(load_backend("mp"), world_size=4, start_method="spawn", nodes=1)
    quiet, loaded = variant_config(variant, scale=1.0), variant_config(variant, scale=3.0)
    assert quiet == ExecutorConfig(world_size=4, start_method="spawn")
    assert loaded.init_timeout_s == 3 * ExecutorConfig.init_timeout_s
    assert (loaded.world_size, loaded.start_method, loaded.nodes) == (4, "spawn", 1)
