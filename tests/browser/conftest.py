"""Fixtures of the browser suite: one JupyterLab server, one headless Chromium, one live notebook.

The suite needs Debian's ``chromium`` and Playwright's Python package (no Playwright browser
download). Without them every test here is skipped with the reason; with
``WORKBENCH_REQUIRE_BROWSER=1`` (CI) their absence is a failure instead.

On a failing test the page's screenshot (the window and the Explorer), the browser console log
and the tail of JupyterLab's log are written to ``results/browser/<test>/`` (or
``$WORKBENCH_BROWSER_ARTIFACTS/<test>/``) and the path is printed in the failure report.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import labkit  # noqa: E402

NOTEBOOK = labkit.REPO / "notebooks" / "rms_norm.ipynb"


def artifacts_root() -> Path:
    return Path(os.environ.get("WORKBENCH_BROWSER_ARTIFACTS") or labkit.REPO / "results" / "browser")


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab in headless Chromium (tests/browser)")


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser_pieces():
    """Skip (or, with WORKBENCH_REQUIRE_BROWSER=1, fail) when chromium or Playwright is missing."""
    missing = labkit.missing_pieces()
    if missing:
        reason = "browser suite cannot run: " + "; ".join(missing)
        if os.environ.get("WORKBENCH_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + " (WORKBENCH_REQUIRE_BROWSER=1 requires it)", pytrace=False)
        pytest.skip(reason)
    return labkit.find_chromium()


@pytest.fixture(scope="session")
def lab(browser_pieces, tmp_path_factory):
    """JupyterLab on a free localhost port, random token, temporary settings / runtime /
    workspace dirs, serving a directory that holds a copy of the notebook with CPU + quick
    parameters injected. Shut down at the end of the session, whatever happened."""
    root = tmp_path_factory.mktemp("lab")
    nb_dir = root / "notebooks"
    nb_dir.mkdir()
    out = root / "out"
    labkit.prepare_notebook(
        NOTEBOOK, nb_dir, {"device": "cpu", "dtype": "bf16", "quick": True, "headless": False, "out_dir": str(out)}
    )
    server = labkit.Lab(nb_dir, root / "server", env={"WORKBENCH_STORE": str(root / "store.sqlite")})
    try:
        server.start()
    except Exception:
        server.stop()
        raise
    yield server
    server.stop()
    assert not [p for p in server._kernel_pids if labkit._alive(p)], "a kernel outlived the server"


@pytest.fixture(scope="session")
def chromium(browser_pieces):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = labkit.launch_chromium(pw, browser_pieces)
        try:
            yield browser
        finally:
            browser.close()


def save_artifacts(page, console: list[str], lab, folder: Path) -> list[str]:
    """Screenshot of the window and of the Explorer, the browser console log and the tail of
    JupyterLab's log into ``folder``; returns what was written (or why not)."""
    saved: list[str] = []
    folder.mkdir(parents=True, exist_ok=True)
    try:
        page.screenshot(path=str(folder / "page.png"), timeout=10_000)
        saved.append(str(folder / "page.png"))
        explorer = page.locator(".wb-explorer")
        if explorer.count():
            explorer.first.screenshot(path=str(folder / "explorer.png"), timeout=10_000)
            saved.append(str(folder / "explorer.png"))
    except Exception as exc:  # the page may be gone; still write the logs
        saved.append(f"(screenshot failed: {type(exc).__name__}: {exc})")
    (folder / "console.log").write_text("\n".join(console) + "\n")
    saved.append(str(folder / "console.log"))
    (folder / "jupyterlab.log").write_text(lab.log_tail(400) + "\n")
    saved.append(str(folder / "jupyterlab.log"))
    return saved


@pytest.fixture(scope="session")
def notebook(lab, chromium):
    """The notebook open in JupyterLab and run (Run > Run All Cells) on the CPU at quick sizes."""
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    nb = labkit.NotebookPage(page, lab, NOTEBOOK.name)
    t0 = time.monotonic()
    try:
        nb.open()
        nb.kernel_pids_at_start = lab.kernel_pids()
        lab.remember_kernels()
        nb.run_all()
        nb.prompts = nb.wait_all_ran(timeout=300)
    except Exception as exc:
        saved = save_artifacts(page, nb.console, lab, artifacts_root() / "notebook-setup")
        raise RuntimeError(f"{exc}\nbrowser artifacts:\n" + "\n".join(saved)) from exc
    nb.run_s = time.monotonic() - t0
    yield nb
    try:  # a picture of the Explorer as the suite left it (kept for the record)
        root = artifacts_root()
        root.mkdir(parents=True, exist_ok=True)
        nb.page.locator(".wb-explorer").first.screenshot(path=str(root / "explorer.png"), timeout=10_000)
    except Exception:
        pass
    page.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    nb = getattr(item, "funcargs", {}).get("notebook")
    if nb is None:
        return
    saved = save_artifacts(nb.page, nb.console, nb.lab, artifacts_root() / item.name)
    text = "\n".join(saved)
    report.sections.append(("browser artifacts", text))
    print(f"\nbrowser artifacts of {item.name}:\n{text}", file=sys.stderr)
