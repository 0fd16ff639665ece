"""C20, MultiprocExecutor: when a worker returns an object of a class the caller cannot
load (from a module made at run time in the worker), the call raises
ModuleNotFoundError, and so does every call after it: the executor is not usable."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C20')]

from tiny import executor, verdict


def unloadable(worker):
    import sys
    import types

    module = types.ModuleType("made_in_the_worker")
    exec("class Made:\n    pass\n", module.__dict__)
    sys.modules[module.__name__] = module  # so the worker can pickle it; the caller has no such module
    return module.Made()


def rank(worker):
    return worker.rank


if __name__ == "__main__":
    ex = executor(tp=2)
    try:
        got = f"returned {ex.collective_rpc(unloadable, timeout=30)!r}"
    except Exception as exc:
        got = f"raised {exc!r}"
    print("the call:", got, flush=True)
    try:
        after = ex.collective_rpc(rank, timeout=30)
    except Exception as exc:
        after = exc
    print("the next call:", repr(after), flush=True)
    ex.shutdown()
    verdict(after != [0, 1], "the executor should stay usable after a result the caller cannot load")
