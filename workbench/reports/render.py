"""``workbench report --render``: a run folder's HTML pages, rebuilt from the files it keeps.

A committed report keeps its README, ``summary.md``, ``environment.json`` and its records
(gzipped where large); its pages are built, never committed. Every kind of run folder renders
here, in this process (no notebook kernel is started). A folder's kind is told by its files,
the first of :data:`KINDS` that matches:

============  ===========================================================  =====================
kind          what the folder keeps                                        page
============  ===========================================================  =====================
suite         ``suite.json``, ``records.json`` (``workbench bench     ``report.html``
              --suite``)
scaling       ``gpus<N>[-nodes<M>]/run.json`` and records                  ``report.html``
              (``benchmarks/sweep_scaling.py``)
notebooks     executed notebooks (``.ipynb``) and ``environment.json``  ``index.html`` and a
              (``workbench report --out``)                                 page per notebook
tune          ``summary.md`` titled "Tune ..." and records                 ``report.html``
              (``workbench tune``)
why           ``summary.md`` titled "Why a tile ..." and records           ``report.html``
              (``benchmarks/why_sweep.py``)
sweep         ``summary.md`` and records (``workbench sweep``)             ``report.html``
============  ===========================================================  =====================

The executed notebooks are rendered from their outputs, kept as data: running them again would
measure again, on whatever machine renders. Every page loads plotly.js from one file
(``plotly_src``); :func:`render_tree` renders a tree of reports into one folder with one copy.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from workbench.reports import reader
from workbench.reports.html import PLOTLY_FILE, write_plotly_js
from workbench.store import kept_path, read_records, records_path

# what a rendered page is named, so a tree copied beside its pages leaves them out
GENERATED = ("report.html", "index.html", "index_notebook.html", PLOTLY_FILE, "all_records.csv")


@dataclass(frozen=True)
class Kind:
    """One kind of run folder: how to tell it (``matches(folder)``) and how to render it
    (``render(folder, out, plotly_src)`` writes its pages into ``out`` and returns the first)."""

    name: str
    matches: Callable[[Path], bool]
    render: Callable[[Path, Path, str], Path]


def summary_title(folder: Path) -> str | None:
    """The title line of ``folder/summary.md`` (without its ``#``), or None."""
    path = Path(folder) / "summary.md"
    if not path.is_file():
        return None
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    return first.lstrip("#").strip() if first.startswith("#") else None


def _page(out: Path, name: str, text: str, scrub: list[Path]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(reader.scrub_paths(text, scrub), encoding="utf-8")
    return path


# --- the kinds ---------------------------------------------------------------------------------
def _is_suite(folder: Path) -> bool:
    return kept_path(folder, "suite.json") is not None


def _render_suite(folder: Path, out: Path, plotly_src: str) -> Path:
    from workbench.reports import suite

    run = suite.load(folder)
    parts = [
        p if isinstance(p, str) else p.to_html(include_plotlyjs=False, full_html=False) for p in suite.report_parts(run)
    ]
    return _page(out, "report.html", reader.page_html(suite.display_title(run), parts, plotly_src), [folder, out])


def _is_scaling(folder: Path) -> bool:
    from workbench.reports.scaling import run_folders

    return bool(run_folders(folder))


def _render_scaling(folder: Path, out: Path, plotly_src: str) -> Path:
    from workbench.reports import scaling

    return _page(out, "report.html", scaling.page(folder, plotly_src), [folder, out])


def _is_notebooks(folder: Path) -> bool:
    from workbench.reports.notebook_report import executed_notebooks

    return (folder / "environment.json").is_file() and bool(executed_notebooks(folder))


def _render_notebooks(folder: Path, out: Path, plotly_src: str) -> Path:
    from workbench.reports.notebook_report import render_folder

    return render_folder(folder, out, plotly_src)


def _has_records(folder: Path) -> bool:
    return records_path(folder) is not None


def _is_tune(folder: Path) -> bool:
    return _has_records(folder) and (summary_title(folder) or "").startswith("Tune ")


def _render_tune(folder: Path, out: Path, plotly_src: str) -> Path:
    from workbench.reports.tune import render_folder

    return render_folder(folder, out, plotly_src)


def _is_why(folder: Path) -> bool:
    return _has_records(folder) and (summary_title(folder) or "").startswith("Why a tile")


def _render_why(folder: Path, out: Path, plotly_src: str) -> Path:
    from workbench.reports import why_sweep

    records = read_records(records_path(folder))
    page = why_sweep.render(records, why_sweep.sweeps_of(records), summary_title(folder), plotly_src)
    return _page(out, "report.html", page, [folder, out])


def _is_sweep(folder: Path) -> bool:
    return _has_records(folder) and summary_title(folder) is not None


def _render_sweep(folder: Path, out: Path, plotly_src: str) -> Path:
    from workbench.reports import sweep

    records = read_records(records_path(folder))
    return _page(out, "report.html", sweep.render(records, summary_title(folder), plotly_src), [folder, out])


KINDS: tuple[Kind, ...] = (
    Kind("suite", _is_suite, _render_suite),
    Kind("scaling", _is_scaling, _render_scaling),
    Kind("notebooks", _is_notebooks, _render_notebooks),
    Kind("tune", _is_tune, _render_tune),
    Kind("why", _is_why, _render_why),
    Kind("sweep", _is_sweep, _render_sweep),
)


def kind_of(folder: str | Path) -> Kind | None:
    """The kind of run folder ``folder`` is (:data:`KINDS`), or None where it is none."""
    folder = Path(folder)
    return next((k for k in KINDS if folder.is_dir() and k.matches(folder)), None)


# --- folders and trees -------------------------------------------------------------------------
@dataclass(frozen=True)
class Rendered:
    folder: Path  # the run folder
    kind: str
    page: Path  # its first page


def find_runs(root: str | Path) -> list[tuple[Path, Kind]]:
    """Every run folder at or below ``root``, parents before their children (a suite's second run
    can sit inside the first's folder); the ``gpus<N>`` runs of a scaling comparison are its parts."""
    root = Path(root)
    found = []
    for here, dirs, _ in os.walk(root):
        dirs.sort()
        kind = kind_of(here)
        if kind is not None:
            found.append((Path(here), kind))
            if kind.name == "scaling":
                dirs[:] = [d for d in dirs if not d.startswith("gpus")]
    return found


def relative_src(page_dir: Path, plotly_file: Path) -> str:
    """The path from ``page_dir`` to ``plotly_file``, as a page's ``<script src>`` names it."""
    return Path(os.path.relpath(plotly_file, page_dir)).as_posix()


def render_folder(folder: str | Path, out: str | Path | None = None, plotly_file: Path | None = None) -> Rendered:
    """Render one run folder into ``out`` (default: the folder itself); its pages load
    ``plotly_file`` (default: ``plotly.min.js`` written into ``out``). ValueError where ``folder``
    is no kind of run folder."""
    folder = Path(folder)
    kind = kind_of(folder)
    if kind is None:
        raise ValueError(
            f"{folder} is no run folder this renders: it holds none of suite.json, gpus<N>/run.json, "
            "an executed notebook with environment.json, or records with a summary.md"
        )
    out = Path(out) if out is not None else folder
    out.mkdir(parents=True, exist_ok=True)
    if plotly_file is None:
        plotly_file = out / write_plotly_js(out)
    page = kind.render(folder, out, relative_src(out, plotly_file))
    return Rendered(folder, kind.name, page)


def render_tree(
    root: str | Path, out: str | Path | None = None, plotly_file: Path | None = None, jobs: int = 1
) -> list[Rendered]:
    """Render every run folder under ``root`` into the same place under ``out`` (default: beside
    its files), every page loading one ``plotly.min.js`` (written at ``out``'s top unless
    ``plotly_file`` names one); ``jobs`` folders at once, each in a process of its own (building
    the figures is Python-bound). ValueError where ``root`` holds no run folder."""
    root = Path(root)
    runs = find_runs(root)
    if not runs:
        raise ValueError(f"{root}: no run folder under it (see `workbench report --help` for the kinds)")
    out = Path(out) if out is not None else root
    out.mkdir(parents=True, exist_ok=True)
    if plotly_file is None:
        plotly_file = out / write_plotly_js(out)
    work = [(folder, out / folder.relative_to(root), plotly_file) for folder, _ in runs]
    if jobs <= 1 or len(work) == 1:
        return [render_folder(*args) for args in work]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: the parent may hold threads (MkDocs', torch's) that a fork would copy mid-step
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(render_folder, *zip(*work)))


def copy_kept_files(root: str | Path, out: str | Path) -> None:
    """Copy what a tree of reports keeps (READMEs, summaries, records, notebooks) under ``out``,
    so the rendered pages' links to them work where the pages are published."""
    root, out = Path(root), Path(out)
    for here, _, files in os.walk(root):
        for name in files:
            if name in GENERATED:
                continue
            src = Path(here) / name
            dst = out / src.relative_to(root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def environment_of(folder: str | Path) -> dict:
    """``environment.json`` of ``folder`` ({} where it has none or it cannot be read)."""
    try:
        return json.loads((Path(folder) / "environment.json").read_text())
    except (OSError, ValueError):
        return {}
