"""The report of a benchmark suite run (``workbench bench --suite NAME``), in the Explorer's format.

The suite run writes its files first (``records.json``, ``ratios.csv``, ``suite.json``,
``environment.json``: see :func:`workbench.suites.write_files`); this module only reads them.
:func:`workbench.report.render_suite_report` executes ``notebooks/suite.ipynb`` headless with
papermill (parameter ``records_dir``) and exports it with the offline template to ``report.html``
beside the files. The notebook calls :func:`load` and
:func:`show_report`: the environment block, the ratio table coloured by status, and per target a
ratio figure against its threshold and the speed figure of its records
(:func:`widgets.figures.speed_figure`; tile sweeps get a bar chart of time relative to default).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from widgets import figures as F
from workbench import compile_facts, reader
from workbench.provenance import is_dirty

STATUS_COLOURS = {
    "MET": "#d8f0d8",
    "MISSED": "#f6d0d0",
    "within noise": "#f8ecc4",
    "wrong result": "#e8a0a0",
    "not measured": "#eeeeee",
    "not comparable": "#e4e8f4",
}


# --- reading the files ---------------------------------------------------------------------
def load(records_dir: str | Path) -> dict:
    """``suite.json`` + ``records.json`` (+ ``environment.json`` when present) of one run."""
    d = Path(records_dir)
    if not (d / "suite.json").exists():
        raise FileNotFoundError(f"{d} has no suite.json: run `workbench bench --suite NAME --out {d}` first")
    run = json.loads((d / "suite.json").read_text())
    run["records"] = json.loads((d / "records.json").read_text()) if (d / "records.json").exists() else []
    env = d / "environment.json"
    run["environment"] = json.loads(env.read_text()) if env.exists() else {}
    base = d / "baseline.json"
    run["baseline"] = json.loads(base.read_text()) if base.exists() else None
    # Repeatability checks beside the run (benchmarks/repeatability.py), each a pair of runs.
    run["repeatability"] = [json.loads(p.read_text()) for p in sorted(d.glob("repeatability*.json"))]
    run["dir"] = str(d)
    return run


def target_records(run: dict, target: dict) -> list[dict]:
    recs = run["records"]
    return [recs[i] for i in target.get("records", []) if i < len(recs)]


# --- HTML pieces ---------------------------------------------------------------------------
_CELL = 'style="border:1px solid #ccc;padding:3px 7px;text-align:{}"'


def environment_html(env: dict) -> str:
    """The environment as readable tables (device, software, run), local paths scrubbed."""
    return reader.environment_html(env)


def _num(v: Any, spec: str = "{:.4g}") -> str:
    return "-" if v is None or v == "" else spec.format(v)


def ours_facts(run: dict) -> dict[tuple[str, str], str]:
    """(target, x) -> the compact ``regs/spills/occ`` cell of our record there (compile facts)."""
    out = {}
    for target in run.get("targets") or []:
        for r in target_records(run, target):
            if r.get("variant") == target.get("ours") and r.get("compile_facts") and not r.get("label"):
                out[(target["name"], str(r.get("x_value")))] = compile_facts.brief(r["compile_facts"])
    return out


def ratio_table_html(rows: list[dict], missing: dict | None = None, facts: dict | None = None) -> str:
    """The ratio table, one row per target and x, coloured by status; a heading row per target
    (its title, and the peers that could not be measured here: ``missing`` target -> {peer: why});
    ``facts``: (target, x) -> our kernels' regs/spills/occupancy cell (:func:`ours_facts`)."""
    missing = missing or {}
    facts = facts or {}
    head = ["x", "ours", "ours µs", "regs/spills/occ", "best peer / config", "peer µs", "ratio [interval]", "%BW"]
    head += ["threshold"]
    head += ["precision, max error", "status"]
    head += ["informative", "note"]
    # Thirteen columns are wider than a notebook page: the table scrolls sideways in its own box
    # (the page around it stays put) and the long text columns wrap, so no column is cut off.
    out = [
        '<div class="wb-ratios-box" style="overflow-x:auto;max-width:100%">'
        '<table class="wb-ratios" style="border-collapse:collapse;font-size:12px;font-family:monospace">',
        "<tr>" + "".join(f"<th {_CELL.format('left')}>{h}</th>" for h in head) + "</tr>",
    ]
    current = None
    for r in rows:
        if r["target"] != current:
            current = r["target"]
            gone = missing.get(current) or {}
            extra = ""
            if gone:
                extra = " — not here: " + "; ".join(f"{k} ({v})" for k, v in gone.items())
            out.append(
                f'<tr><td colspan="{len(head)}" style="border:1px solid #ccc;padding:5px 7px;background:#f7f7f7">'
                f"<b>{html.escape(r['title'])}</b> <code>{html.escape(current)}</code> "
                f"[{html.escape(r['family'])} {html.escape(r['mode'])}]{html.escape(extra)}</td></tr>"
            )
        thr = []
        if r.get("min_ratio") is not None:
            thr.append(f"ratio ≥ {r['min_ratio']:g}")
        if r.get("min_pct_bw") is not None:
            thr.append(f"%BW ≥ {r['min_pct_bw']:g}")
        status = r["status"] + (f" ({r['reason']})" if r.get("reason") else "")
        info = ""
        if r.get("alt_peer"):
            info = f"vs {r['alt_peer']}: {_num(r.get('alt_peer_us'), '{:.1f}')} µs, ratio {_num(r.get('alt_ratio'), '{:.3g}')}"
        note = r.get("note") or ""
        if note.startswith("not here:"):
            note = ""  # said once in the target's heading row
        cells = [
            (f"{r['x_name']}={r['x']}", "right"),
            (r["ours"], "left"),
            (_num(r.get("ours_us"), "{:.1f}"), "right"),
            (facts.get((r["target"], str(r["x"]))) or "-", "left"),
            (r.get("peer") or "-", "left"),
            (_num(r.get("peer_us"), "{:.1f}"), "right"),
            (reader.ratio_text(r), "right"),
            (_num(r.get("pct_copy_bw"), "{:.1f}"), "right"),
            (", ".join(thr) or "-", "left"),
            (reader.precision_text(r), "left"),
            (status, "left"),
            (info, "left"),
            (note, "left"),
        ]
        colour = STATUS_COLOURS.get(r["status"], "#ffffff")
        tds = []
        for i, (text, align) in enumerate(cells):
            style = _CELL.format(align)
            if head[i] == "status":
                style = style[:-1] + f';background:{colour};font-weight:bold;min-width:9em;max-width:24em"'
            elif head[i] in ("regs/spills/occ", "informative", "note", "precision, max error"):
                style = style[:-1] + ';min-width:8em;max-width:20em"'
            tds.append(f"<td {style}>{html.escape(str(text))}</td>")
        out.append(f'<tr class="status-{html.escape(r["status"].replace(" ", "-"))}">' + "".join(tds) + "</tr>")
    out.append("</table></div>")
    return "".join(out)


def summary_html(run: dict) -> str:
    """How to read the ratios (after the headline), and the run's failures."""
    text = (
        "<p>ratio = best peer time / our time (above 1: ours is faster); for a tile sweep, best "
        "configuration's time / the default's (1: the default is the best). <b>MET</b> or <b>MISSED</b> only "
        "when the ratio's interval lies wholly on one side of the threshold, otherwise <i>within noise</i>. "
        "A point whose peer is not installed is <i>not measured</i>, never met.</p>"
    )
    if run.get("failures"):
        items = "".join(f"<li>{html.escape(f)}</li>" for f in run["failures"])
        text += f'<p style="color:#b00"><b>Failures</b></p><ul style="color:#b00">{items}</ul>'
    return text


# --- figures -------------------------------------------------------------------------------
def ratio_figure(target: dict, rows: list[dict]) -> go.Figure | None:
    """Ratio against x with the threshold; None when no point could be judged."""
    judged = [r for r in rows if r["status"] in VERDICT_MARKERS and r.get("ratio") is not None]
    if not judged:
        return None
    xs = [str(r["x"]) for r in rows]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[str(r["x"]) for r in judged],
            y=[r["ratio"] for r in judged],
            mode="lines+markers",
            name="ratio",
            marker=dict(size=11, color=[VERDICT_MARKERS[r["status"]] for r in judged], line=dict(width=1)),
            error_y=dict(
                type="data",
                array=[(r["ratio_hi"] - r["ratio"]) if r.get("ratio_hi") is not None else 0.0 for r in judged],
                arrayminus=[(r["ratio"] - r["ratio_lo"]) if r.get("ratio_lo") is not None else 0.0 for r in judged],
                visible=True,
            ),
            text=[r.get("peer") or "" for r in judged],
            hovertemplate="x=%{x}<br>ratio %{y:.3g}<br>vs %{text}<extra></extra>",
        )
    )
    need = [r.get("min_ratio") for r in rows]
    if any(v is not None for v in need):
        fig.add_trace(
            go.Scatter(x=xs, y=need, mode="lines", name="threshold", line=dict(color="black", dash="dash", shape="hv"))
        )
    alt = [r for r in rows if r.get("alt_ratio") is not None]
    if alt:
        fig.add_trace(
            go.Scatter(
                x=[str(r["x"]) for r in alt],
                y=[r["alt_ratio"] for r in alt],
                mode="lines+markers",
                name=f"vs {alt[0]['alt_peer']} (informative)",
                line=dict(color="#888", dash="dot"),
            )
        )
    fig.update_layout(
        title=dict(text=f"{target['title']}: ratio"),
        xaxis=dict(title=target["axis"], type="category", categoryorder="array", categoryarray=xs),
        yaxis_title="ratio",
        template="plotly_white",
        height=340,
        margin=dict(t=60, l=60, r=20, b=50),
    )
    return fig


def defaults_figure(target: dict, records: list[dict]) -> go.Figure:
    """Each configuration's time relative to the default's, one bar group per x; the line at the
    threshold (a bar below it beats the default by more than the target allows)."""
    fig = go.Figure()
    labels: list[str] = []
    for r in records:
        if r.get("label") and r["label"] not in labels:
            labels.append(r["label"])
    for x in target["values"]:
        here = [r for r in records if str(r.get("x_value")) == str(x) and r.get("label")]
        default = next((r for r in here if r["label"] == "default" and r.get("ms_p50")), None)
        if default is None:
            continue
        ys, texts = [], []
        for lab in labels:
            r = next((r for r in here if r["label"] == lab), None)
            if r is None or r.get("error") or not r.get("ms_p50"):
                ys.append(None)
                texts.append("failed" if r is not None else "")
            else:
                ys.append(r["ms_p50"] / default["ms_p50"])
                texts.append(f"{r['ms_p50'] * 1e3:.1f} µs")
        fig.add_trace(go.Bar(x=labels, y=ys, name=f"{target['axis']}={x}", hovertext=texts))
    need = [r["value"] for r in target.get("min_ratio", [])]
    if need:
        fig.add_hline(
            y=max(need), line=dict(color="black", dash="dash"), annotation_text=f"threshold {max(need):g} of default"
        )
    notes = [F.timing_note(records)] if F.timing_note(records) else []
    fig.update_layout(
        title=dict(text="<br>".join([f"{target['title']}: time / default time"] + [f"<sup>{n}</sup>" for n in notes])),
        barmode="group",
        yaxis_title="time relative to the default",
        template="plotly_white",
        height=420,
        margin=dict(t=80, l=60, r=20, b=120),
    )
    return fig


def speed_figures(target: dict, records: list[dict]) -> list[go.Figure]:
    """The target's speed figure(s): time against x per variant (and % of copy bandwidth where a
    bandwidth rule applies and the device measured it)."""
    if target["kind"] == "defaults":
        return [defaults_figure(target, records)]
    recs = [r for r in records if r.get("mode") == target["mode"]]
    order = [target["ours"]] + [r["variant"] for r in recs if r["variant"] != target["ours"]]
    order = list(dict.fromkeys(order))
    what = "host wall per call" if target["kind"] == "chain" else "time"
    figs = [
        F.speed_figure(
            recs,
            target["axis"],
            "ms",
            order=order,
            highlight=target["ours"],
            title=f"{target['title']}: {what}",
            x_order=target["values"],
        )
    ]
    if target.get("min_pct_bw") and any(r.get("pct_copy_bw") is not None for r in recs):
        figs.append(
            F.speed_figure(
                recs,
                target["axis"],
                "pct_copy_bw",
                order=order,
                highlight=target["ours"],
                title=f"{target['title']}: % of copy bandwidth",
                x_order=target["values"],
            )
        )
    return figs


# --- the headline: what was measured, on what device, where ours stands -------------------------
VERDICT_MARKERS = {"MET": "#2e9e44", "within noise": "#e0a800", "MISSED": "#d32f2f"}
NOT_JUDGED = "#9e9e9e"


def display_title(run: dict) -> str:
    """The suite's title as it reads now (the registry's, for a suite it knows), else the run's;
    where a GPU suite ran on another accelerator than the one it is named for (a device call
    for an H200 that got an H100), the title says which ran it."""
    title, card = run.get("title") or f"Benchmark suite {run.get('suite')}", ""
    try:
        from workbench.suites import SUITES

        if run.get("suite") in SUITES:
            title, card = SUITES[run["suite"]].title, SUITES[run["suite"]].card
    except Exception:  # noqa: BLE001 - a report of an old run must still render
        pass
    device = run.get("device_name") or ""
    if card and device and card.lower() not in device.lower():
        title += f" — run on an {device}, not an {card}"
    return title


def short_title(title: str) -> str:
    """``1. RMSNorm forward`` -> ``RMSNorm forward``; a trailing parenthesis is left out."""
    head, dot, rest = title.partition(". ")
    title = rest if dot and head.isdigit() else title
    if title.endswith(")") and " (" in title:
        title = title[: title.index(" (")]
    return title


def headline_rows(run: dict) -> list[dict]:
    """Ours against the best peer (versus and chain targets; tile sweeps are in the tables)."""
    return [r for r in run["rows"] if r.get("kind") != "defaults"]


def _wrap(text: str, width: int = 24, lines_at_most: int | None = None) -> str:
    """``text`` broken into lines of about ``width`` characters (``<br>``), cut to
    ``lines_at_most`` lines with an ellipsis (the full title is in the table below the chart)."""
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    lines.append(line)
    if lines_at_most is not None and len(lines) > lines_at_most:
        lines = lines[:lines_at_most]
        lines[-1] = lines[-1].rstrip(",;:") + " …"
    return "<br>".join(lines)


def _groups(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """Rows grouped by target, in order."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["target"], []).append(r)
    return [(short_title(g[0]["title"]), g) for g in out.values()]


FACETS_PER_ROW = 6  # at about 1100 px a facet is then ~170 px wide: room for a title of three short lines
_FACET_HEIGHT = 210  # px of plot per row of facets
_FACET_GAP = 112  # px between rows: the upper row's size ticks and axis title, then the lower row's titles
_TITLES_ABOVE = 58  # px a first-row facet title takes above its plot (three lines at 11 px)


def _facets(groups: list[tuple[str, list]], y_title: str, log: bool = False) -> tuple[go.Figure, list[tuple[int, int]]]:
    """One facet per target, up to :data:`FACETS_PER_ROW` in a row and as many rows as needed,
    each titled with its target (wrapped) and its x axis the size; returns the figure and each
    group's (row, col). A wide suite (the H100's 18 targets) gets three rows instead of 18
    narrow columns whose titles overlap."""
    from plotly.subplots import make_subplots

    n = len(groups)
    cols = max(1, min(n, FACETS_PER_ROW))
    rows = max(1, -(-n // cols))
    top, bottom = 150, 70
    height = top + bottom + rows * _FACET_HEIGHT + (rows - 1) * _FACET_GAP
    fig = make_subplots(
        rows=rows,
        cols=cols,
        shared_yaxes=True,
        subplot_titles=[_wrap(t, 31, lines_at_most=3) for t, _ in groups],
        horizontal_spacing=0.035,
        vertical_spacing=_FACET_GAP / (height - top - bottom),
    )
    for ann in fig.layout.annotations:
        ann.font = dict(size=11)
    places = [(i // cols + 1, i % cols + 1) for i in range(n)]
    for (_, g), (r, c) in zip(groups, places):
        axis = g[0].get("x_name", "") if g and isinstance(g[0], dict) else ""
        fig.update_xaxes(
            type="category", title_text=axis, title_font=dict(size=11), tickfont=dict(size=10), row=r, col=c
        )
    for r in range(1, rows + 1):
        fig.update_yaxes(title_text=y_title, row=r, col=1)
    if log:
        fig.update_yaxes(type="log")
    fig.update_layout(
        template="plotly_white",
        height=height,
        # between the figure's title and the first row's facet titles
        legend=dict(orientation="h", yanchor="bottom", y=1 + _TITLES_ABOVE / (height - top - bottom), x=0),
        title=dict(y=1 - 12 / height, yanchor="top"),
        margin=dict(t=top, l=60, r=20, b=bottom),
    )
    return fig, places


def headline_figure(run: dict) -> go.Figure | None:
    """One chart: the ratio (best peer time / ours) per target and size, its interval as error
    bars, coloured by verdict, with each point's threshold; None when no point has a ratio."""
    rows = [r for r in headline_rows(run) if r.get("ratio") is not None]
    if not rows:
        return None
    groups = _groups(rows)
    fig, places = _facets(groups, "ratio (log scale)", log=True)
    for i, ((_, g), (row, col)) in enumerate(zip(groups, places), start=1):
        x = [str(r["x"]) for r in g]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[r["ratio"] for r in g],
                mode="markers",
                name="ratio",
                showlegend=False,
                marker=dict(
                    size=11,
                    color=[VERDICT_MARKERS.get(r["status"], NOT_JUDGED) for r in g],
                    line=dict(width=1, color="#333"),
                ),
                error_y=dict(
                    type="data",
                    array=[(r["ratio_hi"] - r["ratio"]) if r.get("ratio_hi") is not None else 0.0 for r in g],
                    arrayminus=[(r["ratio"] - r["ratio_lo"]) if r.get("ratio_lo") is not None else 0.0 for r in g],
                    visible=True,
                    color="#555",
                    thickness=1.5,
                    width=4,
                ),
                customdata=[
                    [r.get("peer") or "-", reader.ratio_text(r), r["status"], r.get("reason") or ""] for r in g
                ],
                hovertemplate=f"{g[0]['x_name']}=%{{x}}<br>ratio %{{customdata[1]}} vs %{{customdata[0]}}<br>"
                "%{customdata[2]} %{customdata[3]}<extra></extra>",
            ),
            row=row,
            col=col,
        )
        need = [r.get("min_ratio") for r in g]
        if any(v is not None for v in need):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=need,
                    mode="markers",
                    name="threshold",
                    legendgroup="threshold",
                    showlegend=i == 1,
                    marker=dict(symbol="line-ew-open", size=20, color="#111", line=dict(width=2)),
                    hovertemplate="threshold %{y:g}<extra></extra>",
                ),
                row=row,
                col=col,
            )
    present = {r["status"] for r in rows}
    for status, colour in list(VERDICT_MARKERS.items()) + [("not judged", NOT_JUDGED)]:
        if status in present or (status == "not judged" and present - set(VERDICT_MARKERS)):
            fig.add_trace(
                go.Scatter(x=[None], y=[None], mode="markers", name=status, marker=dict(size=11, color=colour))
            )
    fig.add_hline(y=1.0, line=dict(color="#888", dash="dot", width=1), row="all", col="all")
    fig.update_layout(
        title=dict(text="Ours against the best peer: ratio = peer time / our time (above 1: ours is faster)"),
    )
    return fig


def memory_bound(target: dict) -> bool:
    """A target of a family whose spec says it is bound by memory traffic, or one with a copy-bandwidth rule."""
    if target.get("min_pct_bw"):
        return True
    try:
        import kernels

        return bool(kernels.get(target["family"]).memory_bound)
    except Exception:  # noqa: BLE001 - an unknown family is simply not charted
        return False


def _record_at(records: list[dict], variant: str | None, x: Any) -> dict | None:
    hits = [
        r
        for r in records
        if r.get("variant") == variant and str(r.get("x_value")) == str(x) and not r.get("label") and not r.get("error")
    ]
    return hits[-1] if hits else None


def _ours_and_peer(run: dict, want) -> list[tuple[dict, dict, dict | None]]:
    """(row, our record, best peer's record) of every versus target ``want(target)`` accepts."""
    out = []
    for target in run["targets"]:
        if target["kind"] != "versus" or not want(target):
            continue
        recs = [r for r in target_records(run, target) if r.get("mode") == target["mode"]]
        for row in [r for r in run["rows"] if r["target"] == target["name"]]:
            o = _record_at(recs, target["ours"], row["x"])
            if o is not None:
                out.append((row, o, _record_at(recs, row.get("peer"), row["x"]) if row.get("peer") else None))
    return out


def bandwidth_figure(run: dict) -> go.Figure | None:
    """Achieved GB/s of ours and of the best peer per target and size (memory-bound families),
    against the device's measured copy bandwidth; None when no record has GB/s."""
    cells = [(row, o, p) for row, o, p in _ours_and_peer(run, memory_bound) if o.get("gbps") is not None]
    if not cells:
        return None
    groups = _groups([row for row, _, _ in cells])
    by = {(row["target"], str(row["x"])): (o, p) for row, o, p in cells}
    fig, places = _facets(groups, "GB/s")
    for i, ((_, g), (row, col)) in enumerate(zip(groups, places), start=1):
        x = [str(r["x"]) for r in g]
        pairs = [by[(r["target"], str(r["x"]))] for r in g]
        fig.add_trace(
            go.Bar(
                x=x,
                y=[o["gbps"] for o, _ in pairs],
                name="ours",
                legendgroup="ours",
                showlegend=i == 1,
                marker_color="#1f77b4",
            ),
            row=row,
            col=col,
        )
        fig.add_trace(
            go.Bar(
                x=x,
                y=[p.get("gbps") if p else None for _, p in pairs],
                name="best peer",
                legendgroup="peer",
                showlegend=i == 1,
                marker_color="#bbbbbb",
                customdata=[r.get("peer") or "-" for r in g],
                hovertemplate="%{customdata}: %{y:.0f} GB/s<extra></extra>",
            ),
            row=row,
            col=col,
        )
    copy = sorted(o["copy_bw_gbps"] for _, o, _ in cells if o.get("copy_bw_gbps"))
    if copy:
        bw = copy[len(copy) // 2]
        fig.add_hline(y=bw, line=dict(color="#111", dash="dash"), row="all", col="all")
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                name=f"measured copy bandwidth {bw:.0f} GB/s",
                line=dict(color="#111", dash="dash"),
            )
        )
    fig.update_layout(
        title=dict(
            text="Memory-bound targets: achieved GB/s (fewest bytes the work must move / time) against copy bandwidth"
        ),
        barmode="group",
    )
    return fig


def kernel_call_figure(run: dict) -> go.Figure | None:
    """Our kernel time (device work) against our call time (what an eager loop pays) per target
    and size, where a record has both; None when none has."""
    cells = [
        (row, o)
        for row, o, _ in _ours_and_peer(run, lambda t: True)
        if o.get("kernel_ms") is not None and o.get("call_ms") is not None
    ]
    seen, unique = set(), []
    for row, o in cells:  # a call target judges the same cells as its kernel twin: chart each cell once
        key = (
            o.get("kernel"),
            o.get("mode"),
            o.get("dtype"),
            str(o.get("x_value")),
            json.dumps(o.get("problem"), sort_keys=True, default=str),
        )
        if key not in seen:
            seen.add(key)
            unique.append((row, o))
    if not unique:
        return None
    groups = _groups([row for row, _ in unique])
    by = {(row["target"], str(row["x"])): o for row, o in unique}
    fig, places = _facets(groups, "µs (log scale)", log=True)
    for i, ((_, g), (row, col)) in enumerate(zip(groups, places), start=1):
        x = [str(r["x"]) for r in g]
        recs = [by[(r["target"], str(r["x"]))] for r in g]
        for name, key, colour in (
            ("kernel time (device work)", "kernel_ms", "#1f77b4"),
            ("call time (eager loop, host included)", "call_ms", "#ff7f0e"),
        ):
            fig.add_trace(
                go.Bar(
                    x=x,
                    y=[o[key] * 1e3 for o in recs],
                    name=name,
                    legendgroup=key,
                    showlegend=i == 1,
                    marker_color=colour,
                ),
                row=row,
                col=col,
            )
    fig.update_layout(title=dict(text="Ours: kernel time against call time"), barmode="group")
    return fig


def headline_lines(run: dict) -> list[str]:
    """The headline as sentences (Markdown-safe plain text)."""
    env = run.get("environment") or {}
    targets = [t for t in run["targets"]]
    versus = [t for t in targets if t["kind"] != "defaults"]
    sweeps = len(targets) - len(versus)
    what = "; ".join(
        f"{short_title(t['title'])} ({t['axis']} {', '.join(str(v) for v in t['values'])})" for t in versus
    ) + (f"; and {sweeps} sweeps of our default tiles against the best tiles" if sweeps else "")
    device = f"{run.get('device_name') or env.get('device_name')} ({run.get('device_kind')})"
    when = env.get("date", "")
    rows = headline_rows(run)
    c = reader.counts(r["status"] for r in rows)
    lines = [
        f"Measured: {len(versus)} comparison{'' if len(versus) == 1 else 's'} with the best peer — {what}.",
        f"Device: {device}" + (f", {when}" if when else "") + ".",
        f"Ours against the best peer: {reader.counts_text(c)} of {len(rows)} points.",
    ]
    judged = [r for r in rows if r.get("ratio") is not None and r["status"] in VERDICT_MARKERS]
    if judged:
        best = max(judged, key=lambda r: r["ratio"])
        worst = min(judged, key=lambda r: r["ratio"])
        lines.append(
            f"Best: {reader.ratio_text(best)}× at {short_title(best['title'])} {best['x_name']}={best['x']} "
            f"(vs {best.get('peer')}); worst: {reader.ratio_text(worst)}× at {short_title(worst['title'])} "
            f"{worst['x_name']}={worst['x']} (vs {worst.get('peer')})."
        )
    lines.append(code_line(run))
    wall = wall_line(env.get("wall_s"))
    if wall:
        lines.append(wall)
    if rows and all(r.get("ratio_lo") is None for r in rows if r.get("ratio") is not None):
        lines.append("These records predate confidence intervals: each ratio is a point, without an interval.")
    if run.get("device_kind") == "cpu":
        lines.append(
            "On the CPU, Triton kernels run in the Triton interpreter: times are interpreter wall times, "
            "never compared with device times, so no ratio is judged."
        )
    if run.get("failures"):
        lines.append(f"FAILED: {len(run['failures'])} correctness failures: " + "; ".join(run["failures"][:5]))
    return lines


def wall_line(wall: dict | None) -> str | None:
    """How long the run took (``environment.json``'s ``wall_s``), split into its parts, or None
    where the run did not record it (a run in parts, or one from before it was recorded)."""
    if not wall or not wall.get("measuring"):
        return None
    parts: dict[str, float] = {}
    for split in (wall.get("targets") or {}).values():
        for part, seconds in split.items():
            if part != "wall":
                parts[part] = parts.get(part, 0.0) + seconds
    total = wall.get("from_process_start")
    text = f"Wall time: {wall['measuring']:.0f} s measuring every target"
    text += f", {total:.0f} s from the process's start" if total else ""
    if parts:
        text += " (" + ", ".join(f"{part} {seconds:.0f} s" for part, seconds in parts.items()) + ")"
    return text + "."


def code_line(run: dict) -> str:
    """Which code the numbers describe: one commit, several, or a tree that differs from its commit."""
    versions = sorted({str(r.get("commit")) for r in run.get("records", []) if r.get("commit")})
    if not versions:
        versions = [str((run.get("environment") or {}).get("git_commit") or "")] if run.get("environment") else []
    versions = [v for v in versions if v and not v.startswith("(")]
    if not versions:
        return "Code: the records name no commit."
    dirty = [v for v in versions if is_dirty(v)]
    if len(versions) > 1:
        text = f"Code: the records come from {len(versions)} code versions ({', '.join(versions)}), not one."
    else:
        text = f"Code: commit {versions[0]}, every record."
    if dirty:
        text += (
            f" MEASURED ON A DIRTY TREE ({', '.join(dirty)}): the code that ran differs from its commit, "
            "so these numbers describe uncommitted code."
        )
    return text


def headline_html(run: dict) -> str:
    lines = headline_lines(run)
    body = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return (
        f'<h1 class="wb-title">{html.escape(display_title(run))}</h1>'
        f'<ul class="wb-headline" style="font-size:15px;line-height:1.5">{body}</ul>'
    )


def baseline_html(run: dict) -> str | None:
    """The comparison with a baseline run (``baseline.json``, written by ``--baseline``)."""
    b = run.get("baseline")
    if not b:
        return None
    changes = sorted(b.get("changes") or [], key=lambda c: -c["change_pct"])
    rows = [
        {
            "cell": c["cell"],
            "baseline µs": f"{c['base_ms'] * 1e3:.4g}",
            "now µs": f"{c['now_ms'] * 1e3:.4g}",
            "change": f"{c['change_pct']:+.1f}%",
            "beyond noise": ("REGRESSED" if c.get("regressed") else "yes") if c["beyond_noise"] else "no",
        }
        for c in changes
    ]
    pct = b.get("pct")
    head = (
        f"<p>Against {html.escape(str(b.get('baseline') or 'the baseline'))}: {len(changes)} cells of ours compared"
        + (
            f"; a cell fails the gate when it is slower by more than {pct:g}% beyond its noise interval"
            if pct is not None
            else ""
        )
        + f"; <b>{'passed' if b.get('ok') else 'FAILED'}</b>.</p>"
    )
    return head + reader.table_html(rows, cls="wb-baseline")


def repeatability_html(run: dict) -> str | None:
    """Each repeatability check (two runs of the suite compared): the share of cells with the same
    verdict, the share of kernel medians (>= 10 µs) within 3%, and the cells that differ."""
    checks = run.get("repeatability") or []
    if not checks:
        return None
    parts = []
    for c in checks:
        title = html.escape(str(c.get("title") or "two runs"))
        tol = 100 * c.get("tolerance", 0.03)
        parts.append(
            f"<h3>{title}</h3><p>Same verdict: <b>{c['verdict_same']}/{c['verdict_cells']} cells "
            f"({100 * c['verdict_share']:.1f}%)</b>; kernel medians of {c.get('min_us', 10):g} µs or more "
            f"within {tol:g}%: <b>{c['kernel_within']}/{c['kernel_cells']} ({100 * c['kernel_share']:.1f}%)</b>.</p>"
        )
        if c.get("note"):
            parts.append(f"<p>{html.escape(str(c['note']))}</p>")
        flips = [
            {"cell": f"{f['target']} {f['x']}", "first": f["first"], "second": f["second"]} for f in c["verdict_flips"]
        ]
        if flips:
            parts.append(reader.table_html(flips, cls="wb-repeat"))
        apart = [
            {
                "cell": a["cell"].strip(),
                "first µs": f"{a['first_us']:.4g}",
                "second µs": f"{a['second_us']:.4g}",
                "change": f"{100 * a['change']:+.1f}%",
            }
            for a in c["kernel_apart"]
        ]
        if apart:
            parts.append(reader.table_html(apart, cls="wb-repeat"))
    return "".join(parts)


def show_repeatability(run: dict) -> None:
    text = repeatability_html(run)
    if text:
        F.show_html("<h2>Repeatability</h2>" + text)


# --- summary.md and its figures -------------------------------------------------------------------------------
def export_figures(figs: dict[str, go.Figure], folder: str | Path, formats=("svg", "png")) -> tuple[dict, str | None]:
    """Static copies of ``figs`` through plotly's export (kaleido, which drives the system
    chromium): ({name: [relative files]}, None), or ({}, why not)."""
    import importlib.util

    folder = Path(folder)
    figs = {k: v for k, v in figs.items() if v is not None}
    if not figs:
        return {}, "no figure to export"
    if importlib.util.find_spec("kaleido") is None:
        return {}, "kaleido is not installed: pip install 'kernel-workbench[report]'"
    folder.mkdir(parents=True, exist_ok=True)
    jobs, files = [], {}
    for name, fig in figs.items():
        static = go.Figure(fig)
        static.update_layout(width=1100, height=max(420, fig.layout.height or 420))
        for fmt in formats:
            jobs.append((static, folder / f"{name}.{fmt}"))
            files.setdefault(name, []).append(f"{folder.name}/{name}.{fmt}")
    try:
        import plotly.io as pio

        if hasattr(pio, "write_images"):
            pio.write_images(
                [f for f, _ in jobs],
                [str(p) for _, p in jobs],
                width=[int(f.layout.width) for f, _ in jobs],
                height=[int(f.layout.height) for f, _ in jobs],
            )
        else:  # older plotly: one at a time
            for f, p in jobs:
                f.write_image(str(p))
    except Exception as exc:  # noqa: BLE001 - no browser, or kaleido failed: the summary says so
        for _, p in jobs:
            p.unlink(missing_ok=True)
        why = " ".join(str(exc).split())[:200] or type(exc).__name__
        return {}, f"no browser for kaleido's export (install chromium): {why}"
    return files, None


def summary_figures(run: dict) -> dict[str, go.Figure | None]:
    return {
        "headline": headline_figure(run),
        "bandwidth": bandwidth_figure(run),
        "kernel_vs_call": kernel_call_figure(run),
    }


def write_summary(run: dict, out: str | Path | None = None, *, export: bool = True) -> Path:
    """``summary.md`` beside ``report.html``: the headline, its table with verdicts, and links to
    the figures exported to ``figures/`` (or why there are none)."""
    out = Path(out or run["dir"])
    figures, note = export_figures(summary_figures(run), out / "figures") if export else ({}, "export skipped")
    table = reader.md_table(reader.ratio_md_rows(run["rows"]), reader.RATIO_MD_COLUMNS)
    sections = []
    b = run.get("baseline")
    if b:
        regressed = [c for c in b.get("changes") or [] if c.get("regressed")]
        body = f"{len(b.get('changes') or [])} cells compared with {b.get('baseline')}; " + (
            "regressed: " + "; ".join(c["cell"] for c in regressed) if regressed else "none regressed beyond noise"
        )
        sections.append(("Against the baseline", body))
    for c in run.get("repeatability") or []:
        body = (
            f"{c.get('title') or 'two runs'}: same verdict {c['verdict_same']}/{c['verdict_cells']} cells "
            f"({100 * c['verdict_share']:.1f}%); kernel medians >= {c.get('min_us', 10):g} µs within "
            f"{100 * c.get('tolerance', 0.03):g}%: {c['kernel_within']}/{c['kernel_cells']} ({100 * c['kernel_share']:.1f}%)."
        )
        sections.append(("Repeatability", body + (f" {c['note']}" if c.get("note") else "")))
    return reader.write_summary(
        out,
        title=display_title(run),
        headline=[f"- {line}" for line in headline_lines(run)],
        table=table,
        figures=figures,
        figures_note=note,
        sections=sections,
    )


# --- the notebook's calls ------------------------------------------------------------------
def show_headline(run: dict) -> None:
    """Title, the headline sentences and the headline chart: the first thing a reader sees."""
    F.show_html(headline_html(run))
    fig = headline_figure(run)
    if fig is not None:
        F.show(fig)


def show_summary(run: dict) -> None:
    F.show_html(summary_html(run))


def show_environment(run: dict) -> None:
    F.show_html(environment_html(run.get("environment") or {"environment": "environment.json not found"}))


def show_ratios(run: dict) -> None:
    F.show_html(ratio_table_html(run["rows"], run.get("missing"), ours_facts(run)))


def show_speed_overview(run: dict) -> None:
    """The bandwidth chart (memory-bound families) and kernel against call time, where they apply."""
    figs = [f for f in (bandwidth_figure(run), kernel_call_figure(run)) if f is not None]
    if figs:
        F.show_html("<h2>Bandwidth and call overhead</h2>")
    for fig in figs:
        F.show(fig)
    rooflines = rooflines_of(run)
    if rooflines:
        F.show_html("<h2>Roofline per family</h2>")
    for fig in rooflines:
        F.show(fig)


def rooflines_of(run: dict) -> list:
    """One roofline per family among the run's records that has one (:func:`workbench.roofline.figures`)."""
    from workbench.roofline import figures

    return figures(run.get("records") or [])


def show_baseline(run: dict) -> None:
    text = baseline_html(run)
    if text:
        F.show_html("<h2>Against the baseline</h2>" + text)
    else:
        F.show_html(
            "<p>No baseline: run with <code>--baseline DIR</code> to compare each cell with an earlier run.</p>"
        )


def show_targets(run: dict) -> None:
    """Per target: a heading, its ratio figure (when judged) and its speed figure(s)."""
    for target in run["targets"]:
        rows = [r for r in run["rows"] if r["target"] == target["name"]]
        records = target_records(run, target)
        peers = ", ".join(target["peers"]) if target.get("peers") else "every torch / peer variant installed"
        missing = run.get("missing", {}).get(target["name"]) or {}
        lines = [f"<h3>{html.escape(target['title'])}</h3>"]
        lines.append(
            f"<p><code>{html.escape(target['name'])}</code>: {html.escape(target['family'])} "
            f"{html.escape(target['mode'])}; ours <code>{html.escape(str(target['ours']))}</code>; peers: "
            f"{html.escape(peers)}; {len(records)} records.</p>"
        )
        if missing:
            lines.append(
                "<p>Not measured here: "
                + "; ".join(f"<code>{html.escape(k)}</code> ({html.escape(str(v))})" for k, v in missing.items())
                + "</p>"
            )
        F.show_html("".join(lines))
        fig = ratio_figure(target, rows)
        if fig is not None:
            F.show(fig)
        if records:
            for fig in speed_figures(target, records):
                F.show(fig)


def show_report(run: dict) -> None:
    """The whole report in reading order: headline, tables, figures per target, environment."""
    show_headline(run)
    show_summary(run)
    show_ratios(run)
    show_speed_overview(run)
    if run.get("baseline"):
        show_baseline(run)
    show_targets(run)
    show_environment(run)
