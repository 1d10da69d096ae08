"""Scalar-operand table for the issue's closing note: host µs per call and device µs per strategy.

    python3 benchmarks/scalar_ops_table.py --device cuda --out /tmp/out      # on the H100
    python3 benchmarks/scalar_ops_table.py --device cpu --quick              # a smoke run here

Prints, for fp16 and fp32, div / sub / pow, every strategy at 0-d, (2,128,64), 1 Mi, (2,2048,4096)
and 64 Mi elements: host wall µs per synchronised call and device µs (do_bench, L2 flushed).
Then the RMSNorm-backward-shaped step's counts (materialisations, bytes, cache uploads per step)
and the graph-capture test (capture, replay on new data, compare with eager). Writes
scalar_ops_timing.csv, scalar_ops_materializations.csv, scalar_ops_capture.json and, through the
harness, scalar_ops_records.csv (the common kernel-benchmark columns) into --out.

Needs only torch and triton (no pandas). Exit status 1 if a result was wrong or capture failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.scalar_ops import STRATEGIES  # noqa: E402
from kernels.scalar_ops.workload import (  # noqa: E402
    DEFAULT_SHAPES,
    QUICK_SHAPES,
    capture_demo,
    materialization_rows,
    timing_rows,
)
from workbench.device import get_device  # noqa: E402

ALL_STRATEGIES = STRATEGIES + ("triton_npu",)
# The issue's measurements on this H100 (fp16 div, host µs per call): python, cached, materialised.
ISSUE = {"(2, 128, 64)": (8.1, 8.0, 29.1), "(2, 2048, 4096)": (25.6, 46.1, 6460.0)}


def _fmt(v, width=9, spec="{:.1f}"):
    return f"{'-' if v is None else spec.format(v):>{width}s}"


def print_timing(rows, strategies):
    head = f"{'dtype':5s} {'op':4s} {'shape':>18s} " + " ".join(f"{s[:17]:>17s}" for s in strategies)
    print("host µs per call (wall, synchronised) / device µs (do_bench, L2 flushed)")
    print(head)
    print("-" * len(head))
    index = {(r["dtype"], r["op"], r["shape"], r["strategy"]): r for r in rows}
    keys = []
    for r in rows:
        k = (r["dtype"], r["op"], r["shape"])
        if k not in keys:
            keys.append(k)
    for dtype, op, shape in keys:
        cells = []
        for s in strategies:
            r = index.get((dtype, op, shape, s))
            cells.append(" " * 17 if r is None else f"{_fmt(r['host_us'], 8)}/{_fmt(r['device_us'], 8)}")
        print(f"{dtype:5s} {op:4s} {shape:>18s} " + " ".join(cells))


def print_issue_comparison(rows):
    print("\nfp16 div, host µs per call, here vs the issue's measurement (python, cached, materialized):")
    for shape, issue in ISSUE.items():
        here = {
            r["strategy"]: r["host_us"]
            for r in rows
            if r["dtype"] == "fp16" and r["op"] == "div" and r["shape"] == shape
        }
        if here:
            got = ", ".join(_fmt(here.get(s), 0) for s in ("python", "cached", "materialized"))
            print(f"  {shape:>16s}: here {got}   issue {', '.join(str(v) for v in issue)}")


def print_rows(rows, columns):
    widths = [max(len(c), 8) for c in columns]
    print("  ".join(f"{c:>{w}s}" for c, w in zip(columns, widths)))
    for r in rows:
        cells = []
        for c, w in zip(columns, widths):
            v = r[c]
            cells.append(f"{v:{w}.3f}" if isinstance(v, float) else f"{str(v):>{w}s}")
        print("  ".join(cells))


def write_csv(rows, path):
    if not rows:
        return
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def harness_records(device, dtypes, numels, out):
    """The spec's variants through measure(), written with the common benchmark columns."""
    from kernels.scalar_ops.spec import spec
    from workbench.measure import measure
    from workbench.store import Store
    from workbench.store import write_csv as write_records

    store = Store(out / "scalar_ops.sqlite")
    records = []
    for dtype in dtypes:
        for numel in numels:
            for variant in spec.variants:
                if variant.unavailable_reason(device.kind):
                    continue
                rec = measure(
                    spec,
                    variant,
                    device=device,
                    dtype=dtype,
                    problem={"op": "div", "numel": numel, "value": 4096.0},
                    store=store,
                    on_error="record",
                    rep_ms=50,
                )
                records.append(rec)
    write_records(records, out / "scalar_ops_records.csv")
    store.close()
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtypes", default="fp16,fp32")
    parser.add_argument("--ops", default="div,sub,pow")
    parser.add_argument("--out", default="results/scalar_ops")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke run)")
    parser.add_argument("--rep-ms", type=float, default=50)
    args = parser.parse_args(argv)

    device = get_device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    shapes = QUICK_SHAPES if args.quick else DEFAULT_SHAPES
    print(f"device: {device.kind} ({device.name}); {device.driver}")
    if device.kind == "cpu":
        print("cpu: times are CPU wall times (Triton: interpreter), not comparable with device numbers")

    rows = timing_rows(ops, ALL_STRATEGIES, shapes, dtypes, device, rep_ms=2 if args.quick else args.rep_ms)
    print_timing(rows, ALL_STRATEGIES)
    print_issue_comparison(rows)
    write_csv(rows, out / "scalar_ops_timing.csv")
    bad = [r for r in rows if not r["passed"]]

    print("\nRMSNorm-backward-shaped step (two scalar ops per norm), per strategy and step:")
    size = dict(rows=16, hidden=32, n_norms=25, steps=2) if args.quick else dict(rows=4096, hidden=896, n_norms=25)
    mat = materialization_rows(ALL_STRATEGIES, dtype="bf16", device=device, **size)
    print_rows(
        mat,
        [
            "strategy",
            "step",
            "scalar_op_calls",
            "full_shape_materializations",
            "materialized_mb",
            "cache_uploads",
            "host_ms",
            "passed",
        ],
    )
    write_csv(mat, out / "scalar_ops_materializations.csv")
    bad += [r for r in mat if not r["passed"]]

    print("\ngraph capture (cached before capture / not cached / python / triton; replayed on new data):")
    capture = {dt: capture_demo(device, dtype=dt) for dt in ("fp16", "fp32", "bf16")}
    for dt, result in capture.items():
        if "skipped" in result:
            print(f"  {dt}: skipped — {result['skipped']}")
            continue
        worst = max(e["max_abs_err_vs_reference"] for e in result["replays"])
        exact = all(e["bitwise_equal_to_eager"] for e in result["replays"])
        print(
            f"  {dt}: {'PASS' if result['passed'] else 'FAIL'}  cache size {result['cache_before']['size']} -> "
            f"{result['cache_after']['size']}, uploads during capture {result['uploads_during_capture']}, "
            f"on-device fills {result['capture_fills']}, {len(result['replays'])} checks, bitwise equal to eager: {exact}, max err vs reference {worst:.2e}; "
            f"materialized in capture refused: {bool(result['materialized_refused'])}"
        )
        if not result["passed"]:
            bad.append({"capture": dt})
    (out / "scalar_ops_capture.json").write_text(json.dumps(capture, indent=2, default=str))

    numels = (4099,) if args.quick else (16384, 1 << 20, 1 << 24)
    records = harness_records(device, ["bf16"] if args.quick else dtypes, numels, out)
    failed = [r for r in records if r.error is None and r.passed is False]
    print(f"\nharness: {len(records)} records ({len(failed)} failed) -> {out / 'scalar_ops_records.csv'}")
    bad += failed

    print(f"files in {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    if bad:
        print(f"FAILED: {len(bad)} wrong result(s) or capture failure(s)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
