"""Choosing one configuration per size from a tune's records, aware of the timing noise.

The rule (:func:`pick`): among the passing records of one size, the *best* is the one with the
lowest kernel time. Every record whose kernel-time interval overlaps the best's (its low end at
or below the best's high end) is *within noise* of it. Among those, the preference is:

1. the family's rule (the call with every tile "auto" and the tuned tables off), where it was
   measured — it is measured only where an installed table has a non-empty entry for the size,
   and that entry must beat the rule by more than the noise to stay (an empty entry keeps the rule);
2. the current default (every tile "auto", the installed table included): a new table entry
   must beat what users already get by more than the noise;
3. the simplest: fewest warps, then fewest pipeline stages, then fewest split-K programs (the
   Tuning's ``simpler`` order), the lower median breaking what is left.

A record without an interval counts as the point of its median.
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
    """One size's outcome: the chosen record, the fastest one, the default's, the rule's (None
    where it was not measured: no table entry at this size), and why."""

    size: object
    chosen: dict | None
    best: dict | None
    default: dict | None
    within_noise: list[dict]
    why: str
    evaluated: int  # configurations measured besides the default and the rule
    rule: dict | None = None


def pick(
    size,
    records: Sequence[dict],
    default: dict | None,
    simplicity: Callable[[dict], tuple],
    rule: dict | None = None,
) -> Choice:
    """The configuration to write for ``size`` from its ``records`` (``default``, the record of
    the call with every tile "auto", and ``rule``, the same call with the tuned tables off, among
    them or None); module docstring: the rule."""
    ok = [r for r in records if passed(r)]
    evaluated = sum(1 for r in records if r is not default and r is not rule)
    if not ok:
        return Choice(size, None, None, default, [], "no configuration passed", evaluated, rule)
    best = min(ok, key=kernel_ms)
    best_hi = interval(best)[1]
    near = [r for r in ok if interval(r)[0] <= best_hi]
    for kept, name in ((rule, "the rule"), (default, "the default")):
        if kept is not None and kept in near:
            why = f"{name} is the fastest" if kept is best else f"{name} is within noise of the fastest"
            return Choice(size, kept, best, default, near, why, evaluated, rule)
    tunable = [r for r in near if r is not default and r is not rule]
    chosen = min(tunable, key=lambda r: (simplicity(r.get("params") or {}), kernel_ms(r)))
    why = "the fastest" if chosen is best else f"the simplest within noise of the fastest ({len(near)} within noise)"
    return Choice(size, chosen, best, default, near, why, evaluated, rule)
