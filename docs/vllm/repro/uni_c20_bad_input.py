"""C20, UniProcExecutor: an unknown method name raises NotImplementedError; an
unpicklable argument or result raises nothing (the worker runs in the caller's
process, and nothing is pickled)."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-uni', 'C20')]

import threading

from tiny import executor, verdict


def echo(worker, value):
    return value


def lock(worker):
    return threading.Lock()


if __name__ == "__main__":
    ex = executor(tp=1, backend="uni")
    seen = {}
    for what, call in (
        ("unknown method", lambda: ex.collective_rpc("no_such_method_xyz")),
        ("unpicklable argument", lambda: ex.collective_rpc(echo, args=(threading.Lock(),), non_block=True).result()),
        ("unpicklable result", lambda: ex.collective_rpc(lock)),
    ):
        try:
            seen[what] = f"returned {call()!r}"
        except Exception as exc:
            seen[what] = f"raised {exc!r}"
        print(f"{what}: {seen[what]}")
    ex.shutdown()
    ok = "no_such_method_xyz" in seen["unknown method"] and "NotImplementedError" not in seen["unknown method"]
    ok = ok and not any(v.startswith("returned") for v in seen.values())
    verdict(not ok, "an unknown method should be named (NotImplementedError reads as a missing feature), unpicklable arguments and results refused")
