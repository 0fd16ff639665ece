"""C24, MultiprocExecutor: collective_rpc from several threads at once.
Threads get each other's results; calls hang (or abort the process, SIGABRT).
Usage: python mp_c24_calls_from_threads.py [blocking|non_block]"""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C24')]

import faulthandler
import os
import signal
import subprocess
import sys
import threading
import time

from tiny import executor, verdict


def echo(worker, value):
    return value


def child(non_block):
    faulthandler.dump_traceback_later(200)  # where it hangs, if it does
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
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
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
        # Its own session: a child that hangs is killed with its workers.
        child_proc = subprocess.Popen([sys.executable, __file__, "child", mode], start_new_session=True)
        try:
            codes[mode] = child_proc.wait(timeout=240)
            how = " (SIGABRT)" if codes[mode] == -6 else ""
        except subprocess.TimeoutExpired:
            import psutil

            workers = psutil.Process(child_proc.pid).children(recursive=True)
            os.killpg(child_proc.pid, signal.SIGKILL)
            codes[mode] = child_proc.wait()
            how = ": hung, killed after 240 s"
            time.sleep(5)
            alive = [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
            if alive:
                busy = [round(w.cpu_percent(interval=1.0)) for w in alive]
                how += f"; its {len(alive)} workers outlived it 5 s, using {busy} % CPU (killed now)"
                for w in alive:
                    w.kill()
        print(f"{mode} calls from 4 threads: exit status {codes[mode]}{how}", flush=True)
    verdict(any(codes.values()), "calls from several threads should each get their own result")
