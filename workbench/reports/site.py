"""The committed reports as part of the documentation site (``make docs``; ``docs/hooks/reports.py``).

Each folder under ``reports/`` is one report: its README (what was run and what it found), and
the run folders inside it (:mod:`workbench.reports.render`). The site gets:

- ``reports/index.md``: a row per report with its device, commit and headline
  (:func:`index_markdown`);
- ``reports/<name>.md``: its README, then a link to each run folder's rendered page and to the
  files it keeps (:func:`report_markdown`);
- under ``reports/<name>/``: the rendered pages and the kept files, every page loading the one
  ``plotly.min.js`` at the site's top (:func:`build`).

Links to the rendered pages are written as HTML, not Markdown: they are files MkDocs does not
manage, and its link check would otherwise take them for missing pages.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

from workbench.reports import render
from workbench.reports.html import write_plotly_js
from workbench.reports.scaling import run_folders
from workbench.store import read_records, records_path

INDEX = "reports/index.md"
_SHOWN_AT_MOST = 3  # devices or commits named in the index before "and N more"


def report_dirs(root: str | Path) -> list[Path]:
    """The reports under ``root``: its folders, by name."""
    return sorted(d for d in Path(root).iterdir() if d.is_dir())


def _readme(report: Path) -> str:
    path = report / "README.md"
    return path.read_text(encoding="utf-8") if path.is_file() else f"# reports/{report.name}\n\n(no README)\n"


_RELATIVE_LINK = re.compile(r"\]\((?!https?:|#|/)([^)\s]+)\)")


def _site_links(report: Path, text: str) -> str:
    """The README's relative links as the site needs them: the README sits in ``reports/<name>/``
    but its page is ``reports/<name>.md`` in a site whose root is ``docs/``. A link to a page in
    ``docs/`` points to that page; one to a file inside the report points into ``<name>/``."""

    def fix(match: re.Match) -> str:
        target = match[1]
        path, _, anchor = target.partition("#")
        repo_path = os.path.normpath(os.path.join("reports", report.name, path)).replace(os.sep, "/")
        if repo_path.startswith("docs/"):
            site_path = os.path.relpath(repo_path[len("docs/") :], "reports")
        elif repo_path.startswith(f"reports/{report.name}/"):
            site_path = repo_path[len("reports/") :]
        else:
            return match[0]
        return f"]({site_path}{'#' + anchor if anchor else ''})"

    return _RELATIVE_LINK.sub(fix, text)


def _title(report: Path) -> str:
    first = _readme(report).split("\n", 1)[0].lstrip("# ").strip()
    prefix = f"reports/{report.name}:"
    return first[len(prefix) :].strip() if first.startswith(prefix) else first


def _headline(report: Path) -> str:
    """The report's one line: where ours stands (its summary's verdict line) or, without one, the
    README's title."""
    summary = report / "summary.md"
    if summary.is_file():
        for line in summary.read_text(encoding="utf-8").splitlines():
            text = line.lstrip("- ").strip()
            if text.startswith(("Ours against", "Correctness:")):
                return text
    return _title(report)


def _facts(report: Path) -> tuple[list[str], list[str]]:
    """(devices, commits) the report's runs name: each run's environment.json, else its first record."""
    devices, commits = [], []

    def add(device, commit):
        if device and device not in devices:
            devices.append(str(device))
        if commit and commit not in commits:
            commits.append(str(commit))

    folders = [folder for folder, _ in render.find_runs(report)] or [report]
    for folder in folders:
        env = render.environment_of(folder)
        if env.get("device_name"):
            add(env.get("device_name"), env.get("git_commit"))
            continue
        for where in list(run_folders(folder).values()) or [folder]:
            source = records_path(where)
            if source is None:
                continue
            try:
                first = next(iter(read_records(source)), {})
            except ValueError:
                continue
            add(first.get("device_name"), first.get("commit"))
    if not devices and not commits:  # a report of notes and data only: what its README says
        text = _readme(report)
        device = re.search(r"\b(?:NVIDIA )?(H100|H200)\b", text)
        commit = re.search(r"\b(?:commit|at) ([0-9a-f]{7,40})\b", text)
        add(device and f"{device[1]} (README)", commit and f"{commit[1]} (README)")
    return devices, commits


def _some(items: list[str]) -> str:
    if not items:
        return "-"
    shown = ", ".join(items[:_SHOWN_AT_MOST])
    return shown + (f" and {len(items) - _SHOWN_AT_MOST} more" if len(items) > _SHOWN_AT_MOST else "")


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def index_markdown(root: str | Path) -> str:
    """The reports index: a row per report (its page, device, commit, headline)."""
    rows = []
    for report in report_dirs(root):
        devices, commits = _facts(report)
        rows.append(
            f"| [{report.name}]({report.name}.md) | {_cell(_some(devices))} | {_cell(_some(commits))} | "
            f"{_cell(_headline(report))} |"
        )
    return "\n".join(
        [
            "# Reports",
            "",
            "Every report committed under `reports/`, rendered from the records it keeps "
            "(`workbench report --render`). Each page opens with the report's README, then links "
            "its runs' pages (interactive figures; they open from disk, offline) and its files.",
            "",
            "| report | device | commit | headline |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


def report_markdown(report: Path) -> str:
    """A report's page: its README, then its runs' rendered pages and the files it keeps."""
    lines = [_site_links(report, _readme(report)).rstrip(), "", "## Pages", ""]
    runs = render.find_runs(report)
    if not runs:
        lines.append("This report keeps data and notes only: no run folder to render.")
    for folder, kind in runs:
        rel = folder.relative_to(report.parent).as_posix()
        page = "index.html" if kind.name == "notebooks" else "report.html"
        name = folder.relative_to(report).as_posix()
        label = html.escape(report.name if name == "." else f"{report.name}/{name}")
        lines.append(f'- <a href="{html.escape(rel)}/{page}">{label}</a> ({kind.name})')
    lines += ["", "## Files", ""]
    for path in sorted(p for p in report.rglob("*") if p.is_file() and p.name not in render.GENERATED):
        rel = path.relative_to(report.parent).as_posix()
        lines.append(f'- <a href="{html.escape(rel)}">{html.escape(path.relative_to(report).as_posix())}</a>')
    return "\n".join(lines) + "\n"


def build(root: str | Path, site_dir: str | Path) -> list[render.Rendered]:
    """Render every run folder under ``root`` into ``site_dir/reports/`` beside a copy of the files
    each report keeps, as many folders at once as there are CPUs (up to four); one
    ``plotly.min.js`` at ``site_dir``'s top serves every page."""
    site_dir = Path(site_dir)
    out = site_dir / "reports"
    plotly_file = site_dir / write_plotly_js(site_dir)
    render.copy_kept_files(root, out)
    return render.render_tree(root, out, plotly_file, jobs=min(4, os.cpu_count() or 1))


def page_files(root: str | Path) -> dict[str, str]:
    """src path -> Markdown of every page the reports add to the site (the index first)."""
    pages = {INDEX: index_markdown(root)}
    for report in report_dirs(root):
        pages[f"reports/{report.name}.md"] = report_markdown(report)
    return pages
