#!/usr/bin/env bash
# The GPU tier on a GPU machine where torch (CUDA build), pytest, pytest-timeout
# and psutil are installed (nvidia-ml-py too, where it can be: without it, what
# the GPUs hold is read with nvidia-smi) but harness is not: harness is taken from this
# checkout (PYTHONPATH) and its plugin loaded with -p. Writes env.txt,
# pytest.log and the clause matrix (gpu.json, gpu.md) under $OUT (default
# reports/gpu). Usage: ci/gpu-tier.sh [extra pytest arguments]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-reports/gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
    "$PY" - <<'PY'
import sys
import torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "devices", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)
PY
} 2>&1 | tee "$OUT/env.txt"
# The plugin loads through its entry point where harness is installed, else by name.
plugin=(-p harness.pytest_plugin)
"$PY" -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'harness' for e in m.entry_points(group='pytest11')))" && plugin=()
# --harness-sample "": every GPU test of every variant (pyproject.toml's sample is for CI's CPU time).
timeout "${GPU_TIER_TIMEOUT:-480}" "$PY" -m pytest "${plugin[@]}" -p no:cacheprovider -m gpu --harness-sample "" \
    --backend "${HARNESS_BACKENDS:-uni,mp}" --harness-timeout 150 -rA \
    --report-json "$OUT/gpu.json" --report-md "$OUT/gpu.md" "$@" 2>&1 | tee "$OUT/pytest.log"
rc=${PIPESTATUS[0]}
echo "--- after the run: compute processes still on the GPU" | tee -a "$OUT/env.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv 2>&1 | tee -a "$OUT/env.txt"
exit "$rc"
