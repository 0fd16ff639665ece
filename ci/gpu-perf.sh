#!/usr/bin/env bash
# The perf tier's GPU workloads on a GPU machine (torch with CUDA, numpy; scipy
# and matplotlib for the comparison and the plot): records this machine kind's
# GPU baseline (engine step and round trip of `mp` on CUDA, world size 1) into
# $OUT/baselines, then runs `pytest -m "gpu and perf"` against it, and draws
# the payload cost curve. Copy $OUT/baselines/*.json into tests/perf/baselines/
# to keep the baseline. harness comes from this checkout (PYTHONPATH).
# Usage: OUT=reports/gpu-perf ci/gpu-perf.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-reports/gpu-perf}
PY=${PYTHON:-python3}
SIDE="mp@start_method=spawn,device=cuda,dist_backend=nccl"
mkdir -p "$OUT/baselines"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
rc=0
timeout 300 "$PY" -m harness bench --workload engine-step,round-trip --backend "$SIDE" --world-size 1 \
    --baseline-dir "$OUT/baselines" --update-baseline 2>&1 | tee "$OUT/baseline.log" || rc=1
# The pytest run below compares with the baseline where it looks: tests/perf/baselines.
mkdir -p tests/perf/baselines && cp "$OUT"/baselines/*.json tests/perf/baselines/ || rc=1
plugin=(-p harness.pytest_plugin)
"$PY" -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'harness' for e in m.entry_points(group='pytest11')))" && plugin=()
timeout 300 "$PY" -m pytest "${plugin[@]}" -p no:cacheprovider -m "gpu and perf" --harness-require-gpus 1 -rA \
    tests/perf 2>&1 | tee "$OUT/pytest.log" || rc=1
timeout 200 "$PY" -m harness bench --curves payload --backend "$SIDE" --world-size 1 --plot "$OUT/costs.png" \
    --json "$OUT/costs.json" 2>&1 | tee "$OUT/costs.log" || rc=1
exit "$rc"
