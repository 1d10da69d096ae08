"""A notebook's Ray executor is started once per process and reused by every sweep (issue 60).

Two sessions made with ``executor="ray"`` (the family notebooks' ``executor`` parameter) share
one Ray executor, started when the first session is made, its actors warming up in the
background; their sweeps run on those actors and start none of their own. The interpreter
measures on 2 CPU workers.
"""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="the distributed extra (ray) is not installed")


@pytest.fixture
def no_shared_executor(shared_ray):
    """The process's shared executor (on conftest's shared Ray instance) closed after the test."""
    from workbench.sweep.ray_executor import close_shared

    yield
    close_shared()


def test_sessions_share_one_ray_executor_whose_actors_start_once(no_shared_executor, tmp_path, monkeypatch):
    from widgets import Session
    from workbench.compiling import service as compile_service

    started = []  # the local compile processes: a Ray session's sweeps compile on Ray's workers
    monkeypatch.setattr(compile_service, "start", started.append)
    options = {"num_cpus": 2}
    first = Session("rms_norm", device="cpu", quick=True, headless=True, out_dir=tmp_path, store=False,
                    executor="ray", executor_options=options)  # fmt: skip
    executor = first._executor(None, None)
    assert executor.name == "ray" and executor._warming is not None  # its actors warm up meanwhile
    second = Session("rms_norm", device="cpu", quick=True, headless=True, out_dir=tmp_path, store=False,
                     executor="ray", executor_options=options)  # fmt: skip
    assert second._executor(None, None) is executor
    assert started == []  # neither session started a local pool for sweeps that run on Ray

    runs = []
    for session, hidden in ((first, [64, 100]), (second, [128])):
        df = session.sweep("hidden", hidden, variants=["gpu_row"], show=False)
        assert len(df) == len(hidden) and df["passed"].all(), df[["x_value", "error"]]
        runs.append(executor.timeline)
    assert [run["actors"] for run in runs] == [[], []]  # no actor asked for by either sweep
    workers = {t["actor"] for run in runs for t in run["tasks"]}
    assert workers and workers <= {0, 1}  # the two actors the warm-up started
    assert (tmp_path / "ray-logs").is_dir() and any((tmp_path / "ray-logs").iterdir())  # the workers' output
