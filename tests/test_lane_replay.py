"""Lanes that end together (issue 60): the Ray executor's own scheduling (RayExecutor.run, its
lanes, steals and compile-ahead) replayed on a simulated clock with the seconds each
configuration took to measure and to compile in committed 4xH100 runs
(benchmarks/diagnostics/lane_replay.py). No device and no Ray instance: a fake Ray runs each
call for its recorded time.

Replayed with the code before this issue's change, the b775391 warm run had one actor wait
2.17 s for its next configuration at 11.9 s, for the 9.1 s compile of RMSNorm 16384 x 4 rows on
2 warps, which began 4.9 s in (the long compiles' quarter of the workers was full of
block-sparse tiles expected to compile for 2-6 s, which took 1-1.7 s).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the distributed extra (ray) is not installed")

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "reports" / "sweep-h100x4"


@pytest.fixture(scope="module")
def replay():
    spec = importlib.util.spec_from_file_location("lane_replay", ROOT / "benchmarks" / "diagnostics" / "lane_replay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "run, nodes",
    [("at-b775391/warm/gpus4", 1), ("at-7488ffb/warm/gpus4", 1), ("at-b775391/warm/gpus4-nodes2", 2)],
)
def test_no_gpu_waits_at_the_end_while_another_still_measures(replay, run, nodes):
    """Every configuration of the 208 is measured once; no actor waits more than 0.3 s for its
    next configuration, and the four actors' last records come within 0.5 s of the sweep's end
    (7488ffb's 13.2 s compile, which held one GPU 3.9 s at the end of that run, included)."""
    tasks, timing, slots, found_nodes, workers = replay.load_run(RUNS / run)
    assert len(tasks) == 208 and slots == 4 and found_nodes == nodes
    out = replay.replay(tasks, timing, slots=slots, nodes=nodes, compile_workers=workers)
    assert sorted(key for key, *_ in out["ran"]) == sorted(t.key for t in tasks)
    assert len(out["actors"]) == 4
    for actor in out["actors"]:
        assert actor["waiting"] < 0.3, actor
        assert actor["idle_at_end"] < 0.5, actor
    longest = max(tasks, key=timing.compile_s)
    assert out["compile_started"][longest.key] - min(out["compile_started"].values()) < 0.5  # begun first


def test_with_compiles_3x_longer_the_sweep_ends_when_its_longest_compile_allows(replay):
    """Every compile three times as long as recorded (a host whose compile workers are slower or
    busier): the longest compile (RMSNorm 16384 x 4 rows on 2 warps, 27 s) still begins first,
    and the sweep's last record comes within a second of that compile's end plus its own
    measurement, the earliest any schedule could end."""
    tasks, timing, slots, nodes, workers = replay.load_run(RUNS / "at-b775391/warm/gpus4")
    timing.compile_scale = 3.0
    out = replay.replay(tasks, timing, slots=slots, nodes=nodes, compile_workers=workers)
    longest = max(tasks, key=timing.compile_s)
    first = min(out["compile_started"].values())
    assert out["compile_started"][longest.key] - first < 0.5
    floor = out["compile_started"][longest.key] - first + timing.compile_s(longest) + timing.measure_s(longest)
    assert out["end"] - floor < 1.0, (out["end"], floor)
