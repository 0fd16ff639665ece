"""Chaos: the contract under random faults and long load.

``python -m harness chaos --backend X --world-size N --duration S --seed K``
drives executors of a backend through a seeded random schedule of calls and
faults, judged against docs/SPEC.md by a model of it (``model.py``), shrinks
the first violation to a short sequence (Hypothesis's stateful testing,
``machine.py``), then soaks one executor with plain calls and reports what its
processes grew by (``soak.py``); ``run.py`` ties them together and prints the
figures. A run's state and findings are ``state.py``'s, its bounded waits
``bounded.py``'s: no module of the package imports one that imports it.

It stands on the floor of the report and perf (docs/layout.md): it may import
the suite's probes, the loader, the contract and ``harness.system``.
"""

from harness.chaos.model import Violation
from harness.chaos.run import ChaosReport, render, run_chaos
from harness.chaos.state import Finding

__all__ = ["ChaosReport", "Finding", "Violation", "render", "run_chaos"]
