"""The sweep report: one offline HTML file (plotly inlined, no CDN), results grouped by device.

- a summary per device (configurations, passed, failed, timed out, worker deaths);
- the best configuration per shape (family, mode, dtype, problem), devices side by side, with
  the configurations whose kernel-time interval overlaps the best's listed as ties;
- a figure: best time per shape and device;
- every configuration that ran, fastest first per shape, with its compile facts (a compact
  ``regs/spills/occ`` cell per kernel and the warnings they raise: spills, an occupancy limit,
  a grid under one wave), so what spills or loses occupancy lines up with the times;
- a roofline per family (:mod:`workbench.roofline`) where the records carry device bandwidth;
- every failed configuration with its reason, naming the device limit it went over.
"""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path
from typing import Iterable

from workbench import compile_facts
from workbench.occupancy import limit_of_error
from workbench.reports import reader
from workbench.sweep.tasks import ERROR_CRASH, ERROR_TIMEOUT


def device_of(r: dict) -> str:
    name = r.get("device_name") or ""
    return name or (r.get("device_kind") or "?")


def shape_of(r: dict) -> str:
    prob = r.get("problem") or {}
    text = ", ".join(f"{k}={v}" for k, v in prob.items())
    return f"{r.get('kernel')} {r.get('mode')} {r.get('dtype')} ({text})"


def config_of(r: dict) -> str:
    prm = r.get("params") or {}
    return f"{r.get('variant')} " + (", ".join(f"{k}={v}" for k, v in prm.items()) or "defaults")


def record_ms(r: dict):
    """A record's ranking time: its kernel median, else (records from before kernel timing) its ms_p50."""
    return r.get("kernel_ms") if r.get("kernel_ms") is not None else r.get("ms_p50")


def best_by_device(records: Iterable[dict]) -> dict:
    """{shape: {device: {"record": best, "ms": ..., "ties": [configs within its interval]}}},
    over passing records; lower kernel time is better."""
    groups: dict = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("error") or not r.get("passed") or record_ms(r) is None:
            continue
        groups[shape_of(r)][device_of(r)].append(r)
    out: dict = {}
    for shape, by_dev in groups.items():
        out[shape] = {}
        for dev, rs in by_dev.items():
            best = min(rs, key=record_ms)
            hi = best.get("kernel_hi_ms") or record_ms(best)
            ties = [
                config_of(r)
                for r in rs
                if r is not best
                and (r.get("kernel_lo_ms") if r.get("kernel_lo_ms") is not None else record_ms(r)) <= hi
            ]
            out[shape][dev] = {"record": best, "ms": record_ms(best), "ties": ties}
    return out


def summary_by_device(records: Iterable[dict]) -> dict:
    out: dict = defaultdict(lambda: {"configurations": 0, "passed": 0, "failed": 0, "timed out": 0, "worker died": 0})
    for r in records:
        s = out[device_of(r)]
        s["configurations"] += 1
        err = r.get("error") or ""
        if err.startswith(ERROR_TIMEOUT):
            s["timed out"] += 1
        elif err.startswith(ERROR_CRASH):
            s["worker died"] += 1
        elif err or not r.get("passed"):
            s["failed"] += 1
        else:
            s["passed"] += 1
    return dict(out)


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _figure_html(best: dict, devices: list[str], embed_plotly: bool = True) -> str:
    try:
        import plotly.graph_objects as go
    except ImportError:
        return "<p>(plotly not installed: no figure)</p>"
    shapes = list(best)
    fig = go.Figure()
    for dev in devices:
        ys = [best[s].get(dev, {}).get("ms") for s in shapes]
        texts = [config_of(best[s][dev]["record"]) if dev in best[s] else "" for s in shapes]
        fig.add_bar(name=dev, x=shapes, y=ys, hovertext=texts)
    fig.update_layout(
        barmode="group",
        title="Best kernel time per shape, by device (lower is better)",
        yaxis_title="ms (kernel time; interpreter wall time on cpu)",
        height=480,
        margin=dict(b=160),
    )
    return fig.to_html(include_plotlyjs=embed_plotly, full_html=False)


def render(records: list[dict], title: str = "Sweep", plotly_src: str | None = None, head: Iterable[str] = ()) -> str:
    """The page; ``plotly_src``: a plotly.js file the page loads (else the first figure embeds it);
    ``head``: HTML parts after the title (the sweep-scaling comparison puts its table there)."""
    records = list(records)
    summary = summary_by_device(records)
    devices = sorted(summary)
    best = best_by_device(records)
    parts = [f"<h1>{html.escape(title)}</h1>", *head]
    # The answer first: what ran where, then the best configuration per shape; the run's
    # bookkeeping last.
    parts += [f"<p>{html.escape(line)}</p>" for line in headline_lines(records)]
    parts.append("<h2>Best configuration per shape, devices side by side</h2>")
    rows = []
    for shape, by_dev in best.items():
        row = [html.escape(shape)]
        for dev in devices:
            cell = by_dev.get(dev)
            if cell is None:
                row.append("-")
                continue
            text = f"<b>{html.escape(config_of(cell['record']))}</b><br>{cell['ms']:.4g} ms"
            facts = compile_facts.brief(cell["record"].get("compile_facts"))
            if facts:
                text += f"<br><small>regs/spills/occ {html.escape(facts)}</small>"
            if cell["ties"]:
                text += f"<br><small>within noise: {html.escape('; '.join(cell['ties'][:6]))}</small>"
            row.append(text)
        rows.append(row)
    parts.append(_table(["shape"] + [html.escape(d) for d in devices], rows, "best"))
    if best:
        parts.append(_figure_html(best, devices, embed_plotly=plotly_src is None))
    ran = [r for r in records if not r.get("error") and r.get("passed")]
    if ran:
        parts.append("<h2>Every configuration, with its compile facts</h2>")
        parts.append(
            "<p>regs/spills/occ: registers per thread / registers spilled / theoretical occupancy per "
            "kernel, with the limit that binds it when that is not the warps (grid: fewer programs than "
            "the device holds at once).</p>"
        )
        parts.append(reader.table_html(facts_rows(ran)))
    parts += _roofline_html(records, plotly_in_page=bool(best) or plotly_src is not None)
    parts.append("<h2>By device</h2>")
    parts.append(reader.table_html([{"device": d, **summary[d]} for d in devices]))
    failed = [r for r in records if r.get("error") or not r.get("passed")]
    if failed:
        parts.append(f"<h2>Failed configurations ({len(failed)})</h2>")
        rows = [
            {
                "device": device_of(r),
                "shape": shape_of(r),
                "configuration": config_of(r),
                "limit": (limit_of_error(r.get("error")) or ("-",))[0],
                "error": (r.get("error") or "wrong result")[:400],
            }
            for r in failed
        ]
        parts.append(reader.table_html(rows))
    meta = {
        "records": len(records),
        "hosts": ", ".join(sorted({r.get("host") or "" for r in records} - {""})) or "-",
        "commits": ", ".join(sorted({r.get("commit") or "" for r in records} - {""})) or "-",
    }
    parts.append("<h2>Run</h2>")
    parts.append(reader.table_html([{"item": k, "value": v} for k, v in meta.items()]))
    return reader.page_html(title, parts, plotly_src)


def facts_rows(records: list[dict], name=None) -> list[dict]:
    """One row per configuration, grouped by device and shape, fastest first: its time, bandwidth
    and compile facts (the compact cell and the warnings). ``name(record)`` names the
    configuration (default :func:`config_of`)."""
    name = name or config_of
    rows = []
    ordered = sorted(
        records, key=lambda r: (device_of(r), shape_of(r), record_ms(r) if record_ms(r) is not None else float("inf"))
    )
    for r in ordered:
        ms = record_ms(r)
        rows.append(
            {
                "device": device_of(r),
                "shape": shape_of(r),
                "configuration": name(r),
                "kernel ms": "-" if ms is None else f"{ms:.4g}",
                "GB/s": "-" if r.get("gbps") is None else f"{r['gbps']:.0f}",
                "% copy BW": "-" if r.get("pct_copy_bw") is None else f"{r['pct_copy_bw']:.0f}",
                "regs/spills/occ": compile_facts.brief(r.get("compile_facts")) or "-",
                "why": "; ".join(compile_facts.warnings(r.get("compile_facts"))) or "-",
            }
        )
    return rows


def _roofline_html(records: list[dict], plotly_in_page: bool) -> list[str]:
    from workbench.roofline import figures

    figs = figures(records)
    if not figs:
        return []
    # plotly.js goes into the page once: with the first figure drawn
    return ["<h2>Roofline per family</h2>"] + [
        fig.to_html(include_plotlyjs=not plotly_in_page and i == 0, full_html=False) for i, fig in enumerate(figs)
    ]


def headline_lines(records: list[dict]) -> list[str]:
    """What was swept, on which devices, and how it went (the report's and the summary's opening)."""
    summary = summary_by_device(records)
    families = sorted({str(r.get("kernel")) for r in records})
    bits = []
    for dev in sorted(summary):
        c = summary[dev]
        bits.append(
            f"{dev}: {c['configurations']} configurations, {c['passed']} passed, {c['failed']} failed, "
            f"{c['timed out']} timed out, {c['worker died']} worker died"
        )
    return [f"Sweep of {', '.join(families) or 'nothing'}; ranked by kernel time (lower is better)."] + bits


def write_report(records: Iterable[dict], path: str | Path, title: str = "Sweep") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reader.scrub_paths(render(list(records), title), [path.parent]))
    return path


def write_summary(records: Iterable[dict], out: str | Path, title: str = "Sweep") -> Path:
    """``summary.md`` beside the sweep's report.html: the headline and the best configuration per
    shape and device, as a Markdown table."""
    records = list(records)
    rows = []
    for shape, by_dev in best_by_device(records).items():
        for dev, cell in sorted(by_dev.items()):
            rows.append(
                {
                    "shape": shape,
                    "device": dev,
                    "best configuration": config_of(cell["record"]),
                    "kernel ms": f"{cell['ms']:.4g}",
                    "within noise": "; ".join(cell["ties"][:6]) or "-",
                }
            )
    cols = ["shape", "device", "best configuration", "kernel ms", "within noise"]
    return reader.write_summary(
        out,
        title=title,
        headline=[f"- {line}" for line in headline_lines(records)],
        table=reader.md_table(rows, cols) if rows else "No configuration passed.",
        figures_note="the report.html beside this file holds the figure",
    )


def write_outputs(out: Path, store, title: str = "Sweep") -> dict:
    """records.csv / records.json / report.html of everything in the out folder's store."""
    from workbench.store import write_csv, write_json

    rows = store.records()
    paths = {
        "csv": write_csv(rows, out / "records.csv"),
        "json": write_json(rows, out / "records.json"),
        "report": write_report(rows, out / "report.html", title=title),
        "summary": write_summary(rows, out, title=title),
    }
    return paths
