"""The figures of a suite run's report (:mod:`workbench.reports.suite`), from its files.

The headline chart (ours against the best peer per target and size, its interval, coloured by
verdict, each point's threshold), the memory-bound targets' GB/s against the copy bandwidth, our
kernel time against our call time, and per target its ratio figure, its speed figure and, for a
tile sweep, the bar chart of time relative to the default. :func:`export_figures` writes static
copies (kaleido) for ``summary.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from workbench.reports import figures as F
from workbench.reports import reader


def target_records(run: dict, target: dict) -> list[dict]:
    recs = run["records"]
    return [recs[i] for i in target.get("records", []) if i < len(recs)]


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
    """The target's speed figure(s): time against x per variant (and, where a bandwidth rule
    applies and the device measured them, % of the large copy's bandwidth and % of a copy of the
    same bytes in as many launches)."""
    if target["kind"] == "defaults":
        return [defaults_figure(target, records)]
    recs = [r for r in records if r.get("mode") == target["mode"]]
    order = [target["ours"]] + [r["variant"] for r in recs if r["variant"] != target["ours"]]
    order = list(dict.fromkeys(order))
    what = "host wall per call" if target["kind"] == "chain" else "time"
    panels = [("ms", what)]
    if target.get("min_pct_bw"):  # each share the device measured
        panels += [
            (metric, title)
            for metric, title in (
                ("pct_copy_bw", "% of copy bandwidth"),
                ("pct_same_size_copy", "% of a copy of the same bytes in as many launches"),
            )
            if any(r.get(metric) is not None for r in recs)
        ]
    return [
        F.speed_figure(
            recs,
            target["axis"],
            metric,
            order=order,
            highlight=target["ours"],
            title=f"{target['title']}: {title}",
            x_order=target["values"],
        )
        for metric, title in panels
    ]


# --- the headline: what was measured, on what device, where ours stands -------------------------
VERDICT_MARKERS = {"MET": "#2e9e44", "within noise": "#e0a800", "MISSED": "#d32f2f"}
NOT_JUDGED = "#9e9e9e"


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


# At most four facets a row: in a report page or a JupyterLab cell of 700 px a facet is then
# about 150 px wide, room for its title of three lines of FACET_TITLE_CHARS (11 px font).
FACETS_PER_ROW = 4
FACET_TITLE_CHARS = 24
_FACET_HEIGHT = 210  # px of plot per row of facets
_FACET_GAP = 112  # px between rows: the upper row's size ticks and axis title, then the lower row's titles
_TITLES_ABOVE = 58  # px a first-row facet title takes above its plot (three lines at 11 px)


def _facets(groups: list[tuple[str, list]], y_title: str, log: bool = False) -> tuple[go.Figure, list[tuple[int, int]]]:
    """One facet per target, up to :data:`FACETS_PER_ROW` in a row and as many rows as needed,
    each titled with its target (wrapped) and its x axis the size; returns the figure and each
    group's (row, col). A wide suite (the H100's 18 targets) gets five rows instead of 18
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
        subplot_titles=[_wrap(t, FACET_TITLE_CHARS, lines_at_most=3) for t, _ in groups],
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
