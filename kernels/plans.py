"""Per-call host work that depends on no data, done once per call signature.

A small kernel's eager call is mostly host time, and much of it is the same on every call with
the same shapes: argument checks, choosing the implementation, resolving tiles, deriving kernel
constants. :func:`cached_plan` runs that work (``make()``) once per key built from the tensors'
shape, dtype and device and the call's other settings, and returns the remembered result on
later calls. A result is remembered only when ``make()`` returned (so the checks passed); a
call whose arguments cannot make a key (not tensors, an unhashable setting) always runs
``make()``, whose checks then say what is wrong.

A plan holds resolved tiles, which may come from a tuned table, so every plans dict is cleared
with the tables' caches (:func:`kernels.tuned_tables.on_reload`: a table installed while a
process runs, and :func:`kernels.tuned_tables.disabled`, reach calls already planned).
"""

from __future__ import annotations

from kernels import fast_launch, tuned_tables
from kernels.launch import observed

MAX_PLANS = 4096  # a sweep over many sizes starts over rather than growing without bound


def cached_plan(plans: dict, make, tensors: tuple, settings: tuple):
    """``make()``, remembered in ``plans`` by the (shape, dtype, device) of each of ``tensors``
    (None stays None) and ``settings``."""
    try:
        key = (tuple(None if t is None else (t.shape, t.dtype, t.device) for t in tensors), settings)
        plan = plans.get(key)
    except (AttributeError, TypeError):
        return make()
    if plan is None:
        if id(plans) not in _CLEARED_ON_RELOAD:  # once per plans dict (they live as long as their module)
            _CLEARED_ON_RELOAD.add(id(plans))
            tuned_tables.on_reload(plans.clear)
        plan = make()
        if len(plans) >= MAX_PLANS:
            plans.clear()
        plans[key] = plan
    return plan


_CLEARED_ON_RELOAD: set[int] = set()


def tile_items(tiles: dict) -> tuple:
    """Tile overrides as key material: with their types, so ``2.0`` or ``True`` (which equal
    ``2`` and ``1``) do not pass as the ints a remembered plan checked."""
    return tuple((name, type(value), value) for name, value in tiles.items()) if tiles else ()


def eager_plans() -> dict:
    """A family's plans per call layout (a replay of its launch, or False where it has none).
    Emptied when a tuned table is installed ("auto" tiles may change) and when the fast launch is
    reset (its replays are retired, and a layout planned while it was off plans again)."""
    plans: dict = {}
    tuned_tables.on_reload(plans.clear)
    fast_launch.on_reset(plans.clear)
    return plans


def remember_plan(plans: dict, key, make_plan) -> None:
    """Keep ``make_plan()`` (or False where it gives none) as the plan of ``key``; a recorded or
    compile-only call plans nothing, so the next call plans."""
    if observed():
        return
    if len(plans) >= MAX_PLANS:
        plans.clear()
    plans[key] = make_plan() or False


def remember_replay(plans: dict, key, make_replay, rstd) -> None:
    """:func:`remember_plan` of a forward's replay, with what the replayed call allocates for
    ``rstd``: ``(replay, rstd rows, device)``."""

    def plan():
        replay = make_replay()
        return (replay, rstd.shape[0], rstd.device) if replay else False

    remember_plan(plans, key, plan)
