#!/usr/bin/env bash
# The wheels a GPU machine lacks for the suite and its diagnostics: pebble (the compile processes),
# the peers (Liger-Kernel,
# PyJuice and the CUTLASS headers PyJuice's CuTe path reads), py-spy (a sampling profiler for
# "where does the suite's time go") and pytest-xdist (the GPU tests on several processes). The
# GPU image has torch, triton, numpy, scipy, pandas, numba, networkx, matplotlib and tqdm
# already (KINDS.md), so every wheel is fetched --no-deps.
# benchmarks/gpu_run.sh installs .whl/*.whl; name .whl in the device call's carry.
#
#   bash benchmarks/pack_wheels.sh [DEST=.whl]      # about 11 MB
#   WITH_WIDGETS=1 bash benchmarks/pack_wheels.sh   # + plotly, ipywidgets and what they import (about 14 MB more):
#                                                   # explorer_latency.py and the reports' figures on the GPU machine
#   WITH_TUNE=1 bash benchmarks/pack_wheels.sh      # + Optuna and what `import optuna` loads (workbench tune --strategy bayes)
#   bash benchmarks/pack_notebooks.sh               # the notebook stack and the peers as one .tar.xz (about 14 MB):
#                                                   # `workbench report` (gpu_run.sh's report step) on the GPU machine
#   bash benchmarks/pack_ray.sh [DEST=.whl]         # Ray and its dependencies, for sweeps (about 20 MB)
set -euo pipefail
DEST=${1:-.whl}
PIP=${PIP:-python3 -m pip}
PYVER=${PYVER:-3.12}
WHEELS=${WHEELS:-"pebble==5.2.3 liger-kernel==0.8.5 pyjuice==2.6.3 nvidia-cutlass==4.2.0.0 py-spy==0.4.3 pytest-xdist==3.8.0 execnet==2.1.1"}
# ipywidgets imports IPython and traitlets; none of the notebook stack is on the GPU image.
WIDGET_WHEELS="plotly narwhals ipywidgets comm traitlets widgetsnbextension jupyterlab_widgets anywidget psygnal
  typing_extensions ipython ipython_pygments_lexers pygments decorator jedi parso matplotlib-inline pexpect
  ptyprocess prompt_toolkit wcwidth stack_data executing asttokens pure_eval"
[ "${WITH_WIDGETS:-0}" = 1 ] && WHEELS="$WHEELS $WIDGET_WHEELS"
# Optuna imports its RDB storage (SQLAlchemy, Alembic) only when asked for one; tune keeps studies in memory.
[ "${WITH_TUNE:-0}" = 1 ] && WHEELS="$WHEELS optuna==5.0.0 colorlog PyYAML"
mkdir -p "$DEST"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
for w in $WHEELS; do
  $PIP download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    "${platforms[@]}" -d "$DEST" "$w"
done
ls -la "$DEST"
du -ch "$DEST"/*.whl | tail -1
