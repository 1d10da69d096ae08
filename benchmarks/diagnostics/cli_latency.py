"""How long the command line takes to answer --help and a mistyped argument (issue 58's target:
at most 1 s for `workbench bench --help` and `workbench bench nosuchfamily`).

Each command runs as a new process (``python -m workbench ...``, as the console script does),
``--repeat`` times; the table gives the median and the slowest wall time, the exit code and the
first line printed, and whether the process loaded torch (a command that needs no kernel should
not). Records go to ``--out`` as JSON.

    python benchmarks/diagnostics/cli_latency.py
    python benchmarks/diagnostics/cli_latency.py --repeat 9 --out results/cli_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = (
    "bench --help",
    "bench nosuchfamily",
    "bench",
    "bench rms_norm --rep-ms abc",
    "bench --suite nosuch",
    "sweep nosuch",
    "tune nosuch",
    "report /nonexistent",
    "list --bogus",
    "--help",
)
# Run inside the child after the command: did it load torch?
PROBE = (
    "import sys, runpy\n"
    "sys.argv = ['workbench'] + sys.argv[1:]\n"
    "try:\n"
    "    runpy.run_module('workbench', run_name='__main__')\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "else:\n"
    "    code = 0\n"
    "print('TORCH-LOADED' if 'torch' in sys.modules else 'TORCH-NOT-LOADED', file=sys.stderr)\n"
    "raise SystemExit(code)\n"
)


def run_once(command: str) -> tuple[float, int, str, bool]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *command.split()], capture_output=True, text=True, cwd=ROOT, env=env
    )
    seconds = time.perf_counter() - start
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip() and "TORCH-" not in line]
    return seconds, out.returncode, (lines[0] if lines else ""), "TORCH-LOADED" in out.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command (default 5)")
    parser.add_argument("--out", default="results/cli_latency.json", help="records file (default %(default)s)")
    args = parser.parse_args()
    rows = []
    print(f"{'command':32s} {'median s':>9s} {'max s':>7s} {'exit':>4s} torch  first line")
    for command in COMMANDS:
        runs = [run_once(command) for _ in range(args.repeat)]
        times = [r[0] for r in runs]
        row = {
            "command": f"workbench {command}",
            "median_s": round(statistics.median(times), 3),
            "max_s": round(max(times), 3),
            "exit": runs[-1][1],
            "torch_loaded": runs[-1][3],
            "first_line": runs[-1][2][:200],
            "repeat": args.repeat,
        }
        rows.append(row)
        print(
            f"{command:32s} {row['median_s']:9.3f} {row['max_s']:7.3f} {row['exit']:4d} "
            f"{'yes' if row['torch_loaded'] else 'no':5s}  {row['first_line'][:70]}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"python": sys.version.split()[0], "rows": rows}, indent=1) + "\n")
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
