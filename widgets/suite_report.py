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

STATUS_COLOURS = {
    "MET": "#d8f0d8",
    "MISSED": "#f6d0d0",
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
    run["dir"] = str(d)
    return run


def target_records(run: dict, target: dict) -> list[dict]:
    recs = run["records"]
    return [recs[i] for i in target.get("records", []) if i < len(recs)]


# --- HTML pieces ---------------------------------------------------------------------------
_CELL = 'style="border:1px solid #ccc;padding:3px 7px;text-align:{}"'


def environment_html(env: dict) -> str:
    rows = "".join(
        f"<tr><th {_CELL.format('left')}>{html.escape(str(k))}</th><td {_CELL.format('left')}>{html.escape(str(v))}</td></tr>"
        for k, v in env.items()
    )
    return f'<table class="environment" style="border-collapse:collapse;font-size:13px">{rows}</table>'


def _num(v: Any, spec: str = "{:.4g}") -> str:
    return "-" if v is None or v == "" else spec.format(v)


def ratio_table_html(rows: list[dict], missing: dict | None = None) -> str:
    """The ratio table, one row per target and x, coloured by status; a heading row per target
    (its title, and the peers that could not be measured here: ``missing`` target -> {peer: why})."""
    missing = missing or {}
    head = ["x", "ours", "ours µs", "best peer / config", "peer µs", "ratio", "%BW", "threshold", "status"]
    head += ["informative", "note"]
    out = [
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
            (r.get("peer") or "-", "left"),
            (_num(r.get("peer_us"), "{:.1f}"), "right"),
            (_num(r.get("ratio"), "{:.3g}"), "right"),
            (_num(r.get("pct_copy_bw"), "{:.1f}"), "right"),
            (", ".join(thr) or "-", "left"),
            (status, "left"),
            (info, "left"),
            (note, "left"),
        ]
        colour = STATUS_COLOURS.get(r["status"], "#ffffff")
        tds = []
        for i, (text, align) in enumerate(cells):
            style = _CELL.format(align)
            if head[i] == "status":
                style = style[:-1] + f';background:{colour};font-weight:bold;max-width:28em"'
            tds.append(f"<td {style}>{html.escape(str(text))}</td>")
        out.append(f'<tr class="status-{html.escape(r["status"].replace(" ", "-"))}">' + "".join(tds) + "</tr>")
    out.append("</table>")
    return "".join(out)


def summary_html(run: dict) -> str:
    counts: dict[str, int] = {}
    for r in run["rows"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    bits = ", ".join(
        f'<span style="background:{STATUS_COLOURS.get(k, "#fff")};padding:1px 5px">{v} {html.escape(k)}</span>'
        for k, v in counts.items()
    )
    text = (
        f"<p><b>Suite {html.escape(run['suite'])}</b>: {html.escape(run.get('title', ''))}<br>"
        f"device: {html.escape(str(run.get('device_name')))} ({html.escape(str(run.get('device_kind')))}); "
        f"{len(run['records'])} records; {bits}</p>"
        "<p>ratio = best peer time / our time (above 1: ours is faster); for a tile sweep, best "
        "configuration's time / the default's (1: the default is the best). A point whose peer is not "
        "installed is <i>not measured</i>, never met.</p>"
    )
    if run.get("device_kind") == "cpu":
        text += (
            "<p><i>On the CPU, Triton kernels run in the Triton interpreter: times are interpreter wall "
            "times, never compared with device times, so no ratio is judged.</i></p>"
        )
    if run.get("failures"):
        items = "".join(f"<li>{html.escape(f)}</li>" for f in run["failures"])
        text += f'<p style="color:#b00"><b>Failures</b></p><ul style="color:#b00">{items}</ul>'
    return text


# --- figures -------------------------------------------------------------------------------
def ratio_figure(target: dict, rows: list[dict]) -> go.Figure | None:
    """Ratio against x with the threshold; None when no point could be judged."""
    judged = [r for r in rows if r["status"] in ("MET", "MISSED") and r.get("ratio") is not None]
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
            marker=dict(
                size=11, color=["#2a2" if r["status"] == "MET" else "#c22" for r in judged], line=dict(width=1)
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


# --- the notebook's calls ------------------------------------------------------------------
def show_summary(run: dict) -> None:
    F.show_html(summary_html(run))


def show_environment(run: dict) -> None:
    F.show_html(environment_html(run.get("environment") or {"environment": "environment.json not found"}))


def show_ratios(run: dict) -> None:
    F.show_html(ratio_table_html(run["rows"], run.get("missing")))


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
    show_summary(run)
    show_environment(run)
    show_ratios(run)
    show_targets(run)
