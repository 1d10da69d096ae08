"""The why-view's report: 2-D tile sweeps of a kernel with the compile facts that explain them.

Per :class:`WhySweep` (a family's variant over two tiles at one problem): the kernel-time heatmap
(each cell's hover carries its registers, spills and occupancy), the theoretical-occupancy
heatmap with each cell's regs/spills/occupancy as text and the cells that spill outlined, the
facts of every configuration that ran, the roofline, and the configurations that could not run
with the limit each went over. ``benchmarks/why_sweep.py`` measures the sweeps and writes this
page (:func:`render`) and :func:`summary_md` beside the records.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field


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


def sweeps_of(records: list[dict]) -> list[WhySweep]:
    """The sweeps a why-view's records hold, read back from them: per family and variant, the two
    tiles whose values differ between its records (x the one with more values, the later one
    on a tie; each axis's values in order), at the dtype and problem of its first record."""

    def key(v):
        return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))

    groups: dict = {}
    for r in records:
        groups.setdefault((r.get("kernel"), r.get("variant")), []).append(r)
    out = []
    for (family, variant), recs in groups.items():
        names = list(recs[0].get("params") or {})
        values = {n: sorted({(r.get("params") or {}).get(n) for r in recs}, key=key) for n in names}
        varied = [n for n in names if len(values[n]) > 1]
        if len(varied) != 2:
            continue  # not a two-tile sweep: nothing to draw as a heatmap
        y, x = sorted(varied, key=lambda n: (len(values[n]), names.index(n)))
        first = recs[0]
        out.append(
            WhySweep(
                family,
                variant,
                x,
                tuple(values[x]),
                y,
                tuple(values[y]),
                first.get("dtype"),
                first.get("problem") or {},
            )
        )
    return out


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


def render(records: list[dict], sweeps, title: str, plotly_src: str | None = None) -> str:
    """The report page: per sweep the two heatmaps, the facts of every configuration, the
    roofline, the failures. ``plotly_src``: a plotly.js file the page loads (else the first
    figure embeds it)."""
    from workbench.reports import figures as F
    from workbench.reports import reader, why
    from workbench.reports import sweep as sweep_report
    from workbench.roofline import roofline_figure

    parts = [f"<h1>{html.escape(title)}</h1>"]
    parts += [f"<p>{html.escape(line)}</p>" for line in sweep_report.headline_lines(records)]
    parts.append(
        "<p>Each cell's hover on the time heatmap carries its kernels' registers, spills and theoretical "
        "occupancy; the occupancy heatmap shows them as text (regs/spills/occupancy, then the limit that "
        "binds when it is not the warps; grid: fewer programs than the device holds at once). Failed cells "
        "are crossed and name the limit they went over.</p>"
    )
    first = plotly_src is None  # whether the next figure is to embed plotly.js
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
    return reader.page_html(title, parts, plotly_src)


def facts_rows(records: list[dict], sweep: WhySweep) -> list[dict]:
    """The sweep report's rows (fastest first), each configuration named by the two swept tiles."""
    from workbench.reports import sweep as sweep_report

    def name(r):
        prm = r.get("params") or {}
        return f"{sweep.y}={prm.get(sweep.y)}, {sweep.x}={prm.get(sweep.x)}"

    return sweep_report.facts_rows(records, name=name)


def summary_md(records: list[dict], sweeps, title: str) -> str:
    from workbench.reports import sweep as sweep_report

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
