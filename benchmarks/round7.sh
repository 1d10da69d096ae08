# Round 7 on the GPU: the changed kernels' GPU tests, then the h100 suite's norm targets.
mkdir -p reports/h100
timeout ${SUITE_TIMEOUT:-560} python3 -m workbench bench --suite h100 --device cuda --out reports/h100 --resume --no-html \
  --only "${SUITE_ONLY:-rms_norm_forward,rms_norm_full}" 2>&1 | tail -${SUITE_TAIL:-60}
cp -r reports/h100 "$RES/h100"
