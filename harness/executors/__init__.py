"""The built-in executors, one module or package each: ``uniproc`` (``uni``), ``mp``
(the reference), ``ray``, and ``vllm`` (vLLM's own, adapted). Import the one you
need. Beside them, what they share: the futures of calls (``futures``), the base
of the group executors ``mp`` and ``ray`` (``_group``), the checks a call passes
before it is sent (``_validate``), and how a call is pickled (``_wire``).

They may import ``harness.contract``, ``harness.system`` and one another; never
the loader (``harness.backends``), the public API (``harness``), the suite, the
plugin, the report or perf (docs/layout.md).
"""
