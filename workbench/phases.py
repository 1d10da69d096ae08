"""Where a benchmark's wall time goes: seconds per named phase, summed over many measurements.

A suite or a sweep spends its time in a few kinds of work, and only one of them is measuring:

- ``setup``: fresh inputs, a peer's circuit or module built before its first call;
- ``compile``: the first call of each configuration (Triton JIT, torch.compile, a peer's own
  build or the wait for one started ahead), and its first backward;
- ``check``: the reference run and the comparison of outputs and gradients;
- ``timing``: warm-up, the interleaved sampling of the three timings, the peak-memory call.

:class:`Phases` adds up wall seconds per phase; whatever a caller's total holds beyond them is
``other`` (bookkeeping, writing files, printing).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

PHASES = ("setup", "compile", "check", "timing")


class Phases:
    """Wall seconds per phase, summed: ``with phases("compile"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {name: 0.0 for name in PHASES}

    @contextmanager
    def __call__(self, name: str):
        if name not in self.seconds:
            raise ValueError(f"unknown phase {name!r}; phases: {', '.join(PHASES)}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def split(self, wall_s: float) -> dict[str, float]:
        """``wall_s`` (the caller's total) split into the phases plus ``other``, in seconds."""
        out = {name: round(value, 3) for name, value in self.seconds.items()}
        out["other"] = round(max(0.0, wall_s - sum(self.seconds.values())), 3)
        out["wall"] = round(wall_s, 3)
        return out


def process_age_s() -> float | None:
    """Seconds since this process started (Linux ``/proc``), or None where that is not known:
    a suite's wall time from a cold start includes the imports before its first line runs."""
    try:
        import os

        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
