"""The portable conformance suite: one module per clause group of SPEC.md.

Run it against any backend::

    pytest --pyargs harness.conformance --backend mp,mypkg.mod:factory
    python -m harness conform --backend mp

Every test names its clauses with ``@pytest.mark.clause``; it uses only the
worker contract of SPEC.md (``worker.rank``, the default process group, and
the module-level probes of ``harness.conformance.probes``).
"""
