"""Why a tile is fast or slow, shown on two sweeps: the committed example ``reports/h100-why/``.

    python benchmarks/why_sweep.py --device cuda --out reports/h100-why          # the issue's sizes (H100)
    python benchmarks/why_sweep.py --device cpu --quick --out /tmp/why           # tiny, in the interpreter
    python benchmarks/why_sweep.py --render reports/h100-why                     # its report.html (workbench report --render)

Sweeps (kernel time, forward):
- RMSNorm ``gpu_row``: BLOCK_SIZE x num_warps at hidden 16384 (bf16). A whole row per program:
  few warps over a long row hold many elements per thread, so registers run out and spill;
- block-sparse sum layer ``gpu``: TILE_M x TILE_K at batch 16 (fp32): larger tiles use more
  registers and shared memory per program, fewer programs fit on an SM, and the grid shrinks.

Writes into ``--out``: ``records.sqlite`` / ``records.csv`` / ``records.json`` (every record with
its compile facts), ``report.html`` (offline; per sweep a heatmap of kernel time whose hover
carries registers, spills and occupancy, failed cells naming the limit they went over, beside a
heatmap of theoretical occupancy with each cell's regs/spills/occ; then every configuration's
facts, fastest first, and the family's roofline) and ``summary.md`` (the same tables as Markdown).
In the interpreter the facts are marked unavailable and the times are interpreter wall times.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workbench.reports.why_sweep import WhySweep, render, summary_md  # noqa: E402

SWEEPS = (
    WhySweep(
        "rms_norm",
        "gpu_row",
        "num_warps",
        (1, 2, 4, 8, 16, 32),
        "BLOCK_SIZE",
        (16384, 32768),
        "bf16",
        {"hidden": 16384},
    ),
    WhySweep(
        "block_sparse", "gpu", "TILE_K", (8, 16, 32, 64, 128), "TILE_M", (16, 32, 64, 128, 256), "fp32", {"batch": 16}
    ),
)
# The same sweeps small enough for the interpreter (the spec's quick sizes, two values per axis).
QUICK = (
    WhySweep("rms_norm", "gpu_row", "num_warps", (1, 2), "BLOCK_SIZE", (512, 1024), "fp32", {"hidden": 300}),
    WhySweep("block_sparse", "gpu", "TILE_K", (8, 16), "TILE_M", (8, 16), "fp32", {"batch": 3}),
)


def tasks_of(sweep: WhySweep, device: str, quick: bool, rep_ms: float) -> list:
    import kernels
    from workbench.sweep.tasks import make_task

    spec = kernels.get(sweep.family)
    return [
        make_task(
            spec,
            sweep.variant,
            device=device,
            dtype=sweep.dtype,
            mode="forward",
            problem=dict(sweep.problem),
            params={sweep.x: x, sweep.y: y},
            quick=quick,
            rep_ms=rep_ms,
            warmup_ms=min(25.0, rep_ms),
        )
        for y in sweep.ys
        for x in sweep.xs
    ]


def readme(records: list[dict], argv: list[str], title: str) -> str:
    """How the folder was made: the command, the device, the code that ran."""
    devices = sorted({r.get("device_name") or r.get("device_kind") or "?" for r in records})
    commits = sorted({r.get("commit") or "?" for r in records})
    versions = records[0].get("versions", {}) if records else {}
    return (
        f"# {title}\n\n"
        f"Made by `python benchmarks/why_sweep.py {' '.join(argv)}` on {', '.join(devices)} "
        f"(torch {versions.get('torch', '?')}, Triton {versions.get('triton', '?')}), code {', '.join(commits)}.\n\n"
        "Open `report.html` (offline) or read `summary.md`; every record, with its compile facts, is in "
        "`records.json` / `records.csv` / `records.sqlite`.\n"
    )


def render_folder(folder: Path) -> int:
    """``folder/report.html`` from the records it keeps (``workbench report --render FOLDER``: the
    sweeps are read back from the records)."""
    from workbench.reports.render import render_folder as render_run

    try:
        done = render_run(folder)
    except ValueError as exc:
        print(f"why_sweep.py --render: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {done.page}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="cuda (the issue's sizes), cpu (the interpreter) or auto")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the interpreter)")
    parser.add_argument("--out", default="results/why", help="folder for the records and the report")
    parser.add_argument("--rep-ms", type=float, default=None, help="timing budget per configuration")
    parser.add_argument("--isolate", action="store_true", help="a subprocess per configuration")
    parser.add_argument("--timeout-s", type=float, default=None, help="per configuration, with --isolate")
    parser.add_argument("--only", default="", help="comma list of families (default: both sweeps)")
    parser.add_argument(
        "--render",
        metavar="FOLDER",
        default=None,
        help="measure nothing: write FOLDER/report.html from its records (as `workbench report --render FOLDER`)",
    )
    args = parser.parse_args(argv)
    if args.render:
        return render_folder(Path(args.render))

    from workbench.device import get_device
    from workbench.progress import Progress
    from workbench.store import Store, write_csv, write_json
    from workbench.sweep.engine import STORE_NAME, make_executor, run_sweep

    device = get_device(args.device).kind
    sweeps = QUICK if args.quick else SWEEPS
    if args.only:
        wanted = {name.strip() for name in args.only.split(",") if name.strip()}
        sweeps = tuple(s for s in sweeps if s.family in wanted)
        if not sweeps:
            print(f"--only {args.only}: no sweep of that family; families: rms_norm, block_sparse", file=sys.stderr)
            return 2
    rep_ms = args.rep_ms if args.rep_ms is not None else (5.0 if device == "cpu" else 100.0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out / STORE_NAME)
    executor = make_executor("local", isolate=args.isolate, timeout_s=args.timeout_s)
    tasks = [t for sweep in sweeps for t in tasks_of(sweep, device, args.quick, rep_ms)]
    print(f"why sweep: {len(tasks)} configurations on {device} -> {out}", flush=True)
    with Progress(len(tasks), "why sweep") as shown:
        run_sweep(tasks, executor, store, resume=True, progress=shown.sweep())
    records = store.records()
    store.close()
    title = f"Why a tile is fast or slow ({device}{', quick sizes' if args.quick else ''})"
    write_csv(records, out / "records.csv")
    write_json(records, out / "records.json")
    from workbench.reports import reader

    (out / "report.html").write_text(reader.scrub_paths(render(records, sweeps, title), [out]))
    (out / "summary.md").write_text(summary_md(records, sweeps, title))
    (out / "README.md").write_text(readme(records, argv if argv is not None else sys.argv[1:], title))
    print(f"wrote {out / 'report.html'}, {out / 'summary.md'}, README.md, records.csv / .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
