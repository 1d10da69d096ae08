"""Shared fixtures: CPU-interpreter runs by default; GPU tests are marked and skipped without CUDA."""

from __future__ import annotations

import os
import time

import pytest
import torch

# The device facts a compile-ahead compiles for (workbench.sweep.compile_ahead.device_facts) of an
# H100, for tests that compile with Triton's own compiler and no GPU.
H100_FACTS = {
    "kind": "cuda",
    "backend": "cuda",
    "arch": 90,
    "warp_size": 32,
    "name": "NVIDIA H100 80GB HBM3",
    "num_cores": 132,
    "l2_bytes": 50 << 20,
}


def interleave_long_tests(items: list) -> list:
    """The ``long_gpu`` tests at positions 0, 2, 4, ... with the others between and after them.

    pytest-xdist's load scheduling with ``--maxschedchunk 1`` (gpu_run.sh) first hands each worker
    two consecutive tests: so every long test starts at once on a worker of its own, and the
    GPU step's wall time is the longest test, not two long tests back to back (the default chunk
    of four gave one worker the PyJuice test and the next-longest: 211 s on the H100)."""
    long = [item for item in items if "long_gpu" in item.keywords]
    rest = [item for item in items if "long_gpu" not in item.keywords]
    out = []
    for i, item in enumerate(long):
        out.append(item)
        if i < len(rest):
            out.append(rest[i])
    return out + rest[len(long) :]


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
