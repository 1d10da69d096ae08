"""Notebooks run headless: papermill on the Python running this, in a kernel that imports this checkout.

- :func:`kernel_env` points the ``python3`` kernel name at ``sys.executable`` through a temporary
  kernelspec on ``JUPYTER_PATH`` (and, when given, the store and the checkout the kernels import);
- :func:`execute_notebook` runs one notebook through papermill; :func:`find_notebooks` lists a
  folder's notebooks (the index first; a notebook can opt out of the report in its metadata);
- :func:`render_notebook_report` turns one notebook into a reader's report: executed in the
  folder it reports on, exported offline (:mod:`workbench.reports.html`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

from workbench.provenance import ROOT
from workbench.reports.html import notebook_to_html
from workbench.reports.reader import scrub_paths
from workbench.store import open_text

KERNEL_NAME = "python3"


def repo_root() -> Path:
    """The checkout this package runs from (its notebooks/ and kernels/ beside workbench/)."""
    return ROOT


def default_notebooks_dir() -> Path:
    here = Path.cwd() / "notebooks"
    return here if here.is_dir() else repo_root() / "notebooks"


def _workbench_metadata(path: Path) -> dict:
    """The notebook's ``metadata.workbench`` ({} where it has none or cannot be read)."""
    try:
        with open_text(path) as f:
            meta = json.load(f).get("metadata", {})
    except (OSError, ValueError, EOFError):
        return {}
    return meta.get("workbench") or {}


def in_report(path: Path) -> bool:
    """False for a notebook whose metadata says ``"workbench": {"report": false}`` (e.g.
    ``suite.ipynb``, which renders the files of ``workbench bench --suite`` and takes none of the
    report's parameters)."""
    return bool(_workbench_metadata(path).get("report", True))


def records_family(path: Path) -> str:
    """The family whose ``<family>_records.json`` the notebook's ``Session.finish()`` writes: its
    metadata's ``"workbench": {"family": ...}`` (the tutorial, ``your_kernel.ipynb``, names its family),
    else the notebook's name."""
    return str(_workbench_metadata(path).get("family") or Path(path).name.split(".")[0])


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
                    # log_level ERROR: a kernel's own log goes to the console of whoever started it
                    # (`workbench report`, `workbench lab`); at WARNING ipykernel says there, for every
                    # kernel, that it runs over TCP on localhost without transport encryption
                    "argv": [
                        sys.executable,
                        "-m",
                        "ipykernel_launcher",
                        "-f",
                        "{connection_file}",
                        "--IPKernelApp.log_level=ERROR",
                    ],
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
    km=None,
) -> None:
    """Run one notebook headless with papermill (call inside :func:`kernel_env`); raises
    ``papermill.PapermillExecutionError`` when a cell fails. The executed notebook is written
    either way. ``km``: a started kernel's manager to run it in (the caller shuts it down),
    else papermill starts and stops one."""
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
        **({"km": km} if km is not None else {}),
    )


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
    ``summary.md`` with :func:`workbench.reports.reader.write_summary`."""
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


def html_unavailable_reason() -> str | None:
    """None when papermill, nbconvert, ipykernel and plotly (every report's figures) are importable;
    else what is missing."""
    needed = ("papermill", "nbconvert", "nbformat", "ipykernel", "plotly")
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    return f"{', '.join(missing)} not installed (pip install {' '.join(missing)})" if missing else None
