"""vLLM's workers with the suite's start-up failure injection (C22), for ``vllm-*``.

vLLM builds its worker from ``parallel_config.worker_cls``; the adapter names
one of these only when the injection is asked for. The rank named by
``HARNESS_FAIL_WORKER_INIT`` raises as its device is set up, before it joins
the process group, as a worker that cannot start would.
"""

from __future__ import annotations

import os

from vllm.v1.worker.cpu_worker import CPUWorker

from harness.contract import FAIL_INIT_ENV


def _fail_if_asked(rank: int) -> None:
    if os.environ.get(FAIL_INIT_ENV) == str(rank):
        raise RuntimeError(f"rank {rank}: start-up failure injected by {FAIL_INIT_ENV}={rank}")


class FailingCpuWorker(CPUWorker):  # type: ignore[misc]
    def init_device(self) -> None:
        _fail_if_asked(int(self.rank))
        super().init_device()


try:
    from vllm.v1.worker.gpu_worker import Worker as _GpuWorker
except ImportError:  # a CPU build without the GPU worker's imports
    _GpuWorker = None

if _GpuWorker is not None:

    class FailingGpuWorker(_GpuWorker):  # type: ignore[misc,valid-type]
        def init_device(self) -> None:
            _fail_if_asked(int(self.rank))
            super().init_device()
