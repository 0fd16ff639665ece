"""C22, MultiprocExecutor: when a worker fails to start, construction fails with
"WorkerProc initialization failed ..." but without the worker's own message."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C22')]

from pathlib import Path

from tiny import executor, verdict

import torch

if torch.cuda.is_available():
    from vllm.v1.worker.gpu_worker import Worker as _Base
else:
    from vllm.v1.worker.cpu_worker import CPUWorker as _Base

MESSAGE = "disk quota exceeded while loading shard 7"


class FailingWorker(_Base):
    def init_device(self):
        if self.rank == 1:
            raise RuntimeError(MESSAGE)
        super().init_device()


if __name__ == "__main__":
    try:
        ex = executor(tp=2, worker_cls=f"{Path(__file__).stem}.FailingWorker")  # imported by the workers
        ex.shutdown()
        error = "construction succeeded"
    except Exception as exc:
        error = repr(exc)
    print("construction:", error)
    verdict(MESSAGE not in error, f"the construction error should carry the worker's message {MESSAGE!r}")
