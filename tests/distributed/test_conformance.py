"""The portable suite, run for the built-in backends (``harness_backends`` in pyproject.toml).

The tests live in ``harness.conformance`` so that backend authors run the very
same ones; importing them here collects them for this repository's CI.
"""

from harness.conformance.test_errors import *  # noqa: F403
from harness.conformance.test_faults import *  # noqa: F403
from harness.conformance.test_lifecycle import *  # noqa: F403
from harness.conformance.test_payloads import *  # noqa: F403
from harness.conformance.test_process_group import *  # noqa: F403
from harness.conformance.test_results import *  # noqa: F403
from harness.conformance.test_security import *  # noqa: F403
