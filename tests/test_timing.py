"""workbench.timing: the statistics on synthetic timings with known distributions (CPU), and the
three timings on a real kernel (GPU)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import testkit
import torch

from workbench import timing
from workbench.device import get_device
from workbench.suites.judge import RUN_SPREAD, RatioRow, judge
from workbench.suites.targets import MET, MISSED, TIE, Rule


class Synthetic:
    """A sampler drawing per-call times from a known distribution."""

    method = "synthetic"

    def __init__(self, draw, batch=1):
        self.draw, self.batch = draw, batch

    def sample(self):
        return [float(self.draw()) for _ in range(self.batch)]


def fake_clock(step_s):
    ticks = itertools.count()
    return lambda: next(ticks) * step_s


def test_median_interval_covers_the_true_median_at_its_confidence():
    """Lognormal(mu, 0.3) has median exp(mu); the 95% interval must cover it ~95% of the time."""
    rng = np.random.default_rng(1)
    true_median = math.exp(0.5)
    trials, covered = 400, 0
    for _ in range(trials):
        lo, hi = timing.median_interval(rng.lognormal(0.5, 0.3, size=31))
        covered += lo <= true_median <= hi
    # Order-statistic intervals are conservative: coverage at or a little above 95%.
    assert 0.92 <= covered / trials <= 0.995


def test_median_interval_is_scipys_quantile_test_interval_at_every_count():
    """The ranks are computed once per count; the bounds must be scipy's own, ties, a sample count
    too small for the confidence and another confidence included."""
    from scipy import stats

    rng = np.random.default_rng(3)
    for n in list(range(2, 80)) + [101, 257, 1000, 2000]:  # 2000: MAX_SAMPLES, past a float's 2**n
        for x in (rng.lognormal(0.0, 0.5, n), rng.integers(0, 4, n).astype(float)):
            for confidence in (0.95, 0.5):
                ci = stats.quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(confidence)
                want = (
                    float(ci.low) if np.isfinite(ci.low) else -math.inf,
                    float(ci.high) if np.isfinite(ci.high) else math.inf,
                )
                assert timing.median_interval(x, confidence) == want, (n, confidence, x)


def test_interval_narrows_with_samples_and_is_unbounded_for_one():
    rng = np.random.default_rng(2)
    few = timing.estimate(rng.normal(10, 1, 12), "m")
    many = timing.estimate(rng.normal(10, 1, 1200), "m")
    assert many.rel_half_width < few.rel_half_width
    one = timing.estimate([3.0], "m")
    assert math.isinf(one.rel_half_width) and not one.converged


def test_stopping_rule_stops_early_on_a_quiet_timing():
    rng = np.random.default_rng(3)
    quiet = Synthetic(lambda: rng.normal(1.0, 0.005))  # 0.5% noise: +-2% after the minimum
    est = timing.run_interleaved({"a": quiet}, budget_s=1e9, clock=fake_clock(0.0))["a"]
    assert est.converged and est.n == timing.MIN_SAMPLES
    assert est.lo <= 1.0 <= est.hi and est.rel_half_width <= timing.DEFAULT_REL_WIDTH


def test_a_noisy_cell_runs_out_of_budget_and_says_so():
    rng = np.random.default_rng(4)
    noisy = Synthetic(lambda: rng.uniform(0.5, 1.5))  # +-50%: the +-2% rule needs thousands
    est = timing.run_interleaved({"a": noisy}, budget_s=0.05, clock=fake_clock(0.001))["a"]
    assert not est.converged
    assert est.n >= timing.MIN_SAMPLES and est.n < 100  # stopped by the budget, not the sample cap
    assert est.rel_half_width > timing.DEFAULT_REL_WIDTH


def test_trials_alternate_between_variants():
    rng = np.random.default_rng(5)
    samplers = {name: Synthetic(lambda: rng.normal(1.0, 0.001)) for name in "ABC"}
    order: list = []
    out = timing.run_interleaved(samplers, budget_s=1e9, clock=fake_clock(0.0), order=order)
    assert set(out) == set("ABC")
    assert len(order) == 3 * timing.MIN_SAMPLES
    # Each round starts one place later: alternation kept, every place taken by each in turn.
    assert order[:9] == list("ABCBCACAB")
    rounds = [order[i : i + 3] for i in range(0, len(order), 3)]
    assert all(sorted(r) == list("ABC") for r in rounds)
    firsts = [r[0] for r in rounds]
    assert max(firsts.count(k) for k in "ABC") - min(firsts.count(k) for k in "ABC") <= 1


def test_a_converged_variant_keeps_alternating_while_another_is_noisy():
    rng = np.random.default_rng(6)
    samplers = {
        "quiet": Synthetic(lambda: rng.normal(1.0, 0.001)),
        "noisy": Synthetic(lambda: rng.uniform(0.5, 1.5)),
    }
    order: list = []
    out = timing.run_interleaved(samplers, budget_s=0.1, clock=fake_clock(0.001), order=order)
    assert out["quiet"].converged and not out["noisy"].converged
    assert out["quiet"].n == out["noisy"].n  # drift must hit both alike: same number of trials
    assert order[:6] == ["quiet", "noisy", "noisy", "quiet", "quiet", "noisy"]


def test_ratio_interval_and_the_three_verdicts():
    def est(median, half):
        return timing.Estimate(median, median - half, median + half, 20, "m", True, median, median)

    ratio, lo, hi = timing.ratio_interval(est(10.0, 0.2), est(8.0, 0.1))
    assert ratio == pytest.approx(1.25) and lo == pytest.approx(9.8 / 8.1) and hi == pytest.approx(10.2 / 7.9)
    assert timing.verdict(lo, hi, 1.0) == MET
    assert timing.verdict(lo, hi, 1.25) == TIE
    assert timing.verdict(lo, hi, 1.4) == MISSED


def _record(variant, backend, us, half_us):
    ms, half = us / 1e3, half_us / 1e3
    return {
        "variant": variant,
        "backend": backend,
        "mode": "forward",
        "passed": True,
        "ms_p50": ms,
        "kernel_ms": ms,
        "kernel_lo_ms": ms - half,
        "kernel_hi_ms": ms + half,
        "kernel_method": "cuda-graph",
        "timing_method": "cuda-graph",
    }


@pytest.mark.parametrize(
    "ours_us, peer_us, half_us, status",
    [
        (10.0, 10.1, 0.3, TIE),  # 1% apart with +-3% intervals: no verdict is honest
        (10.0, 12.0, 0.1, MET),
        (10.0, 8.0, 0.1, MISSED),
    ],
)
def test_judge_calls_a_straddling_ratio_within_noise(ours_us, peer_us, half_us, status):
    row = RatioRow(
        target="t", kind="versus", title="t", family="rms_norm", mode="forward", x_name="hidden", x=1, ours="o"
    )
    ours = _record("o", "gpu", ours_us, half_us)
    peer = _record("p", "torch", peer_us, half_us)
    judged = judge(row, ours, [peer], ratio_rules=(Rule(1.0),))
    assert judged.status == status
    assert judged.ratio_lo <= judged.ratio <= judged.ratio_hi
    if status == TIE:
        assert "straddles 1" in judged.reason


def test_a_verdict_allows_for_the_run_to_run_spread():
    # 3% apart with +-0.5% intervals: one run's interval clears 1.0, but the same ratio moves by
    # up to RUN_SPREAD between runs, so only a ratio that clears it by more than that is MET.
    def row():
        return RatioRow(
            target="t", kind="versus", title="t", family="rms_norm", mode="forward", x_name="hidden", x=1, ours="o"
        )

    spread = RUN_SPREAD["kernel"]
    close = judge(row(), _record("o", "gpu", 10.0, 0.05), [_record("p", "torch", 10.3, 0.05)], ratio_rules=(Rule(1.0),))
    assert close.status == TIE and close.ratio_lo == pytest.approx(10.25 / 10.05 / (1 + spread))
    clear = judge(row(), _record("o", "gpu", 10.0, 0.05), [_record("p", "torch", 11.0, 0.05)], ratio_rules=(Rule(1.0),))
    assert clear.status == MET and clear.ratio_hi == pytest.approx(11.05 / 9.95 * (1 + spread))


class _EventLog:
    """A stand-in device backend that logs the order of flushes, syncs and event records."""

    def __init__(self):
        self.log = []
        backend = self

        class Event:
            made = 0

            def __init__(self, enable_timing=True):
                self.name = ("start", "end")[Event.made % 2]  # the sampler makes them in pairs
                Event.made += 1

            def record(self):
                backend.log.append(self.name)

            def synchronize(self):
                backend.log.append("wait end")

            def elapsed_time(self, other):
                return 1.0

        self.Event = Event

    def synchronize(self):
        self.log.append("sync")


def test_the_call_timing_starts_on_an_idle_device():
    backend = _EventLog()
    sampler = timing.EventCallSampler(
        lambda: backend.log.append("call"), backend, flush=lambda: backend.log.append("flush"), batch=2
    )
    assert sampler.sample() == [1.0, 1.0]
    one = ["flush", "sync", "start", "call", "end", "wait end"]
    assert backend.log == one + one  # the flush is over before the start event: no host time hidden


def test_call_and_host_batches_start_with_an_untimed_call():
    """warm_call: one call before the batch's first flush (call) or sync (host), timed by nothing;
    the device's samplers ask for it."""
    backend = _EventLog()
    sampler = timing.EventCallSampler(
        lambda: backend.log.append("call"),
        backend,
        flush=lambda: backend.log.append("flush"),
        batch=2,
        warm_call=True,
    )
    assert sampler.sample() == [1.0, 1.0]
    one = ["flush", "sync", "start", "call", "end", "wait end"]
    assert backend.log == ["call"] + one + one
    log = []
    host = timing.HostSampler(lambda: log.append("call"), sync=lambda: log.append("sync"), batch=2, warm_call=True)
    assert len(host.sample()) == 2
    assert log == ["call", "sync", "call", "sync", "call", "sync"]
    from workbench.device import Device

    samplers, _ = Device("cuda").samplers(lambda: None, which=("call", "host"))  # built, not run: no GPU needed
    assert samplers["call"].warm_call and samplers["host"].warm_call


def test_judge_call_targets_read_call_time():
    row = RatioRow(
        target="t", kind="versus", title="t", family="rms_norm", mode="forward", x_name="hidden", x=1, ours="o"
    )
    ours = dict(_record("o", "gpu", 10.0, 0.1), call_ms=0.030, call_lo_ms=0.029, call_hi_ms=0.031)
    peer = dict(_record("p", "torch", 12.0, 0.1), call_ms=0.020, call_lo_ms=0.0195, call_hi_ms=0.0205)
    assert judge(row, ours, [peer], ratio_rules=(Rule(1.0),)).status == MET  # kernel: ours faster
    row2 = RatioRow(
        target="t", kind="versus", title="t", family="rms_norm", mode="forward", x_name="hidden", x=1, ours="o"
    )
    judged = judge(row2, ours, [peer], ratio_rules=(Rule(1.0),), timing="call")
    assert judged.status == MISSED and judged.timing.startswith("call")  # call: the peer is faster


def test_measure_on_the_cpu_labels_interpreter_wall_time():
    from workbench.measure import measure

    rec = measure("rms_norm", "gpu_row", device="cpu", dtype="fp32", problem={"rows": 3, "hidden": 40}, rep_ms=1)
    assert rec.ok and rec.kernel_method == "interpreter-wall" and rec.timing_method == "interpreter-wall"
    assert rec.kernel_n >= 3 and rec.kernel_ms == rec.ms_p50 > 0
    assert rec.call_ms is None and rec.host_ms is None  # no device: no separate call or host time
    assert isinstance(rec.noisy, bool)


def test_measure_many_interleaves_and_keeps_each_configuration_apart():
    from workbench.measure import measure_many

    configs = [
        dict(variant="gpu_row", dtype="fp32", problem={"rows": 3, "hidden": 40}),
        dict(variant="torch_eager", dtype="fp32", problem={"rows": 3, "hidden": 40}),
        dict(variant="gpu_row", dtype="fp32", problem={"rows": 3, "hidden": 40}, params={"BLOCK_SIZE": 8}),
    ]
    recs = measure_many("rms_norm", configs, device="cpu", rep_ms=1, on_error="record")
    assert [r.variant for r in recs] == ["gpu_row", "torch_eager", "gpu_row"]
    assert recs[0].ok and recs[1].ok and recs[1].timing_method == "cpu-wall"
    assert not recs[2].ok and "BLOCK_SIZE" in recs[2].error  # a bad tile stays its own error record
    assert recs[2].kernel_ms is None


# --- GPU: the three timings on a real kernel ---------------------------------------------------
@pytest.mark.gpu
@pytest.mark.exclusive
def test_graph_replay_and_profiler_agree_on_a_capturable_kernel():
    from kernels.rms_norm import rms_norm

    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)

    def call():
        return rms_norm(x, w)

    call()
    # Both with the L2 warm (graph replay cannot flush without adding node latency).
    samplers = {"graph": timing.CudaGraphSampler(call), "profiler": timing.ProfilerKernelSampler(call)}
    est = timing.run_interleaved(samplers, budget_s=2.0)
    graph, prof = est["graph"].median, est["profiler"].median
    assert samplers["graph"].method == "cuda-graph, L2 warm" and samplers["profiler"].method == "profiler, L2 warm"
    assert graph > 0 and prof > 0
    assert abs(graph - prof) / prof < 0.10, (graph, prof)
    # A cold L2 can only make the kernel slower.
    cold = timing.run_interleaved({"p": timing.ProfilerKernelSampler(call, flush=get_device("cuda").flush_l2)})
    assert cold["p"].median >= 0.95 * prof


@pytest.mark.gpu
def test_three_timings_of_a_real_kernel():
    from workbench.measure import measure

    rec = measure(
        "rms_norm", "gpu_multirow", device="cuda", dtype="bf16", mode="full", problem={"rows": 4096, "hidden": 1024}
    )
    assert rec.ok, rec.error
    assert rec.kernel_method == "profiler, L2 flushed"
    assert 0 < rec.kernel_lo_ms <= rec.kernel_ms <= rec.kernel_hi_ms
    assert rec.call_ms >= rec.kernel_ms * 0.9  # a call cannot take less device time than its kernels
    assert rec.host_ms > 0 and rec.host_n >= timing.MIN_SAMPLES
    assert rec.ms_p50 == rec.kernel_ms


@pytest.mark.gpu
def test_an_uncapturable_call_is_timed_by_the_profiler():
    x = torch.randn(1 << 20, device="cuda")

    def call():
        y = x * 2
        return y.sum().item()  # a read-back: cannot be captured in a CUDA graph

    with pytest.raises(RuntimeError):  # torch reports the failed capture as a RuntimeError
        timing.CudaGraphSampler(call)
    torch.randn(16, device="cuda")  # the failed capture left the device's random generator usable
    sampler, note = timing.kernel_sampler(call, flush=get_device("cuda").flush_l2)
    assert sampler.method == "profiler, L2 flushed" and note == ""
    est = timing.run_interleaved({"k": sampler}, budget_s=1.0)["k"]
    assert est.median > 0


@pytest.mark.gpu
def test_kernel_timings_after_the_profiler_was_started_in_a_warm_up():
    timing.start_profiler()  # as a measuring actor's warm-up does (or nothing, if a session ran)
    assert timing.start_profiler() is False
    x = torch.randn(1 << 22, device="cuda")
    y = torch.empty_like(x)
    sampler, note = timing.kernel_sampler(lambda: y.copy_(x), flush=get_device("cuda").flush_l2)
    assert note == "" and min(sampler.sample()) > 0


def test_a_converged_timing_stops_for_every_variant_and_leaves_the_budget_to_the_others():
    """Kernel samplers of A and B converge; call samplers never do: the kernel group stops
    (for both at once, with equal trials) and the call group alone uses the rest of the budget."""
    rng = np.random.default_rng(7)
    samplers = {
        ("A", "kernel"): Synthetic(lambda: rng.normal(1.0, 0.001)),
        ("B", "kernel"): Synthetic(lambda: rng.normal(2.0, 0.001)),
        ("A", "call"): Synthetic(lambda: rng.uniform(0.5, 1.5)),
        ("B", "call"): Synthetic(lambda: rng.uniform(1.0, 3.0)),
    }
    order: list = []
    out = timing.run_interleaved(samplers, budget_s=0.2, clock=fake_clock(0.001), order=order, group=lambda key: key[1])
    kernel_a, kernel_b = out[("A", "kernel")], out[("B", "kernel")]
    assert kernel_a.converged and kernel_b.converged
    assert kernel_a.n == kernel_b.n == timing.MIN_SAMPLES  # stopped together, at the minimum
    call_a, call_b = out[("A", "call")], out[("B", "call")]
    assert call_a.n == call_b.n > 3 * timing.MIN_SAMPLES  # the call group kept alternating
    after = order[4 * timing.MIN_SAMPLES :]
    assert set(after) == {("A", "call"), ("B", "call")}
    pairs = [after[i : i + 2] for i in range(0, len(after) - 1, 2)]
    assert all(set(pair) == {("A", "call"), ("B", "call")} for pair in pairs)  # still alternating
    firsts = [pair[0] for pair in pairs]
    assert abs(firsts.count(("A", "call")) - firsts.count(("B", "call"))) <= 1  # each first as often


def test_without_groups_a_converged_sampler_keeps_its_turns():
    rng = np.random.default_rng(8)
    samplers = {"k": Synthetic(lambda: rng.normal(1.0, 0.001)), "c": Synthetic(lambda: rng.uniform(0.5, 1.5))}
    out = timing.run_interleaved(samplers, budget_s=0.05, clock=fake_clock(0.001))
    assert out["k"].n == out["c"].n > timing.MIN_SAMPLES


def test_warm_l2_kernel_timing_skips_the_flush_while_call_timing_keeps_it(monkeypatch):
    """``l2="warm"`` hands the CUDA kernel sampler no flush (the L2 stays as the previous call left
    it); the call timing starts from a flushed L2 either way; anything else is refused."""
    from workbench.device import Device

    seen = []

    def kernel_sampler(fn, flush=None):
        seen.append(flush)
        return timing.WallSampler(fn, method="stand-in"), ""

    monkeypatch.setattr(timing, "kernel_sampler", kernel_sampler)
    dev = Device("cuda", 0)  # nothing here touches CUDA: the samplers are only built
    warm, _ = dev.samplers(lambda: None, l2="warm")
    cold, _ = dev.samplers(lambda: None)
    assert seen == [None, dev.flush_l2]
    assert warm["call"].flush == dev.flush_l2 and cold["call"].flush == dev.flush_l2
    with pytest.raises(ValueError, match="l2='hot' is not allowed; use one of cold, warm"):
        dev.samplers(lambda: None, l2="hot")


def test_measure_many_refuses_an_unknown_l2_state():
    from workbench.measure import measure_many

    with pytest.raises(ValueError, match="use one of cold, warm"):
        measure_many("rms_norm", [dict(variant="gpu_row")], device="cpu", quick=True, l2="lukewarm")


def test_the_profiler_is_started_once_per_process(monkeypatch):
    """The session itself needs CUDA (the GPU tests run it); here, that it runs once."""
    import workbench.timing as timing

    sessions = []
    monkeypatch.setattr(timing, "cuda_profiled_operations", lambda run: sessions.append(run) or [])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timing, "_PROFILER_STARTED", False)
    assert timing.start_profiler() is True
    assert timing.start_profiler() is False  # the second costs nothing
    assert len(sessions) == 1


@pytest.mark.parametrize("inductor_loaded", [False, True])
def test_a_profiler_session_imports_no_inductor_that_was_not_loaded(monkeypatch, inductor_loaded):
    """torch.profiler's session start asks ``hasattr(torch, "_inductor")``, which imports Inductor
    (seconds); without Inductor loaded the session is the autograd profiler's, device activity
    only, and Inductor stays unloaded; with it loaded, torch.profiler's own session is used."""
    import sys
    import types

    import torch.autograd.profiler
    import torch.profiler

    opened = []  # (which profiler, its keyword arguments), one per session opened

    def stand_in(kind):
        """A profiler session that records how it was opened (the real ones need CUDA)."""

        class Session:
            function_events = []

            def __init__(self, **kwargs):
                opened.append((kind, kwargs))

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def events(self):
                return []

        return Session

    monkeypatch.setattr(torch.profiler, "profile", stand_in("torch.profiler"))
    monkeypatch.setattr(torch.autograd.profiler, "profile", stand_in("autograd"))
    if inductor_loaded:
        monkeypatch.setitem(sys.modules, "torch._inductor", types.ModuleType("torch._inductor"))
    else:
        monkeypatch.delitem(sys.modules, "torch._inductor", raising=False)
    ran = []
    assert timing.cuda_profiled_operations(lambda: ran.append(1)) == []
    assert ran == [1]
    (kind, kwargs), *rest = opened
    assert not rest
    if inductor_loaded:
        assert kind == "torch.profiler" and kwargs == {"activities": [torch.profiler.ProfilerActivity.CUDA]}
    else:
        assert kind == "autograd" and kwargs == {"use_cpu": False, "use_device": "cuda", "use_kineto": True}
        assert "torch._inductor" not in sys.modules


@pytest.mark.gpu
@pytest.mark.exclusive
def test_the_first_profiler_session_leaves_inductor_unloaded_and_times_alike():
    """In a fresh process the first session (the autograd profiler's) does not import Inductor;
    a copy's kernel time from it agrees with torch.profiler's, taken here with Inductor loaded."""
    import json
    import statistics

    import torch._inductor  # noqa: F401  (this process: torch.profiler's session)

    script = """
import json, statistics, sys
import torch
from workbench import timing
from workbench.device import get_device
x = torch.ones(1 << 24, device="cuda"); y = torch.empty_like(x)
timing.start_profiler()
inductor = "torch._inductor" in sys.modules
sampler = timing.ProfilerKernelSampler(lambda: y.copy_(x), calls=10, flush=get_device("cuda").flush_l2)
print(json.dumps(dict(inductor=inductor, ms=statistics.median(v for _ in range(5) for v in sampler.sample()))))
sys.stdout.flush()
import os
os._exit(0)  # a profiled process hangs at its exit now and then (reports/h200-cold-start): not this test's subject
"""
    done = testkit.python_in_repo(script, timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    child = json.loads(done.stdout.strip().splitlines()[-1])
    assert child["inductor"] is False and child["ms"] > 0
    x = torch.ones(1 << 24, device="cuda")
    y = torch.empty_like(x)
    sampler = timing.ProfilerKernelSampler(lambda: y.copy_(x), calls=10, flush=get_device("cuda").flush_l2)
    here = statistics.median(v for _ in range(5) for v in sampler.sample())
    assert abs(child["ms"] - here) / here < 0.15, (child, here)


def test_median_kernel_us_calls_once_first_then_takes_the_median_of_every_sample(monkeypatch):
    """The benchmark scripts' one-number kernel time: the function's first call (its compile)
    before any sample, the flush handed to the sampler, the median over rounds x calls in us."""
    seen = {}

    class Sampler:
        def __init__(self, fn, calls, flush):
            seen.update(calls=calls, flush=flush, first_calls=len(made))

        def sample(self):
            seen["rounds"] = seen.get("rounds", 0) + 1
            return [0.001 * (i + 1) for i in range(seen["calls"])]  # 1..calls us

    made = []
    monkeypatch.setattr(timing, "ProfilerKernelSampler", Sampler)
    flush = object()
    us = timing.median_kernel_us(lambda: made.append(1), flush, calls=5, rounds=4)
    assert seen == {"calls": 5, "flush": flush, "first_calls": 1, "rounds": 4}
    assert us == pytest.approx(3.0)
