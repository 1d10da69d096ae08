# Issue 4's H100 table: bf16, 4096 rows, hidden 512-16384, forward and full, every variant
# (ours beside torch eager, torch.compile, our rms_norm after a torch add, Liger when installed).
# Then the NPU kernels' strategies on the same GPU: untiled vs chunked across BLOCK_SIZE_M (the
# notebook's crossover, as a table).
# Usage on the device machine: bash benchmarks/gpu_run.sh "fused_add" benchmarks/fused_add_rms_norm_h100.sh
python3 -m workbench bench fused_add_rms_norm --device cuda --dtype bf16 --rows 4096 \
  --hidden 512,1024,2048,4096,8192,16384 --mode forward,full \
  --store "$RES/fused_add_rms_norm.sqlite" --csv "$RES/fused_add_rms_norm.csv" | grep -v "^fused_add_rms_norm/"
for strategy in untiled chunked; do
  for m in 1 2 4 8; do
    python3 -m workbench bench fused_add_rms_norm --device cuda --dtype bf16 --rows 4096 \
      --hidden 512,2048,4096,8192,32768 --mode forward --variants npu \
      --param strategy=$strategy --param BLOCK_SIZE_M=$m --rep-ms 50 \
      --store "$RES/fused_add_rms_norm_npu.sqlite" | grep -A20 "^mode"
  done
done
