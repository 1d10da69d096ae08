# Round 10 on the GPU: re-run the block-sparse target (peer-wrong rule), the RMSNorm full and the fused forward
# targets into the report, and the host-cost pieces at the same time.
timeout 40 python3 benchmarks/profile_h100.py --only host --out "$RES" 2>&1 | head -20
SUITE_TIMEOUT=300 SUITE_TAIL=30 SUITE_ONLY=block_sparse_forward,rms_norm_full,fused_forward bash benchmarks/round7.sh
