# The foundation issue's H100 table: bf16, 4096 rows, hidden 1024-32768, forward and full.
python3 -m workbench bench rms_norm --device cuda --dtype bf16 --rows 4096 \
  --hidden 1024,2048,4096,8192,16384,32768 --mode forward,full \
  --store "$RES/rms_norm.sqlite" --csv "$RES/rms_norm.csv"
