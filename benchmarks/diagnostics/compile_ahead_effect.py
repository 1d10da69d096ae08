"""What the compile service (workbench/compiling/service.py) takes off a ``workbench bench`` run
from an empty Triton cache, and whether each first call found its kernels compiled ahead.

    python benchmarks/diagnostics/compile_ahead_effect.py                       # rms_norm, 8 sizes, forward and full
    python benchmarks/diagnostics/compile_ahead_effect.py -- block_sparse --batch 1,2,4,8,16 --variants gpu

Runs the same ``workbench bench`` command in fresh processes, each with a Triton cache of its own
(empty): with every kernel compiled in the measuring process (``WORKBENCH_COMPILE_AHEAD=0``, as
before the service), with the compile processes (the default number, and 4), and again on the
second run's cache (warm). Prints each run's wall seconds from the process's start and inside the
bench, the sum of its records' first-call seconds (``compile_ms``) and of the waits for a compile
in flight, how many first calls found every kernel compiled ahead (``first_call_cached``; a peer
launching its own kernels names none, so its records are not counted there), per variant whether
its compiles ahead succeeded (and why not), and the kernel-time medians side by side.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT = ["rms_norm", "--hidden", "1024,2048,3072,4096,6144,8192,12288,16384", "--mode", "forward,full",
           "--variants", "gpu_multirow,gpu_row,liger"]  # fmt: skip


def _run(label: str, args: list[str], cache: Path, ahead: bool, tmp: Path, workers: int | None = None) -> dict:
    store = tmp / f"{label}.sqlite"
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "WORKBENCH_COMPILE_AHEAD": "1" if ahead else "0"}
    if workers:
        env["WORKBENCH_COMPILE_WORKERS"] = str(workers)
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--child", "bench", *args, "--device", "cuda", "--store", str(store)],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    lines = out.stdout.strip().splitlines()
    if out.returncode not in (0, 1) or not lines or not lines[-1].startswith("{"):
        raise SystemExit(f"{label}: bench failed ({out.returncode}):\n{out.stdout[-1500:]}\n{out.stderr[-1500:]}")
    child = json.loads(lines[-1])
    from workbench.store import Store

    records = Store(store).records()
    notes = [((r.get("compile_facts") or {}).get("compiled_ahead") or {}) for r in records]
    by_variant: dict = {}
    for r, note in zip(records, notes):
        slot = by_variant.setdefault(r["variant"], {"first_call_s": 0.0, "ahead_ok": 0, "ahead_failed": 0, "why": ""})
        slot["first_call_s"] += float(r.get("compile_ms") or 0) / 1e3
        if note:
            slot["ahead_ok" if note.get("ok") else "ahead_failed"] += 1
            slot["why"] = slot["why"] or (note.get("error") or "")
    return {
        "label": label,
        "wall_s": wall,
        "in_bench_s": child["bench_s"],
        "records": len(records),
        "compile_s": sum(float(r.get("compile_ms") or 0) for r in records) / 1e3,
        "found_ahead": sum(1 for n in notes if n.get("first_call_cached")),
        "waited_s": sum(float(n.get("waited_ms") or 0) for n in notes) / 1e3,
        "service": child.get("service") or {},
        "by_variant": by_variant,
        "kernel_us": {_key(r): (r.get("kernel_ms") or 0) * 1e3 for r in records if r.get("kernel_ms")},
        "failed": sum(1 for r in records if r.get("error") or r.get("passed") is False),
    }


def _child(argv: list[str]) -> int:
    """Run ``workbench`` with ``argv`` in this process, then print one JSON line: the seconds it
    took and what the compile service did."""
    from workbench.cli import main as workbench
    from workbench.compiling import service

    started = time.perf_counter()
    code = workbench(argv)
    active = service.active()
    print(json.dumps({"bench_s": time.perf_counter() - started, "service": active.summary() if active else None}))
    return code


def _key(r: dict) -> str:
    return f"{r['variant']} {r['mode']} " + ",".join(
        f"{k}={v}" for k, v in sorted(r["problem"].items()) if k in ("hidden", "batch", "n")
    )


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    args = argv[argv.index("--") + 1 :] if "--" in argv else DEFAULT
    with tempfile.TemporaryDirectory(prefix="wb-ahead-") as tmp:
        tmp = Path(tmp)
        runs = [
            _run("serial", args, tmp / "cache-serial", False, tmp),
            _run("ahead", args, tmp / "cache-ahead", True, tmp),
            _run("ahead-4", args, tmp / "cache-ahead-4", True, tmp, workers=4),
            _run("warm", args, tmp / "cache-ahead", True, tmp),
        ]
    print(f"workbench bench {' '.join(args)} --device cuda, each from a fresh process")
    print(
        f"{'run':8s} {'wall s':>7s} {'bench s':>8s} {'records':>8s} {'first calls s':>14s} {'waited s':>9s} "
        f"{'found ahead':>12s} {'withdrawn':>10s} {'failed':>7s}"
    )
    for r in runs:
        print(
            f"{r['label']:8s} {r['wall_s']:7.1f} {r['in_bench_s']:8.1f} {r['records']:8d} {r['compile_s']:14.1f} "
            f"{r['waited_s']:9.1f} {r['found_ahead']:12d} {r['service'].get('withdrawn', '-'):>10} {r['failed']:7d}"
        )
    for r in runs:
        parts = ", ".join(
            f"{v}: first calls {d['first_call_s']:.1f} s, ahead ok {d['ahead_ok']} / failed {d['ahead_failed']}"
            + (f" ({d['why'][:160]})" if d["why"] else "")
            for v, d in r["by_variant"].items()
        )
        print(f"  {r['label']}: {parts}")
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
