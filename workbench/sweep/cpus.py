"""Which CPUs a host's measuring processes and its compile-ahead processes run on.

Why. A measurement's host and call times are CPU time. On a 2xH100 host (32 cores), with 12
compile processes busy beside two measuring actors, the same configurations' host times read
17% higher than on one GPU beside 8, and call times 13% higher; kernel times did not move. The
two actors' busy time was 10% longer. Placed apart, the same ratios were 1.037 and 1.029
(reports/sweep-h100x2-placement). Each measuring process gets physical cores of its own (with
their SMT siblings, where the host has them); the compile processes share the rest.

- :func:`physical_cores`: the logical CPUs this process may use, grouped by physical core
  (Linux's ``thread_siblings_list``; a CPU whose topology cannot be read is a core of its own).
- :class:`Placement`: the plan for a host measuring on ``slots`` devices: slot ``i`` (the device
  with that index on the host) gets cores ``[i * per_slot, (i + 1) * per_slot)``, the compile
  processes every core after the last slot's. A host with too few cores for that (the compile
  processes would keep fewer cores than the measuring ones take) gets no placement: every
  process may use every CPU, as without it.
- :func:`pin`: this process onto a set of CPUs (``os.sched_setaffinity``; False where the OS has
  none); :func:`pin_to_slot`: a measuring process onto its slot's CPUs in a placement.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CORES_PER_SLOT = 2  # a measuring process: its Python thread, and the CUDA / CUPTI / Ray threads beside it
SYS_CPU = Path("/sys/devices/system/cpu")


def available_cpus() -> set[int]:
    """The logical CPUs this process may run on."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def _siblings(cpu: int, root: Path) -> set[int]:
    """``cpu``'s SMT siblings (itself included), from ``thread_siblings_list`` ("0,16", "0-1")."""
    try:
        text = (root / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip()
    except OSError:
        return {cpu}
    out: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out.update(range(int(lo), int(hi) + 1))
        elif part:
            out.add(int(part))
    return out or {cpu}


def physical_cores(cpus: set[int] | None = None, root: Path = SYS_CPU) -> list[tuple[int, ...]]:
    """``cpus`` (default: :func:`available_cpus`) grouped by physical core, each group sorted,
    the groups in order of their first CPU."""
    cpus = available_cpus() if cpus is None else set(cpus)
    seen: set[int] = set()
    cores = []
    for cpu in sorted(cpus):
        if cpu in seen:
            continue
        group = tuple(sorted(_siblings(cpu, root) & cpus)) or (cpu,)
        seen.update(group)
        cores.append(group)
    return cores


@dataclass(frozen=True)
class Placement:
    """CPUs per measuring slot, and the compile processes' CPUs (plain data: it travels to Ray actors)."""

    slots: tuple[tuple[int, ...], ...]
    compile: tuple[int, ...]

    @classmethod
    def plan(cls, slots: int, cores: list[tuple[int, ...]], per_slot: int = CORES_PER_SLOT) -> Placement | None:
        """The placement of ``slots`` measuring processes on ``cores`` (:func:`physical_cores`),
        or None where the compile processes would be left fewer cores than the measuring ones
        take."""
        taken = slots * per_slot
        if slots < 1 or len(cores) - taken < taken:
            return None
        measuring = tuple(
            tuple(cpu for core in cores[i * per_slot : (i + 1) * per_slot] for cpu in core) for i in range(slots)
        )
        rest = tuple(cpu for core in cores[taken:] for cpu in core)
        return cls(measuring, rest)

    def for_slot(self, index: int) -> tuple[int, ...] | None:
        """The CPUs of slot ``index`` (None: no slot of that index)."""
        return self.slots[index] if 0 <= index < len(self.slots) else None


def pin(cpus) -> bool:
    """Run this process on ``cpus`` only: every thread it has (Linux sets affinity per thread),
    and those it starts later, which inherit it; False where it cannot."""
    if not cpus:
        return False
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    try:
        for tid in threads:
            try:
                os.sched_setaffinity(tid, set(cpus))
            except ProcessLookupError:  # a thread that ended meanwhile
                pass
    except (AttributeError, OSError, ValueError):
        return False
    return True


def device_slot(visible: str | None = None) -> int | None:
    """This process's slot on its host: the index of the first device Ray made visible to it
    (``CUDA_VISIBLE_DEVICES``, or the NPU's ``ASCEND_RT_VISIBLE_DEVICES``); None where none is
    or it is not an index (a UUID)."""
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("ASCEND_RT_VISIBLE_DEVICES") or ""
    first = visible.split(",")[0].strip()
    return int(first) if first.isdigit() else None


def pin_to_slot(placement: Placement | None) -> list[int] | None:
    """This measuring process onto the CPUs of its slot (:func:`device_slot`) in ``placement``;
    the CPUs, or None where it stays where it was (no placement, no slot index, no affinity)."""
    if placement is None:
        return None
    slot = device_slot()
    cpus = placement.for_slot(slot) if slot is not None else None
    return sorted(cpus) if cpus and pin(cpus) else None
