# Round 3 on the GPU: block-sparse tests (CPU interpreter + CUDA) and table, fused add+RMSNorm
# table, torch.compile full mode after the donated-buffer fix.
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_block_sparse.py -o faulthandler_timeout=90 2>&1 | tail -15
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu -k "torch_compile" tests/test_rms_norm.py tests/test_fused_add_rms_norm.py 2>&1 | tail -3
timeout 200 python3 benchmarks/block_sparse_h100.py --device cuda --out "$RES/block_sparse"
timeout 150 python3 -m workbench bench fused_add_rms_norm --device cuda --dtype bf16 --rows 4096 \
  --hidden 512,1024,2048,4096,8192,16384 --mode forward,full \
  --store "$RES/fused_add_rms_norm.sqlite" --csv "$RES/fused_add_rms_norm.csv" | grep -A100 "^mode"
timeout 60 python3 -m workbench bench rms_norm --device cuda --dtype bf16 --rows 4096 --variants torch_compile \
  --hidden 1024,8192 --mode full --store "$RES/rms_norm_compile.sqlite" | grep -A5 "^mode"
