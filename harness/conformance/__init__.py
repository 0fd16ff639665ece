"""The portable conformance suite: one module per clause group of SPEC.md.

Run it against any backend::

    pytest --pyargs harness.conformance --backend mp,mypkg.mod:factory
    python -m harness conform --backend mp

Every test names its clauses with ``@pytest.mark.harness_clause``; it uses only the
worker contract of SPEC.md (``worker.rank``, the default process group, and
the module-level probes of ``harness.conformance.probes``).

Beside the tests it holds the probes (``probes``), the tiny models (``models``)
and the checks the tests share (``_checks``, ``_faults``, ...). It may import
the public API (``harness``), ``harness.backends``, ``harness.contract`` and
``harness.system``; it reaches executors only through the contract and the
loader, and never imports the plugin, the report or perf.
"""
