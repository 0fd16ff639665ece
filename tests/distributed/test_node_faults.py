"""The portable suite's `harness.conformance.test_node_faults`, run for the built-in backends.

The tests live in the package so backend authors run the very same ones; one
shim per module keeps each module's own `pytestmark`.
"""

from harness.conformance.test_node_faults import *  # noqa: F403
from harness.conformance.test_node_faults import pytestmark  # noqa: F401
