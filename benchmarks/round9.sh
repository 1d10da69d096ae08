# Round 9 on the GPU: block-sparse GPU tests, then the suite's tile-default targets and the full-mode norms again.
timeout 140 python3 -m pytest -q -m gpu tests/test_block_sparse.py tests/test_device.py -p no:cacheprovider \
  -o faulthandler_timeout=90 2>&1 | tail -6 | tee "$RES/pytest_gpu_block_sparse.txt"
SUITE_TIMEOUT=400 SUITE_TAIL=40 \
SUITE_ONLY=defaults_rms_norm_forward,defaults_fused_forward,defaults_block_sparse_forward,defaults_rms_norm_full,rms_norm_full,fused_full \
  bash benchmarks/round7.sh
