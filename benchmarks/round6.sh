# Round 6 on the GPU: tile sweeps that set the defaults (block-sparse small batch, RMSNorm backward chunks).
timeout 560 python3 benchmarks/tune_h100.py --out "$RES" 2>&1
