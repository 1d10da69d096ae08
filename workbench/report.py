"""``workbench report`` and ``workbench lab``.

``workbench report [--device auto] [--quick] [--out DIR] [--dtype D] [--only a,b]`` executes every
notebook in ``notebooks/`` headless through papermill (parameters ``device``, ``quick``,
``headless=True``, ``out_dir=DIR``), so each family notebook writes ``<family>_records.csv/.json``
into DIR beside its executed ``.ipynb``, then converts each executed notebook to HTML and writes
``DIR/index.html``: an environment block (device name and driver, Python / torch / triton
versions, git commit, date), one row per notebook (status, time, records, checks) linking its
HTML, the executed notebook and its records, and ``all_records.csv`` with every record.

The HTML is self-contained: plotly.js is embedded once per page, figures draw with
``window.Plotly`` and nbconvert's require.js, MathJax, mermaid and widget-manager scripts (all
loaded from CDNs) are left out, so the report opens offline; the Markdown cells' LaTeX is
converted to MathML (:mod:`workbench.mathml`), which the browser draws itself.

Notebooks run on the Python interpreter running this command: the ``python3`` kernel name is
pointed at ``sys.executable`` through a temporary kernelspec on ``JUPYTER_PATH``.

Why one long module: running notebooks headless, exporting them offline and the index page share
one kernel environment and one HTML template.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import html
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workbench.mathml import markdown_with_mathml
from workbench.phases import process_age_s
from workbench.reader import scrub_paths

KERNEL_NAME = "python3"

# Extends nbconvert's lab template; every block that would load a script from a CDN is
# replaced: plotly.js goes inline (once), the rest is dropped.
TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}
{%- if resources.plotly_src -%}
<script type="text/javascript" src="{{ resources.plotly_src }}"></script><!-- plotly.js {{ resources.plotly_version }}, one copy beside the pages for offline use -->
{%- else -%}
<script type="text/javascript">/* plotly.js {{ resources.plotly_version }}, embedded for offline use */
{{ resources.plotly_js }}
</script>
{%- endif -%}
{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def default_notebooks_dir() -> Path:
    here = Path.cwd() / "notebooks"
    return here if here.is_dir() else repo_root() / "notebooks"


def in_report(path: Path) -> bool:
    """False for a notebook whose metadata says ``"workbench": {"report": false}`` (e.g.
    ``suite.ipynb``, which renders the files of ``workbench bench --suite`` and takes none of the
    report's parameters)."""
    try:
        meta = json.loads(Path(path).read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError):
        return True
    return bool((meta.get("workbench") or {}).get("report", True))


def find_notebooks(directory: Path, only: list[str] | None = None) -> list[Path]:
    """Notebooks in ``directory``, ``index.ipynb`` first; ``only`` filters by stem. Notebooks that
    opt out of the report (:func:`in_report`) are left out unless ``only`` names them."""
    found = sorted(p for p in Path(directory).glob("*.ipynb") if not p.name.startswith("."))
    if only:
        wanted = {o.removesuffix(".ipynb") for o in only}
        missing = wanted - {p.stem for p in found}
        if missing:
            raise ValueError(f"no notebook {', '.join(sorted(missing))} in {directory}")
        found = [p for p in found if p.stem in wanted]
    else:
        found = [p for p in found if in_report(p)]
    return sorted(found, key=lambda p: (p.stem != "index", p.stem))


@contextlib.contextmanager
def kernel_env(store: str | Path | None = None, root: str | Path | None = None):
    """Within: the ``python3`` kernel runs ``sys.executable`` (a temporary kernelspec first on
    ``JUPYTER_PATH``); when given, ``WORKBENCH_STORE`` points kernels at ``store`` and ``root``
    (a checkout holding ``kernels/`` and ``widgets/``) goes first on the kernels' ``PYTHONPATH``,
    so notebooks import the code they sit beside."""
    saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "WORKBENCH_STORE", "PYTHONPATH")}
    with tempfile.TemporaryDirectory(prefix="wb-kernels-") as tmp:
        spec_dir = Path(tmp) / "kernels" / KERNEL_NAME
        spec_dir.mkdir(parents=True)
        (spec_dir / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "Python 3 (ipykernel)",  # as ipykernel names it: saving keeps the committed metadata
                    "language": "python",
                }
            )
        )
        os.environ["JUPYTER_PATH"] = os.pathsep.join([tmp] + ([saved["JUPYTER_PATH"]] if saved["JUPYTER_PATH"] else []))
        if store is not None:
            os.environ["WORKBENCH_STORE"] = str(store)
        if root is not None and (Path(root) / "kernels").is_dir():
            os.environ["PYTHONPATH"] = os.pathsep.join(
                [str(Path(root).resolve())] + ([saved["PYTHONPATH"]] if saved["PYTHONPATH"] else [])
            )
        try:
            yield tmp
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def execute_notebook(
    path: Path,
    out_path: Path,
    parameters: dict,
    *,
    timeout: int | None = 1200,
    cwd: Path | None = None,
) -> None:
    """Run one notebook headless with papermill (call inside :func:`kernel_env`); raises
    ``papermill.PapermillExecutionError`` when a cell fails. The executed notebook is written
    either way."""
    import papermill as pm

    out_path.parent.mkdir(parents=True, exist_ok=True)
    pm.execute_notebook(
        str(path),
        str(out_path),
        parameters=parameters,
        kernel_name=KERNEL_NAME,
        cwd=str(cwd or path.parent),
        progress_bar=False,
        log_output=False,
        execution_timeout=timeout,
    )


PLOTLY_FILE = "plotly.min.js"  # a report of several pages keeps one copy of plotly.js beside them


def write_plotly_js(folder: Path) -> str:
    """Write plotly.js into ``folder`` (:data:`PLOTLY_FILE`) for pages that load it from there; returns its name."""
    from plotly.offline import get_plotlyjs

    (Path(folder) / PLOTLY_FILE).write_text(get_plotlyjs(), encoding="utf-8")
    return PLOTLY_FILE


def notebook_to_html(
    nb_path: Path,
    html_path: Path,
    *,
    show_code: bool = False,
    title: str | None = None,
    scrub: bool = True,
    plotly_src: str | None = None,
) -> Path:
    """Executed notebook -> HTML that opens offline (no CDN scripts): plotly.js embedded in the
    page, or, with ``plotly_src``, loaded from that file beside it (:func:`write_plotly_js`:
    a report of six pages then holds one 4.6 MB copy instead of six).

    A reader's page by default: no code cells, no ``In [ ]`` prompts, the parameters cells left out
    (``show_code=True`` keeps the code), and no path of this machine in the text (:func:`scrub_paths`)."""
    import nbformat
    import plotly
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    from plotly.offline import get_plotlyjs

    nb = nbformat.read(str(nb_path), as_version=4)
    nb.metadata.pop("widgets", None)  # widget state would pull the widget manager from a CDN
    nb.metadata.pop("papermill", None)  # its parameters name this machine's paths
    if title:
        nb.metadata["title"] = title  # the page's <title>
    if not show_code:
        hidden = {"parameters", "injected-parameters"}
        nb.cells = [c for c in nb.cells if not hidden & set(c.get("metadata", {}).get("tags", []))]
    for cell in nb.cells:  # MathJax is left out (a CDN script): formulas go as MathML instead
        if cell.cell_type == "markdown":
            cell.source = markdown_with_mathml(cell.source)
    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"workbench.html.j2": TEMPLATE})],
        exclude_input=not show_code,
        exclude_input_prompt=not show_code,
        exclude_output_prompt=not show_code,
    )
    exporter.template_file = "workbench.html.j2"
    body, _ = exporter.from_notebook_node(
        nb,
        resources={
            "plotly_src": plotly_src,
            "plotly_js": "" if plotly_src else get_plotlyjs(),
            "plotly_version": plotly.__version__,
            "metadata": {"name": title or nb_path.stem},
        },
    )
    if scrub:
        body = scrub_paths(body, [Path(html_path).parent])
    html_path.write_text(body, encoding="utf-8")
    return html_path


def render_notebook_report(
    notebook: str | Path,
    out_dir: str | Path,
    parameters: dict | None = None,
    *,
    html_name: str = "report.html",
    show_code: bool = False,
    title: str | None = None,
    timeout: int | None = 600,
) -> Path:
    """A reader's report from a notebook: execute ``notebook`` headless in ``out_dir`` (its working
    folder, so the files it reads and writes are named relative to it: pass ``"."`` rather than a
    path), save the executed copy there under the notebook's name and export ``html_name`` (code
    hidden unless ``show_code``, no local paths). The suite report is this with
    ``notebooks/suite.ipynb``; a sweep report can be the same with its own notebook, which writes its
    ``summary.md`` with :func:`workbench.reader.write_summary`."""
    out = Path(out_dir).resolve()
    nb = Path(notebook)
    executed = out / nb.name
    with kernel_env(root=repo_root()):
        execute_notebook(nb, executed, dict(parameters or {}), timeout=timeout, cwd=out)
    _scrub_notebook(executed, out)
    return notebook_to_html(executed, out / html_name, show_code=show_code, title=title)


def _scrub_notebook(path: Path, out: Path) -> None:
    """The executed notebook kept beside a report names no local path either."""
    text = path.read_text(encoding="utf-8")
    clean = scrub_paths(text, [out])
    if clean != text:
        path.write_text(clean, encoding="utf-8")


def environment(device: str = "auto") -> dict:
    """Device name and driver, versions, commit, date: the report's environment block."""
    import torch
    import triton

    from workbench.provenance import code_version

    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": getattr(triton, "__version__", "?"),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "git_commit": code_version() or "(not a git checkout)",
    }
    try:
        from workbench.device import get_device

        dev = get_device(device)
        env.update({k: v for k, v in dev.describe().items()})
    except Exception as exc:
        env["device_error"] = str(exc)
    try:
        import plotly

        env["plotly"] = plotly.__version__
    except ImportError:
        pass
    return env


def _records_summary(json_path: Path) -> dict:
    if not json_path.exists():
        return {}
    rows = json.loads(json_path.read_text())
    return {
        "records": len(rows),
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
) -> dict:
    """Execute the notebooks and write the report; returns {"index", "results", "ok"}.

    ``jobs > 1`` runs that many notebooks at once (each in its own kernel): faster, but their
    timings disturb each other, so keep 1 for reports whose numbers matter."""
    from workbench.store import write_csv

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    notebooks_dir = Path(notebooks_dir or default_notebooks_dir()).resolve()
    paths = find_notebooks(notebooks_dir, only)
    if not paths:
        raise ValueError(f"no notebooks in {notebooks_dir}")
    paths = _prebuild_first(paths, device, log)
    # quick=None lets each notebook choose: small sizes on the CPU interpreter, full sizes on a device.
    params = {"device": device, "quick": True if quick else None, "headless": True, "out_dir": str(out)}
    plotly_src = write_plotly_js(out)
    run_one = lambda p: _run_one(p, out, params, timeout, notebooks_dir, log, show_code, plotly_src)  # noqa: E731
    if dtype:
        params["dtype"] = dtype
    store = os.environ.get("WORKBENCH_STORE") or str(out / "workbench.sqlite")
    with kernel_env(store, root=notebooks_dir.parent):
        if jobs > 1 and len(paths) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=jobs) as pool:
                results = list(pool.map(run_one, paths))
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


def _prebuild_first(paths: list[Path], device: str, log) -> list[Path]:
    """Start the one-off builds of every family with a notebook here (a peer's compiles, in
    background processes: ``KernelSpec.start_prebuilds``) and put those families' notebooks
    last, so the builds run while the other notebooks do; the order is otherwise kept."""
    import kernels
    from workbench.device import get_device

    kind = get_device(device).kind
    building = set()
    for path in paths:
        if path.stem in kernels.families() and kernels.get(path.stem).start_prebuilds(kind):
            building.add(path.stem)
    if building:
        log(f"report: building {', '.join(sorted(building))}'s peers in the background; their notebooks run last")
    return sorted(paths, key=lambda p: p.stem in building)


def _run_one(
    path: Path,
    out: Path,
    params: dict,
    timeout,
    notebooks_dir: Path,
    log,
    show_code: bool = False,
    plotly_src: str | None = None,
) -> dict:
    """Execute one notebook, export its HTML, summarise its records; never raises."""
    executed = out / path.name
    t0 = time.perf_counter()
    error = None
    try:
        execute_notebook(path, executed, params, timeout=timeout, cwd=notebooks_dir)
    except Exception as exc:  # a failing notebook is reported, the others still run
        error = _error_text(exc)
    seconds = time.perf_counter() - t0
    html_name = None
    if executed.exists():
        try:
            _scrub_notebook(executed, out)
            page = notebook_to_html(executed, out / html_name_for(path), show_code=show_code, plotly_src=plotly_src)
            html_name = page.name
        except Exception as exc:
            error = (error + "\n" if error else "") + f"HTML export failed: {exc}"
    summary = _records_summary(out / f"{path.stem}_records.json")
    slowest = slowest_cells(executed) if executed.exists() else []
    where = "; ".join(f"{c['seconds']:.0f} s {c['cell']}" for c in slowest)
    log(
        f"{path.name}: {'ok' if error is None else 'FAILED'} in {seconds:.1f} s"
        + (f" (slowest: {where})" if where else "")
    )
    return {
        "slowest": slowest,
        "notebook": path.name,
        "ok": error is None,
        "error": error,
        "seconds": round(seconds, 1),
        "html": html_name,
        "executed": path.name if executed.exists() else None,
        "csv": f"{path.stem}_records.csv" if (out / f"{path.stem}_records.csv").exists() else None,
        "json": f"{path.stem}_records.json" if (out / f"{path.stem}_records.json").exists() else None,
        **summary,
    }


def slowest_cells(executed: Path, n: int = 3) -> list[dict]:
    """Where a notebook's time went: its ``n`` slowest code cells as papermill timed them
    (``metadata.papermill.duration``), each {"cell": "#<index> <first line>", "seconds"}."""
    try:
        cells = json.loads(Path(executed).read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
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
    from workbench import reader

    rows = [
        {
            "notebook": r["notebook"],
            "status": "ok" if r["ok"] else "**FAILED**",
            "records": r.get("records", "-"),
            "passed": r.get("passed", "-"),
            "wrong": r.get("wrong", "-"),
            "could not run": r.get("errors", "-"),
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
            rows, ["notebook", "status", "time", "records", "passed", "wrong", "could not run", "slowest cells", "page"]
        ),
        figures=None,
        figures_note="the figures are in each notebook's page",
        html_name="index.html",
    )


def _index_html(results: list[dict], env: dict, params: dict, records: list[dict] | None = None) -> str:
    from workbench import reader

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
<script type="text/javascript" src="{PLOTLY_FILE}"></script>
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


def report_main(argv) -> int:
    """``workbench report``: run the notebooks into a report (``--out``), or, given a run's folder,
    re-render its report from its files (``workbench report DIR``) or gate it (``--check``)."""
    from workbench import gate
    from workbench.cli import Parser, check_output_path

    parser = Parser(prog="workbench report", description=__doc__.split("\n\n")[1])
    parser.add_argument(
        "dir",
        nargs="?",
        default=None,
        help="a run's folder (a suite run, or notebook records): re-render its report, or with --check gate it",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 on a wrong result (and, with --baseline, a regression)"
    )
    parser.add_argument("--baseline", default=None, help="an earlier run's folder to compare each cell of ours with")
    parser.add_argument(
        "--fail-on-regression",
        type=float,
        default=None,
        metavar="PCT",
        help="fail when a cell is slower than --baseline by more than PCT percent beyond the noise interval",
    )
    parser.add_argument("--show-code", action="store_true", help="keep the notebooks' code in the HTML pages")
    parser.add_argument("--device", default="auto", help="auto | cuda | npu | cpu (passed to every notebook)")
    parser.add_argument("--quick", action="store_true", help="small problem sizes and sweeps (CPU interpreter)")
    parser.add_argument("--out", default=None, help="output directory of a notebook run (default reports/latest)")
    parser.add_argument("--dtype", default=None, help="override every notebook's dtype parameter")
    parser.add_argument("--notebooks", default=None, help="notebooks directory (default ./notebooks)")
    parser.add_argument("--only", default="", help="comma list of notebook names to run (default: all)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at once (default 1: timings undisturbed)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: give 1 or more notebooks at once")
    if args.timeout < 1:
        raise ValueError(f"--timeout {args.timeout}: give a number of seconds of 1 or more")
    pct = gate.check_pct(args.fail_on_regression, args.baseline is not None)
    baseline = gate.load_records(args.baseline, "--baseline") if args.baseline else None
    if args.dir is not None:
        if args.out is not None:
            raise ValueError(
                "give either a run's folder DIR (re-render or --check it) or --out DIR (run the notebooks), not both"
            )
        folder = Path(args.dir)
        records = gate.load_records(folder, "workbench report")
        if args.check or baseline is not None:
            result = _gate(folder, records, baseline, pct, args.baseline)
            if args.check:
                return 0 if result.ok else 1
        if not (folder / "suite.json").exists():
            raise ValueError(
                f"{folder} is not a suite run (no suite.json): only a suite's report re-renders from its files; "
                "run the notebooks again with `workbench report --out DIR`, or gate this folder with --check"
            )
        reason = html_unavailable_reason()
        if reason:
            raise ValueError(f"cannot render report.html: {reason}")
        path = render_suite_report(folder, show_code=args.show_code)
        print(f"report: {path} and {path.parent / 'summary.md'}")
        return 0
    only = [t.strip() for t in args.only.split(",") if t.strip()] or None
    from workbench.device import get_device

    get_device(args.device)  # a device that is not here: say so once, before any notebook runs
    out = Path(args.out or "reports/latest")
    check_output_path(out, "--out", folder=True)
    result = build_report(
        out,
        device=args.device,
        quick=args.quick,
        dtype=args.dtype,
        notebooks_dir=Path(args.notebooks) if args.notebooks else None,
        only=only,
        timeout=args.timeout,
        jobs=args.jobs,
        show_code=args.show_code,
    )
    status = 0 if result["ok"] else 1
    if args.check or baseline is not None:
        verdict = _gate(out, gate.load_records(out, "--out"), baseline, pct, args.baseline)
        if args.check and not verdict.ok:
            status = 1
    return status


def _gate(folder: Path, records: list[dict], baseline, pct, baseline_dir):
    """Check ``folder``'s records (and compare them with ``baseline``); print the verdict."""
    from workbench import gate

    result = gate.check(
        records,
        baseline,
        pct,
        failures=gate.load_failures(folder),
        baseline_name=scrub_paths(str(baseline_dir)) if baseline_dir else None,
    )
    if baseline is not None:
        print(result.table() or "no cell of ours in common with the baseline")
        gate.write(result, folder)
    print(result.message())
    return result


def lab_main(argv) -> int:
    """Open JupyterLab on notebooks/ (kernels run this interpreter; records go to results/; a save
    that changed only a notebook's outputs leaves ``git status`` clean)."""
    from workbench.cli import Parser

    parser = Parser(prog="workbench lab", description="Open JupyterLab on notebooks/ with the workbench kernel.")
    parser.add_argument("--notebooks", default=None, help="notebooks directory (default ./notebooks)")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    args, extra = parser.parse_known_args(argv)
    nb_dir = Path(args.notebooks).resolve() if args.notebooks else default_notebooks_dir().resolve()
    from workbench.notebook_git import HOOK

    # the post-save hook keeps `git status` clean when a save changed only outputs (workbench/notebook_git.py)
    cmd = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={nb_dir}", f"--ContentsManager.post_save_hook={HOOK}"]
    if args.port:
        cmd.append(f"--port={args.port}")
    if args.no_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    cmd += extra
    store = os.environ.get("WORKBENCH_STORE") or str(nb_dir.parent / "results" / "workbench.sqlite")
    if args.dry_run:
        print(" ".join(cmd))
        print(f"WORKBENCH_STORE={store}")
        return 0
    if shutil.which("jupyter") is None and not _has_module("jupyterlab"):
        print("workbench lab: jupyterlab is not installed (pip install jupyterlab)", file=sys.stderr)
        return 2
    with kernel_env(store, root=nb_dir.parent):
        return subprocess.call(cmd)


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


SUITE_NOTEBOOK = "suite.ipynb"


# --- the suite report (notebooks/suite.ipynb on a suite run's files) -----------------------------------------------------------------------------
def html_unavailable_reason() -> str | None:
    """None when papermill, nbconvert and ipykernel are importable; else what is missing."""
    missing = [m for m in ("papermill", "nbconvert", "nbformat", "ipykernel") if importlib.util.find_spec(m) is None]
    return f"{', '.join(missing)} not installed (pip install {' '.join(missing)})" if missing else None


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
        title = json.loads((out / "suite.json").read_text()).get("suite")
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
