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
loaded from CDNs) are left out, so the report opens offline.

Notebooks run on the Python interpreter running this command: the ``python3`` kernel name is
pointed at ``sys.executable`` through a temporary kernelspec on ``JUPYTER_PATH``.

Why one long module: running notebooks headless, exporting them offline and the index page share
one kernel environment and one HTML template.
"""

from __future__ import annotations

import argparse
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

KERNEL_NAME = "python3"

# Extends nbconvert's lab template; every block that would load a script from a CDN is
# replaced: plotly.js goes inline (once), the rest is dropped.
TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}
<script type="text/javascript">/* plotly.js {{ resources.plotly_version }}, embedded for offline use */
{{ resources.plotly_js }}
</script>
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
                    "display_name": "Python 3 (workbench)",
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


def notebook_to_html(nb_path: Path, html_path: Path) -> Path:
    """Executed notebook -> self-contained HTML (plotly.js inline, no CDN scripts)."""
    import nbformat
    import plotly
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    from plotly.offline import get_plotlyjs

    nb = nbformat.read(str(nb_path), as_version=4)
    nb.metadata.pop("widgets", None)  # widget state would pull the widget manager from a CDN
    exporter = HTMLExporter(extra_loaders=[DictLoader({"workbench.html.j2": TEMPLATE})])
    exporter.template_file = "workbench.html.j2"
    body, _ = exporter.from_notebook_node(
        nb,
        resources={
            "plotly_js": get_plotlyjs(),
            "plotly_version": plotly.__version__,
            "metadata": {"name": nb_path.stem},
        },
    )
    html_path.write_text(body, encoding="utf-8")
    return html_path


def environment(device: str = "auto") -> dict:
    """Device name and driver, versions, commit, date: the report's environment block."""
    import torch
    import triton

    from workbench.measure import git_commit

    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": getattr(triton, "__version__", "?"),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "git_commit": git_commit() or "(not a git checkout)",
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
    params = {"device": device, "quick": bool(quick), "headless": True, "out_dir": str(out)}
    if dtype:
        params["dtype"] = dtype
    store = os.environ.get("WORKBENCH_STORE") or str(out / "workbench.sqlite")
    with kernel_env(store, root=notebooks_dir.parent):
        if jobs > 1 and len(paths) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=jobs) as pool:
                results = list(pool.map(lambda p: _run_one(p, out, params, timeout, notebooks_dir, log), paths))
        else:
            results = [_run_one(p, out, params, timeout, notebooks_dir, log) for p in paths]
    all_rows = []
    for r in results:
        all_rows.extend(r.pop("rows", []))
    write_csv(all_rows, out / "all_records.csv")
    env = environment(device)
    (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
    index = out / "index.html"
    index.write_text(_index_html(results, env, params), encoding="utf-8")
    ok = all(r["ok"] for r in results)
    log(f"report: {index} ({sum(r['ok'] for r in results)}/{len(results)} notebooks ok)")
    return {"index": index, "results": results, "ok": ok}


def _run_one(path: Path, out: Path, params: dict, timeout, notebooks_dir: Path, log) -> dict:
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
            html_name = notebook_to_html(executed, out / html_name_for(path)).name
        except Exception as exc:
            error = (error + "\n" if error else "") + f"HTML export failed: {exc}"
    summary = _records_summary(out / f"{path.stem}_records.json")
    log(f"{path.name}: {'ok' if error is None else 'FAILED'} in {seconds:.1f} s")
    return {
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


def html_name_for(path: Path) -> str:
    """``<stem>.html``; the index notebook becomes ``index_notebook.html`` (index.html is the report's)."""
    return "index_notebook.html" if path.stem == "index" else f"{path.stem}.html"


def _error_text(exc: BaseException) -> str:
    name = getattr(exc, "ename", None) or type(exc).__name__
    value = getattr(exc, "evalue", None) or str(exc)
    return f"{name}: {value}"[:4000]


def _index_html(results: list[dict], env: dict, params: dict) -> str:
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
        rows.append(
            "<tr>"
            f"<td>{link(r['html'], r['notebook'])}</td><td>{status}{err}</td><td>{r['seconds']} s</td>"
            f"<td>{r.get('records', '-')}</td><td>{checks}</td>"
            f"<td>{link(r['executed'], 'ipynb')} {link(r['csv'], 'csv')} {link(r['json'], 'json')}</td>"
            "</tr>"
        )
    env_rows = "".join(f"<tr><th>{esc(str(k))}</th><td>{esc(str(v))}</td></tr>" for k, v in env.items())
    param_text = ", ".join(f"{k}={v!r}" for k, v in params.items() if k != "out_dir")
    timing = (
        "<p><i>On the CPU, Triton kernels run in the Triton interpreter: times are interpreter wall times, "
        "not device times, and are never comparable with them.</i></p>"
        if env.get("device_kind") == "cpu"
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Kernel Workbench report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }}
</style></head>
<body>
<h1>Kernel Workbench report</h1>
<p>Notebooks executed headless with papermill ({esc(param_text)}).
All records: <a href="all_records.csv">all_records.csv</a>.</p>
{timing}
<h2>Notebooks</h2>
<table><tr><th>notebook</th><th>status</th><th>time</th><th>records</th><th>checks</th><th>files</th></tr>
{"".join(rows)}
</table>
<h2>Environment</h2>
<table class="environment">{env_rows}</table>
</body></html>
"""


def report_main(argv) -> int:
    parser = argparse.ArgumentParser(prog="workbench report", description=__doc__.split("\n\n")[1])
    parser.add_argument("--device", default="auto", help="auto | cuda | npu | cpu (passed to every notebook)")
    parser.add_argument("--quick", action="store_true", help="small problem sizes and sweeps (CPU interpreter)")
    parser.add_argument("--out", default="reports/latest", help="output directory (default reports/latest)")
    parser.add_argument("--dtype", default=None, help="override every notebook's dtype parameter")
    parser.add_argument("--notebooks", default=None, help="notebooks directory (default ./notebooks)")
    parser.add_argument("--only", default="", help="comma list of notebook names to run (default: all)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at once (default 1: timings undisturbed)")
    args = parser.parse_args(argv)
    only = [t.strip() for t in args.only.split(",") if t.strip()] or None
    try:
        from workbench.device import get_device

        get_device(args.device)  # a device that is not here: say so once, before any notebook runs
        result = build_report(
            Path(args.out),
            device=args.device,
            quick=args.quick,
            dtype=args.dtype,
            notebooks_dir=Path(args.notebooks) if args.notebooks else None,
            only=only,
            timeout=args.timeout,
            jobs=args.jobs,
        )
    except ValueError as exc:
        print(f"workbench report: {exc}", file=sys.stderr)
        return 2
    return 0 if result["ok"] else 1


def lab_main(argv) -> int:
    """Open JupyterLab on notebooks/ (kernels run this interpreter; records go to results/)."""
    parser = argparse.ArgumentParser(
        prog="workbench lab", description="Open JupyterLab on notebooks/ with the workbench kernel."
    )
    parser.add_argument("--notebooks", default=None, help="notebooks directory (default ./notebooks)")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    args, extra = parser.parse_known_args(argv)
    nb_dir = Path(args.notebooks).resolve() if args.notebooks else default_notebooks_dir().resolve()
    cmd = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={nb_dir}"]
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


def render_suite_report(out_dir: str | Path, *, timeout: int | None = 600) -> Path:
    """Execute the suite notebook on ``out_dir``'s files; write ``suite.ipynb`` and ``report.html`` there."""
    out = Path(out_dir).resolve()
    nb = suite_notebook_path()
    executed = out / SUITE_NOTEBOOK
    with kernel_env(root=repo_root()):
        execute_notebook(nb, executed, {"records_dir": str(out)}, timeout=timeout, cwd=out)
    return notebook_to_html(executed, out / "report.html")
