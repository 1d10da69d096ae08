# Round 1 on the GPU: RMSNorm and fused add+RMSNorm tables (bounded, progress visible).
timeout 240 bash benchmarks/rms_norm_h100.sh
timeout 200 python3 -m workbench bench fused_add_rms_norm --device cuda --dtype bf16 --rows 4096 \
  --hidden 512,1024,2048,4096,8192,16384 --mode forward,full \
  --store "$RES/fused_add_rms_norm.sqlite" --csv "$RES/fused_add_rms_norm.csv"
