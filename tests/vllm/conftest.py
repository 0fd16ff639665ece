"""vLLM's own end-to-end checks, run by ``make test-vllm`` in the venv that has vLLM.

Where vLLM is not installed (the core venv) nothing here is collected: then
``pytest tests/vllm`` finds no test and fails, rather than reading green."""

from importlib.util import find_spec

collect_ignore_glob = [] if find_spec("vllm") is not None else ["test_*.py"]
