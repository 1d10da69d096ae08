"""Where a host's measuring and compile processes run (workbench.sweep.cpus): physical cores read
from Linux's topology files (a fake tree here), the plan per slot, and a measuring actor moving
onto its slot's CPUs."""

from __future__ import annotations

import os

import pytest

from workbench.sweep import cpus as cpus_module
from workbench.sweep.cpus import Placement, device_slot, physical_cores, pin


def _topology(root, siblings: dict[int, str]):
    for cpu, text in siblings.items():
        folder = root / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(text + "\n")
    return root


def test_physical_cores_group_smt_siblings_in_both_notations(tmp_path):
    # 4 cores x 2 threads, siblings 0,4 / 1,5 ... ; and a range form "6-7" on another tree
    root = _topology(tmp_path / "a", {c: f"{c % 4},{c % 4 + 4}" for c in range(8)})
    assert physical_cores(set(range(8)), root) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert physical_cores({0, 1, 4}, root) == [(0, 4), (1,)]  # only the CPUs this process may use
    ranges = _topology(tmp_path / "b", {0: "0-1", 1: "0-1", 2: "2-3", 3: "2-3"})
    assert physical_cores({0, 1, 2, 3}, ranges) == [(0, 1), (2, 3)]
    assert physical_cores({0, 1}, tmp_path / "missing") == [(0,), (1,)]  # unreadable: a core each


def test_placement_gives_each_slot_its_own_cores_and_the_compile_workers_the_rest():
    cores = [(c, c + 16) for c in range(16)]  # 16 cores x 2 threads, as a 32-CPU host
    plan = Placement.plan(2, cores)
    assert plan.slots == ((0, 16, 1, 17), (2, 18, 3, 19))
    assert set(plan.compile) == set(range(32)) - {0, 1, 2, 3, 16, 17, 18, 19}
    assert plan.for_slot(1) == (2, 18, 3, 19) and plan.for_slot(2) is None and plan.for_slot(-1) is None
    assert Placement.plan(4, cores).compile == tuple(c for core in cores[8:] for c in core)
    assert Placement.plan(5, cores) is None  # 10 cores measuring would leave the compile workers 6
    assert Placement.plan(0, cores) is None


def test_device_slot_is_the_first_visible_index():
    assert device_slot("1") == 1 and device_slot("3,2") == 3 and device_slot(" 0 ") == 0
    assert device_slot("") is None and device_slot("GPU-8d1c9e0a") is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_pin_to_the_cpus_it_already_has_keeps_them():
    mine = os.sched_getaffinity(0)
    assert pin(mine) is True and os.sched_getaffinity(0) == mine
    assert pin([]) is False


def test_a_measuring_actor_moves_to_its_slots_cpus(monkeypatch):
    """pin_to_slot: the slot is the index Ray made visible; its CPUs are pinned and reported;
    no placement, or no index, leaves the process where it is."""
    from workbench.sweep.cpus import pin_to_slot

    pinned = []
    monkeypatch.setattr(cpus_module, "pin", lambda cpus: pinned.append(tuple(cpus)) or True)
    plan = Placement(slots=((0, 8), (1, 9)), compile=(2, 3, 10, 11))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert pin_to_slot(plan) == [1, 9] and pinned == [(1, 9)]
    assert pin_to_slot(None) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8d1c9e0a")
    assert pin_to_slot(plan) is None and len(pinned) == 1


def test_the_executor_plans_a_placement_for_its_own_gpus_only(monkeypatch):
    """On a host's own GPUs (embedded Ray) the executor plans one placement and keeps it; not
    for the interpreter, a cluster, or with place_cpus off."""
    pytest.importorskip("ray", reason="the distributed extra (ray) is not installed")
    from workbench.sweep.ray_executor import RayExecutor

    monkeypatch.setattr(cpus_module, "physical_cores", lambda: [(c, c + 8) for c in range(8)])
    ex = RayExecutor()
    ex.slots = 2
    ex._plan_placement("cpu")
    assert ex.placement is None
    ex._plan_placement("cuda")
    assert ex.placement.slots == ((0, 8, 1, 9), (2, 10, 3, 11)) and len(ex.placement.compile) == 8
    ex.slots = 1
    ex._plan_placement("cuda")  # planned once, for the session
    assert len(ex.placement.slots) == 2
    for other in (RayExecutor(address="auto"), RayExecutor(place_cpus=False)):
        other.slots = 2
        other._plan_placement("cuda")
        assert other.placement is None
