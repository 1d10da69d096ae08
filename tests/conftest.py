"""Shared fixtures: CPU-interpreter runs by default; GPU tests are marked and skipped without CUDA."""

from __future__ import annotations

import os
import re
import time

import pytest
import torch
from testkit import interleave_long_tests

RAY_MODULES = ("tests/test_sweep.py", "tests/test_sweep_cluster.py")  # their Ray clusters start per module
ONE_WORKER_MODULES = {
    "tests/test_notebooks.py": "notebooks-headless",  # a module fixture runs every notebook once
    "tests/test_npu_check.py": "npu",  # the real compiles build one .npu-venv
}


def xdist_group_of(nodeid: str) -> str | None:
    """The tests that must share a worker under ``make test`` (``--dist loadgroup``): the browser
    suite (one JupyterLab, one Chromium), the modules whose module fixture is costly, and every
    test that starts a Ray cluster (two starting at once on 2 cores time out); None: any worker."""
    path, _, name = nodeid.partition("::")
    if path.startswith("tests/browser/"):
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


@pytest.hookimpl(trylast=True)  # after -m has deselected: the long tests' neighbours must be kept tests
def pytest_collection_modifyitems(config, items):
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
