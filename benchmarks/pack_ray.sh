#!/usr/bin/env bash
# Ray for a device call (issue 17): the ray 2.60.0 manylinux wheel is 79 MB, over the 64 MiB a
# call can carry. Unpacked without ray/jars (Java), ray/rllib and the libraries a sweep does not
# use, the dashboard's front end, its binaries stripped, and repacked as .tar.xz (xz -9e), it is
# about 17 MB (25 MB with the front end at xz -6: too much beside today's checkout); benchmarks/gpu_run.sh
# unpacks .whl/*-site.tar.xz into its site dir. Ray's
# dependencies that the GPU image lacks come along as wheels in the same folder (gpu_run.sh
# installs .whl/*.whl with --no-deps).
#
#   bash benchmarks/pack_ray.sh [DEST=.whl]
#   then: run(command="bash benchmarks/gpu_run.sh run python3 benchmarks/sweep_scaling.py ...", carry=[".whl"])
#
# GPU image (as seen on the lent machines): python 3.12, torch 2.11, triton 3.6, numpy, pandas, scipy; torch brings
# filelock, typing_extensions, jinja2, networkx, sympy, fsspec. SKIP lists what is there already.
set -euo pipefail
DEST=${1:-.whl}
PIP=${PIP:-python3 -m pip}
PYVER=${PYVER:-3.12}
PLATFORM=${PLATFORM:-manylinux2014_x86_64}
RAY_VERSION=${RAY_VERSION:-2.60.0}
SKIP=${SKIP:-"numpy pandas scipy torch triton filelock typing_extensions jinja2 markupsafe networkx sympy mpmath fsspec setuptools"}
mkdir -p "$DEST"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
target=(--only-binary=:all: --python-version "$PYVER" --platform "$PLATFORM" --implementation cp)

# ray and its dependency closure, as the GPU image's python would resolve them
$PIP download -q "${target[@]}" -d "$TMP/all" "ray==$RAY_VERSION"
mkdir -p "$TMP/site"
python3 -m zipfile -e "$TMP"/all/ray-"$RAY_VERSION"-*.whl "$TMP/site"
rm -rf "$TMP/site/ray/jars" "$TMP/site/ray/rllib"
# A sweep needs Ray core alone: the libraries on top go, and the binaries lose their symbol
# tables (unstripped, the tree no longer fit beside the checkout in one call: 34 MB of 64).
rm -rf "$TMP/site/ray/data" "$TMP/site/ray/serve" "$TMP/site/ray/train" "$TMP/site/ray/tune" "$TMP/site/ray/llm"
# The dashboard's web front end (8.9 MB unpacked): sweeps start Ray with include_dashboard=False.
rm -rf "$TMP/site/ray/dashboard/client"
find "$TMP/site/ray" -type f \( -name "*.so" -o -path "*/core/src/ray/*" \) -exec strip --strip-unneeded {} + 2>/dev/null || true
# zipfile drops the executable bits: the raylet, gcs_server and friends need them back
find "$TMP/site/ray/core/src" -type f \( -name raylet -o -name gcs_server -o -name plasma_store_server \
  -o -name "*_server" -o -name "default_worker*" \) -exec chmod +x {} +
find "$TMP/site" -path "*/bin/*" -type f -exec chmod +x {} + 2>/dev/null || true
rm -f "$DEST"/ray-*-site.tar.xz
XZ_OPT=${XZ_OPT:--T0 -9e} tar -C "$TMP/site" -cJf "$DEST/ray-$RAY_VERSION-site.tar.xz" .
rm -f "$TMP"/all/ray-"$RAY_VERSION"-*.whl

for whl in "$TMP"/all/*.whl; do
  name=$(basename "$whl" | cut -d- -f1 | tr '[:upper:]-' '[:lower:]_')
  if [[ " $SKIP " == *" $name "* ]]; then continue; fi
  cp "$whl" "$DEST/"
done
ls -la "$DEST"
du -ch "$DEST"/ray-*-site.tar.xz "$DEST"/*.whl | tail -1
