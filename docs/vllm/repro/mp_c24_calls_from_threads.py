"""C24, MultiprocExecutor: collective_rpc from several threads at once.
Blocking calls abort the process (SIGABRT); non_block calls never complete.
Usage: python mp_c24_calls_from_threads.py [blocking|non_block]"""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C24')]

import subprocess
import sys
import threading

from tiny import executor, verdict


def echo(worker, value):
    return value


def child(non_block):
    ex = executor(tp=2)
    problems = []

    def calls(t):
        for i in range(20):
            if non_block:
                got = ex.collective_rpc(echo, args=((t, i),), non_block=True).result()
            else:
                got = ex.collective_rpc(echo, args=((t, i),))
            if got != [(t, i)] * 2:
                problems.append(f"thread {t} call {i} got {got!r}")

    threads = [threading.Thread(target=calls, args=(t,), daemon=True) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stuck = sum(t.is_alive() for t in threads)
    print(f"threads still waiting after 60 s: {stuck}; wrong results: {problems[:3]}", flush=True)
    if not stuck:
        ex.shutdown()
    verdict(bool(stuck or problems), "each thread should get its own results")


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2] == "non_block")
    modes = sys.argv[1:] or ["blocking", "non_block"]
    codes = {}
    for mode in modes:
        codes[mode] = subprocess.run([sys.executable, __file__, "child", mode], timeout=300).returncode
        print(f"{mode} calls from 4 threads: exit status {codes[mode]}" + (" (SIGABRT)" if codes[mode] == -6 else ""))
    verdict(any(codes.values()), "calls from several threads should each get their own result")
