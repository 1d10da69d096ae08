"""Shared fixtures: CPU-interpreter runs by default; GPU tests are marked and skipped without CUDA."""

from __future__ import annotations

import importlib.util
import os
import re
import time

import pytest
import torch
from testkit import interleave_long_tests

# Modules whose tests start a Ray instance of their own or use the shared one (SHARED_RAY).
RAY_MODULES = ("tests/test_sweep.py", "tests/test_sweep_cluster.py", "tests/test_cluster_cache.py")
ONE_WORKER_MODULES = {
    "tests/test_notebooks.py": "notebooks-headless",  # a module fixture runs every notebook once
    "tests/test_npu_check.py": "npu",  # the real compiles build one .npu-venv
}


# The tests outside tests/browser that read the documentation site (the session fixture
# ``docs_site``): on the browser suite's worker, which builds it once for all of them.
DOCS_SITE_TESTS = (
    "tests/test_docs.py::test_the_docs_build_offline_with_warnings_as_errors",
    "tests/test_render_reports.py::test_every_committed_report_renders_into_a_temporary_folder",
)


def xdist_group_of(nodeid: str) -> str | None:
    """The tests that must share a worker under ``make test`` (``--dist loadgroup``): the browser
    suite (one JupyterLab, one Chromium) and the other readers of its documentation site, the
    modules whose module fixture is costly, and every test that starts a Ray cluster or uses the
    shared one (two starting at once on 2 cores time out); None: any worker."""
    path, _, name = nodeid.partition("::")
    if path.startswith("tests/browser/") or nodeid in DOCS_SITE_TESTS:
        return "browser"
    if path in ONE_WORKER_MODULES:
        return ONE_WORKER_MODULES[path]
    if path in RAY_MODULES or "ray" in re.split(r"[^a-z0-9]+", name.lower()):
        return "ray"
    return None


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the groups of :func:`xdist_group_of`, told from the test ids
    (pytest-xdist 3.8 marks a group by rewriting an item's id, which pytest 9 no longer lets it
    do): a group's tests go to one worker, every other test to whichever worker is free."""
    if config.getvalue("dist") != "loadgroup":
        return None  # e.g. gpu_run.sh's --dist load
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = xdist_group_of(nodeid)
            return f"group:{group}" if group else nodeid

    return GroupScheduling(config, log)


class _SharedRay:
    """One embedded Ray instance of 2 CPUs for the tests that ask for ``shared_ray``, started on
    first use (again if a test shut it down) and shut down once the next test does not ask for
    it. Each test starts its own executors or actors on it; starting Ray costs about 10 s of
    both cores here.

    Started as an embedded executor starts its Ray (the checkout on the workers' path, the
    preload), but with no log folder of its own for the workers (``WORKBENCH_WORKER_LOG_DIR``),
    as on a cluster: each actor sends its output where its executor or test says."""

    def __init__(self):
        self.started = False
        self.saved_env: dict = {}

    def get(self):
        ray = pytest.importorskip("ray", reason="the distributed extra (ray) is not installed")

        from workbench.children import import_path
        from workbench.sweep.ray_executor import LOG_DIR_ENV, PRELOAD_CONFIG

        if self.started and ray.is_initialized():
            return ray
        self.close()
        self.saved_env = {name: os.environ.get(name) for name in ("PYTHONPATH", LOG_DIR_ENV)}
        os.environ["PYTHONPATH"] = os.pathsep.join(import_path())
        os.environ.pop(LOG_DIR_ENV, None)
        for attempt in range(3):  # a loaded machine can miss Ray's start-up wait
            try:
                ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False,
                         _system_config=dict(PRELOAD_CONFIG))  # fmt: skip
                break
            except Exception:  # noqa: BLE001
                ray.shutdown()
                if attempt == 2:
                    raise
        self.started = True
        return ray

    def close(self):
        if not self.started:
            return
        self.started = False
        import ray

        ray.shutdown()
        for name, value in self.saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


SHARED_RAY = _SharedRay()


@pytest.fixture(scope="module")
def shared_ray():
    """``ray``, initialized: the embedded instance of 2 CPUs the "ray" group's tests share."""
    return SHARED_RAY.get()


def _uses_shared_ray(item) -> bool:
    return item is not None and "shared_ray" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down: their executors close first
def pytest_runtest_teardown(item, nextitem):
    # An idle Ray instance still costs CPU (its agents, its preloaded workers): down at once.
    if not _uses_shared_ray(nextitem):
        SHARED_RAY.close()


@pytest.hookimpl(trylast=True)  # after -m has deselected: the long tests' neighbours must be kept tests
def pytest_collection_modifyitems(config, items):
    # The tests on the shared Ray instance last, one after another: it starts once, and is up
    # while no other test runs (those that start their own Ray included).
    items.sort(key=_uses_shared_ray)
    if torch.cuda.is_available():
        items[:] = interleave_long_tests(items)
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    """With ``WORKBENCH_TEST_LOG=FILE``, one line per test phase as it ends (seconds, outcome,
    id, when it ended and on which xdist worker): a GPU test step cut short by its time limit
    still says where its time went, and the end times show each worker's timeline."""
    path = os.environ.get("WORKBENCH_TEST_LOG")
    if getattr(report, "node", None) is not None:
        return  # the xdist controller relaying a worker's report: the worker wrote the line already
    if path and (report.when == "call" or report.duration >= 1.0):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
        with open(path, "a") as log:
            log.write(
                f"{report.duration:8.2f} {report.when:8s} {report.outcome:8s} {report.nodeid} "
                f"ended={time.time():.1f} worker={worker}\n"
            )


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory):
    """The documentation site as ``make docs`` builds it, built once for the tests that read it
    (test_docs' offline build, test_render_reports' render of every committed report, the browser's
    reports site; :data:`DOCS_SITE_TESTS` keeps them on one worker): ``mkdocs build --strict``
    with the reports hook's render left out (``WORKBENCH_DOCS_RENDER=0``), then that render as
    the hook's ``on_post_build`` runs it (:func:`workbench.reports.site.build`: every run folder
    under reports/ into ``<site>/reports/``, one ``plotly.min.js`` at the site's top). Rendering
    every report is the costly part (about 45 s of a core); it used to run twice, once in the
    browser suite's build and again in test_render_reports. Returns ``(site folder, what the
    render returned)``."""
    import subprocess
    import sys
    from pathlib import Path

    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (the dev extra)")
    from workbench.reports import site as reports_site

    root = Path(__file__).resolve().parent.parent
    out = tmp_path_factory.mktemp("docs-site") / "site"
    env = {**os.environ, "PYTHONPATH": str(root), "NO_MKDOCS_2_WARNING": "1", "WORKBENCH_DOCS_RENDER": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    if done.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}", pytrace=False)
    return out, reports_site.build(root / "reports", out)


@pytest.fixture(params=["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def device(request):
    """Every test that takes ``device`` runs on the CPU interpreter and, where present, CUDA."""
    return request.param


@pytest.fixture
def store(tmp_path):
    from workbench.store import Store

    s = Store(tmp_path / "records.sqlite")
    yield s
    s.close()


@pytest.fixture
def measured_on_gpu():
    """``measured_on_gpu(family, variant, problem)``: a bf16 forward+backward record measured on
    CUDA with a short timing budget, checked to have run and passed. It tests the path on a GPU
    (records, bandwidth, memory), not the speed."""
    from workbench.measure import measure

    def run(family: str, variant: str, problem: dict):
        rec = measure(family, variant, device="cuda", dtype="bf16", mode="full", problem=problem, warmup_ms=2, rep_ms=5)
        assert rec.error is None, rec.error
        assert rec.passed, rec.checks
        return rec

    return run


@pytest.fixture
def tables(tmp_path, monkeypatch):
    """A private folder of tuned tables (``KERNELS_TUNED_DIR``) for the test, every table and answer
    read so far forgotten on the way in and out."""
    from kernels import tuned_tables

    monkeypatch.setenv("KERNELS_TUNED_DIR", str(tmp_path / "tables"))
    tuned_tables.reload()
    yield tmp_path / "tables"
    monkeypatch.delenv("KERNELS_TUNED_DIR")
    tuned_tables.reload()


@pytest.fixture
def registered():
    """``register(spec)`` registers a family for the test and unregisters it afterwards."""
    import kernels
    from kernels.spec import unregister

    names = []

    def register(spec):
        names.append(kernels.register(spec))
        return spec

    yield register
    for name in names:
        unregister(name)
