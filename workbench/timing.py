"""Timings a kernel engineer can trust: kernel, call and host time, each a median with an interval.

One number from one ``do_bench`` run mixes the device's work with the host's launch cost and its
noise; on the lent H100 that moved a cell by 2x between runs. This module takes three timings
of the same call, each answering one question:

* **kernel** - the device's work only: the sum of the call's device-operation durations that
  the CUDA profiler reports, with the L2 flushed before each call (:func:`kernel_sampler` says
  why this, and not graph replay, comes first); it needs no capture, so calls with a host sync
  inside are timed alike. Graph replay (``do_bench_cudagraph``'s idea) is the fallback and the
  cross-check; the record's method says which ran.
* **call** - what a lone eager call pays: device events around one call issued to an idle
  device, the L2 flushed (and the flush awaited) before it, so host issue time and device work
  both count (:class:`EventCallSampler` says why not ``do_bench``'s overlap with the flush).
* **host** - the wall time to issue one call from Python, the device idle and synchronised
  before it. ``call - kernel`` hides host work that overlaps the device, so host is its own
  number.

Each timing is a stream of samples. :func:`run_interleaved` draws them round-robin over every
sampler it is given, each round starting one place later (A B C, B C A, C A B, ...), so that
clock or thermal drift and a place in the round hit all alike, and stops
when the 95% confidence interval of every median is within ``rel_width`` (default +-2%) of it,
or when the time budget ends; a timing that did not get there is marked not converged, and
the record that holds it is "noisy". The interval is the distribution-free one for a quantile
(order statistics at binomial ranks, the bounds of ``scipy.stats.quantile_test``, computed here
once per sample count): it holds for skewed, heavy-tailed timing samples without a normality
assumption.

A ratio of two medians carries the interval those two intervals imply (:func:`ratio_interval`),
and a verdict against a threshold is MET or MISSED only when the interval lies wholly on one
side of it, otherwise a tie (:func:`verdict`).

Why one long module: the samplers, the statistics and the interleaving loop are one protocol;
every sampler is short, and a reader checks the protocol in one place.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

CONFIDENCE = 0.95
DEFAULT_REL_WIDTH = 0.02
MIN_SAMPLES = 10
MAX_SAMPLES = 2000

# Verdict words (the suites' vocabulary; workbench.suites.targets re-uses them).
MET, MISSED, TIE = "MET", "MISSED", "within noise"


@dataclass(frozen=True)
class Estimate:
    """A median per-call time in ms with its confidence interval, from ``n`` samples."""

    median: float
    lo: float
    hi: float
    n: int
    method: str
    converged: bool
    p20: float
    p80: float

    @classmethod
    def of(cls, median: float, lo: float, hi: float) -> "Estimate":
        """A median and its interval kept in a record, as an Estimate for interval maths
        (:func:`ratio_interval`); its sample count and percentiles are not kept, so not given."""
        return cls(median, lo, hi, 0, "", True, median, median)

    @property
    def rel_half_width(self) -> float:
        """Half the interval's width relative to the median (inf when it is unbounded)."""
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)) or self.median <= 0:
            return math.inf
        return (self.hi - self.lo) / 2 / self.median

    def overlaps(self, other: "Estimate") -> bool:
        """Whether the two intervals overlap: the two medians cannot be told apart."""
        return self.lo <= other.hi and other.lo <= self.hi

    def fields(self, prefix: str) -> dict:
        """This estimate as ``Record`` fields named ``{prefix}_ms``, ``{prefix}_lo_ms``, ..."""
        return {
            f"{prefix}_ms": self.median,
            f"{prefix}_lo_ms": _finite_or_none(self.lo),
            f"{prefix}_hi_ms": _finite_or_none(self.hi),
            f"{prefix}_n": self.n,
        }


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


# --- statistics --------------------------------------------------------------------------------
def median_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free confidence interval of the median: two order statistics of the samples,
    at the ranks the binomial distribution gives (scipy's ``quantile_test`` interval, p = 0.5).

    The ranks depend on the sample count alone, so they are computed once per count
    (:func:`_median_ranks`): the timing loops ask for an interval after every round, and scipy's
    whole test took about 2 ms a call. With too few samples for the requested confidence a bound
    is infinite, which reads as "not converged" rather than as a false precision.
    """
    x = np.sort(np.asarray(samples, dtype=float))
    if x.size < 2:
        return -math.inf, math.inf
    lo_rank, hi_rank = _median_ranks(int(x.size), float(confidence))
    lo = float(x[lo_rank]) if lo_rank is not None else -math.inf
    hi = float(x[hi_rank]) if hi_rank is not None else math.inf
    return (lo if math.isfinite(lo) else -math.inf), (hi if math.isfinite(hi) else math.inf)


@functools.lru_cache(maxsize=4096)
def _median_ranks(n: int, confidence: float) -> tuple[int | None, int | None]:
    """The ranks (0-based, in sorted order) of the median interval's bounds among ``n`` samples,
    None where the bound lies past the samples: the quantiles of the two tails of binomial(n, 1/2),
    as scipy's ``binom.ppf`` and ``binom.isf`` give them, from its exact CDF in integers (so the
    first measurement of a process does not import scipy.stats: 2.3 s on an H200 host)."""
    num, den = ((1 - confidence) / 2).as_integer_ratio()  # the tail, exactly: P >= tail as integers
    total = 1 << n
    cdf, term, lo_q = 0, 1, None  # term: C(n, k); lo_q: the smallest k with P(X <= k) >= tail
    hi_q = n  # the smallest k with P(X > k) <= tail
    for k in range(n + 1):
        cdf += term
        if lo_q is None and cdf * den >= num * total:
            lo_q = k
        if (total - cdf) * den <= num * total:
            hi_q = k
            break
        term = term * (n - k) // (k + 1)
    lo = lo_q - 1
    return (lo if lo >= 0 else None), (hi_q if hi_q < n else None)


def estimate(samples: Sequence[float], method: str, rel_width: float = DEFAULT_REL_WIDTH) -> Estimate:
    """Median, interval and convergence of one timing's samples."""
    x = np.asarray(samples, dtype=float)
    lo, hi = median_interval(x)
    med = float(np.median(x)) if x.size else math.nan
    p20, p80 = (float(v) for v in np.quantile(x, [0.2, 0.8])) if x.size else (math.nan, math.nan)
    est = Estimate(median=med, lo=lo, hi=hi, n=int(x.size), method=method, converged=False, p20=p20, p80=p80)
    done = x.size >= MIN_SAMPLES and est.rel_half_width <= rel_width
    return Estimate(median=med, lo=lo, hi=hi, n=int(x.size), method=method, converged=done, p20=p20, p80=p80)


def ratio_interval(num: Estimate, den: Estimate) -> tuple[float, float, float]:
    """``num / den`` with the interval the two medians' intervals imply.

    The bounds pair the extremes (lowest numerator over highest denominator and the reverse):
    if each interval covers its median, the ratio's interval covers the ratio of medians.
    """
    ratio = num.median / den.median
    lo = num.lo / den.hi if den.hi > 0 and math.isfinite(den.hi) and num.lo > 0 else 0.0
    hi = num.hi / den.lo if den.lo > 0 and math.isfinite(num.hi) else math.inf
    return ratio, lo, hi


def verdict(lo: float, hi: float, threshold: float) -> str:
    """MET when the whole interval clears ``threshold``, MISSED when it is wholly below, else a tie."""
    if lo >= threshold:
        return MET
    if hi < threshold:
        return MISSED
    return TIE


# --- sampling ----------------------------------------------------------------------------------
class Sampler(Protocol):
    """One timing of one call: ``method`` names how, ``sample()`` returns new per-call times (ms)."""

    method: str

    def sample(self) -> list[float]: ...


def run_interleaved(
    samplers: Mapping[object, Sampler],
    *,
    rel_width: float = DEFAULT_REL_WIDTH,
    budget_s: float = 1.0,
    min_samples: int = MIN_SAMPLES,
    max_samples: int = MAX_SAMPLES,
    clock: Callable[[], float] = time.perf_counter,
    order: list | None = None,
    group: Callable[[object], object] | None = None,
) -> dict[object, Estimate]:
    """Sample every sampler round-robin until all medians are within ``rel_width`` or time ends.

    Each round draws once from each sampler still sampling, in the mapping's order turned by
    one place per round (A B C, B C A, C A B, ...): trials of variants A, B and C alternate, and
    each sampler takes every place in the round equally often. The place matters: sampled first in every
    round, right after the round's estimates, an eager norm call read 3-5 us more host time
    than the same call sampled last in the same rounds (reports/h100-eager-call, "The place in
    the round"). ``group(key)`` names the timing a sampler belongs to
    (kernel, call, host; one group for all when None). A sampler whose estimate has converged
    still takes its turn while another of its group has not: alternation is what keeps drift
    from favouring one side. Once every sampler of a group has converged, the whole group stops
    at once, and the rounds left in the budget go to the groups still sampling (on CUDA the
    kernel time converges within a few dozen samples; call and host times, which carry the
    host's jitter, use the rest). ``order`` (a list) receives the keys in the order they were
    sampled, for tests and logs.
    """
    if not samplers:
        return {}
    group = group or (lambda key: None)
    members: dict[object, list] = {}
    for key in samplers:
        members.setdefault(group(key), []).append(key)
    samples: dict[object, list[float]] = {k: [] for k in samplers}
    keys = list(samplers)
    active = set(members)
    start = clock()
    rounds = 0
    while active:
        live = [k for k in keys if group(k) in active]
        turn = rounds % len(live)
        for key in live[turn:] + live[:turn]:
            samples[key].extend(samplers[key].sample())
            if order is not None:
                order.append(key)
        rounds += 1
        counts = [len(v) for v in samples.values()]
        for name in list(active):
            keys_of = members[name]
            if min(len(samples[k]) for k in keys_of) >= min_samples and all(
                estimate(samples[k], samplers[k].method, rel_width).converged for k in keys_of
            ):
                active.discard(name)
        if (min(counts) >= min_samples and clock() - start >= budget_s) or max(counts) >= max_samples:
            break
    return {k: estimate(samples[k], samplers[k].method, rel_width) for k in samplers}


class WallSampler:
    """Wall time of whole synchronised calls (the CPU, the interpreter, or a host-side timing)."""

    def __init__(self, fn: Callable[[], object], method: str, sync: Callable[[], None] | None = None, batch: int = 1):
        self.fn, self.method, self.sync, self.batch = fn, method, sync or (lambda: None), batch

    def sample(self) -> list[float]:
        out = []
        for _ in range(self.batch):
            self.sync()
            t0 = time.perf_counter()
            self.fn()
            self.sync()
            out.append((time.perf_counter() - t0) * 1e3)
        return out


class HostSampler:
    """Time to issue one call from Python with the device idle before it (no sync inside the timing).

    ``warm_call``: each batch starts with one untimed call, so the first timed call does not
    pay for the other samplers that ran since this one's last batch (their Python code and
    data in the CPU's caches)."""

    method = "host-issue"

    def __init__(self, fn: Callable[[], object], sync: Callable[[], None], batch: int = 5, warm_call: bool = False):
        self.fn, self.sync, self.batch, self.warm_call = fn, sync, batch, warm_call

    def sample(self) -> list[float]:
        out = []
        if self.warm_call:
            self.fn()
        for _ in range(self.batch):
            self.sync()
            t0 = time.perf_counter()
            self.fn()
            out.append((time.perf_counter() - t0) * 1e3)
        self.sync()
        return out


class EventCallSampler:
    """Device events around one eager call from an idle device, the L2 flushed and the flush
    waited for before the start event.

    ``do_bench`` records its start event straight after enqueueing the flush, so the host issues
    the call while the device is still flushing: host time up to the flush's length (about 90 us
    for 256 MiB on the H100) is hidden, and beyond it shows in full. A call's time then jumps
    with small changes of host speed: on the H100 our RMSNorm forward at 4096 x 1024 read 43 us
    in one pass and 10 us in the next, F.rms_norm 11 us in both. Waiting for the flush makes
    the call time host issue plus device work (what a lone eager call costs after anything
    that synchronises), linear in both: the same two passes read 66 and 47 us against 39 and
    25 us.
    """

    method = "device-events, idle start"

    def __init__(
        self, fn: Callable[[], object], backend, flush: Callable[[], None], batch: int = 5, warm_call: bool = False
    ):
        self.fn, self.backend, self.flush, self.batch, self.warm_call = fn, backend, flush, batch, warm_call

    def sample(self) -> list[float]:
        out = []
        if self.warm_call:  # as HostSampler's: before the flush, so the timed calls still start cold
            self.fn()
        for _ in range(self.batch):
            self.flush()
            self.backend.synchronize()
            start, end = self.backend.Event(enable_timing=True), self.backend.Event(enable_timing=True)
            start.record()
            self.fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end))
        return out


class BackToBackSampler:
    """Device events around ``calls`` calls issued back to back, per call: the host runs ahead,
    so the device's work dominates. The NPU's kernel time (no graph capture there) and the last
    fallback on CUDA."""

    def __init__(self, fn: Callable[[], object], backend, method: str, calls: int = 10):
        self.fn, self.backend, self.method, self.calls = fn, backend, method, calls

    def sample(self) -> list[float]:
        start, end = self.backend.Event(enable_timing=True), self.backend.Event(enable_timing=True)
        self.backend.synchronize()
        start.record()
        for _ in range(self.calls):
            self.fn()
        end.record()
        self.backend.synchronize()
        return [start.elapsed_time(end) / self.calls]


# --- CUDA kernel time --------------------------------------------------------------------------
class CudaGraphSampler:
    """Device time per call from CUDA-graph replay: no host in the loop.

    With ``flush`` (a call that overwrites more memory than the L2 holds) the graph holds, per
    call, ``flush(); start event; fn(); end event`` with the events captured as graph nodes
    (``external`` events), so each call starts with a cold L2 as in the *call* timing and as
    in a model, where the data rarely sits in L2, and each replay yields one sample per call.
    Without it (or where this torch cannot capture timing events) the graph holds ``calls``
    calls back to back and a replay yields their mean, with the L2 warm: a kernel whose data
    fits in L2 then reads it from there. ``method`` says which ran. Construction raises when
    ``fn`` cannot be captured (a host sync, a read-back); see :func:`kernel_sampler`.
    """

    def __init__(
        self,
        fn: Callable[[], object],
        flush: Callable[[], None] | None = None,
        target_ms: float = 0.2,
        max_calls: int = 100,
        batch: int = 3,
    ):
        import torch

        self._torch = torch
        self.batch = batch
        self.events: list = []
        self.graph = _capture(fn, 1)
        probe = self._replay_ms(5)
        self.calls = int(min(max_calls, max(1, math.ceil(target_ms / max(probe, 1e-4)))))
        self.graph = None  # free the probe's pool before the real capture
        if flush is not None:
            try:
                self.calls = min(self.calls, 20)  # each call also writes the flush buffer
                self.events = [
                    (
                        torch.cuda.Event(enable_timing=True, external=True),
                        torch.cuda.Event(enable_timing=True, external=True),
                    )
                    for _ in range(self.calls)
                ]
                self.graph = _capture(fn, self.calls, flush=flush, events=self.events)
                self.method = "cuda-graph, L2 flushed"
                return
            except Exception:  # noqa: BLE001 - no timing events in graphs here: warm-L2 replay
                self.events = []
                torch.cuda.synchronize()
        self.graph = _capture(fn, self.calls)
        self.method = "cuda-graph, L2 warm"

    def _replay_ms(self, n: int) -> float:
        times = []
        for _ in range(n):
            start = self._torch.cuda.Event(enable_timing=True)
            end = self._torch.cuda.Event(enable_timing=True)
            start.record()
            self.graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return float(np.median(times))

    def sample(self) -> list[float]:
        torch = self._torch
        if self.events:
            self.graph.replay()
            torch.cuda.synchronize()
            return [start.elapsed_time(end) for start, end in self.events]
        pairs = []
        torch.cuda.synchronize()
        for _ in range(self.batch):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.graph.replay()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        return [s.elapsed_time(e) / self.calls for s, e in pairs]

    def close(self) -> None:
        self.graph = None
        self.events = []


def _capture(fn: Callable[[], object], calls: int, flush=None, events=None):
    import torch

    # Warm up on a side stream first (torch's recipe): lazy state (cuBLAS handles, autograd's
    # device thread, allocator blocks) must not be created inside the capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # A capture that fails (a read-back, a host sync) ends before torch hands the device's
    # random generator back: every later torch.randn on the device then raises "Offset
    # increment outside graph capture". Its state from before the capture is put back instead.
    generator = torch.cuda.default_generators[torch.cuda.current_device()]
    saved = generator.clone_state()
    try:
        with torch.cuda.graph(graph):
            for i in range(calls):
                if flush is not None:
                    flush()
                if events:
                    events[i][0].record()
                fn()
                if events:
                    events[i][1].record()
    except BaseException:
        generator.graphsafe_set_state(saved)
        raise
    torch.cuda.synchronize()
    return graph


TEARDOWN_SWITCH = "TEARDOWN_CUPTI"


class ProfilerKernelSampler:
    """Summed device time per call from ``torch.profiler``: for calls a graph cannot capture.

    One profiling session covers ``calls`` calls; when every call launched the same number of
    device operations the trace is cut into per-call samples, else the session gives one. With
    ``flush`` each call is preceded by it (cold L2, as in the graph sampler) and the flush's own
    operation, the first of each call's share, is left out of the sum. ``ops_per_call`` is how
    many device operations a call launched (the count a same-size copy matches:
    :func:`workbench.same_size_copy.same_size_copy_fields`).

    Each session ends with CUPTI torn down (``TEARDOWN_CUPTI=1`` for Kineto, unless the caller
    set the variable): left attached, as Kineto does by default, it slows every later CUDA call
    of the process, and the call and host timings of the same cell come after a session. On the
    H100 (``benchmarks/diagnostics/call_breakdown.py --sessions-only``, 4096 x 1024 bf16) five sessions
    left our forward+backward at 511 us of host time against 278 before, F.rms_norm's at 409
    against 130; torn down, 248 against 232 and 132 against 113. A session then costs about
    23 ms instead of 11.
    """

    def __init__(self, fn: Callable[[], object], calls: int = 10, flush: Callable[[], None] | None = None):
        self.fn, self.calls, self.flush = fn, calls, flush
        self.method = "profiler, L2 flushed" if flush is not None else "profiler, L2 warm"
        self.op_counts: dict[int, int] = {}  # device operations per call -> sessions that saw that many
        os.environ.setdefault(TEARDOWN_SWITCH, "1")  # Kineto reads it as each session stops

    @property
    def ops_per_call(self) -> int | None:
        """The device operations one call launched (the flush left out), as most sessions saw
        them; None while no session split evenly into calls."""
        if not self.op_counts:
            return None
        return max(self.op_counts, key=self.op_counts.get)

    def sample(self) -> list[float]:
        import torch

        def run_calls() -> None:
            for _ in range(self.calls):
                if self.flush is not None:
                    self.flush()
                self.fn()
            torch.cuda.synchronize()

        torch.cuda.synchronize()
        device_ops = cuda_profiled_operations(run_calls)
        global _PROFILER_STARTED
        _PROFILER_STARTED = True
        device_ops.sort(key=lambda e: e.time_range.start)
        us = [e.time_range.elapsed_us() for e in device_ops]
        if not us:
            return [0.0]
        skip = 1 if self.flush is not None else 0
        per_call, ops = split_per_call(us, self.calls, skip)
        if per_call is not None:
            self.op_counts[ops] = self.op_counts.get(ops, 0) + 1
            return per_call
        if skip:
            # Uneven calls: drop the flushes by name and size (the trace opens with one; a fill
            # of the call's own is far smaller than a write of more than the whole L2).
            first = device_ops[0]
            us = [
                u
                for e, u in zip(device_ops, us)
                if not (e.name == first.name and u >= 0.5 * first.time_range.elapsed_us())
            ]
        return [sum(us) / self.calls / 1e3]


def cuda_profiled_operations(run: Callable[[], None]) -> list:
    """The CUDA device operations (Kineto's ``FunctionEvent`` objects) of one profiler session over
    ``run()``, device activity only.

    ``torch.profiler.profile`` asks, as each session starts, whether Inductor's CUDA graphs are on
    (``hasattr(torch, "_inductor")``), and that question imports Inductor in a process that has
    not: 5.6-6.6 s on an H200 host, against 15-17 ms for the session opened here
    (``benchmarks/diagnostics/process_start.py``), and 1.5-2.9 s on the 2-core CPU machine.
    Where Inductor is loaded, the session is torch.profiler's, with its guard for Inductor's CUDA
    graphs (a suite's torch.compile peers load it); elsewhere it is the autograd profiler that
    torch.profiler wraps, with the same settings (Kineto, device activity only), so no kernel
    timing imports a compiler it does not use.
    """
    from torch.autograd import DeviceType

    with warnings.catch_warnings():
        # torch warns (once, as a session starts) that its events are cleared at its end: here
        # each session is one sample, read before the next starts
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        if "torch._inductor" in sys.modules:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                run()
            events = prof.events()
        else:
            from torch.autograd.profiler import profile as autograd_profile

            with autograd_profile(use_cpu=False, use_device="cuda", use_kineto=True) as prof:
                run()
            events = prof.function_events
    return [e for e in events if e.device_type == DeviceType.CUDA]


def split_per_call(us: Sequence[float], calls: int, skip: int) -> tuple[list[float] | None, int]:
    """A profiler session's device-operation durations (us, in start order) over ``calls`` calls
    as per-call sums in ms, each call's first ``skip`` operations (its L2 flush) left out, and
    the operations each call launched; (None, 0) when the session does not split evenly."""
    if not us or len(us) % calls:
        return None, 0
    per = len(us) // calls
    return [sum(us[i * per + skip : (i + 1) * per]) / 1e3 for i in range(calls)], per - skip


_PROFILER_STARTED = False  # this process has had a profiler session
_deferral = threading.local()  # .on: this thread's kernel timings wait for the profiler (profiler_deferred)


def profiler_started() -> bool:
    """Whether this process has had its first profiler session."""
    return _PROFILER_STARTED


@contextlib.contextmanager
def profiler_deferred():
    """Within the block, while this process has had no profiler session, this thread's CUDA
    kernel timings take CUDA-graph replay (the L2 flushed inside the graph) instead of starting
    the profiler, and their method says so: a first number without waiting for the process's
    first session, which the Explorer shows while the profiler starts on the main thread and then
    refines."""
    previous = getattr(_deferral, "on", False)
    _deferral.on = True
    try:
        yield
    finally:
        _deferral.on = previous


def deferring() -> bool:
    """Whether this thread's kernel timings now skip the profiler (:func:`profiler_deferred`)."""
    return getattr(_deferral, "on", False) and not _PROFILER_STARTED


def start_profiler() -> bool:
    """Run this process's first CUDA profiler session now, over nothing, unless one ran before;
    whether it ran here.

    Opened through ``torch.profiler`` a process's first session cost seconds (3.4-5.8 s on an
    H100, 5.6-6.6 s on an H200), nearly all of it Inductor's import inside the session's start;
    opened as :func:`cuda_profiled_operations` opens it, 15-17 ms on an H200 (``torch_profiler``
    against ``profiler`` in ``benchmarks/diagnostics/process_start.py``, 83dd028). A measuring
    process that starts the profiler in its warm-up keeps what remains (Kineto's and CUPTI's
    start) out of its first kernel timing. Kineto wants the session on the thread that imported
    torch: begun from another thread it reports an error.
    """
    if _PROFILER_STARTED:
        return False
    ProfilerKernelSampler(lambda: None, calls=1).sample()  # a session as every kernel timing opens one
    return True


def median_kernel_us(
    fn: Callable[[], object], flush: Callable[[], None] | None = None, calls: int = 10, rounds: int = 3
) -> float:
    """The median device time of one call of ``fn``, in us: ``fn`` once first (its compile and
    first launch), then ``rounds`` profiler samples of ``calls`` calls each, ``flush`` (a device's
    ``flush_l2``) before every call. The benchmark scripts' one-number kernel time; the measuring
    tool itself times through :func:`kernel_sampler` and reports intervals."""
    fn()
    sampler = ProfilerKernelSampler(fn, calls=calls, flush=flush)
    return float(np.median([ms for _ in range(rounds) for ms in sampler.sample()])) * 1e3


def kernel_sampler(fn: Callable[[], object], flush: Callable[[], None] | None = None) -> tuple[Sampler, str]:
    """The CUDA kernel-time sampler for ``fn``, and a note when a fallback was taken ('' if none).

    The profiler's per-kernel device durations, with the L2 flushed before each call, come
    first: measured on the lent H100 they are what "device work only" means. Graph replay with
    the flush and timing events inside the graph added about 2.7 us of node latency per call
    (28.0 against 25.3 us for RMSNorm 4096x4096), and replay without the flush leaves data in
    L2 (147% of DRAM copy bandwidth at 4096x1024). Where the profiler cannot run (no CUPTI),
    warm-L2 graph replay stands in, and the method says so. Inside :func:`profiler_deferred`,
    before the process's first profiler session, graph replay with the flush is taken at once.
    """
    if deferring():
        try:
            return CudaGraphSampler(fn, flush=flush), "first number: CUDA-graph replay while the profiler starts"
        except Exception:  # noqa: BLE001 - not capturable: the profiler after all
            pass
    sampler = ProfilerKernelSampler(fn, flush=flush)
    try:
        sampler.sample()
        return sampler, ""
    except Exception as exc:  # noqa: BLE001 - no profiler here: graph replay
        why = f"profiler unavailable ({type(exc).__name__}: {str(exc)[:120]})"
    try:
        return CudaGraphSampler(fn), why
    except Exception:  # noqa: BLE001 - neither: calls issued back to back, the host running ahead
        import torch

        return BackToBackSampler(fn, torch.cuda, method="cuda-events, back to back"), why + "; not capturable"
