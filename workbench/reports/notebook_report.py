"""``workbench report``: every notebook headless, then an index page a reader opens first.

:func:`build_report` executes every notebook in ``notebooks/`` through papermill (parameters
``device``, ``quick``, ``headless=True``, ``out_dir``), so each family notebook writes
``<family>_records.csv/.json`` beside its executed ``.ipynb``; it exports each to HTML
(:mod:`workbench.reports.html`, one plotly.js beside the pages) and writes ``index.html``: the
headline (what was measured, the device, correctness, wall time), a chart of ours against the
fastest peer per problem, one row per notebook (status, time, its slowest cells, records,
checks) linking its page, the executed notebook and its records, and the environment; then
``summary.md``, ``all_records.csv`` and ``environment.json``. A family whose peers build
(PyJuice's nvcc extensions) starts them first and runs its notebook last. On a GPU or NPU each
notebook's kernel is started, and its imports made, while the notebook before it runs
(:mod:`workbench.reports.warm_kernels`).
"""

from __future__ import annotations

import html
import json
import os
import time
from pathlib import Path

from workbench.compiling.note import ahead_counts, ahead_text
from workbench.device import get_device
from workbench.phases import process_age_s
from workbench.reports.environment import environment
from workbench.reports.html import PLOTLY_FILE, notebook_to_html, write_plotly_js
from workbench.reports.notebooks import (
    KERNEL_NAME,
    _scrub_notebook,
    default_notebooks_dir,
    execute_notebook,
    find_notebooks,
    kernel_env,
    records_family,
)
from workbench.reports.reader import scrub_paths
from workbench.reports.warm_kernels import WarmKernel, warm_kernel_for
from workbench.store import kept_names, kept_path, open_text, read_records


def _records_summary(json_path: Path | None) -> dict:
    if json_path is None or not json_path.exists():
        return {}
    rows = read_records(json_path)
    return {
        "records": len(rows),
        "compiled ahead": ahead_text(ahead_counts(rows)),
        "passed": sum(1 for r in rows if not r.get("error") and r.get("passed")),
        "wrong": sum(1 for r in rows if not r.get("error") and r.get("passed") is False),
        "errors": sum(1 for r in rows if r.get("error")),
        "rows": rows,
    }


def build_report(
    out: Path,
    *,
    device: str = "auto",
    quick: bool = False,
    dtype: str | None = None,
    notebooks_dir: Path | None = None,
    only: list[str] | None = None,
    timeout: int | None = 1200,
    jobs: int = 1,
    show_code: bool = False,
    log=print,
    on_start=None,
    warm_ahead: bool | None = None,
) -> dict:
    """Execute the notebooks and write the report; returns {"index", "results", "ok"}.
    ``log(text)`` gets a line per notebook run, ``on_start(name)`` hears a notebook starting.

    ``jobs > 1`` runs that many notebooks at once (each in its own kernel): faster, but their
    timings disturb each other, so keep 1 for reports whose numbers matter. ``warm_ahead``
    (None: on a GPU or NPU, off on the CPU, whose cores the interpreter's measurements need)
    starts each notebook's kernel and imports while the one before runs."""
    from workbench.store import write_csv

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    notebooks_dir = Path(notebooks_dir or default_notebooks_dir()).resolve()
    paths = find_notebooks(notebooks_dir, only)
    if not paths:
        raise ValueError(f"no notebooks in {notebooks_dir}")
    kind = get_device(device).kind
    paths = _prebuild_first(paths, kind, log)
    warm_ahead = (kind != "cpu") if warm_ahead is None else warm_ahead
    # quick=None lets each notebook choose: small sizes on the CPU interpreter, full sizes on a device.
    params = {"device": device, "quick": True if quick else None, "headless": True, "out_dir": str(out)}
    plotly_src = write_plotly_js(out)

    def run_one(path: Path, warm: WarmKernel | None = None) -> dict:
        if on_start is not None:
            on_start(path.name)
        return _run_one(path, out, params, timeout, notebooks_dir, log, show_code, plotly_src, warm)

    def warm_kernel(path: Path) -> WarmKernel:
        return warm_kernel_for(path, records_family(path), notebooks_dir, KERNEL_NAME, kind)

    if dtype:
        params["dtype"] = dtype
    store = os.environ.get("WORKBENCH_STORE") or str(out / "workbench.sqlite")
    with kernel_env(store, root=notebooks_dir.parent):
        if jobs > 1 and len(paths) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=jobs) as pool:
                results = list(pool.map(run_one, paths))
        elif warm_ahead:
            results, warm, used = [], warm_kernel(paths[0]), []
            for i, path in enumerate(paths):
                mine, warm = warm, (warm_kernel(paths[i + 1]) if i + 1 < len(paths) else None)
                results.append(run_one(path, mine))
                used.append(mine)
            for kernel in used:  # each shut down beside the next notebook; all gone before the pages
                kernel.wait_released()
        else:
            results = [run_one(p) for p in paths]
    all_rows = []
    for r in results:
        all_rows.extend(r.pop("rows", []))
    write_csv(all_rows, out / "all_records.csv")
    env = environment(device)
    age = process_age_s()  # the pages are written in a second or two more
    env["wall_s"] = {
        "notebooks": round(sum(r["seconds"] for r in results), 1),
        "from_process_start": None if age is None else round(age, 1),
    }
    (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
    index = out / "index.html"
    index.write_text(scrub_paths(_index_html(results, env, params, all_rows), [out]), encoding="utf-8")
    _index_summary(out, results, env)
    ok = all(r["ok"] for r in results)
    log(
        f"report: {index} ({sum(r['ok'] for r in results)}/{len(results)} notebooks ok"
        + (f", {age:.1f} s from the process's start)" if age is not None else ")")
    )
    return {"index": index, "results": results, "ok": ok}


def _prebuild_first(paths: list[Path], kind: str, log) -> list[Path]:
    """Start the one-off builds of every family with a notebook here (a peer's compiles, in
    background processes: ``KernelSpec.start_prebuilds``) and put those families' notebooks
    last, so the builds run while the other notebooks do; the order is otherwise kept."""
    import kernels

    building = set()
    for path in paths:
        family = records_family(path)
        if family in kernels.families() and kernels.get(family).start_prebuilds(kind):
            building.add(family)
    if building:
        log(f"report: building {', '.join(sorted(building))}'s peers in the background; their notebooks run last")
    return sorted(paths, key=lambda p: records_family(p) in building)


def _run_one(
    path: Path,
    out: Path,
    params: dict,
    timeout,
    notebooks_dir: Path,
    log,
    show_code: bool = False,
    plotly_src: str | None = None,
    warm: WarmKernel | None = None,
) -> dict:
    """Execute one notebook (in ``warm``'s kernel where given, shut down in the background
    after), export its HTML, summarise its records; never raises. Its seconds count from its
    turn: the wait for its kernel included, a warm kernel's shutdown not."""
    executed = out / path.name
    t0 = time.perf_counter()
    error = None
    km = warm.take() if warm is not None else None
    try:
        execute_notebook(path, executed, params, timeout=timeout, cwd=notebooks_dir, km=km)
    except Exception as exc:  # a failing notebook is reported, the others still run
        error = _error_text(exc)
    finally:
        if warm is not None:
            warm.release(km)
    seconds = time.perf_counter() - t0
    html_name = None
    if executed.exists():
        try:
            _scrub_notebook(executed, out)
            page = notebook_to_html(executed, out / html_name_for(path), show_code=show_code, plotly_src=plotly_src)
            html_name = page.name
        except Exception as exc:
            error = (error + "\n" if error else "") + f"HTML export failed: {exc}"
    family = records_family(path)
    summary = _records_summary(out / f"{family}_records.json")
    slowest = slowest_cells(executed) if executed.exists() else []
    where = "; ".join(f"{c['seconds']:.0f} s {c['cell']}" for c in slowest)
    ahead = warm.facts() if warm is not None else None
    log(
        f"{path.name}: {'ok' if error is None else 'FAILED'} in {seconds:.1f} s"
        + (f" (slowest: {where})" if where else "")
        + (f"; {_ahead_text(ahead)}" if ahead else "")
    )
    return {
        "slowest": slowest,
        "notebook": path.name,
        "ok": error is None,
        "error": error,
        "seconds": round(seconds, 1),
        "kernel_ahead": ahead,
        "html": html_name,
        "executed": path.name if executed.exists() else None,
        "csv": f"{family}_records.csv" if (out / f"{family}_records.csv").exists() else None,
        "json": f"{family}_records.json" if (out / f"{family}_records.json").exists() else None,
        **summary,
    }


def _ahead_text(ahead: dict) -> str:
    """A warm kernel's line: what it cost beside the notebook before, and what this one waited."""
    if ahead["error"]:
        return f"its kernel started ahead failed ({ahead['error']}); it started its own"
    return (
        f"its kernel started ahead with {ahead['modules']} imports in {ahead['seconds']} s, "
        f"{ahead['waited_s']} s of it waited for"
    )


def slowest_cells(executed: Path, n: int = 3) -> list[dict]:
    """Where a notebook's time went: its ``n`` slowest code cells as papermill timed them
    (``metadata.papermill.duration``), each {"cell": "#<index> <first line>", "seconds"}."""
    try:
        with open_text(executed) as f:
            cells = json.load(f)["cells"]
    except (OSError, ValueError, KeyError, EOFError):
        return []
    timed = []
    for i, cell in enumerate(cells):
        duration = ((cell.get("metadata") or {}).get("papermill") or {}).get("duration")
        if cell.get("cell_type") != "code" or not isinstance(duration, (int, float)) or duration < 0.05:
            continue
        source = "".join(cell.get("source") or "").strip()
        first = next((line for line in source.splitlines() if line.strip() and not line.startswith("#")), "")
        timed.append({"cell": f"#{i} {first[:60]}", "seconds": round(float(duration), 1)})
    return sorted(timed, key=lambda c: -c["seconds"])[:n]


def html_name_for(path: Path) -> str:
    """``<stem>.html``; the index notebook becomes ``index_notebook.html`` (index.html is the report's)."""
    return "index_notebook.html" if path.stem == "index" else f"{path.stem}.html"


def _error_text(exc: BaseException) -> str:
    name = getattr(exc, "ename", None) or type(exc).__name__
    value = getattr(exc, "evalue", None) or str(exc)
    return f"{name}: {value}"[:4000]


def _headline(results: list[dict], env: dict) -> list[str]:
    """What was measured, on what device, and whether every check passed (plain sentences)."""
    families = [r["notebook"].removesuffix(".ipynb") for r in results if "records" in r]
    records = sum(r.get("records", 0) for r in results)
    passed = sum(r.get("passed", 0) for r in results)
    wrong = sum(r.get("wrong", 0) for r in results)
    errors = sum(r.get("errors", 0) for r in results)
    failed = [r["notebook"] for r in results if not r["ok"]]
    device = f"{env.get('device_name', '?')} ({env.get('device_kind', '?')})"
    lines = [
        f"Measured: {', '.join(families) or 'no family'} — {records} measurements from {len(results)} notebooks run headless.",
        f"Device: {device}, {env.get('date', '')}.",
        f"Correctness: {passed} passed, {wrong} wrong, {errors} configurations could not run"
        + (" (a tile that does not fit is reported, not an error)." if errors else "."),
        ("Notebooks: all ran." if not failed else f"Notebooks FAILED: {', '.join(failed)}."),
    ]
    wall = env.get("wall_s") or {}
    if wall.get("notebooks") is not None:
        lines.append(
            f"Wall time: {wall['notebooks']:.0f} s running the notebooks"
            + (
                f", {wall['from_process_start']:.0f} s from the process's start."
                if wall.get("from_process_start")
                else "."
            )
        )
    if env.get("device_kind") == "cpu":
        lines.append(
            "On the CPU, Triton kernels run in the Triton interpreter: times are interpreter wall times, "
            "never comparable with device times."
        )
    return lines


def standing_rows(records: list[dict]) -> list[dict]:
    """Where ours stands in the notebooks' records: per family, mode, dtype and problem, our fastest
    passing record against the fastest passing peer (torch or a peer library) by kernel time, the
    ratio (peer / ours) with its interval and a verdict against parity (MET: ours faster, MISSED:
    slower, within noise; CPU interpreter / wall times are not comparable)."""
    from workbench.suites.judge import ratio_with_interval, timed
    from workbench.suites.targets import CPU_TIMINGS, PEER_BACKENDS
    from workbench.timing import verdict

    groups: dict[tuple, dict] = {}
    for r in records:
        if r.get("error") or r.get("passed") is not True or not timed(r)[0]:
            continue
        key = (
            r.get("kernel"),
            r.get("mode"),
            r.get("dtype"),
            json.dumps(r.get("problem"), sort_keys=True, default=str),
        )
        side = "peer" if r.get("backend") in PEER_BACKENDS else "ours"
        g = groups.setdefault(key, {})
        if side not in g or timed(r)[0] < timed(g[side])[0]:
            g[side] = r
    rows = []
    for (kernel, mode, dtype, _), g in groups.items():
        if "ours" not in g or "peer" not in g:
            continue
        o, p = g["ours"], g["peer"]
        ratio, lo, hi = ratio_with_interval(p, o, "kernel")
        cpu = o.get("timing_method") in CPU_TIMINGS or p.get("timing_method") in CPU_TIMINGS
        rows.append(
            {
                "label": f"{kernel} {mode} {dtype} {o.get('axis')}={o.get('x_value')}",
                "ours": o.get("variant"),
                "peer": p.get("variant"),
                "ratio": ratio,
                "ratio_lo": lo,
                "ratio_hi": hi,
                "status": "not comparable" if cpu else verdict(lo, hi, 1.0),
                "problem": o.get("problem") or {},
            }
        )
    # Two problems can share a label (a correctness problem at other rows, the product layer at
    # the same batch): those labels name what differs from the first problem that had it.
    first: dict[str, dict] = {}
    for r in rows:
        seen = first.setdefault(r["label"], r["problem"])
        if seen is not r["problem"]:
            diff = {k: v for k, v in r["problem"].items() if seen.get(k) != v}
            r["label"] += " (" + ", ".join(f"{k}={v}" for k, v in diff.items()) + ")"
    return rows


_STANDING_COLOURS = {"MET": "#2e9e44", "within noise": "#e0a800", "MISSED": "#d32f2f"}


def _standing_chart_html(rows: list[dict]) -> str:
    """The headline chart of a notebook report (plotly.js embedded once), or a sentence when no
    problem was measured for both ours and a peer."""
    if not rows:
        return "<p>No problem was measured for both ours and a peer: no ratio to show.</p>"
    import plotly.graph_objects as go
    import plotly.io as pio

    # One row per problem, its label on the left and the ratio along a log axis: forty labels
    # side by side would stand on end and squeeze the plot to a strip.
    labels = [r["label"] for r in rows]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            y=labels,
            x=[r["ratio"] for r in rows],
            mode="markers",
            showlegend=False,
            marker=dict(size=9, color=[_STANDING_COLOURS.get(r["status"], "#9e9e9e") for r in rows]),
            error_x=dict(
                type="data",
                array=[(r["ratio_hi"] or r["ratio"]) - r["ratio"] for r in rows],
                arrayminus=[r["ratio"] - (r["ratio_lo"] or r["ratio"]) for r in rows],
                color="#555",
            ),
            customdata=[[r["ours"], r["peer"], r["status"]] for r in rows],
            hovertemplate="%{y}<br>ratio %{x:.3g}: %{customdata[0]} vs %{customdata[1]}<br>%{customdata[2]}<extra></extra>",
        )
    )
    for status in [s for s in ("MET", "within noise", "MISSED", "not comparable") if s in {r["status"] for r in rows}]:
        name = {"MET": "ours faster", "MISSED": "ours slower"}.get(status, status)
        colour = _STANDING_COLOURS.get(status, "#9e9e9e")
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, marker=dict(size=10, color=colour)))
    fig.add_vline(x=1.0, line=dict(color="#888", dash="dot"))
    fig.update_layout(
        title="Ours against the fastest peer: ratio = peer time / our time (right of 1: ours is faster)",
        xaxis=dict(title="ratio (log scale)", type="log"),
        yaxis=dict(type="category", categoryorder="array", categoryarray=labels[::-1], tickfont=dict(size=11)),
        template="plotly_white",
        height=150 + 17 * len(rows),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0),
        margin=dict(t=90, l=20, r=20, b=50),
    )
    fig.update_yaxes(automargin=True)
    # plotly.js comes from the report's one copy (PLOTLY_FILE, loaded in the index page's head)
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id="wb-headline-chart")


def _index_summary(out: Path, results: list[dict], env: dict) -> Path:
    """``summary.md`` beside ``index.html``: the headline and one row per notebook."""
    from workbench.reports import reader

    rows = [
        {
            "notebook": r["notebook"],
            "status": "ok" if r["ok"] else "**FAILED**",
            "records": r.get("records", "-"),
            "passed": r.get("passed", "-"),
            "wrong": r.get("wrong", "-"),
            "could not run": r.get("errors", "-"),
            "compiled ahead": r.get("compiled ahead", "-"),
            "time": f"{r['seconds']} s",
            "slowest cells": "; ".join(f"{c['cell']} {c['seconds']} s" for c in r.get("slowest") or []) or "-",
            "page": f"[{r['html']}]({r['html']})" if r.get("html") else "-",
        }
        for r in results
    ]
    return reader.write_summary(
        out,
        title="Kernel Workbench report: every family notebook, run headless",
        headline=[f"- {line}" for line in _headline(results, env)],
        table=reader.md_table(
            rows,
            [
                "notebook",
                "status",
                "time",
                "records",
                "passed",
                "wrong",
                "could not run",
                "compiled ahead",
                "slowest cells",
                "page",
            ],  # fmt: skip
        ),
        figures=None,
        figures_note="the figures are in each notebook's page",
        html_name="index.html",
    )


def _index_html(
    results: list[dict], env: dict, params: dict, records: list[dict] | None = None, plotly_src: str = PLOTLY_FILE
) -> str:
    from workbench.reports import reader

    esc = html.escape

    def link(name, label):
        return f'<a href="{esc(name)}">{esc(label)}</a>' if name else "-"

    rows = []
    for r in results:
        status = '<b style="color:#080">ok</b>' if r["ok"] else '<b style="color:#b00">FAILED</b>'
        checks = "-"
        if "records" in r:
            checks = f"{r['passed']} passed, {r['wrong']} wrong, {r['errors']} could not run"
        err = f'<pre style="color:#b00;white-space:pre-wrap">{esc(r["error"])}</pre>' if r["error"] else ""
        slow = "<br>".join(f"{esc(c['cell'])}: {c['seconds']} s" for c in r.get("slowest") or []) or "-"
        rows.append(
            "<tr>"
            f"<td>{link(r['html'], r['notebook'])}</td><td>{status}{err}</td><td>{r['seconds']} s</td>"
            f'<td style="font-size:12px">{slow}</td>'
            f"<td>{r.get('records', '-')}</td><td>{checks}</td>"
            f"<td>{link(r['executed'], 'ipynb')} {link(r['csv'], 'csv')} {link(r['json'], 'json')}</td>"
            "</tr>"
        )
    param_text = ", ".join(f"{k}={v!r}" for k, v in params.items() if k != "out_dir")
    headline = "".join(f"<li>{esc(line)}</li>" for line in _headline(results, env))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Kernel Workbench report</title>
<script type="text/javascript" src="{esc(plotly_src)}"></script>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }}
</style></head>
<body>
<h1>Kernel Workbench report: every family notebook, run headless</h1>
<ul class="wb-headline" style="font-size:15px;line-height:1.5">{headline}</ul>
{_standing_chart_html(standing_rows(records or []))}
<h2>Notebooks</h2>
<table><tr><th>notebook</th><th>status</th><th>time</th><th>slowest cells</th><th>records</th><th>checks</th><th>files</th></tr>
{"".join(rows)}
</table>
<p>Every record: <a href="all_records.csv">all_records.csv</a>; a short summary: <a href="summary.md">summary.md</a>.
Parameters: {esc(param_text)}.</p>
<h2>Environment</h2>
{reader.environment_html({k: v for k, v in env.items() if k != "wall_s"})}
</body></html>
"""


# --- the report again, from the folder it left -------------------------------------------------
def executed_notebooks(folder: Path) -> list[Path]:
    """The executed notebooks a report folder keeps (``<name>.ipynb``, or compressed as committed
    reports keep them), the index first."""
    found = sorted(p for p in Path(folder).iterdir() if p.name.endswith(kept_names(".ipynb")))
    return sorted(found, key=lambda p: (not p.name.startswith("index."), p.name))


def _papermill_of(path: Path) -> dict:
    with open_text(path) as f:
        return (json.load(f).get("metadata") or {}).get("papermill") or {}


def _first_error(path: Path) -> str | None:
    """The first error a cell of the executed notebook raised, as the run reported it."""
    with open_text(path) as f:
        cells = json.load(f).get("cells") or []
    for cell in cells:
        for output in cell.get("outputs") or []:
            if output.get("output_type") == "error":
                return f"{output.get('ename')}: {output.get('evalue')}"[:4000]
    return None


def render_folder(folder: Path, out: Path, plotly_src: str = PLOTLY_FILE, show_code: bool = False) -> Path:
    """``index.html`` and a page per notebook, rebuilt from what a ``workbench report`` folder keeps:
    the executed notebooks (their outputs are the measurements' figures and tables, kept as data:
    running them again would measure again, on whatever machine renders), each family's records,
    and ``environment.json``. Each notebook's status, time and slowest cells come from papermill's
    metadata in it; the parameters shown are those papermill gave the first notebook."""
    from workbench.store import write_csv

    folder, out = Path(folder), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results, rows, params = [], [], {}
    for path in executed_notebooks(folder):
        meta = _papermill_of(path)
        params = params or dict(meta.get("parameters") or {})
        stem = path.name.split(".")[0]
        page = notebook_to_html(path, out / html_name_for(Path(stem)), show_code=show_code, plotly_src=plotly_src)
        family = records_family(path)
        records_file = kept_path(folder, f"{family}_records.json")
        summary = _records_summary(records_file)
        rows.extend(summary.pop("rows", []))
        error = _first_error(path) if meta.get("exception") else None
        results.append(
            {
                "slowest": slowest_cells(path),
                "notebook": f"{stem}.ipynb",
                "ok": error is None and not meta.get("exception"),
                "error": error,
                "seconds": round(float(meta.get("duration") or 0.0), 1),
                "html": page.name,
                "executed": path.name,
                "csv": None,
                "json": records_file.name if records_file else None,
                **summary,
            }
        )
    if not results:
        raise ValueError(f"{folder}: no executed notebook (.ipynb, plain or compressed) to render")
    env_path = folder / "environment.json"
    env = json.loads(env_path.read_text()) if env_path.exists() else {}
    write_csv(rows, out / "all_records.csv")  # the index links every record as one table
    index = out / "index.html"
    index.write_text(scrub_paths(_index_html(results, env, params, rows, plotly_src), [folder, out]), encoding="utf-8")
    return index
