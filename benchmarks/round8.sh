# Round 8 on the GPU: GPU tests of the norm families, a host/kernel profile, the remaining suite parts.
timeout 170 python3 -m pytest -q -x -m gpu tests/test_rms_norm.py tests/test_fused_add_rms_norm.py -p no:cacheprovider \
  -o faulthandler_timeout=90 2>&1 | tail -8 | tee "$RES/pytest_gpu.txt"
timeout 40 python3 benchmarks/profile_h100.py --only host,kernels --out "$RES" 2>&1 | grep -v "^ *[0-9]* *0.0" | head -60
SUITE_TIMEOUT=330 SUITE_ONLY=rms_norm_full,fused_forward,fused_full,block_sparse_forward,hmm_chain SUITE_TAIL=45 bash benchmarks/round7.sh
