#!/usr/bin/env bash
# One call on the lent GPU machine: install carried wheels, run the GPU tests, then the benches.
# Usage (device machine, repo root): bash benchmarks/gpu_run.sh "<pytest -k expr or ''>" "<bench script>"
# Everything lands in $RES (a scratch dir) and comes back as one archive, $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-/tmp/out}
export RES=/tmp/res
mkdir -p "$OUT" "$RES"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site JUPYTER_PATH=/tmp/site/share/jupyter  # nbconvert templates: wheel data files
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 WORKBENCH_STORE=$RES/workbench.sqlite
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$RES/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$RES/gpu.txt"
if [ -n "${1:-}" ]; then
  timeout 400 python3 -m pytest -q -ra -m gpu -k "$1" -p no:cacheprovider --continue-on-collection-errors \
    -o faulthandler_timeout=90 2>&1 | tee "$RES/pytest_gpu.txt" | tail -25
fi
if [ -n "${2:-}" ]; then
  bash "$2" 2>&1 | tee "$RES/bench.txt"
fi
tar czf "$OUT/results.tgz" -C "$RES" .
cp "$RES/bench.txt" "$RES/pytest_gpu.txt" "$OUT/" 2>/dev/null || true
