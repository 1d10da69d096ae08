"""The compile service (issue 55): configurations submitted ahead are compiled by other processes,
and a measurement settles with its configuration's compile before its first call.

- The settle protocol, with a pool of plain futures: compiled (the result is noted), compiling
  (waited for), still queued (withdrawn: the measuring process compiles it), never submitted,
  a compile process that was lost.
- Real compile processes compiling for an H100 on this CPU (Triton's bundled ptxas): the kernels
  land in the cache; a process that dies fails only its job and is replaced; no GPU is visible
  to them; nothing reaches the console; closing does not wait for a compile in flight.
- measure() notes what was compiled ahead on its record; on the CPU no service starts.
- A suite submits its targets' configurations in the order it measures them.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future

import pytest
from testkit import H100_FACTS, HAVE_PTXAS

import kernels
from kernels.spec import unregister
from workbench.compiling import service as compile_service
from workbench.compiling.cache import cache_folder
from workbench.compiling.jobs import job_of
from workbench.compiling.service import CompileService


class FakePool:
    """What CompileService asks of its pool, with futures the test completes by hand."""

    def __init__(self, facts=None, workers=1, log_path=None):
        self.submitted = []
        self.futures = []
        self.started_before = None  # how many jobs had been submitted when start() was called

    def start(self):
        if self.started_before is None:
            self.started_before = len(self.submitted)

    def submit(self, job):
        future = Future()
        self.submitted.append(job)
        self.futures.append(future)
        return future

    def close(self):
        pass


@pytest.fixture
def fake_service(tmp_path):
    pool = FakePool()
    service = CompileService(H100_FACTS, 1, tmp_path / "log", pool_factory=lambda *a: pool)
    compile_service.install(service)
    yield service, pool
    compile_service.install(None)


def _job(hidden=300, **params):
    spec = kernels.get("rms_norm")
    return job_of(
        spec, "gpu_multirow", dtype="fp32", mode="forward", problem={"hidden": hidden}, params=params, quick=True
    )


def _done(result: dict) -> dict:
    return {
        "ok": True,
        "inputs": "meta",
        "kernels": [],
        "ms": 5.0,
        "error": None,
        "worker": {"host": "h", "pid": 1},
        **result,
    }


def test_settle_notes_a_compile_waits_for_one_under_way_and_withdraws_a_queued_one(fake_service):
    service, pool = fake_service
    jobs = [_job(h) for h in (300, 301, 302, 303)]
    assert service.submit(jobs + [jobs[0], None]) == 4  # each key once; None skipped
    done, running, queued, lost = pool.futures
    done.set_running_or_notify_cancel()
    done.set_result(_done({"ms": 12.0}))
    running.set_running_or_notify_cancel()
    threading.Timer(0.3, running.set_result, args=(_done({}),)).start()
    lost.set_running_or_notify_cancel()
    lost.set_exception(RuntimeError("Abnormal termination"))

    assert service.settle(jobs[0])["ms"] == 12.0
    waited = service.settle(jobs[1])
    assert waited["ok"] and waited["waited_ms"] >= 250
    assert service.settle(jobs[2]) is None and queued.cancelled()  # the measuring process compiles it
    gone = service.settle(jobs[3])
    assert not gone["ok"] and gone["error"].startswith("compile process lost: RuntimeError")
    assert service.settle(_job(999)) is None  # never submitted
    assert service.settle(jobs[0]) is None  # settled once: its first call has happened
    assert service.submit([jobs[0]]) == 0  # and it is not compiled again
    summary = service.summary()
    assert {k: summary[k] for k in ("submitted", "compiled", "failed", "withdrawn", "waited")} == {
        "submitted": 4,
        "compiled": 2,
        "failed": 1,
        "withdrawn": 1,
        "waited": 1,
    }


def test_checks_run_in_the_order_their_compiles_become_ready(fake_service):
    """in_readiness_order: compiled (or never submitted) first, in the given order; then one
    still queued (compiled by the measuring process rather than waited for); with every one left
    compiling, the first to finish. Without a service, the given order."""
    service, pool = fake_service
    spec = kernels.get("rms_norm")
    configs = [
        dict(variant="gpu_multirow", dtype="fp32", mode="forward", problem=_job(h).problem, params={})
        for h in (300, 301, 302, 303, 304)
    ]
    service.submit(_job(h) for h in (300, 301, 302, 303))  # 304 never submitted
    slow, late, queued, ready = pool.futures
    for f in (slow, late, ready):
        f.set_running_or_notify_cancel()
    ready.set_result(_done({}))
    order = compile_service.in_readiness_order(spec, configs)
    taken = [next(order), next(order)]
    assert taken == [3, 4]  # compiled, then nothing to wait for
    assert next(order) == 2  # queued: taken over rather than waited for
    threading.Timer(0.2, late.set_result, args=(_done({}),)).start()
    assert next(order) == 1  # both compiling: the first to finish
    slow.set_result(_done({}))
    assert list(order) == [0]
    compile_service.install(None)
    assert list(compile_service.in_readiness_order(spec, configs)) == [0, 1, 2, 3, 4]


def test_a_compile_that_does_not_finish_in_time_is_withdrawn(fake_service):
    service, pool = fake_service
    job = _job()
    service.submit([job])
    pool.futures[0].set_running_or_notify_cancel()
    assert service.settle(job, limit_s=0.2) is None
    assert service.summary()["withdrawn"] == 1


def test_measure_notes_what_was_compiled_ahead_on_its_record(fake_service):
    """The record of a configuration a compile process compiled says so; the measurement itself is
    the same (the interpreter here: its first call names no kernel hash)."""
    from workbench.measure import measure

    service, pool = fake_service
    spec = kernels.get("rms_norm")
    config = dict(variant="gpu_multirow", dtype="fp32", mode="forward", problem={"hidden": 300})
    service.submit(
        [
            job_of(
                spec,
                config["variant"],
                dtype="fp32",
                mode="forward",
                problem=config["problem"],
                params=None,
                quick=True,
            )
        ]
    )
    pool.futures[0].set_running_or_notify_cancel()
    pool.futures[0].set_result(_done({"kernels": [{"name": "_rms_norm_rows_kernel", "hash": "ab" * 32}]}))
    rec = measure(spec, device="cpu", quick=True, rep_ms=1, warmup_ms=0, **config)
    assert rec.ok, rec.error
    note = rec.compile_facts["compiled_ahead"]
    assert note["ok"] and note["kernels"] == ["_rms_norm_rows_kernel"] and note["first_call_cached"] is None
    other = measure(spec, device="cpu", quick=True, rep_ms=1, warmup_ms=0, **{**config, "problem": {"hidden": 301}})
    assert "compiled_ahead" not in other.compile_facts  # not submitted: nothing noted


def test_nothing_is_compiled_ahead_on_the_cpu(monkeypatch):
    compile_service.install(None)
    spec = kernels.get("rms_norm")
    assert compile_service.for_kind("cpu") is None
    assert compile_service.submit_configs(spec, [dict(variant="gpu_multirow")], "cpu") == 0
    assert compile_service.active() is None
    assert compile_service.settle(spec, spec.variant("gpu_multirow"), "fp32", "forward", {}, {}) is None
    monkeypatch.setenv(compile_service.ENV_SWITCH, "0")
    assert compile_service.for_kind("cuda") is None  # --serial-compile


def test_jobs_name_what_can_be_compiled_ahead():
    """Ours and a peer of plain Triton kernels (Liger's); a torch.compile peer as a graphs job
    (tests/test_compile_graphs.py); not an eager torch path, not a family another process cannot
    import, not a configuration refused."""
    spec = kernels.get("rms_norm")
    job = job_of(spec, "gpu_multirow", dtype="bf16", mode="full", problem={"hidden": 1000}, params=None)
    assert job.family_module == "kernels.rms_norm" and job.problem["hidden"] == 1000 and job.tables is True
    assert job.params == spec.variant("gpu_multirow").resolve_params(None)
    assert spec.variant("liger").compiles_ahead and not spec.variant("torch_compile").compiles_ahead
    assert job_of(spec, "torch_compile", dtype="bf16", mode="forward", problem=None, params=None).kind == "graphs"
    assert job_of(spec, "torch_eager", dtype="bf16", mode="forward", problem=None, params=None) is None
    assert job_of(spec, "gpu_multirow", dtype="bf16", mode="forward", problem={"hidden": -1}, params=None) is None
    from kernels import tuned_tables

    with tuned_tables.disabled():
        off = job_of(spec, "gpu_multirow", dtype="bf16", mode="full", problem={"hidden": 1000}, params=None)
    assert off.tables is False and off.key != job.key


class _Cuda:
    kind = "cuda"


def test_a_suite_submits_its_configurations_in_the_order_it_measures_them(fake_service):
    from workbench.suites import get_suite
    from workbench.suites.run import compile_ahead

    service, pool = fake_service
    suite = get_suite("h100")
    targets = [suite.target("rms_norm_forward"), suite.target("rms_norm_forward_call")]
    assert compile_ahead(targets, _Cuda()) == len(pool.submitted) > 0
    first = targets[0]
    hidden = [job.problem["hidden"] for job in pool.submitted if job.variant == first.ours]
    assert hidden == list(first.values)  # each size once (the call target measures the same cells)
    assert {job.variant for job in pool.submitted} <= {first.ours, "liger"}  # no torch path


@pytest.fixture
def fault_family():
    import compile_fault_family

    compile_fault_family.register()
    yield kernels.get(compile_fault_family.NAME)
    unregister(compile_fault_family.NAME)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_PTXAS, reason="needs Triton's bundled ptxas")
def test_compile_processes_compile_for_an_h100_here_and_survive_a_dying_one(fault_family, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "compile.log"
    service = CompileService(H100_FACTS, 2, log)
    try:
        service.start()  # the processes start before any job: the log is theirs as soon as one has
        deadline = time.monotonic() + 120
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert log.exists()
        spec = fault_family
        jobs = {
            fault: job_of(spec, "ours", dtype="fp32", mode="forward", problem={"n": 40}, params={"FAULT": fault})
            for fault in ("exit", "raise", "none")
        }
        later = job_of(spec, "ours", dtype="fp32", mode="forward", problem={"n": 40}, params={"BLOCK": 128})
        hang = job_of(spec, "ours", dtype="fp32", mode="forward", problem={"n": 41}, params={"FAULT": "hang"})
        assert service.submit(list(jobs.values()) + [later]) == 4
        died = service.settle(jobs["exit"], limit_s=120, take_over=False)
        assert died is not None and not died["ok"] and died["error"].startswith("compile process lost")
        raised = service.settle(jobs["raise"], limit_s=120, take_over=False)
        assert not raised["ok"] and "injected fault: raise" in raised["error"]
        for job in (jobs["none"], later):  # compiled, one of them by the process that replaced the lost one
            result = service.settle(job, limit_s=120, take_over=False)
            assert result["ok"], result["error"]
            (kernel,) = result["kernels"]
            assert kernel["name"] == "_double_kernel"
            assert (tmp_path / "cache" / cache_folder(kernel["hash"])).is_dir()
            assert result["worker"]["gpus"] == ""  # a compile process sees no GPU
        # Every process up before closing, the one that replaced the lost process included: one
        # stopped while Python is still starting it (before it reads the log) would print its
        # bootstrap's error to this console (pebble unlinks the pool's channels on stop).
        deadline = time.monotonic() + 120
        while log.read_text().count(": started") < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert log.read_text().count(": started") == 3  # two processes, then the replacement
        service.submit([hang])
        started = time.monotonic()
    finally:
        service.close()  # a compile in flight does not hold it up
    assert time.monotonic() - started < 30
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # the compile processes write to their log only
    assert log.exists()


def test_the_explorer_compiles_one_step_ahead_of_the_user(fake_service, monkeypatch):
    """After a result is shown, the configurations one notch away on each control are submitted
    (here to a service that compiles nothing, standing in for a GPU's)."""
    from widgets import Explorer, Session

    service, pool = fake_service
    monkeypatch.setattr(compile_service, "for_kind", lambda kind: service)
    s = Session("rms_norm", device="cpu", dtype="fp32", quick=True, headless=False, store=False)
    ex = Explorer(s, variant="gpu_row", debounce_s=0.01, peers=False)
    try:
        assert ex.wait(120)
        ex.set(BLOCK_SIZE=512)
        assert ex.wait(120) and ex.record.ok
    finally:
        ex.close()
    assert pool.started_before == 0  # the compile processes were started with the first launch, before any job
    here = [j for j in pool.submitted if j.variant == "gpu_row" and j.dtype == "fp32" and j.mode == "forward"]
    assert {256, 1024} <= {j.params["BLOCK_SIZE"] for j in here}  # one notch down and up from 512
    assert {j.variant for j in pool.submitted} >= {"gpu_multirow"}  # the next variant
    assert {j.dtype for j in pool.submitted} >= {"fp16"} and {j.mode for j in pool.submitted} >= {"backward"}
    assert all(j.problem["hidden"] == 300 for j in here)  # the quick problem the session shows


def test_the_triton_cache_folder_is_pinned_for_the_compile_processes_and_inductor(monkeypatch, tmp_path):
    """torch.compile's Inductor sets TRITON_CACHE_DIR to a folder of its own where it is unset: the
    service sets it first, so its compile processes and the measuring process use one folder."""
    from workbench.compiling.cache import pin_triton_cache_dir, triton_cache_dir

    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    default = triton_cache_dir()
    assert pin_triton_cache_dir() == default and os.environ["TRITON_CACHE_DIR"] == default
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert pin_triton_cache_dir() == str(tmp_path)  # the user's choice stands


def test_the_ptxas_is_pinned_for_the_compile_processes_and_inductor(monkeypatch, tmp_path):
    """Inductor points TRITON_PTXAS_PATH at torch's ptxas where it is unset, and Triton's cache
    key holds the ptxas version: the service sets the variable first, to the ptxas Triton uses,
    so a compile process started later keys its kernels as the measuring process does."""
    from workbench.compiling.cache import pin_triton_environment, triton_ptxas_path

    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    ours = triton_ptxas_path()
    if ours is None:
        pytest.skip("Triton has no NVIDIA ptxas here")
    pinned = pin_triton_environment()
    assert pinned == {"TRITON_CACHE_DIR": str(tmp_path), "TRITON_PTXAS_PATH": ours}
    assert os.environ["TRITON_PTXAS_PATH"] == ours
    other = tmp_path / "ptxas"
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(other))
    assert pin_triton_environment()["TRITON_PTXAS_PATH"] == str(other)  # the user's choice stands


def test_withdrawing_a_queued_job_stops_no_process_and_stopping_a_running_one_replaces_it(tmp_path):
    """Jobs wait in the pool's queue until a process is free: one withdrawn while it waits is
    dropped and every process lives on (pebble stopped a process for each task cancelled in its
    pipe); cancelling a running job stops its process, and a new one takes the next job."""
    import concurrent.futures

    from workbench.compiling.pool import HelperPool

    pool = HelperPool(2, tmp_path / "log", 60, os.getpid, ())
    try:
        busy = [pool.schedule(time.sleep, 1.0) for _ in range(2)]
        queued = [pool.schedule(os.getpid) for _ in range(6)]
        assert all(f.running() for f in busy) and not any(f.running() for f in queued)
        assert all(f.cancel() for f in queued[1:5])
        pids = {f.result(timeout=60) for f in (queued[0], queued[5])}
        pids |= {pool.schedule(os.getpid).result(timeout=60) for _ in range(6)}
        assert len(pids) <= 2, f"a process was replaced: {pids}"
        assert all(f.cancelled() for f in queued[1:5])

        stuck = pool.schedule(time.sleep, 60)
        deadline = time.monotonic() + 30
        while not (stuck.handed and stuck.handed.running()) and time.monotonic() < deadline:
            time.sleep(0.05)  # until a process has taken it
        assert stuck.cancel()
        with pytest.raises(concurrent.futures.CancelledError):
            stuck.result(timeout=30)
        seen, deadline = set(), time.monotonic() + 30
        while not seen - pids and time.monotonic() < deadline:  # the new process takes a job in time
            busy = [pool.schedule(time.sleep, 0.2) for _ in range(2)]
            seen |= {pool.schedule(os.getpid).result(timeout=60) for _ in range(2)}
            concurrent.futures.wait(busy, timeout=60)
        assert seen - pids, f"the stopped process was not replaced: {seen}"
    finally:
        pool.close()


def test_a_first_number_skips_the_profiler_until_it_has_started(monkeypatch):
    """Inside profiler_deferred, before the process's first profiler session, a CUDA kernel
    timing takes graph replay and says so; once the profiler has run, the profiler again."""
    from workbench import timing

    made = []

    class Graph:
        def __init__(self, fn, flush=None):
            made.append(("graph", flush is not None))

    class Profiler:
        def __init__(self, fn, flush=None):
            made.append(("profiler", flush is not None))

        def sample(self):
            return [0.001]

    monkeypatch.setattr(timing, "CudaGraphSampler", Graph)
    monkeypatch.setattr(timing, "ProfilerKernelSampler", Profiler)
    monkeypatch.setattr(timing, "_PROFILER_STARTED", False)
    flush = object()
    with timing.profiler_deferred():
        assert timing.deferring()
        sampler, note = timing.kernel_sampler(lambda: None, flush=flush)
    assert isinstance(sampler, Graph) and note.startswith("first number") and made == [("graph", True)]
    assert not timing.deferring()  # outside the block
    sampler, note = timing.kernel_sampler(lambda: None, flush=flush)
    assert isinstance(sampler, Profiler) and note == ""
    monkeypatch.setattr(timing, "_PROFILER_STARTED", True)
    with timing.profiler_deferred():
        assert not timing.deferring()  # started: nothing to defer


def test_the_explorer_starts_the_profiler_on_the_notebook_loop_then_refines(monkeypatch):
    """The first profiler session runs where the notebook's event loop runs it (the main thread),
    and the refined measurement is queued on the worker after it."""
    from widgets import Explorer, Session
    from workbench import timing

    class Loop:
        def __init__(self):
            self.callbacks = []

        def is_running(self):
            return True

        def is_closed(self):
            return False

        def call_soon_threadsafe(self, fn):
            self.callbacks.append(fn)

    started_on, after_on = [], []
    monkeypatch.setattr(timing, "start_profiler", lambda: started_on.append(threading.current_thread()))
    s = Session("rms_norm", device="cpu", dtype="fp32", quick=True, headless=False, store=False)
    ex = Explorer(s, variant="gpu_row", debounce_s=0.01, peers=False, autostart=False)
    try:
        ex._main_loop = loop = Loop()
        ex._worker.submit(lambda: ex._start_profiler_then(lambda: after_on.append(threading.current_thread())))
        assert ex.wait(30) and not started_on and not after_on  # nothing until the loop runs it
        (callback,) = loop.callbacks
        callback()  # the loop, on this (the main) thread
        assert ex.wait(30)
        assert started_on == [threading.main_thread()]
        assert len(after_on) == 1 and after_on[0] is not threading.main_thread()  # on the worker
    finally:
        ex.close()


def test_a_sessions_edge_checks_are_all_submitted_before_the_first_runs(fake_service, monkeypatch, capsys):
    """s.correctness(edges=True): every variant's configuration, then every variant's edge cases,
    go to the compile service before the first of them runs (those compiled first run first), and
    the verdicts are the ones a run without the service gives."""
    from widgets import Session
    from workbench import measure

    service, pool = fake_service
    monkeypatch.setattr(compile_service, "for_kind", lambda kind: service)
    submitted_at_first_run = []
    run_edges = measure.run_edges

    def counting(spec, cases, device):
        submitted_at_first_run.append(len(pool.submitted))
        return run_edges(spec, cases, device)

    monkeypatch.setattr(measure, "run_edges", counting)
    s = Session("rms_norm", device="cpu", dtype="fp32", quick=True, headless=True, store=False)
    table = s.correctness(variants=["gpu_row", "gpu_multirow"], mode="forward", edges=True, show=False)
    assert table["pass"].all()
    planned = {
        v: [
            c
            for c in measure.edges_module.plan(
                s.spec, s.spec.variant(v), rec.problem, rec.params, dtype="fp32", mode="forward", device=s.device
            )
            if c.config is not None
        ]  # fmt: skip
        for v, rec in ((r.variant, r) for r in s.records)
    }
    assert set(planned) == {"gpu_row", "gpu_multirow"} and all(planned.values())
    # one run of every variant's cases (in the order their compiles are ready), after one
    # submission of all
    assert submitted_at_first_run == [len(pool.submitted)]  # every key below was in by then
    keys = {j.key for j in pool.submitted}
    for rec in s.records:  # the variants' own configurations, submitted before the first was measured
        assert (
            job_of(s.spec, rec.variant, dtype="fp32", mode="forward", problem=rec.problem, params=rec.params).key
            in keys
        )
    for variant, cases in planned.items():
        for c in cases:
            job = job_of(
                s.spec, variant, dtype="fp32", mode="forward", problem=c.config["problem"], params=c.config["params"]
            )
            assert job.key in keys, c.verdict["edge"]
    assert "gpu_row: edge shapes:" in capsys.readouterr().out


def test_a_session_starts_the_compile_processes_when_it_is_made(fake_service, monkeypatch):
    """A Session on a device that compiles ahead starts the service's processes in its
    constructor (its first sweep or Explorer launch then finds them ready); where nothing is
    compiled ahead (``for_kind`` answers None: the CPU) nothing starts."""
    from widgets import Session

    service, pool = fake_service
    monkeypatch.setattr(compile_service, "for_kind", lambda kind: service)
    Session("rms_norm", device="cpu", dtype="fp32", quick=True, headless=True, store=False)
    assert pool.started_before == 0  # started, before any submission
    monkeypatch.setattr(compile_service, "for_kind", lambda kind: None)
    assert compile_service.start("cpu") is False


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs Triton's bundled ptxas")
def test_an_hmm_chain_is_compiled_ahead_for_an_h100_here(tmp_path, monkeypatch):
    """A chain job (workbench/suites/chain.py): the same HMM built on the CPU, its forward and
    backward compiled for an H100 with tiles planned for it, every layer's kernels among them;
    an equal HMM names the same job, another heuristic another one."""
    from kernels.block_sparse.hmm import HMM
    from workbench.compiling.jobs import compile_job
    from workbench.suites.chain import chain_job

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    hmm = HMM(T=3, L=48, V=5, device="cpu", heuristic="small")  # block size 16: three blocks
    job = chain_job(hmm, 5)
    assert job.kind == "call" and job.problem["batch"] == 5 and job.problem["block_size"] == 16
    assert chain_job(HMM(T=3, L=48, V=5, device="cpu", heuristic="small", seed=9), 5).key == job.key
    assert chain_job(HMM(T=3, L=48, V=5, device="cpu", heuristic="large"), 5).key != job.key
    result = compile_job(job, H100_FACTS)
    assert result["ok"], result["error"]
    names = {k["name"] for k in result["kernels"]}
    assert {"_sum_forward_kernel", "_product_forward_kernel", "_product_backward_kernel"} <= names
    assert names & {"_sum_element_flows_kernel", "_sum_backward_kernel"}
    for kernel in result["kernels"]:
        assert (tmp_path / "cache" / cache_folder(kernel["hash"])).is_dir()
    assert hmm.plan(5).trans_fwd is not None  # the CPU HMM plans for itself again after the block


def test_a_chains_first_call_settles_with_its_compile(fake_service, monkeypatch):
    """The notebook's and the suite's chains: every HMM at every batch submitted before the
    first is timed; a compiled one is noted on its rows, a queued one withdrawn (compiled by the
    first call), one never submitted left alone."""
    from kernels.block_sparse.hmm import HMM
    from workbench.suites.chain import chain_timings, submit_chains

    service, pool = fake_service
    monkeypatch.setattr(compile_service, "for_kind", lambda kind: service)
    hmm = HMM(T=2, L=16, V=3, device="cpu", heuristic="small")
    assert submit_chains([hmm], [1, 3]) == 2 and [j.problem["batch"] for j in pool.submitted] == [1, 3]
    pool.futures[0].set_result(_done({}))
    rows = chain_timings(hmm, 1, rep_ms=1, graphs=False)
    assert [r["compiled_ahead"] for r in rows] == [True, True] and all(r["first_ms"] > 0 for r in rows)
    assert [r["compiled_ahead"] for r in chain_timings(hmm, 3, rep_ms=1, graphs=False)] == [None, None]
    assert pool.futures[1].cancelled()  # still queued: withdrawn
    assert [r["compiled_ahead"] for r in chain_timings(hmm, 2, rep_ms=1, graphs=False)] == [None, None]


@pytest.mark.gpu
def test_on_a_gpu_a_chain_compiled_ahead_is_what_its_first_call_launches(tmp_path, monkeypatch):
    """Every kernel the chain's first forward and backward launch on this GPU was compiled by a
    compile process beforehand (the same hashes: the CPU stand-in planned the GPU's tiles)."""
    import torch

    from kernels.block_sparse.hmm import HMM
    from kernels.launch import recording
    from workbench.compiling.target import visible_device_facts
    from workbench.suites.chain import chain_job, settled_chain, submit_chains

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    service = compile_service.install(CompileService(visible_device_facts("cuda"), 2, tmp_path / "log"))
    try:
        for heuristic, batch in (("small", 1), ("auto", 16)):
            hmm = HMM(T=4, L=1024, V=64, device="cuda", heuristic=heuristic)
            assert submit_chains([hmm], [batch]) == 1
            service.wait_any([chain_job(hmm, batch)], limit_s=120)
            ahead = settled_chain(hmm, batch)
            assert ahead is not None and ahead["ok"], ahead
            x = hmm.sample(batch)
            with recording() as launches:
                hmm.forward_backward(x)
            torch.cuda.synchronize()
            launched = {launch.compiled.hash for launch in launches}
            assert launched and launched <= {k["hash"] for k in ahead["kernels"]}, (heuristic, batch)
    finally:
        compile_service.install(None)
