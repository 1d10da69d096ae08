"""MkDocs hook: every committed report (``reports/``) on the site, rendered from its records.

Before the pages are read, the reports index and a page per report join the site's files
(:func:`workbench.reports.site.page_files`); after the site is built, every run folder's pages
are rendered into ``<site>/reports/`` beside the files each report keeps, all loading the one
``plotly.min.js`` at the site's top (:func:`workbench.reports.site.build`). The site stays one
folder that opens from disk. ``WORKBENCH_DOCS_RENDER=0`` leaves the run folders unrendered (the
index and the reports' pages are still built): the docs' own build test, where the browser test
renders and opens them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mkdocs.structure.files import File


def _root(config) -> Path:
    return Path(config["config_file_path"]).resolve().parent / "reports"


def on_files(files, config):
    from workbench.reports.site import page_files

    for src, text in page_files(_root(config)).items():
        files.append(File.generated(config, src, content=text))
    return files


def on_post_build(config):
    from workbench.reports.site import build

    if os.environ.get("WORKBENCH_DOCS_RENDER") == "0":
        return
    started = time.perf_counter()
    done = build(_root(config), config["site_dir"])
    print(f"INFO    -  reports: {len(done)} run folders rendered in {time.perf_counter() - started:.1f} s")
