"""What the compile service (workbench/compiling/service.py) takes off a ``workbench bench`` run
from an empty Triton cache, and whether each first call found its kernels compiled ahead.

    python benchmarks/diagnostics/compile_ahead_effect.py                       # rms_norm, 8 sizes, forward and full
    python benchmarks/diagnostics/compile_ahead_effect.py -- block_sparse --batch 1,2,4,8,16 --variants gpu

Runs the same ``workbench bench`` command twice, each in a fresh process with a Triton cache of its
own (empty): once with every kernel compiled in the measuring process (``WORKBENCH_COMPILE_AHEAD=0``,
as before the service) and once with the compile processes; then the same command again on the
second run's cache (warm). Prints each run's wall seconds from the process's start, the sum of its
records' first-call milliseconds (``compile_ms``), how many records found every kernel compiled
ahead (``first_call_cached``), and their kernel-time medians side by side.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT = ["rms_norm", "--hidden", "1024,2048,3072,4096,6144,8192,12288,16384", "--mode", "forward,full",
           "--variants", "gpu_multirow,gpu_row,liger"]  # fmt: skip


def _run(label: str, args: list[str], cache: Path, ahead: bool, tmp: Path) -> dict:
    store = tmp / f"{label}.sqlite"
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "WORKBENCH_COMPILE_AHEAD": "1" if ahead else "0"}
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "bench", *args, "--device", "cuda", "--store", str(store)],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if out.returncode not in (0, 1):
        raise SystemExit(f"{label}: bench failed ({out.returncode}):\n{out.stderr[-2000:]}")
    from workbench.store import Store

    records = Store(store).records()
    cached = sum(
        1 for r in records if ((r.get("compile_facts") or {}).get("compiled_ahead") or {}).get("first_call_cached")
    )
    return {
        "label": label,
        "wall_s": wall,
        "records": len(records),
        "compile_s": sum(float(r.get("compile_ms") or 0) for r in records) / 1e3,
        "found_ahead": cached,
        "kernel_us": {_key(r): (r.get("kernel_ms") or 0) * 1e3 for r in records if r.get("kernel_ms")},
        "failed": sum(1 for r in records if r.get("error") or r.get("passed") is False),
    }


def _key(r: dict) -> str:
    return f"{r['variant']} {r['mode']} " + ",".join(
        f"{k}={v}" for k, v in sorted(r["problem"].items()) if k in ("hidden", "batch", "n")
    )


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = argv[argv.index("--") + 1 :] if "--" in argv else DEFAULT
    with tempfile.TemporaryDirectory(prefix="wb-ahead-") as tmp:
        tmp = Path(tmp)
        runs = [
            _run("serial", args, tmp / "cache-serial", False, tmp),
            _run("ahead", args, tmp / "cache-ahead", True, tmp),
            _run("warm", args, tmp / "cache-ahead", True, tmp),
        ]
    print(f"workbench bench {' '.join(args)} --device cuda, each from a fresh process")
    print(f"{'run':8s} {'wall s':>8s} {'records':>8s} {'first calls s':>14s} {'found ahead':>12s} {'failed':>7s}")
    for r in runs:
        print(
            f"{r['label']:8s} {r['wall_s']:8.1f} {r['records']:8d} {r['compile_s']:14.1f} {r['found_ahead']:12d} {r['failed']:7d}"
        )
    serial, ahead = runs[0]["kernel_us"], runs[1]["kernel_us"]
    ratios = [ahead[k] / serial[k] for k in serial if k in ahead and serial[k] > 0]
    if ratios:
        print(
            f"kernel medians, ahead / serial over {len(ratios)} records: median {statistics.median(ratios):.3f}, "
            f"min {min(ratios):.3f}, max {max(ratios):.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
