"""Choosing one configuration per size from a tune's records, aware of the timing noise.

The rule (:func:`pick`): among the passing records of one size, the *best* is the one with the
lowest kernel time. Every record whose kernel-time interval overlaps the best's (its low end at
or below the best's high end) is *within noise* of it. Among those, the current default (the
call with every tile "auto") is kept if it is one of them — a new table entry must beat what
users already get by more than the noise; otherwise the simplest is chosen: fewest warps, then
fewest pipeline stages, then fewest split-K programs (the Tuning's ``simpler`` order), the
lower median breaking what is left. A record without an interval counts as the point of its
median.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


def kernel_ms(r: dict) -> float | None:
    return r.get("kernel_ms") if r.get("kernel_ms") is not None else r.get("ms_p50")


def passed(r: dict) -> bool:
    return not r.get("error") and bool(r.get("passed")) and kernel_ms(r) is not None


def interval(r: dict) -> tuple[float, float]:
    ms = kernel_ms(r)
    lo, hi = r.get("kernel_lo_ms"), r.get("kernel_hi_ms")
    return (ms if lo is None else lo, ms if hi is None else hi)


@dataclass
class Choice:
    """One size's outcome: the chosen record, the fastest one, the default's, and why."""

    size: object
    chosen: dict | None
    best: dict | None
    default: dict | None
    within_noise: list[dict]
    why: str
    evaluated: int  # configurations measured besides the default


def pick(size, records: Sequence[dict], default: dict | None, simplicity: Callable[[dict], tuple]) -> Choice:
    """The configuration to write for ``size`` from its ``records`` (``default``, the record of
    the call with every tile "auto", among them or None); module docstring: the rule."""
    ok = [r for r in records if passed(r)]
    evaluated = sum(1 for r in records if r is not default)
    if not ok:
        return Choice(size, None, None, default, [], "no configuration passed", evaluated)
    best = min(ok, key=kernel_ms)
    best_hi = interval(best)[1]
    near = [r for r in ok if interval(r)[0] <= best_hi]
    if default is not None and default in near:
        why = "the default is within noise of the fastest" if default is not best else "the default is the fastest"
        return Choice(size, default, best, default, near, why, evaluated)
    tunable = [r for r in near if r is not default]
    chosen = min(tunable, key=lambda r: (simplicity(r.get("params") or {}), kernel_ms(r)))
    why = "the fastest" if chosen is best else f"the simplest within noise of the fastest ({len(near)} within noise)"
    return Choice(size, chosen, best, default, near, why, evaluated)
