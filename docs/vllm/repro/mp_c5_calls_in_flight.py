"""C5, MultiprocExecutor: 300 non_block calls in flight, replies read only at
the end, never complete: the reply queues fill and the workers block."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C5')]

import threading

from tiny import executor, verdict


def echo(worker, value):
    return value


if __name__ == "__main__":
    ex = executor(tp=2)
    blob = b"r" * 20_000
    done = []

    def run():
        futures = [ex.collective_rpc(echo, args=((i, blob),), non_block=True) for i in range(300)]
        print("300 calls submitted", flush=True)
        for i, f in enumerate(futures):
            assert f.result() == [(i, blob)] * 2
        done.append(True)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(120)
    print("all 300 completed" if done else "not complete after 120 s")
    if not done:
        # Left alone, the workers outlive this process, spinning on the full reply queue.
        import psutil

        for worker in psutil.Process().children(recursive=True):
            worker.kill()
    verdict(not done, "hundreds of calls in flight should all complete")
