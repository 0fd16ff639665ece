"""C9/C10/C11, MultiprocExecutor on CPUs: every executor leaves zmq's IPC
socket files (uuid-named) in its temporary folder after an orderly shutdown()
of idle workers: the suite's C9 idle shutdown, every C10 cycle and C11's with
block all see them, on a quiet machine too."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C9'), ('vllm-mp', 'C10'), ('vllm-mp', 'C11')]

import os
import shutil
import stat
import tempfile


def sockets(folder: str) -> set:
    return {n for n in os.listdir(folder) if stat.S_ISSOCK(os.lstat(os.path.join(folder, n)).st_mode)}


if __name__ == "__main__":
    # A temporary folder of our own, for vLLM and every process it starts:
    # what is left in it is the executor's.
    folder = os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="repro-c9-tmp-")
    tempfile.tempdir = None
    from tiny import executor, verdict

    ex = executor(tp=2)
    print("socket files of the running executor:", len(sockets(folder)))
    ex.shutdown()
    left = sorted(sockets(folder))
    print("socket files left in its temporary folder after shutdown():", left)
    shutil.rmtree(folder, ignore_errors=True)
    verdict(bool(left), "shutdown() should remove the executor's IPC socket files")
