"""Fixtures of the browser suite: a throwaway checkout, one JupyterLab server on its notebooks, one
headless Chromium; the RMSNorm notebook run there at its defaults (Run All, Save) and kept open
for the Explorer tests, and (``make test-notebooks``) every other notebook the same way.

The suite needs Debian's ``chromium`` and Playwright's Python package (no Playwright browser
download). Without them every test here is skipped with the reason; with
``WORKBENCH_REQUIRE_BROWSER=1`` (CI) their absence is a failure instead.

On a failing test the page's screenshot (the window and the Explorer), the browser console log
and the tail of JupyterLab's log are written to ``results/browser/<test>/`` (or
``$WORKBENCH_BROWSER_ARTIFACTS/<test>/``) and the path is printed in the failure report.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import labkit  # noqa: E402
import testkit  # noqa: E402

EXPLORER_NOTEBOOK = "rms_norm.ipynb"  # the notebook whose live Explorer the tests drive
WIDTH = 1280  # px: the window the layout targets name
RUN_ALL_TIMEOUT = 240  # s for one notebook's Run All (each takes well under 90 s here)
SLOW_GIT_S = 3  # s the lab's git holds its index lock per add (testkit.slow_git)


class _Pieces:
    """What the browser suite holds open (JupyterLab, Chromium and Playwright, the RMSNorm page),
    closed when this worker's last browser test is done (:func:`pytest_runtest_teardown`) rather
    than at the session's end. Why: Playwright's sync API keeps an asyncio event loop marked as
    running on the main thread while it is open; under ``make test`` other tests follow on the
    same worker, and one that runs its own loop (``asyncio.run``) would be refused."""

    def __init__(self):
        self.stack = contextlib.ExitStack()
        self.closed = False

    def hold(self, close):
        if self.closed:
            pytest.fail("the browser suite's lab and browser were closed: its tests must run one after another")
        self.stack.callback(close)

    def close(self):
        self.closed = True
        self.stack.close()


_PIECES = _Pieces()


def _is_browser(item) -> bool:
    return item is not None and item.get_closest_marker("browser") is not None


def pytest_runtest_teardown(item, nextitem):
    if _is_browser(item) and not _is_browser(nextitem):
        _PIECES.close()


def pytest_sessionfinish(session):
    _PIECES.close()


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
def checkout(browser_pieces, tmp_path_factory):
    """A throwaway git checkout of this working tree (tracked and untracked-but-not-ignored
    files, committed once) with the notebook filter configured by ``make notebook-filter``, as
    ``make lab`` does: the notebooks run there, so whatever a run writes lands in that tree and
    ``git status`` there says whether running and saving them leaves a checkout clean."""
    return labkit.copy_checkout(tmp_path_factory.mktemp("checkout"))


@pytest.fixture(scope="session")
def lab(checkout):
    """JupyterLab on a free localhost port, random token, temporary settings / runtime /
    workspace dirs, serving the checkout copy's notebooks/ with their kernels importing that
    copy (so the default store and records go to its results/). Shut down at the end of the
    session, whatever happened."""
    # a slow git first on the lab's PATH: a save must neither wait for it nor leave its lock behind
    slow = testkit.slow_git(checkout.parent / "slow-git", SLOW_GIT_S)
    env = {"PYTHONPATH": str(checkout), "PATH": f"{slow}{os.pathsep}{os.environ['PATH']}"}
    server = labkit.Lab(checkout / "notebooks", checkout.parent / "server", env=env)
    try:
        server.start()
    except Exception:
        server.stop()
        raise

    def stop():
        server.stop()
        assert not [p for p in server._kernel_pids if labkit._alive(p)], "a kernel outlived the server"

    _PIECES.hold(stop)
    return server


@pytest.fixture(scope="session")
def chromium(browser_pieces):
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    _PIECES.hold(pw.stop)
    browser = labkit.launch_chromium(pw, browser_pieces)
    _PIECES.hold(browser.close)
    return browser


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
    """The RMSNorm notebook opened in JupyterLab at its defaults, Run > Run All Cells, then File >
    Save, as a person would; its page is kept open with the Explorer live for the Explorer tests
    (``run`` holds what Run All saw, ``prompts`` its cells' prompts)."""
    page = chromium.new_page(viewport={"width": WIDTH, "height": 1000})
    _PIECES.hold(page.close)
    nb = labkit.NotebookPage(page, lab, EXPLORER_NOTEBOOK)
    try:
        nb.run = nb.run_all_and_save(timeout=RUN_ALL_TIMEOUT)
    except Exception as exc:
        saved = save_artifacts(page, nb.console, lab, artifacts_root() / "run-all-rms_norm")
        raise RuntimeError(f"{EXPLORER_NOTEBOOK}: {exc}\nbrowser artifacts:\n" + "\n".join(saved)) from exc
    nb.prompts = nb.run.prompts
    nb.kernel_pids_at_start = lab.kernel_pids()
    return nb


@pytest.fixture(scope="session")
def run_all(notebook, lab, chromium, checkout):
    """Every notebook opened in JupyterLab at its defaults (no parameter injected: on this CPU
    machine that is the interpreter at small sizes), Run > Run All Cells, then File > Save twice,
    one after another as a person would (the RMSNorm one by the ``notebook`` fixture, whose page
    stays open). Returns {"runs": {name: labkit.RunAll}, "git_status" (once the save hook's git
    is done), "index_lock_left", "version"}. The other notebooks' kernels are shut down once they
    have run. ``make test-notebooks`` runs the tests that use it."""
    runs: dict[str, labkit.RunAll] = {EXPLORER_NOTEBOOK: notebook.run}
    for path in labkit.notebooks_of(checkout):
        if path.name == EXPLORER_NOTEBOOK:
            continue
        page = chromium.new_page(viewport={"width": WIDTH, "height": 1000})
        nb = labkit.NotebookPage(page, lab, path.name)
        try:
            runs[path.name] = nb.run_all_and_save(timeout=RUN_ALL_TIMEOUT)
        except Exception as exc:
            saved = save_artifacts(page, nb.console, lab, artifacts_root() / f"run-all-{path.stem}")
            raise RuntimeError(f"{path.name}: {exc}\nbrowser artifacts:\n" + "\n".join(saved)) from exc
        lab.shutdown_kernel_of(path.name)
        page.close()
    times = {name: round(r.seconds, 1) for name, r in runs.items()}
    root = artifacts_root()
    root.mkdir(parents=True, exist_ok=True)
    (root / "run_all_times.json").write_text(json.dumps(times, indent=1) + "\n")
    print(f"\nRun All at the defaults in JupyterLab, seconds: {times} (total {sum(times.values()):.1f})")
    saves = {name: [round(t, 2) for t in r.save_seconds] for name, r in runs.items()}
    print(f"File > Save, seconds from the click to a clean tab: {saves}")
    status = labkit.settled_git_status(checkout)  # the save hook's git runs in the server's background
    return {
        "runs": runs,
        "git_status": status,
        "index_lock_left": (checkout / ".git" / "index.lock").exists(),
        "version": labkit.code_version_of(checkout),
    }


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
