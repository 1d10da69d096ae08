# Round 2 on the GPU: host overhead, RMSNorm table after the overhead fix, scalar ops, Explorer latency.
timeout 60 python3 benchmarks/host_overhead.py --device cuda --rows 4096 --hidden 1024
timeout 40 python3 benchmarks/host_overhead.py --device cuda --rows 4096 --hidden 8192 --profile none | head -12
timeout 200 python3 -m workbench bench rms_norm --device cuda --dtype bf16 --rows 4096 \
  --hidden 1024,2048,4096,8192,16384,32768 --mode forward,full \
  --store "$RES/rms_norm.sqlite" --csv "$RES/rms_norm.csv" | grep -A100 "^mode"
timeout 150 python3 benchmarks/scalar_ops_h100.py --device cuda --out "$RES/scalar_ops"
timeout 90 python3 benchmarks/explorer_latency.py --device cuda
