# Round 11 on the GPU: after the review refactor, the norm families' GPU tests and the block-sparse
# suite target (the peer's bare kernel now comes from Variant.kernel) into a scratch folder.
timeout 200 python3 -m pytest -q -x -m gpu tests/test_rms_norm.py tests/test_fused_add_rms_norm.py -p no:cacheprovider \
  -o faulthandler_timeout=90 2>&1 | tail -4 | tee "$RES/pytest_gpu.txt"
timeout 200 python3 -m workbench bench --suite h100 --device cuda --out "$RES/check" --no-html \
  --only block_sparse_forward 2>&1 | tail -12
