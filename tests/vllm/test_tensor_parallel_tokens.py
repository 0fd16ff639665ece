"""Through vLLM's engine, the tiny model at TP=2 picks the same greedy tokens as at
TP=1, for each multi-process executor: ``mp`` on CPUs (float32; vLLM refuses Ray
there), ``mp`` and ``ray`` on two GPUs (bfloat16).

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


def _tokens(model: str, tp: int, backend: str, device: str) -> list[list[int]]:
    code = (
        "import json, sys; from harness.executors.vllm import greedy_tokens; "
        "print('TOKENS ' + json.dumps(greedy_tokens(*json.loads(sys.argv[1]))))"
    )
    spec = json.dumps([model, tp, backend, device, PROMPTS, STEPS])
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
    assert proc.returncode == 0 and lines, (
        f"vLLM's engine ({backend}, TP={tp}, {device}) exited with {proc.returncode}:\n{out[-4000:]}"
    )
    return json.loads(lines[-1].removeprefix("TOKENS "))


@pytest.mark.timeout(2 * ENGINE_TIMEOUT_S + 60)
@pytest.mark.parametrize(
    ("backend", "device"),
    [
        ("mp", "cpu"),
        pytest.param("mp", "cuda", marks=pytest.mark.gpu(min_gpus=2)),
        pytest.param("ray", "cuda", marks=pytest.mark.gpu(min_gpus=2)),
    ],
)
def test_greedy_tokens_at_tp2_equal_tp1(backend: str, device: str) -> None:
    model = tiny_model()
    single = _tokens(model, 1, "uni", device)
    assert all(len(t) == STEPS for t in single), f"TP=1 gave {single}, expected {STEPS} tokens per prompt"
    assert len({tuple(t) for t in single}) > 1, f"TP=1 gave the same tokens for every prompt: {single}"
    split = _tokens(model, 2, backend, device)
    for i, (one, two) in enumerate(zip(single, split, strict=True)):
        first = next((s for s, (a, b) in enumerate(zip(one, two, strict=False)) if a != b), None)
        assert first is None and len(one) == len(two), (
            f"prompt {i}: TP=2 ({backend}) differs from TP=1 from step {first}: TP=1 {one}, TP=2 {two}"
        )
