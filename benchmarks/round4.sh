# Round 4 on the GPU: every notebook headless through papermill on CUDA (quick sizes), as the
# report does; the HTML report comes back in the archive.
timeout 480 python3 -m workbench report --device cuda --quick --out "$RES/report" --timeout 400 2>&1 | tail -30
du -sh "$RES/report" 2>/dev/null; ls "$RES/report" 2>/dev/null
