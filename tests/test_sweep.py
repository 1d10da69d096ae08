"""The sweep engine (issue 17): local, isolated and Ray executors give the same records; a
configuration that kills its worker or hangs becomes an error record and the rest complete; an
interrupted sweep resumes without duplicates or losses; ``workbench sweep`` input errors.

One executor on the shared embedded Ray instance (2 CPU workers, the interpreter; conftest's
``shared_ray``) serves the whole module. Faults come from a test-only family
(tests/sweep_fault_family), registered here and removed afterwards.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from testkit import HAVE_PTXAS, norm_task

import kernels
from kernels.spec import unregister
from workbench.store import Store
from workbench.sweep.actors import DeviceWorker
from workbench.sweep.engine import Progress, run_sweep
from workbench.sweep.executors import IsolateExecutor, LocalExecutor
from workbench.sweep.tasks import ERROR_CRASH, ERROR_TIMEOUT, make_task

ray = pytest.importorskip("ray", reason="the distributed extra (ray) is not installed")


@pytest.fixture(scope="module", autouse=True)
def fault_family():
    import sweep_fault_family

    sweep_fault_family.register()
    yield kernels.get(sweep_fault_family.NAME)
    unregister(sweep_fault_family.NAME)


@pytest.fixture(scope="module")
def ray_executor(fault_family, shared_ray):
    from workbench.sweep.ray_executor import RayExecutor

    ex = RayExecutor(num_cpus=2)
    ex.start()
    ex._started = True  # run_sweep leaves it running: one executor for the module
    yield ex
    ex._started = False
    ex.close()


def _norm_tasks():
    """12 interpreter configurations of rms_norm, 2 of which cannot run (tile < hidden)."""
    return [
        norm_task(variant, 4, hidden, {"BLOCK_SIZE": block}, rep_ms=2)
        for hidden in (64, 100)
        for block in (64, 128, 256)
        for variant in ("gpu_row", "gpu_multirow")
    ]


def _faults(spec, cases):
    return [
        make_task(spec, "faulty", device="cpu", dtype="fp32", mode="forward", problem={"n": n}, params=p, rep_ms=1)
        for n, p in cases
    ]


def _outcome(records):
    return {(r["sweep_key"], r["passed"], r["error"]) for r in records}


def test_ray_gives_the_same_records_as_local(ray_executor, tmp_path):
    tasks = _norm_tasks()
    assert len(tasks) >= 12
    local_store, ray_store = Store(tmp_path / "local.sqlite"), Store(tmp_path / "ray.sqlite")
    seen: list[Progress] = []
    local = run_sweep(tasks, LocalExecutor(), local_store)
    remote = run_sweep(
        tasks, ray_executor, ray_store, progress=lambda p, r: seen.append((p.done, p.failed, p.cannot_run))
    )
    assert len(local.records) == len(remote.records) == len(tasks)
    assert _outcome(local_store.records()) == _outcome(ray_store.records())
    failed = [r for r in remote.records if r["error"]]
    assert len(failed) == 2 and all("smaller than hidden" in r["error"] for r in failed)
    assert all(r["cannot_run"] for r in failed)  # refused by the family's check: no failure
    assert seen[-1] == (len(tasks), 0, 2)
    assert {r["worker"]["pid"] for r in remote.records} - {r["worker"]["pid"] for r in local.records}


def test_ray_with_compile_workers_records_every_configuration_once(ray_executor, tmp_path):
    """Compile-ahead beside 2 CPU workers: a compile worker compiles queued configurations for an
    H100 target (Triton's own compiler, no GPU) while the interpreter measures. Every
    configuration is recorded once with the outcome it has without compile-ahead; a record
    measured after its compile-ahead notes it, and the interpreter's first call claims no cache."""
    from testkit import H100_FACTS

    tasks = _norm_tasks()[:8]
    local = run_sweep(tasks, LocalExecutor(), Store(tmp_path / "local.sqlite"))
    ray_executor.compile_workers, ray_executor.compile_target = 1, H100_FACTS
    try:
        result = run_sweep(tasks, ray_executor, Store(tmp_path / "ahead.sqlite"))
    finally:
        ray_executor.compile_workers, ray_executor.compile_target = None, None
    assert sorted(r["sweep_key"] for r in result.records) == sorted(t.key for t in tasks)
    assert _outcome(result.records) == _outcome(local.records)
    assert ray_executor.compile_ahead["workers"] == 1
    for record in result.records:
        note = record["compile_facts"].get("compiled_ahead")
        if note is not None:
            assert note["first_call_cached"] is None  # the interpreter loads nothing from a cache
            assert note["ok"] == bool(note["kernels"]) or "error" in note


@pytest.fixture
def own_executor(ray_executor):
    """The module's executor with no actors and no target known yet (one Ray instance of 2 CPUs
    has no room for a second executor's actors); put back as it was afterwards."""
    from workbench.sweep.actors import kill_actor

    names = ("compile_workers", "compile_target", "_target", "_target_source", "_target_checked", "_actor_class")
    saved = {name: getattr(ray_executor, name) for name in names}

    def clear():
        for pool in ray_executor._pools.values():
            for actor in list(pool.live):
                ray_executor._retire(pool, actor)
        for actor in ray_executor._all_compilers():
            kill_actor(ray, actor)
        ray_executor._compilers, ray_executor._warmed_compilers = {}, []

    clear()
    ray_executor._target, ray_executor._target_source, ray_executor._target_checked = None, "actor", False
    yield ray_executor
    clear()
    for name, value in saved.items():
        setattr(ray_executor, name, value)


def test_a_target_the_driver_knows_is_compiled_for_before_any_measuring_actor_reports(
    own_executor, monkeypatch, tmp_path
):
    """WORKBENCH_COMPILE_TARGET (the driver's own GPUs are read the same way, on cuda): the
    compile workers get the first queued configurations as soon as the run sets them up, before
    any measuring actor exists; the whole run then records every configuration once, those
    measured after their compile-ahead noting it, and the summary says where the target came from."""
    import json

    from testkit import H100_FACTS

    from workbench.compiling.target import TARGET_ENV
    from workbench.sweep.ray_executor import triton_cache_root

    monkeypatch.setenv(TARGET_ENV, json.dumps(H100_FACTS))
    own_executor.compile_workers = 1
    tasks = _norm_tasks()[:6]
    by_node = own_executor._compile_ahead("cpu", triton_cache_root())
    (ahead,) = by_node.by_node.values()  # one node: one compile-ahead
    assert by_node.facts == H100_FACTS and ahead.source == "environment"
    ahead.feed([(task, 0.3 * i) for i, task in enumerate(tasks)])  # (task, when an actor reaches it)
    assert ahead.compiling() == {tasks[0].key}
    assert not any(pool.live for pool in own_executor._pools.values())  # no measuring actor yet
    (ref,) = ahead.refs()
    ray.wait([ref], timeout=120)
    ahead.collect(ref)
    assert ahead.results[tasks[0].key]["ok"], ahead.results[tasks[0].key]["error"]
    own_executor._compilers = by_node.finish()

    result = run_sweep(tasks, own_executor, Store(tmp_path / "r.sqlite"))
    assert sorted(r["sweep_key"] for r in result.records) == sorted(t.key for t in tasks)
    assert own_executor.compile_ahead["target"] == "environment"
    assert own_executor.compile_ahead["retargeted"] is False  # the interpreter's actors report no facts
    assert any(r["compile_facts"].get("compiled_ahead") for r in result.records)


def test_the_first_actor_gives_the_target_where_the_driver_cannot_tell_and_corrects_it(own_executor, monkeypatch):
    """No target from the driver (no GPU it can read, GPUs of two kinds, a cluster, or
    WORKBENCH_COMPILE_TARGET=actor): the compile-ahead waits for the first measuring actor's
    facts, as before. Driver facts that a measuring actor contradicts are replaced by the
    actor's; a compile_target given is used as given."""
    from testkit import H100_FACTS

    from workbench.compiling import target
    from workbench.compiling.target import TARGET_ENV
    from workbench.sweep.compile_ahead_driver import CompileAhead

    monkeypatch.delenv(TARGET_ENV, raising=False)
    monkeypatch.setattr(target, "visible_device_facts", lambda device: None)
    assert own_executor._known_target("cuda") == (None, "actor")
    ahead = CompileAhead(ray, [], None, 60, None, source="actor")
    own_executor._check_target(ahead, H100_FACTS)
    assert ahead.facts == H100_FACTS and not ahead.retargeted
    assert own_executor._known_target("cuda") == (H100_FACTS, "actor")  # the next run knows it at once

    h200 = dict(H100_FACTS, name="NVIDIA H200")
    own_executor._target, own_executor._target_checked = None, False
    monkeypatch.setattr(target, "visible_device_facts", lambda device: h200)
    assert own_executor._known_target("cuda") == (h200, "driver")
    monkeypatch.setenv(TARGET_ENV, "actor")  # the probe is not even asked
    own_executor._target = None
    assert own_executor._known_target("cuda") == (None, "actor")
    own_executor._target, own_executor._target_source = h200, "driver"
    ahead = CompileAhead(ray, [], h200, 60, None, source="driver")
    own_executor._check_target(ahead, H100_FACTS)
    assert ahead.facts == H100_FACTS and ahead.retargeted
    assert own_executor._known_target("cuda") == (H100_FACTS, "actor")

    own_executor.compile_target, own_executor._target_checked = h200, False
    ahead = CompileAhead(ray, [], h200, 60, None)
    own_executor._check_target(ahead, H100_FACTS)
    assert ahead.facts == h200 and own_executor._known_target("cuda") == (h200, "given")


class FailingWarmUp(DeviceWorker):
    """A measuring actor whose warm-up fails (a device that cannot start)."""

    def ready(self, cache_root, device, placement=None, store=None, log_dir=None):
        raise RuntimeError("this device cannot start")


def test_an_actor_whose_warm_up_fails_is_replaced_and_a_configuration_says_why(own_executor, tmp_path):
    """Actors are started, all at once, with a warm-up call; a configuration is handed out only to
    an actor that finished it. A failed warm-up retires the actor, and the configuration it would
    have run is recorded with why (as when a start failed inside its call): the sweep ends."""
    own_executor._actor_class = ray.remote(max_restarts=0, max_task_retries=0)(FailingWarmUp)
    tasks = _norm_tasks()[:3]
    result = run_sweep(tasks, own_executor, Store(tmp_path / "r.sqlite"))
    assert sorted(r["sweep_key"] for r in result.records) == sorted(t.key for t in tasks)
    assert all("this device cannot start" in r["error"] for r in result.records)


def test_warm_up_starts_the_actors_before_the_sweep_and_the_timeline_says_when(own_executor, tmp_path):
    """warm_up starts every measuring actor and returns once each has finished its warm-up; the
    sweep after it asks for no actor, hands its first configurations out at once, and its
    timeline has each configuration's events in order, on the warmed actors."""
    own_executor.warm_up("cpu")
    warm = own_executor.timeline
    assert warm["kind"] == "warm-up" and len(warm["actors"]) == 2
    for actor in warm["actors"]:
        steps = [actor[name] for name in ("asked", "init", "imported", "device", "warmed", "seen")]
        assert steps == sorted(steps), actor
        assert actor["process"] is not None and actor["process"] <= actor["init"]
    tasks = _norm_tasks()[:6]
    sweep_started = time.time()
    result = run_sweep(tasks, own_executor, Store(tmp_path / "r.sqlite"))
    assert sorted(r["sweep_key"] for r in result.records) == sorted(t.key for t in tasks)
    run = own_executor.timeline
    assert run["kind"] == "run" and run["actors"] == []  # none asked for: the warmed ones ran it
    assert len(run["tasks"]) == len(tasks)
    assert {t["actor"] for t in run["tasks"]} <= {a["actor"] for a in warm["actors"]}
    for t in run["tasks"]:
        assert t["idle"] <= t["sent"] <= t["started"] <= t["arrived"], t
    first = min(t["started"] for t in run["tasks"])
    assert first - sweep_started < 1.0  # no actor start inside the sweep


@pytest.mark.skipif(not HAVE_PTXAS, reason="no ptxas (Triton's NVIDIA backend) to compile with")
def test_warm_up_has_each_compile_worker_pay_its_first_compile(own_executor, monkeypatch, tmp_path):
    """With the target known (given here: an H100's facts; Triton's own compiler, no GPU),
    warm_up returns once each compile worker has compiled the first-compile kernel into the
    host's Triton cache, before any sweep sends it a configuration."""
    from testkit import H100_FACTS

    from workbench.sweep.ray_executor import triton_cache_root

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    own_executor.compile_workers, own_executor.compile_target = 2, H100_FACTS
    root = Path(triton_cache_root())
    assert not list(root.rglob("_add_one_kernel*"))
    own_executor.warm_up("cpu")
    assert len(own_executor._all_compilers()) == 2
    compiled = {p.parent for p in root.rglob("_add_one_kernel.json")}
    assert len(compiled) == 1  # both compiled the same kernel for the same target: one cache entry
    assert list(next(iter(compiled)).glob("_add_one_kernel.cubin"))


def test_worker_death_is_a_failed_record_and_the_rest_complete(ray_executor, fault_family, tmp_path):
    cases = [(8, {}), (16, {}), (8, {"FAULT": "exit"}), (32, {}), (8, {"FAULT": "signal"})]
    cases += [(8, {"FAULT": "raise"}), (8, {"SCALE": 2}), (64, {})]
    tasks = _faults(fault_family, cases)
    store = Store(tmp_path / "r.sqlite")
    result = run_sweep(tasks, ray_executor, store)
    assert len(store) == len(tasks)
    for (_n, p), t in zip(cases, tasks):
        rec = next(r for r in result.records if r["sweep_key"] == t.key)
        fault = p.get("FAULT")
        if fault in ("exit", "signal"):
            assert rec["error"].startswith(ERROR_CRASH), rec["error"]
            assert rec["passed"] is False
        elif fault == "raise":
            assert "injected fault" in rec["error"]
        elif p.get("SCALE") == 2:
            assert rec["error"] is None and rec["passed"] is False
        else:
            assert rec["error"] is None and rec["passed"] is True, rec["error"]


def test_a_failed_configuration_keeps_its_workers_output_in_the_run_folder_not_on_the_console(
    ray_executor, fault_family, tmp_path, capfd
):
    """What a configuration's worker prints (a failing compiler's whole PTX, here a line the fault
    family prints before it raises) goes to a log file, never to the console; the failed record
    names the file holding its part of the log, under the executor's log folder."""
    tasks = _faults(fault_family, [(8, {"FAULT": "raise"}), (9, {})])
    result = run_sweep(tasks, ray_executor, Store(tmp_path / "r.sqlite"))
    (failed,) = [r for r in result.records if r["error"]]
    assert not failed["cannot_run"] and "injected fault: raise" in failed["error"]
    log = Path(failed["log"])
    assert log.parent == Path(ray_executor.log_dir) / "failed"
    assert "injected fault: what a failing compiler prints" in log.read_text()
    time.sleep(3)  # Ray forwards a worker's output to the driver's console within about a second
    seen = capfd.readouterr()
    assert "what a failing compiler prints" not in seen.out + seen.err


def test_hang_past_timeout_is_recorded_as_timed_out(ray_executor, fault_family, tmp_path):
    tasks = _faults(fault_family, [(8, {"FAULT": "hang"}), (8, {}), (16, {})])
    ray_executor.timeout_s = 10
    try:
        t0 = time.monotonic()
        result = run_sweep(tasks, ray_executor, Store(tmp_path / "r.sqlite"))
    finally:
        ray_executor.timeout_s = None
    hang = next(r for r in result.records if r["sweep_key"] == tasks[0].key)
    assert hang["error"].startswith(ERROR_TIMEOUT) and "10 s" in hang["error"]
    assert [r["passed"] for r in result.records if r["sweep_key"] != tasks[0].key] == [True, True]
    assert time.monotonic() - t0 < 120


def test_interrupted_sweep_resumes_without_duplicates_or_losses(ray_executor, fault_family, tmp_path):
    tasks = _faults(fault_family, [(n, {}) for n in range(1, 13)])
    store = Store(tmp_path / "r.sqlite")

    def stop_after_four(p, rec):
        if p.done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(tasks, ray_executor, store, progress=stop_after_four)
    first = store.records()
    assert 4 <= len(first) < len(tasks)
    again = run_sweep(tasks, ray_executor, store)
    assert len(again.skipped) == len(first)
    keys = [r["sweep_key"] for r in store.records()]
    assert sorted(keys) == sorted(t.key for t in tasks)  # each once: no duplicates, none lost
    assert run_sweep(tasks, ray_executor, store).records == []  # a third run has nothing to do


def test_isolate_executor_records_crashes_and_timeouts(fault_family, tmp_path):
    cases = [(8, {}), (8, {"FAULT": "exit"}), (8, {"FAULT": "signal"}), (8, {"FAULT": "hang"})]
    tasks = _faults(fault_family, cases)
    result = run_sweep(tasks, IsolateExecutor(timeout_s=10), Store(tmp_path / "i.sqlite"))
    errors = [r["error"] for r in result.records]
    assert errors[0] is None and result.records[0]["passed"]
    assert errors[1].startswith(ERROR_CRASH) and "status 3" in errors[1]
    assert errors[2].startswith(ERROR_CRASH) and "SIGKILL" in errors[2]
    assert errors[3].startswith(ERROR_TIMEOUT)


def test_a_planned_sweep_measures_each_configuration_once_and_knows_its_cache():
    """A request with a repeated value plans one task per configuration; points a cache holds
    are found, not measured; every point's key is the session's key for that configuration."""
    from kernels.spec import get
    from workbench.sweep.config import config_key, resolve_config
    from workbench.sweep.plan import Measuring, SweepRequest, plan_sweep

    spec = get("rms_norm")
    var = spec.variant("gpu_row")
    measuring = Measuring(spec, "cpu", "fp32", spec.resolve_problem({"rows": 4, "hidden": 64}, quick=True))
    request = SweepRequest("BLOCK_SIZE", [128, 128, 256], variants=["gpu_row"])
    plan = plan_sweep(request, [var], measuring)
    assert len(plan.items) == 3 and len(plan.tasks) == 2 and plan.tasks[0].params["BLOCK_SIZE"] == 128
    assert plan.slots[plan.tasks[0].key] == [0, 1]
    prob, prm, _ = resolve_config(spec, var, measuring.problem, {"BLOCK_SIZE": 256}, False)
    assert plan.keys[2] == config_key("gpu_row", "cpu", "fp32", "forward", prob, prm)
    cached = plan_sweep(request, [var], measuring, known={plan.keys[2]: "a record"}.get)
    assert cached.found == {2: "a record"} and len(cached.tasks) == 1


# --- the command line --------------------------------------------------------------------
def _cli(argv, capsys):
    from workbench.cli import main

    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_local_sweep_writes_and_resumes(tmp_path, capsys):
    out = tmp_path / "sw"
    argv = ["sweep", "sweep_faults", "--param", "SCALE=1,2", "--problem", "n=4,8", "--device", "cpu"]
    argv += ["--out", str(out), "--rep-ms", "1"]
    code, text, _ = _cli(argv, capsys)
    assert code == 1  # SCALE=2 is a wrong result
    assert "4 measured" in text
    for name in ("records.sqlite", "records.csv", "records.json", "report.html"):
        assert (out / name).exists()
    code, text, _ = _cli(argv, capsys)
    assert "0 measured, 4 already recorded" in text
    assert len(Store(out / "records.sqlite")) == 4


def test_cli_warm_l2_sweep_is_recorded_apart_and_reaches_the_measurement(monkeypatch, tmp_path, capsys):
    """``--l2 warm`` travels in the task to ``measure`` and keys its configurations apart from
    the cold ones, so a warm sweep into the store of a cold one measures them again."""
    import workbench.measure as measure_module

    seen = []
    real = measure_module.measure

    def spy(*args, **kwargs):
        seen.append(kwargs.get("l2"))
        return real(*args, **kwargs)

    monkeypatch.setattr(measure_module, "measure", spy)
    out = tmp_path / "sw"
    argv = ["sweep", "sweep_faults", "--param", "SCALE=1", "--problem", "n=4", "--device", "cpu"]
    argv += ["--out", str(out), "--rep-ms", "1"]
    assert _cli(argv, capsys)[0] == 0
    code, text, _ = _cli(argv + ["--l2", "warm"], capsys)
    assert code == 0 and "1 measured, 0 already recorded" in text
    assert seen == ["cold", "warm"]
    keys = [r["sweep_key"] for r in Store(out / "records.sqlite").records()]
    assert len(set(keys)) == 2 and sum('"l2"' in k for k in keys) == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--param", "NOPE=1"], "no variant of sweep_faults"),
        (["--param", "FAULT=boom"], "not allowed"),
        (["--problem", "m=3"], "no such knob"),
        (["--problem", "n=abc"], "must be an integer"),
        (["--timeout-s", "5"], "--isolate"),
        (["--executor", "spark"], "local or ray"),
        (["--param", "FAULT"], "NAME=V1"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(extra, message, tmp_path, capsys):
    code, _, err = _cli(["sweep", "sweep_faults", "--device", "cpu", "--out", str(tmp_path)] + extra, capsys)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_cli_without_ray_says_how_to_install(monkeypatch, tmp_path, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    code, _, err = _cli(["sweep", "sweep_faults", "--executor", "ray", "--out", str(tmp_path)], capsys)
    assert code == 2 and "kernel-workbench[distributed]" in err and len(err.strip().splitlines()) == 1


def test_report_groups_by_device_and_stands_alone(tmp_path):
    from workbench.reports.sweep import best_by_device, write_report

    base = dict(kernel="k", mode="forward", dtype="bf16", problem={"n": 1}, passed=True, error=None)
    recs = [
        dict(base, device_name="H100", variant="v", params={"B": 1}, kernel_ms=2.0),
        dict(base, device_name="H100", variant="v", params={"B": 2}, kernel_ms=1.0),
        dict(base, device_name="H200", variant="v", params={"B": 1}, kernel_ms=0.5),
        dict(
            base, device_name="H200", variant="v", params={"B": 2}, kernel_ms=None, passed=False, error="timed out: x"
        ),
    ]
    best = best_by_device(recs)
    (shape,) = best
    assert best[shape]["H100"]["record"]["params"] == {"B": 2}
    assert best[shape]["H200"]["record"]["params"] == {"B": 1}
    text = write_report(recs, tmp_path / "r.html").read_text()
    assert "H100" in text and "H200" in text and "timed out" in text
    assert 'src="http' not in text and "Plotly" in text  # plotly.js inlined: opens offline


def test_session_sweep_on_ray_matches_local_and_fills_the_explorer(ray_executor, tmp_path):
    from widgets import Session

    def sweep(session, executor):
        return session.sweep2d(
            "BLOCK_SIZE",
            [64, 128],
            "BLOCK_SIZE_M",
            [1, 2],
            variant="gpu_multirow",
            executor=executor,
            problem={"rows": 4, "hidden": 100},
            show=False,
        )

    def grid(executor):
        s = Session(
            "rms_norm", device="cpu", dtype="fp32", quick=True, headless=True, store=tmp_path / f"{executor}.db"
        )
        partial = []

        class View:  # stands in for the Explorer: records each partial heatmap
            def partial_heatmap(self, rows, *args, title="sweep running", **kwargs):
                partial.append((len(rows), title))

        s.attach(View())
        df = sweep(s, ray_executor if executor == "ray" else executor)
        return s, df, partial

    s_local, df_local, _ = grid("local")
    s_ray, df_ray, partial = grid("ray")
    cols = ["variant", "params", "passed", "error"]
    assert df_local[cols].astype(str).values.tolist() == df_ray[cols].astype(str).values.tolist()
    # the heatmap filled in as results arrived, then showed the finished grid under its own title
    assert partial == [(1, "sweep running"), (2, "sweep running"), (3, "sweep running"), (4, "sweep running")] + [
        (4, "gpu_multirow: BLOCK_SIZE_M x BLOCK_SIZE")
    ]
    assert s_ray.measured == 4 and len(s_ray.store) == 4
    again = sweep(s_ray, ray_executor)  # the same grid again
    assert s_ray.measured == 4 and len(again) == 4  # cached: nothing ran again


# A driver with two declared (fake) GPUs: each configuration asks Ray for one of them while it
# runs in the interpreter, so Ray's GPU bookkeeping is exercised on a CPU machine.
_PINNING_DRIVER = r"""
import json
import kernels
from workbench.sweep.engine import run_sweep
from workbench.sweep.ray_executor import RayExecutor
from workbench.sweep.tasks import make_task


class TwoFakeGpus(RayExecutor):
    def _options(self, device):
        return {"num_cpus": 1, "num_gpus": 1}

    def _slots(self, device):
        return 2


spec = kernels.get("rms_norm")
tasks = [
    make_task(spec, "gpu_row", device="cpu", dtype="fp32", mode="forward", problem={"rows": rows, "hidden": 64},
              params={}, quick=True, rep_ms=1, warmup_ms=0)
    for rows in (1, 40, 3, 64, 2, 33, 5, 50, 7, 21, 4, 60, 9, 45, 6, 30)
]
# The executor starts its own Ray, starting again where a loaded machine's raylet timed out.
result = run_sweep(tasks, TwoFakeGpus(num_cpus=4, num_gpus=2))
print(json.dumps([[r["worker"]["pid"], r["worker"]["gpus"], r["passed"]] for r in result.records]))
"""


@pytest.mark.slow
def test_ray_workers_keep_the_gpu_they_started_with(tmp_path):
    """A worker process is bound to the GPU it first used, so it must never be handed the other
    GPU: every process runs all its configurations under one GPU id, and both GPUs are used.
    (Plain Ray tasks sent as slots free up break this: each process got both ids on this
    machine. The executor's actors hold one GPU each for their life.)"""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "tests")]))
    done = subprocess.run(
        [sys.executable, "-c", _PINNING_DRIVER], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(rows) == 16 and all(passed for _, _, passed in rows)
    ids_by_process: dict = {}
    for pid, gpus, _ in rows:
        ids_by_process.setdefault(pid, set()).add(gpus)
    assert all(len(ids) == 1 for ids in ids_by_process.values()), ids_by_process
    assert set().union(*ids_by_process.values()) == {"0", "1"}, ids_by_process
