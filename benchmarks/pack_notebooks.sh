#!/usr/bin/env bash
# The notebook stack for a device call: `workbench report --device cuda` (gpu_run.sh's report step)
# runs every notebook headless on the GPU machine, whose image has none of papermill, nbconvert,
# ipykernel, ipywidgets or plotly. Their wheels with every dependency are about 32 MB, the peers
# (Liger-Kernel, PyJuice, the CUTLASS headers PyJuice's CuTe path reads) 8 MB more, and the
# checkout itself is about 46 MB of the 64 MiB a call can carry. Installed into one site tree
# and repacked as .tar.xz, the whole set is about 14 MB; benchmarks/gpu_run.sh unpacks
# .whl/*-site.tar.xz onto PYTHONPATH and points JUPYTER_PATH at its nbconvert templates.
#
#   bash benchmarks/pack_notebooks.sh [DEST=.whl]
#   then: run(command="bash benchmarks/gpu_run.sh report", carry=[".whl"])
#
# Left out: what the image has (torch and what it brings, numpy, pandas, scipy), and what a
# headless kernel never imports (debugpy, jedi and parso: the debugger and completion; the
# classic notebook's widgetsnbextension).
set -euo pipefail
DEST=${1:-.whl}
PIP=${PIP:-python3 -m pip}
PYVER=${PYVER:-3.12}
STACK=${STACK:-"papermill nbconvert ipykernel ipywidgets plotly latex2mathml pebble"}
PEERS=${PEERS:-"liger-kernel==0.8.5 pyjuice==2.6.3 nvidia-cutlass==4.2.0.0"}
SKIP=${SKIP:-"numpy pandas scipy torch triton filelock networkx sympy mpmath fsspec setuptools debugpy jedi parso widgetsnbextension"}
mkdir -p "$DEST"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_26_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
target=(--only-binary=:all: --python-version "$PYVER" --implementation cp "${platforms[@]}")
# shellcheck disable=SC2086
$PIP download -q "${target[@]}" -d "$TMP/all" $STACK
# shellcheck disable=SC2086
$PIP download -q --no-deps "${target[@]}" -d "$TMP/all" $PEERS
for name in $SKIP; do
  rm -f "$TMP"/all/"$name"-*.whl "$TMP"/all/"${name//-/_}"-*.whl
done
$PIP install -q --no-deps --no-compile --target "$TMP/site" "${target[@]}" "$TMP"/all/*.whl
find "$TMP/site" -name "__pycache__" -type d -prune -exec rm -rf {} +
tar -C "$TMP/site" -cJf "$DEST/notebooks-site.tar.xz" .
ls -la "$DEST/notebooks-site.tar.xz"
