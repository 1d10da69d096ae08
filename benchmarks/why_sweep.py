"""Why a tile is fast or slow, shown on two sweeps: the committed example ``reports/h100-why/``.

    python benchmarks/why_sweep.py --device cuda --out reports/h100-why          # the issue's sizes (H100)
    python benchmarks/why_sweep.py --device cpu --quick --out /tmp/why           # tiny, in the interpreter

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
import html
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@dataclass(frozen=True)
class WhySweep:
    family: str
    variant: str
    x: str
    xs: tuple
    y: str
    ys: tuple
    dtype: str
    problem: dict = field(default_factory=dict)


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


def occupancy_heatmap(records: list[dict], sweep: WhySweep):
    """Theoretical occupancy (%) of the kernel that explains most, each cell's text its
    regs/spills/occ; cells that spill outlined in red; n/a where facts are unavailable."""
    import plotly.graph_objects as go

    from workbench import compile_facts

    def at(x, y):
        for r in records:
            if (r.get("params") or {}).get(sweep.x) == x and (r.get("params") or {}).get(sweep.y) == y:
                return r
        return None

    z, text = [], []
    spilled = []
    for iy, y in enumerate(sweep.ys):
        zr, tr = [], []
        for ix, x in enumerate(sweep.xs):
            r = at(x, y)
            if r is None or r.get("error"):
                zr.append(None)
                tr.append("✗" if r is not None else "")
                continue
            cols = compile_facts.columns(r.get("compile_facts"))
            zr.append(cols["occupancy_pct"])
            tr.append(compile_facts.brief(r.get("compile_facts")).replace(" · ", "<br>"))
            if cols["spills"]:
                spilled.append((ix, iy))
        z.append(zr)
        text.append(tr)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(len(sweep.xs))),
            y=list(range(len(sweep.ys))),
            text=text,
            texttemplate="%{text}",
            colorscale="Blues",
            zmin=0,
            zmax=100,
            colorbar=dict(title=dict(text="occupancy %")),
            hovertemplate="%{text}<extra></extra>",
            xgap=2,
            ygap=2,
        )
    )
    for ix, iy in spilled:
        fig.add_shape(type="rect", x0=ix - 0.5, x1=ix + 0.5, y0=iy - 0.5, y1=iy + 0.5, line=dict(color="red", width=3))
    fig.update_layout(
        title=f"{sweep.family}/{sweep.variant}: theoretical occupancy, regs/spills/occ per cell"
        + ("<br><sup>red outline: registers spilled</sup>" if spilled else ""),
        xaxis=dict(title=sweep.x, tickvals=list(range(len(sweep.xs))), ticktext=[str(v) for v in sweep.xs]),
        yaxis=dict(title=sweep.y, tickvals=list(range(len(sweep.ys))), ticktext=[str(v) for v in sweep.ys]),
        template="plotly_white",
        height=max(320, 60 * len(sweep.ys) + 160),
    )
    return fig


def render(records: list[dict], sweeps, title: str) -> str:
    """The report page: per sweep the two heatmaps, the facts of every configuration, the
    roofline, the failures."""
    from widgets import figures as F
    from widgets import why
    from workbench import reader
    from workbench.roofline import roofline_figure
    from workbench.sweep import report as sweep_report

    parts = [f"<h1>{html.escape(title)}</h1>"]
    parts += [f"<p>{html.escape(line)}</p>" for line in sweep_report.headline_lines(records)]
    parts.append(
        "<p>Each cell's hover on the time heatmap carries its kernels' registers, spills and theoretical "
        "occupancy; the occupancy heatmap shows them as text (regs/spills/occupancy, then the limit that "
        "binds when it is not the warps; grid: fewer programs than the device holds at once). Failed cells "
        "are crossed and name the limit they went over.</p>"
    )
    first = True
    for sweep in sweeps:
        recs = [r for r in records if r.get("kernel") == sweep.family and r.get("variant") == sweep.variant]
        if not recs:
            continue
        parts.append(f"<h2>{html.escape(sweep.family)} / {html.escape(sweep.variant)}: {sweep.y} x {sweep.x}</h2>")
        time_fig, _ = F.heatmap_figure(
            recs, sweep.x, list(sweep.xs), sweep.y, list(sweep.ys), "ms", title=f"kernel time: {sweep.y} x {sweep.x}"
        )
        for fig in (time_fig, occupancy_heatmap(recs, sweep)):
            parts.append(fig.to_html(include_plotlyjs=first, full_html=False))
            first = False
        ran = [r for r in recs if not r.get("error") and r.get("passed")]
        if ran:
            parts.append(reader.table_html(facts_rows(ran, sweep)))
        roof = roofline_figure(recs, sweep.family)
        if roof is not None:
            parts.append(roof.to_html(include_plotlyjs=first, full_html=False))
            first = False
        failed = [r for r in recs if r.get("error") or not r.get("passed")]
        if failed:
            rows = [{"configuration": sweep_report.config_of(r), "why": why.failure_text(r)} for r in failed]
            parts.append(f"<h3>{len(failed)} configuration(s) that could not run</h3>" + reader.table_html(rows))
    return reader.page_html(title, parts)


def facts_rows(records: list[dict], sweep: WhySweep) -> list[dict]:
    """The sweep report's rows (fastest first), each configuration named by the two swept tiles."""
    from workbench.sweep import report as sweep_report

    def name(r):
        prm = r.get("params") or {}
        return f"{sweep.y}={prm.get(sweep.y)}, {sweep.x}={prm.get(sweep.x)}"

    return sweep_report.facts_rows(records, name=name)


def summary_md(records: list[dict], sweeps, title: str) -> str:
    from workbench.sweep import report as sweep_report

    lines = [f"# {title}", ""] + [f"{line}  " for line in sweep_report.headline_lines(records)] + [""]
    for sweep in sweeps:
        recs = [r for r in records if r.get("kernel") == sweep.family and not r.get("error") and r.get("passed")]
        if not recs:
            continue
        lines += [f"## {sweep.family} / {sweep.variant}: {sweep.y} x {sweep.x}", ""]
        rows = facts_rows(recs, sweep)
        keys = ["configuration", "kernel ms", "GB/s", "regs/spills/occ", "why"]
        lines.append("| " + " | ".join(keys) + " |")
        lines.append("|" + "---|" * len(keys))
        for row in rows:
            lines.append("| " + " | ".join(str(row[k]).replace("|", "/") for k in keys) + " |")
        lines.append("")
    return "\n".join(lines)


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="cuda (the issue's sizes), cpu (the interpreter) or auto")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the interpreter)")
    parser.add_argument("--out", default="results/why", help="folder for the records and the report")
    parser.add_argument("--rep-ms", type=float, default=None, help="timing budget per configuration")
    parser.add_argument("--isolate", action="store_true", help="a subprocess per configuration")
    parser.add_argument("--timeout-s", type=float, default=None, help="per configuration, with --isolate")
    parser.add_argument("--only", default="", help="comma list of families (default: both sweeps)")
    args = parser.parse_args(argv)

    from workbench.device import get_device
    from workbench.store import Store, write_csv, write_json
    from workbench.sweep.engine import STORE_NAME, TerminalBar, make_executor, run_sweep

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
    run_sweep(tasks, executor, store, resume=True, progress=TerminalBar())
    records = store.records()
    store.close()
    title = f"Why a tile is fast or slow ({device}{', quick sizes' if args.quick else ''})"
    write_csv(records, out / "records.csv")
    write_json(records, out / "records.json")
    from workbench import reader

    (out / "report.html").write_text(reader.scrub_paths(render(records, sweeps, title), [out]))
    (out / "summary.md").write_text(summary_md(records, sweeps, title))
    (out / "README.md").write_text(readme(records, argv if argv is not None else sys.argv[1:], title))
    print(f"wrote {out / 'report.html'}, {out / 'summary.md'}, README.md, records.csv / .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
