"""The report of a benchmark suite run (``workbench bench --suite NAME``), in the Explorer's format.

The suite run writes its files first (``records.json``, ``ratios.csv``, ``suite.json``,
``environment.json``: see :func:`workbench.suites.write_files`); this module only reads them.
:func:`render_suite_report` executes ``notebooks/suite.ipynb`` headless with
papermill (parameter ``records_dir``) and exports it with the offline template to ``report.html``
beside the files. The notebook calls :func:`load` and
:func:`show_report`: the environment block, the ratio table coloured by status, and per target a
ratio figure against its threshold and the speed figure of its records
(:func:`workbench.reports.figures.speed_figure`; tile sweeps get a bar chart of time relative to default).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Union

import plotly.graph_objects as go

from workbench import compile_facts
from workbench.provenance import is_dirty
from workbench.reports import figures as F
from workbench.reports import reader
from workbench.reports.notebooks import default_notebooks_dir, render_notebook_report, repo_root
from workbench.reports.suite_figures import (
    VERDICT_MARKERS,
    bandwidth_figure,
    export_figures,
    headline_figure,
    headline_rows,
    kernel_call_figure,
    ratio_figure,
    short_title,
    speed_figures,
    target_records,
)
from workbench.reports.text import same_size_copy_text
from workbench.store import kept_path, read_json, read_records, records_path

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
    """``suite.json`` + ``records.json`` (compressed, as committed reports keep it, or
    ``records.csv``; + ``environment.json`` when present) of one run."""
    d = Path(records_dir)
    if kept_path(d, "suite.json") is None:
        raise FileNotFoundError(f"{d} has no suite.json: run `workbench bench --suite NAME --out {d}` first")
    run = read_json(kept_path(d, "suite.json"))
    source = records_path(d)  # records.json first; a run from before it was written kept records.csv
    run["records"] = read_records(source) if source else []
    env = d / "environment.json"
    run["environment"] = json.loads(env.read_text()) if env.exists() else {}
    base = d / "baseline.json"
    run["baseline"] = json.loads(base.read_text()) if base.exists() else None
    # Repeatability checks beside the run (benchmarks/repeatability.py), each a pair of runs.
    run["repeatability"] = [json.loads(p.read_text()) for p in sorted(d.glob("repeatability*.json"))]
    run["dir"] = str(d)
    return run


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
    head = ["x", "ours", "ours µs", "best peer / config", "peer µs", "ratio [interval]", "threshold", "status"]
    head += ["%BW", "%BW same-size", "regs/spills/occ", "precision, max error", "informative", "note"]
    # Fourteen columns are wider than a notebook cell: the verdict comes right after the ratio and
    # its threshold, so it is in view at a cell's width; the details after it scroll sideways in
    # the table's own box (the page around it stays put) and the long text columns wrap.
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
            (r.get("peer") or "-", "left"),
            (_num(r.get("peer_us"), "{:.1f}"), "right"),
            (reader.ratio_text(r), "right"),
            (", ".join(thr) or "-", "left"),
            (status, "left"),
            (_num(r.get("pct_copy_bw"), "{:.1f}"), "right"),
            (same_size_copy_text(r), "right"),
            (facts.get((r["target"], str(r["x"]))) or "-", "left"),
            (reader.precision_text(r), "left"),
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


# --- the headline: what was measured, on what device, where ours stands -------------------------
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


# --- summary.md -------------------------------------------------------------------------------
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


# --- the report's parts, in reading order: the notebook shows them, a rendered page lists them ---
Part = Union[str, go.Figure]  # HTML text, or a figure


def headline_parts(run: dict) -> list[Part]:
    """Title, the headline sentences and the headline chart: the first thing a reader sees."""
    return [headline_html(run), *[f for f in [headline_figure(run)] if f is not None]]


def summary_parts(run: dict) -> list[Part]:
    """How to read the ratios, and the run's failures."""
    return [summary_html(run)]


def ratio_table_parts(run: dict) -> list[Part]:
    return [ratio_table_html(run["rows"], run.get("missing"), ours_facts(run))]


def speed_overview_parts(run: dict) -> list[Part]:
    """The bandwidth chart (memory-bound families) and kernel against call time, where they apply;
    a roofline per family."""
    parts: list[Part] = []
    figs = [f for f in (bandwidth_figure(run), kernel_call_figure(run)) if f is not None]
    if figs:
        parts += ["<h2>Bandwidth and call overhead</h2>", *figs]
    rooflines = rooflines_of(run)
    if rooflines:
        parts += ["<h2>Roofline per family</h2>", *rooflines]
    return parts


def rooflines_of(run: dict) -> list:
    """One roofline per family among the run's records that has one (:func:`workbench.roofline.figures`)."""
    from workbench.roofline import figures

    return figures(run.get("records") or [])


def baseline_parts(run: dict) -> list[Part]:
    text = baseline_html(run)
    if text:
        return ["<h2>Against the baseline</h2>" + text]
    return ["<p>No baseline: run with <code>--baseline DIR</code> to compare each cell with an earlier run.</p>"]


def repeatability_parts(run: dict) -> list[Part]:
    text = repeatability_html(run)
    return ["<h2>Repeatability</h2>" + text] if text else []


def targets_parts(run: dict) -> list[Part]:
    """Per target: a heading, its ratio figure (when judged) and its speed figure(s)."""
    parts: list[Part] = []
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
        parts.append("".join(lines))
        fig = ratio_figure(target, rows)
        if fig is not None:
            parts.append(fig)
        if records:
            parts += speed_figures(target, records)
    return parts


def environment_parts(run: dict) -> list[Part]:
    return [environment_html(run.get("environment") or {"environment": "environment.json not found"})]


def report_parts(run: dict) -> list[Part]:
    """The whole report in reading order: headline, tables, figures per target, environment (the
    sections of ``notebooks/suite.ipynb``, under the same headings)."""
    parts = headline_parts(run) + ["<h2>Results</h2>"] + summary_parts(run) + ratio_table_parts(run)
    parts += speed_overview_parts(run)
    if run.get("baseline"):
        parts += baseline_parts(run)
    parts += repeatability_parts(run) + ["<h2>Per target</h2>"] + targets_parts(run)
    return parts + ["<h2>Environment</h2>"] + environment_parts(run)


def show_parts(parts: list[Part]) -> None:
    """Display ``parts`` in a notebook: HTML as HTML, figures as interactive figures."""
    for part in parts:
        F.show_html(part) if isinstance(part, str) else F.show(part)


def _shows(parts_of):
    """The notebook's call for one section: display ``parts_of(run)``."""

    def show(run: dict) -> None:
        show_parts(parts_of(run))

    show.__doc__ = f"Display {parts_of.__name__}(run) in the notebook."
    return show


show_headline = _shows(headline_parts)
show_summary = _shows(summary_parts)
show_ratios = _shows(ratio_table_parts)
show_speed_overview = _shows(speed_overview_parts)
show_baseline = _shows(baseline_parts)
show_repeatability = _shows(repeatability_parts)
show_targets = _shows(targets_parts)
show_environment = _shows(environment_parts)
show_report = _shows(report_parts)


# --- report.html: notebooks/suite.ipynb on a suite run's files ------------------------------------
SUITE_NOTEBOOK = "suite.ipynb"


def suite_notebook_path() -> Path:
    for d in (default_notebooks_dir(), repo_root() / "notebooks"):
        if (d / SUITE_NOTEBOOK).exists():
            return d / SUITE_NOTEBOOK
    raise FileNotFoundError(f"notebooks/{SUITE_NOTEBOOK} not found")


def render_suite_report(out_dir: str | Path, *, timeout: int | None = 600, show_code: bool = False) -> Path:
    """Execute the suite notebook on ``out_dir``'s files; write ``suite.ipynb``, ``report.html`` and
    ``summary.md`` (with ``figures/``) there."""
    out = Path(out_dir).resolve()
    title = None
    try:
        title = read_json(kept_path(out, "suite.json") or out / "suite.json").get("suite")
    except (OSError, ValueError):
        pass
    return render_notebook_report(
        suite_notebook_path(),
        out,
        {"records_dir": ".", "write_summary": True},
        show_code=show_code,
        title=f"Benchmark suite {title}" if title else "Benchmark suite",
        timeout=timeout,
    )
