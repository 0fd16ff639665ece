"""Deliberately slowed backends, built on ``mp``: what the perf tier must catch.

- ``spinning_reply_thread``: the regression this project exists for. A driver
  thread busy-waits on the reply channel while a call is pending (it polls the
  call's future with a zero timeout, spinning in Python between polls) and
  completes the future the caller's
  thread sleeps on. Idle, the thread blocks on its queue: an idle-CPU check
  (C19) sees nothing, and every result is right; only time shows it.
- ``delayed``: every call returns ``HARNESS_PERF_DELAY_S`` seconds late (a busy
  wait on the caller's thread after the reply, exact at microseconds), for the
  smallest slowdown the A/B mode detects. A ``non_block`` call's future pays it
  in ``result()``, after the reply: paid at submission, it overlapped the
  workers' step (the engine step submits, then schedules), and a 1 ms delay on
  a 2.2 ms step read +9 %, not flagged. Set it per side:
  ``...:delayed@env.HARNESS_PERF_DELAY_S=0.0001``.
- ``spinning_beside``: the seed's regression as it shipped, beside the calls
  rather than in them: a caller-side thread that busy-polls (a look in
  Python, then a yield of the CPU) from the executor's creation to its
  shutdown, whether a call is pending or not. The calls themselves are the
  inner backend's, untouched. The inner backend is ``mp`` unless the
  executor's env names another (``HARNESS_PERF_INNER``, any spec the suite
  accepts): ``...:spinning_beside@env.HARNESS_PERF_INNER=vllm-mp`` puts it
  beside vLLM's ``MultiprocExecutor``.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
import time
from typing import Any

from harness import ExecutorConfig
from harness.backends import load_backend
from tests.meta.broken import _Wrapper

DELAY_ENV = "HARNESS_PERF_DELAY_S"
INNER_ENV = "HARNESS_PERF_INNER"
# Python-level iterations between two polls of the reply channel (tens of microseconds).
_SPIN_BETWEEN_POLLS = 500


class SpinningReplyThread(_Wrapper):
    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._pending: queue.Queue[tuple[Any, concurrent.futures.Future[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drive, name="reply-spinner", daemon=True)
        self._thread.start()

    def _drive(self) -> None:
        while True:
            item = self._pending.get()  # blocks while nothing is pending
            if item is None:
                return
            inner, outer = item
            while True:
                try:
                    value = inner.result(timeout=0)
                except TimeoutError:
                    # The regression: poll again at once. The check between
                    # polls is Python, holding the GIL, as a ring read in
                    # Python is: the caller's own Python work waits on it.
                    for _ in range(_SPIN_BETWEEN_POLLS):
                        pass
                    continue
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's future
                    outer.set_exception(exc)
                    break
                outer.set_result(value)
                break

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        inner = self.inner.collective_rpc(method, timeout, args, kwargs, True, unique_reply_rank)
        outer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._pending.put((inner, outer))
        return outer if non_block else outer.result()

    def shutdown(self) -> None:
        self._pending.put(None)
        self._thread.join(timeout=10)
        super().shutdown()


class Delayed(_Wrapper):
    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        text = dict(config.env).get(DELAY_ENV, "0")
        try:
            self.delay_s = float(text)
            if self.delay_s < 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"delayed: {DELAY_ENV} in the executor's env must be seconds >= 0, got {text!r}") from None

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if isinstance(out, concurrent.futures.Future):
            return _LateFuture(out, self.delay_s)
        _spin(self.delay_s)
        return out


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class _LateFuture(concurrent.futures.Future[Any]):
    """The inner future's outcome, ``delay_s`` after the caller's ``result()`` got it."""

    def __init__(self, inner: concurrent.futures.Future[Any], delay_s: float) -> None:
        super().__init__()
        self._inner = inner
        self._delay_s = delay_s

    def result(self, timeout: float | None = None) -> Any:
        if not self.done():
            try:
                value = self._inner.result(timeout)
            except concurrent.futures.TimeoutError:
                raise
            except BaseException as exc:  # noqa: BLE001 - the call's own error, as late as a value
                _spin(self._delay_s)
                self.set_exception(exc)
            else:
                _spin(self._delay_s)
                self.set_result(value)
        return super().result(0)


#: Python-level iterations of one look at the reply queue (a few microseconds).
_LOOK = 200


class SpinningBeside(_Wrapper):
    """The inner backend's executor, and beside it a thread polling from start to shutdown."""

    def __init__(self, config: ExecutorConfig) -> None:
        # Not _Wrapper's __init__, which starts mp: the inner backend is the env's.
        spec = dict(config.env).get(INNER_ENV, "mp")
        self.inner = load_backend(spec, where=f"{INNER_ENV} in the executor's env").factory(config)
        self.world_size = config.world_size
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="reply-poller", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for _ in range(_LOOK):  # the look: Python, holding the GIL
                pass
            os.sched_yield()  # the "polite" part: lets go of the GIL and the CPU, and looks again at once

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        super().shutdown()


def spinning_beside(config: ExecutorConfig) -> SpinningBeside:
    return SpinningBeside(config)


def spinning_reply_thread(config: ExecutorConfig) -> SpinningReplyThread:
    return SpinningReplyThread(config)


def delayed(config: ExecutorConfig) -> Delayed:
    return Delayed(config)
