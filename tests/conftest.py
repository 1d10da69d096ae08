"""Shared fixtures: CPU-interpreter runs by default; GPU tests are marked and skipped without CUDA."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
import torch
from testkit import interleave_long_tests


def xdist_group_of(item) -> str | None:
    """The worker group a test must share (``make test`` runs ``--dist loadgroup``): the browser
    suite (one JupyterLab, one Chromium), the headless notebook runs (a module fixture runs every
    notebook once), the Ray tests (two local Ray clusters starting at once on 2 cores time out)
    and the real NPU compiles (one .npu-venv built once); None: any worker."""
    path = Path(str(item.fspath))
    words = set(re.split(r"[^a-z0-9]+", item.name.lower()))
    if "browser" in path.parts:
        return "browser"
    if path.name == "test_notebooks.py":
        return "notebooks-headless"
    if "ray" in words or "ray_executor" in getattr(item, "fixturenames", ()) or path.name == "test_sweep_cluster.py":
        return "ray"
    if item.get_closest_marker("npu_compile") is not None:
        return "npu"
    return None


def pytest_itemcollected(item):
    """Each test's xdist group, marked as it is collected: xdist reads the marks when the
    collection is modified, before this file's ``pytest_collection_modifyitems`` (trylast) runs."""
    group = xdist_group_of(item)
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))


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
