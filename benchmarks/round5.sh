# Round 5 on the GPU: where the time goes (host pieces, kernel lists, tile grid, block-sparse).
timeout 500 python3 benchmarks/profile_h100.py --out "$RES" 2>&1
