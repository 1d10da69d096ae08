"""Devices as the measuring tool sees them: detection, timers, memory and copy bandwidth.

:class:`Device` extends the library's :class:`kernels.runtime.DeviceInfo` (kind, index, name,
cores) with what only a benchmark needs: per-call timings, peak-memory windows, the measured
device-to-device copy bandwidth that GB/s figures are compared with, and the environment facts
recorded with every measurement.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from kernels.runtime import KINDS, DeviceCache, DeviceInfo, kinds_present

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
        """Per-call time of ``fn``. On devices: ``triton.testing.do_bench`` (device events, L2
        flushed between calls). On the CPU: wall time of whole calls."""
        if self.kind == "cpu":
            return wall_timing(fn, rep_ms, method="interpreter-wall")
        import triton.testing

        # No Triton lock here: autograd runs CUDA backward on its own thread, whose launches
        # take the lock; holding it around do_bench would deadlock a backward timing.
        p50, p20, p80 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
        return Timing(p50=p50, p20=p20, p80=p80, n=0, method="device-events")

    def wall_per_call(self, fn: Callable[[], object], rep_ms: float = 50, max_calls: int = 200) -> Timing:
        """Host wall time of one synchronised call (issue + run + sync), median of many."""
        return wall_timing(fn, rep_ms, method="host-wall", sync=self.synchronize, max_calls=max_calls)

    def copy_bandwidth_gbps(self) -> float | None:
        """Measured device-to-device copy bandwidth in GB/s (bytes read + written).

        Measured once per device per process (a 512 MiB copy timed with do_bench); None on the
        CPU, where kernel times are interpreter times and no bandwidth share is meaningful.
        """
        if self.kind == "cpu":
            return None
        key = (self.kind, self.index)
        if key not in _COPY_BW:
            n_bytes = 512 * 2**20
            src = torch.empty(n_bytes, dtype=torch.uint8, device=self.torch_device).random_(0, 255)
            dst = torch.empty_like(src)
            timing = self.time(lambda: dst.copy_(src), warmup_ms=25, rep_ms=200)
            _COPY_BW[key] = 2 * n_bytes / (timing.p50 * 1e-3) / 1e9
            del src, dst
        return _COPY_BW[key]

    def describe(self) -> dict:
        """Environment facts recorded with every measurement."""
        return {
            "device_kind": self.kind,
            "device_name": self.name,
            "driver": self.driver,
            "num_cores": self.num_cores,
            "l2_bytes": self.l2_bytes,
        }


_COPY_BW: dict[tuple[str, int], float] = {}


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
