"""C23: nothing listens beyond loopback; shared memory is private."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import ExecutorConfig
from harness.conformance import _netns
from harness.conformance._checks import blocked_by
from harness.conformance._exposure import CollectivesFailedError, examine
from harness.system import leaks
from harness.verdicts import Prop

pytestmark = pytest.mark.timeout(300)


@pytest.mark.harness_clause("C23")
def test_c23_nothing_listens_beyond_loopback_and_shm_is_private(
    backend: Any, executor_config: ExecutorConfig, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Every process the executor starts from here on carries this process's tag.
    tag = leaks.tag()
    here = _netns.host_resolution()
    try:
        plain = examine(backend.factory, executor_config, tag)
    except CollectivesFailedError as exc:
        blocked_by("C15", f"the workers' process group could not be connected: {exc}")
    assert not plain.problems(), f"in this machine's network, where the {here}: " + "; ".join(plain.problems())
    if executor_config.nodes > 1:
        # Each node is a network namespace of its own already, with an address on the cluster's network.
        ns = _netns.NetnsRun(unavailable="across nodes, each node is a network namespace of its own already")
    elif backend.session is not None:
        # Its run-wide resources (a cluster) live in this machine's network, out of the namespace's reach.
        ns = _netns.NetnsRun(unavailable="the backend's run-wide session runs outside any namespace")
    else:
        ns = _netns.run(backend.name, executor_config, tmp_path, executor_config.init_timeout_s + 60)
    if ns.exposure is None and not ns.error:
        note = f"C23 ran in this machine's network only ({here}); not in a network namespace: {ns.unavailable}"
        request.node.user_properties.append((Prop.NOTE, note))
        return
    request.node.user_properties.append(
        (Prop.NOTE, f"C23 ran twice: in this machine's network ({here}) and in a network namespace ({ns.where})")
    )
    assert not ns.error, f"in a network namespace where the {ns.where}, the executor failed: {ns.error}"
    assert ns.exposure is not None
    problems = ns.exposure.problems()
    assert not problems, f"in a network namespace where the {ns.where}: " + "; ".join(problems)
