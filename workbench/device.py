"""Devices as the measuring tool sees them: detection, timings, memory, bandwidth and state.

:class:`Device` extends the library's :class:`kernels.runtime.DeviceInfo` (kind, index, name,
cores) with what only a benchmark needs: per-call timings, peak-memory windows, the measured
device-to-device copy bandwidth that GB/s figures are compared with, and the environment facts
recorded with every measurement.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from kernels import tuned_tables
from kernels.runtime import KINDS, DeviceCache, DeviceInfo, kinds_present
from workbench import device_state, host_facts, timing

# The three timings of a measurement (workbench.timing explains each).
TIMINGS = ("kernel", "call", "host")
# The L2 state a kernel timing starts each call in: flushed (the default, what a lone call meets)
# or as the previous call left it (a layer whose operands stay resident, an HMM's transitions).
L2_STATES = ("cold", "warm")


def check_l2(l2: str) -> str:
    if l2 not in L2_STATES:
        raise ValueError(f"l2={l2!r} is not allowed; use one of {', '.join(L2_STATES)}")
    return l2


__all__ = ["KINDS", "Device", "Timing", "device_of", "get_device", "kinds_present"]


@dataclass(frozen=True)
class Timing:
    """Per-call times in milliseconds: median with p20/p80, and how they were taken."""

    p50: float
    p20: float
    p80: float
    n: int
    method: str  # "device-events" | "interpreter-wall" | "cpu-wall" | "host-wall"


class Device(DeviceInfo):
    """One accelerator (or the CPU) with the few operations the harness needs."""

    def reset_peak_memory(self) -> int | None:
        """Start a peak-memory window; returns the baseline (bytes allocated now)."""
        if self.backend is None:
            return None
        self.synchronize()
        self.backend.reset_peak_memory_stats(self.index)
        return self.backend.memory_allocated(self.index)

    def peak_memory_above(self, baseline: int | None) -> int | None:
        """Peak bytes allocated since :meth:`reset_peak_memory`, above its baseline.

        None on the CPU: torch keeps no allocator statistics there, and the harness shows the
        value as unavailable rather than guessing.
        """
        if self.backend is None or baseline is None:
            return None
        self.synchronize()
        return max(0, self.backend.max_memory_allocated(self.index) - baseline)

    def time(self, fn: Callable[[], object], warmup_ms: float = 25, rep_ms: float = 100) -> Timing:
        """Per-call time of one eager call of ``fn`` (the *call* timing): device events with L2
        flushed before each call, sampled until the median's interval is within +-2% or
        ``rep_ms`` is spent. On the CPU: wall time of whole calls."""
        est = self.timings({0: fn}, which=("call",), budget_s=rep_ms / 1e3)[0]["call"]
        return Timing(p50=est.median, p20=est.p20, p80=est.p80, n=est.n, method=est.method)

    def wall_per_call(self, fn: Callable[[], object], rep_ms: float = 50, max_calls: int = 200) -> Timing:
        """Host wall time of one synchronised call (issue + run + sync), median of many."""
        return wall_timing(fn, rep_ms, method="host-wall", sync=self.synchronize, max_calls=max_calls)

    def samplers(self, fn: Callable[[], object], which: Sequence[str] = TIMINGS, l2: str = "cold") -> tuple[dict, str]:
        """The samplers of ``fn``'s kernel, call and host timings here, and a note on any fallback.

        CUDA: the profiler (else graph replay) for kernel, flushed device events for call, the
        issue time for host. NPU: back-to-back device events for kernel (no graph capture
        there), flushed events for call. CPU: every timing is the interpreter's (or torch's)
        wall time and carries that label; there is no separate host time. ``l2="warm"`` leaves
        the L2 as the previous call left it for the CUDA kernel timing (its method says "L2
        warm"); the call timing always starts from a flushed L2.
        """
        check_l2(l2)
        out: dict[str, timing.Sampler] = {}
        note = ""
        if self.kind == "cpu":
            # One wall timing stands for both kernel and call: sampling it twice would only
            # double the interpreter's cost.
            named = [name for name in which if name != "host"][:1]
            return {name: timing.WallSampler(fn, method="interpreter-wall") for name in named}, note
        if "kernel" in which:
            if self.kind == "cuda":
                out["kernel"], note = timing.kernel_sampler(fn, flush=self.flush_l2 if l2 == "cold" else None)
            else:
                out["kernel"] = timing.BackToBackSampler(fn, self.backend, method=f"{self.kind}-events")
        # Each call and host batch starts with an untimed call (warm_call), as a loop calling the
        # same op has it: trials alternate between configurations, and on the H100 the call took
        # 9-11% off the host times of both sides of an RMSNorm cell (docs/measuring.md).
        if "call" in which:
            out["call"] = timing.EventCallSampler(fn, self.backend, flush=self.flush_l2, warm_call=True)
        if "host" in which:
            out["host"] = timing.HostSampler(fn, sync=self.synchronize, warm_call=True)
        return out, note

    def timings(
        self,
        fns: Mapping[object, Callable[[], object]],
        *,
        which: Sequence[str] = TIMINGS,
        rel_width: float = timing.DEFAULT_REL_WIDTH,
        budget_s: float = 1.0,
        l2: str = "cold",
    ) -> dict[object, dict[str, timing.Estimate]]:
        """Kernel, call and host timings of several calls at once, their trials interleaved.

        ``budget_s`` is per call and timing; all samplers alternate (A B C, B C A, ...) until every
        median's interval is within ``rel_width`` or the budget is spent. ``l2``: see
        :meth:`samplers`. Returns, per key, the estimates by timing name, plus ``"note"`` where
        the kernel timing had to fall back and ``"launches"`` where the profiler counted the
        device operations of one call (:attr:`timing.ProfilerKernelSampler.ops_per_call`).
        """
        samplers, notes = {}, {}
        for key, fn in fns.items():
            per_fn, notes[key] = self.samplers(fn, which, l2)
            for name, sampler in per_fn.items():
                samplers[(key, name)] = sampler
        try:
            estimates = timing.run_interleaved(
                samplers,
                rel_width=rel_width,
                budget_s=budget_s * max(1, len(samplers)),
                group=lambda key: key[1],  # a timing (kernel, call, host) stops once all its cells converged
                # The interpreter is slow and its wall time is never compared with a device's.
                min_samples=3 if self.kind == "cpu" else timing.MIN_SAMPLES,
            )
        finally:
            for sampler in samplers.values():
                getattr(sampler, "close", lambda: None)()
        out: dict[object, dict] = {key: {} for key in fns}
        for (key, name), est in estimates.items():
            out[key][name] = est
        for key, note in notes.items():
            if note:
                out[key]["note"] = note
        for (key, name), sampler in samplers.items():
            ops = getattr(sampler, "ops_per_call", None) if name == "kernel" else None
            if ops:
                out[key]["launches"] = ops
        return out

    def state(self) -> dict:
        """Clocks, temperature, power and slowdown reasons now (NVML); {} where there is none."""
        return device_state.snapshot(self.kind, self.index)

    def flush_l2(self) -> None:
        """Overwrite a buffer larger than any L2 so each timed call starts cold (``do_bench``'s way)."""
        key = (self.kind, self.index)
        if key not in _FLUSH:
            _FLUSH[key] = torch.empty(256 * 2**20, dtype=torch.int8, device=self.torch_device)
        _FLUSH[key].zero_()

    def copy_bandwidth_gbps(self) -> float | None:
        """Measured device-to-device copy bandwidth in GB/s (bytes read + written); None on the
        CPU, where kernel times are interpreter times and no bandwidth share is meaningful.
        Where it came from and how old it is: :meth:`copy_bandwidth_facts`."""
        facts = self.copy_bandwidth_facts()
        return None if facts is None else facts["gbps"]

    def copy_bandwidth_facts(self, measure: bool = True) -> dict | None:
        """The copy bandwidth with its provenance: ``{"gbps", "measured_at", "age_s", "source"}``.

        A 512 MiB copy, far above any L2, timed like a kernel so that GB/s figures compare like
        with like; measured once per device per host and kept while younger than a day
        (:mod:`workbench.host_facts`: ``WORKBENCH_COPY_BW_MAX_AGE_H``), and once per process
        at most. ``measure=False``: only a figure already known (this process's, or the host's
        kept one); None rather than measuring it now."""
        if self.kind == "cpu":
            return None
        key = (self.kind, self.index)
        if key not in _COPY_BW:
            name = tuned_tables.device_key(self)  # "cuda:NVIDIA H100 80GB HBM3"
            host_key = host_facts.device_key(name, self.index, str(self.driver), torch.__version__)
            try:
                _COPY_BW[key] = host_facts.copy_bandwidth(
                    host_key, self._measure_copy_bandwidth if measure else _not_measured
                )
            except _NotMeasured:
                return None
        return _COPY_BW[key]

    def same_size_copy(
        self,
        n_bytes: int,
        launches: int,
        *,
        l2: str = "cold",
        rel_width: float = timing.DEFAULT_REL_WIDTH,
        budget_s: float = 0.1,
    ) -> dict | None:
        """A device copy that moves ``n_bytes`` (read + written) in ``launches`` copies, timed as
        kernel time is (:meth:`timings`, the same sampler and L2 state): the limit a kernel that
        moves that many bytes in that many launches can be held to, launch and tail costs
        included. ``{"ms", "lo_ms", "hi_ms", "n", "method", "gbps", "bytes", "launches",
        "counted_launches"}``: ``bytes`` what the copy moved, ``counted_launches`` the device
        operations the profiler saw per copy (None where it did not count them). Measured once
        per device, bytes, launches and L2 state in a process (a sweep's cells share it); None
        on the CPU, where kernel times are interpreter wall times and no copy compares with them.
        """
        check_l2(l2)
        if self.kind == "cpu":
            return None
        key = (self.kind, self.index, int(n_bytes), int(launches), l2)
        if key not in _SAME_SIZE_COPY:
            copy = ChunkedCopy(n_bytes, launches, self.torch_device)
            found = self.timings({0: copy}, which=("kernel",), rel_width=rel_width, budget_s=budget_s, l2=l2)[0]
            est = found["kernel"]
            interval = est.fields("copy")  # open bounds as None
            _SAME_SIZE_COPY[key] = {
                "ms": est.median,
                "lo_ms": interval["copy_lo_ms"],
                "hi_ms": interval["copy_hi_ms"],
                "n": est.n,
                "method": est.method + (f"; {found['note']}" if found.get("note") else ""),
                "gbps": copy.bytes / (est.median * 1e-3) / 1e9 if est.median > 0 else None,
                "bytes": copy.bytes,
                "launches": copy.launches,
                "counted_launches": found.get("launches"),
            }
        return _SAME_SIZE_COPY[key]

    def _measure_copy_bandwidth(self) -> float:
        copy = ChunkedCopy(2 * 512 * 2**20, 1, self.torch_device)  # a 512 MiB buffer read and written once
        est = self.timings({0: copy}, which=("kernel",), budget_s=0.5)[0]["kernel"]
        return copy.bytes / (est.median * 1e-3) / 1e9

    def describe(self) -> dict:
        """Environment facts recorded with every measurement."""
        return {
            "device_kind": self.kind,
            "device_name": self.name,
            "driver": self.driver,
            "num_cores": self.num_cores,
            "l2_bytes": self.l2_bytes,
        }


_COPY_BW: dict[tuple[str, int], dict] = {}
_FLUSH: dict[tuple[str, int], torch.Tensor] = {}
# (kind, index, bytes, launches, l2) -> Device.same_size_copy's facts, for this process
_SAME_SIZE_COPY: dict[tuple, dict] = {}


class ChunkedCopy:
    """``launches`` device copies that together move ``n_bytes`` (half read, half written): one
    source buffer copied into one destination chunk by chunk, each ``Tensor.copy_`` one device
    operation. The large-copy figure (:meth:`Device.copy_bandwidth_facts`) is one of
    512 MiB in one launch.

    Chunks start on 16-byte boundaries where the bytes allow (a copy's vector loads then stay
    aligned) and are as equal as that leaves them; the last takes the remainder. ``bytes`` is
    what a call moves: ``n_bytes`` rounded down to an even count (a copy reads what it writes)."""

    ALIGN = 16

    def __init__(self, n_bytes: int, launches: int, device):
        if launches < 1:
            raise ValueError(f"a copy needs at least one launch, not {launches}")
        half = max(int(n_bytes) // 2, launches)
        self.src = torch.empty(half, dtype=torch.uint8, device=device).random_(0, 255)
        self.dst = torch.empty_like(self.src)
        step = half // launches
        if step >= self.ALIGN:
            step -= step % self.ALIGN
        starts = [i * step for i in range(launches)] + [half]
        self.chunks = [(self.src[a:b], self.dst[a:b]) for a, b in zip(starts, starts[1:])]
        self.bytes, self.launches = 2 * half, launches

    def __call__(self) -> torch.Tensor:
        for src, dst in self.chunks:
            dst.copy_(src)
        return self.dst


def wall_timing(fn, rep_ms, method, sync=None, max_calls=200) -> Timing:
    """Median / p20 / p80 wall time of whole calls; at least 3 calls, until rep_ms is spent."""
    sync = sync or (lambda: None)
    times = []
    budget = rep_ms / 1e3
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget and len(times) < max_calls):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles(times, n=10, method="inclusive") if len(times) > 1 else times * 9
    return Timing(p50=statistics.median(times), p20=q[1], p80=q[7], n=len(times), method=method)


_DEVICES = DeviceCache(Device)


def get_device(name: str | torch.device | DeviceInfo = "auto") -> Device:
    """Resolve ``"auto" | "cuda" | "npu" | "cpu"`` (or a torch.device) to a :class:`Device`.

    ``auto`` prefers cuda, then npu, then cpu. Asking for a device that is not here is a
    ValueError naming the devices that are.
    """
    if isinstance(name, Device):
        return name
    if isinstance(name, DeviceInfo):
        name = name.torch_device
    return _DEVICES.get(name)


def device_of(tensor: torch.Tensor) -> Device:
    return _DEVICES.get(tensor.device)


class _NotMeasured(Exception):
    """Raised in place of a measurement that was not asked for (copy_bandwidth_facts(measure=False))."""


def _not_measured() -> float:
    raise _NotMeasured
