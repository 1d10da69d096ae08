"""benchmarks/sweep_scaling.py's account of where a run's time went, from an executor timeline.

The timeline here is written by hand (two actors, one warmed before the sweep), so each figure
the summary gives can be checked against the events it comes from.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def scaling():
    spec = importlib.util.spec_from_file_location("sweep_scaling", ROOT / "benchmarks" / "sweep_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_timeline_summary_steps_and_per_actor_times(scaling):
    warm_up = {
        "kind": "warm-up",
        "begun": 90.0,
        "actors": [
            {"actor": 0, "asked": 90.0, "process": 89.0, "init": 90.5, "imported": 92.5, "device": 93.0,
             "warmed": 94.0, "seen": 94.1},
        ],
        "tasks": [],
    }  # fmt: skip
    run = {
        "kind": "run",
        "begun": 100.0,
        "actors": [
            {"actor": 1, "asked": 100.0, "process": 100.2, "init": 100.7, "imported": 103.0, "device": 103.5,
             "warmed": 104.0, "seen": 104.1},
        ],
        "tasks": [
            {"actor": 0, "idle": 100.0, "sent": 100.01, "started": 100.02, "arrived": 100.32},
            {"actor": 0, "idle": 100.32, "sent": 100.34, "started": 100.35, "arrived": 100.55},
            {"actor": 1, "idle": 104.1, "sent": 104.2, "started": 104.21, "arrived": 104.61},
            {"actor": 0, "idle": 100.55, "sent": 100.6, "started": None},  # cut short: no record
        ],
    }  # fmt: skip
    where = scaling.timeline_summary(warm_up, run)
    first, second = where["actors"]
    assert first["steps"] == {"init": 0.5, "imported": 2.0, "device": 0.5, "warmed": 1.0, "seen": pytest.approx(0.1)}
    assert (first["process_at"], first["asked_at"], first["ready_at"], first["first_task_at"]) == (
        -11.0,
        -10.0,
        pytest.approx(-5.9),
        pytest.approx(0.02),
    )
    assert second["ready_at"] == pytest.approx(4.1) and second["first_task_at"] == pytest.approx(4.21)
    zero, one = where["tasks"]
    assert zero["n"] == 3 and zero["busy"] == pytest.approx(0.5) and zero["median_task"] == pytest.approx(0.3)
    assert zero["waiting"] == pytest.approx(0.01 + 0.02 + 0.05)
    assert zero["dispatch"] == pytest.approx(0.02) and zero["last_at"] == pytest.approx(0.55)
    assert one["n"] == 1 and one["waiting"] == pytest.approx(0.1) and one["last_at"] == pytest.approx(4.61)
    text = "\n".join(scaling.describe_where(where))
    assert "actor 1 start: process at 0.20 s, asked at 0.00 s" in text and "3 configurations, busy 0.5 s" in text


def test_no_timeline_gives_no_summary(scaling):
    assert scaling.timeline_summary({}, {}) == {}


def test_the_tune_sized_sweep_covers_every_familys_tune_space(scaling):
    """``--sweep tune``: every registered family with a tune space, at its sizes, in the
    Tuning's mode and dtype, the configurations its check refuses left out (interpreter sizes here)."""
    import kernels
    from workbench.device import get_device
    from workbench.tune.space import Space

    items = scaling.tune_plan("cpu", quick=True)
    tuned = [name for name in kernels.families() if kernels.get(name).tuning is not None]
    assert sorted({item[0] for item in items}) == sorted(tuned)
    for name in tuned:
        space = Space.of(kernels.get(name), quick=True)
        want = sum(len(space.candidates(size, get_device("cpu"))) for size in space.sizes)
        assert sum(item[0] == name for item in items) == want > 0
    tasks = scaling.tasks_for(items, "cpu", 5.0, True)
    for item, task in zip(items, tasks):
        assert (task.family, task.variant, task.mode, task.dtype) == (item[0], item[1], item[4], item[5])


def test_compare_reads_the_two_node_run_beside_the_others(scaling, tmp_path):
    """--compare takes gpus<N> and gpus<N>-nodes<M> folders (a two-node run once broke it), and
    checks each run against the one-GPU run: same configurations, each once, the same bests."""
    import gzip
    import json

    real = json.loads(gzip.open(ROOT / "reports/sweep-h200x4/at-83dd028/warm/gpus1/records.json.gz").read())[:12]
    for record in real[-2:]:  # two configurations that cannot compile
        record.update(passed=False, error="ValueError: tile too large")
        record["compile_facts"] = {"compiled_ahead": {"ok": False}}
    for name, sweep_s, records in (
        ("gpus1", 40.0, real),
        ("gpus4", 12.0, real),
        ("gpus4-nodes2", 13.0, real + real[:1]),  # one configuration measured twice
    ):
        run = tmp_path / name
        run.mkdir()
        if name == "gpus4":  # committed reports keep their records gzipped
            (run / "records.json.gz").write_bytes(gzip.compress(json.dumps(records).encode()))
        else:
            (run / "records.json").write_text(json.dumps(records))
        # two nodes: each node's compile-ahead counted the two failures
        ahead = {"failed": 4 if "nodes" in name else 2, "found_on_node": 9}
        (run / "run.json").write_text(json.dumps({"runs": [{"sweep_s": sweep_s, "compile_ahead": ahead}]}))
    assert scaling.main(["--compare", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "scaling.json").read_text())
    rows = {(r["gpus"], r["nodes"]): r for r in result["table"]}
    assert rows[(4, 1)]["speedup"] == pytest.approx(40 / 12) and rows[(4, 2)]["speedup"] == pytest.approx(40 / 13)
    assert rows[(4, 2)]["compilable"] == 11 and rows[(4, 2)]["found_on_node"] == 9
    against = {(r["gpus"], r["nodes"]): r for r in result["against"]}
    assert against[(4, 1)]["same_configurations"] and against[(4, 1)]["each_once"]
    assert against[(4, 2)]["same_configurations"] and not against[(4, 2)]["each_once"]
    assert against[(4, 1)]["best_agree"] == against[(4, 1)]["shapes"] > 0
