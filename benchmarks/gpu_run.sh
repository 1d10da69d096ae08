#!/usr/bin/env bash
# The one entry for a command on a GPU machine: install the carried wheels, then run the steps
# named on the command line, in order, each bounded in time. Everything lands in $RES and comes
# back as $OUT/results.tgz, with the step logs beside it (a device call returns few files).
#
#   bash benchmarks/gpu_run.sh tests "rms_norm or fused"          # pytest -m gpu -k EXPR
#   bash benchmarks/gpu_run.sh suite h100 --only rms_norm_forward  # workbench bench --suite ... into $RES/<suite>
#   bash benchmarks/gpu_run.sh profile --only host                 # benchmarks/profile_calls.py
#   bash benchmarks/gpu_run.sh tune --only rms_forward             # benchmarks/tune_tiles.py
#   bash benchmarks/gpu_run.sh report --only rms_norm              # workbench report --device cuda into $RES/notebooks
#                                                                  # (carry the notebook wheels: WITH_NOTEBOOKS=1 pack_wheels.sh)
#   bash benchmarks/gpu_run.sh run python3 some_script.py ...      # anything else, output kept
# Steps chain with "+": gpu_run.sh tests "block_sparse" + suite h100 --only hmm_chain
# Records name the code that ran: the machine's copy has no history of its own (its .git may be
# an older one), so pass the commit it holds, checked by content there:
#   WORKBENCH_CODE_CLAIM=<output of `python -m workbench.provenance --claim`> bash benchmarks/gpu_run.sh ...
# Budget per step: STEP_TIMEOUT seconds (default 540), or TESTS_TIMEOUT, SUITE_TIMEOUT... for one kind. A suite step resumes into $RES/<suite>
# (or SUITE_OUT), so a suite longer than one call runs in parts (--resume is added for you).
set -uo pipefail
OUT=${OUT:-/tmp/out}
export RES=${RES:-/tmp/res}  # exported: a "run bash -c ..." step may write under $RES
mkdir -p "$OUT" "$RES"
if ls .whl/*-site.tar.xz >/dev/null 2>&1; then  # trees repacked to fit a call (pack_ray.sh, pack_notebooks.sh)
  mkdir -p /tmp/site && for t in .whl/*-site.tar.xz; do tar -C /tmp/site -xJf "$t"; done \
    && export PYTHONPATH=/tmp/site JUPYTER_PATH=/tmp/site/share/jupyter
fi
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site JUPYTER_PATH=/tmp/site/share/jupyter  # nbconvert templates: wheel data files
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 WORKBENCH_STORE=$RES/workbench.sqlite
# PyJuice's CuTe/TMA kernels need CUTLASS headers: the carried nvidia-cutlass wheel holds them.
[ -d /tmp/site/cutlass_library/source ] && export PYJUICE_CUTLASS_PATH=/tmp/site/cutlass_library/source
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$RES/gpu.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$RES/gpu.txt"
cat "$RES/gpu.txt"
# The image sets PYTHONDONTWRITEBYTECODE=1 and ships its packages without bytecode (and the
# wheels above install with --no-compile), so every process compiled the source of what it
# imported: 8.5 s of transformers' in each notebook that imports Liger, 18 s for one `import
# pandas` (reports/h200-cold-start). A pip-installed environment has its bytecode; so has this
# one now, compiled once here on every core, before any step, into a folder of its own
# (PYTHONPYCACHEPREFIX; the image's tree stays as it is). The seconds it took go to gpu.txt.
# BYTECODE=0 leaves the image's behaviour.
if [ "${BYTECODE:-1}" != 0 ]; then
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX=/tmp/pycache
  started=$SECONDS
  timeout 180 python3 -m compileall -q -j 0 $(python3 -c "import site; print(' '.join(site.getsitepackages()))") \
    $( [ -d /tmp/site ] && echo /tmp/site ) kernels workbench widgets >/dev/null 2>&1
  echo "bytecode compiled into $PYTHONPYCACHEPREFIX in $((SECONDS - started)) s (BYTECODE=0: not)" | tee -a "$RES/gpu.txt"
fi

# `timeout LIMIT CMD...`, and HANG_DUMP_S seconds before the limit, if the command still runs,
# the stacks of every process under it (Python's and the native ones, py-spy's `dump --native`;
# py-spy is carried in .whl) are appended to $RES/hangs.txt: a process that outlives its work
# names what holds it, even where the hang is below Python (the suite's exit, issue 57).
HANG_DUMP_S=${HANG_DUMP_S:-10}
PYSPY=$(command -v py-spy || echo /tmp/site/bin/py-spy)
descendants() {
  local child
  for child in $(pgrep -P "$1"); do echo "$child"; descendants "$child"; done
}
dump_stacks() {
  echo "=== $(date -u +%T) still running at its limit less ${HANG_DUMP_S} s: $*"
  [ -x "$PYSPY" ] || { echo "(no py-spy at $PYSPY)"; return 0; }
  local pid
  for pid in $(descendants "$1"); do
    echo "--- pid $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-200)"
    timeout 20 "$PYSPY" dump --native --pid "$pid" 2>&1 | head -120
  done
}
bounded() {
  local limit=$1; shift
  timeout "$limit" "$@" &
  local pid=$!
  ( sleep $((limit > HANG_DUMP_S ? limit - HANG_DUMP_S : 1)) && dump_stacks "$pid" "$@" ) >>"$RES/hangs.txt" 2>&1 &
  local watcher=$!
  wait "$pid"
  local rc=$?
  pkill -P "$watcher" 2>/dev/null; kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
  return $rc
}

step() {
  local name=$1; shift
  local limit=${name^^}_TIMEOUT
  local t=${!limit:-${STEP_TIMEOUT:-540}}
  echo "=== $name $* (timeout ${t}s)"
  case "$name" in
    # Only the modules that hold GPU tests: the others import notebook packages the image lacks.
    # Most of the step is Triton compiling into an empty cache, so the tests run on
    # TEST_WORKERS processes (pytest-xdist, carried in .whl) sharing the GPU; the "exclusive"
    # ones (they compare timings) run afterwards with the GPU to themselves. Each test's time
    # lands in $RES/test_times.txt as it ends, so a step cut short still says where time went.
    tests) local modules=$(grep -l "mark.gpu" tests/test_*.py) started=$SECONDS
           local common=(-q -ra -k "${1:-}" -p no:cacheprovider -o faulthandler_timeout=120 --durations=25)
           local parallel=()
           # --maxschedchunk 1: each worker starts with two consecutive tests, and the long ones sit
           # at every other place (tests/conftest.py), so each starts at once on its own worker.
           python3 -c "import xdist" 2>/dev/null && parallel=(-n "${TEST_WORKERS:-8}" --maxschedchunk 1)
           { WORKBENCH_TEST_LOG=$RES/test_times.txt bounded "$t" python3 -m pytest -m "gpu and not exclusive" \
               "${parallel[@]}" "${common[@]}" $modules
             WORKBENCH_TEST_LOG=$RES/test_times.txt bounded "$t" python3 -m pytest -m "gpu and exclusive" "${common[@]}" $modules
           } 2>&1 | tee -a "$RES/pytest_gpu.txt" | tail -40
           echo "tests step: $((SECONDS - started)) s" | tee -a "$RES/pytest_gpu.txt" ;;
    suite) local suite=$1; shift
           local dir=${SUITE_OUT:-$RES/$suite}
           bounded "$t" python3 -m workbench bench --suite "$suite" --device cuda --out "$dir" --resume "$@" 2>&1 \
             | tee -a "$RES/suite_$suite.txt" | tail -${SUITE_TAIL:-60} ;;
    profile) bounded "$t" python3 benchmarks/profile_calls.py --out "$RES" "$@" 2>&1 | tee -a "$RES/profile.txt" | tail -80 ;;
    tune) bounded "$t" python3 benchmarks/tune_tiles.py --out "$RES" "$@" 2>&1 | tee -a "$RES/tune.txt" | tail -80 ;;
    report) bounded "$t" python3 -m workbench report --device cuda --out "${REPORT_OUT:-$RES/notebooks}" "$@" 2>&1 \
              | tee -a "$RES/report.txt" | tail -40 ;;
    run) bounded "$t" "$@" 2>&1 | tee -a "$RES/run.txt" | tail -80 ;;
    *) echo "gpu_run.sh: unknown step '$name' (tests, suite, profile, tune, report, run)"; return 2 ;;
  esac
}

pack_results() {
  tar czf "$OUT/results.tgz" -C "$RES" .
  cp "$RES"/*.txt "$OUT/" 2>/dev/null || true
}

args=()
for a in "$@" "+"; do
  if [ "$a" = "+" ]; then
    if [ ${#args[@]} -gt 0 ]; then  # each step's wall time, the process's exit included (a hang shows here)
      began=$SECONDS
      step "${args[@]}"
      echo "=== ${args[0]} ended after $((SECONDS - began)) s" | tee -a "$RES/steps.txt"
      pack_results  # after every step: a call cut short at its device limit still returns the steps before
    fi
    args=()
  else
    args+=("$a")
  fi
done
[ -f "$OUT/results.tgz" ] || pack_results  # no step ran: the machine's facts still come back
