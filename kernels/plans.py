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

import torch

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
    """:func:`remember_plan` of a forward's replay, with what the replayed call needs for
    ``rstd``: ``(replay, rstd rows, device, address of a discard buffer of that many rows or
    None)``. A call with gradients allocates rstd (its backward reads it); one without writes it
    into the discard buffer (:func:`discard_rows`) instead of allocating it."""

    def plan():
        replay = make_replay()
        if not replay:
            return False
        rows, device = rstd.shape[0], rstd.device
        discard = discard_rows(device, rows)
        return (replay, rows, device, None if discard is None else discard.data_ptr())

    remember_plan(plans, key, plan)


def unread_rows(rows: int, device, discard_address):
    """``(tensor or None, address)`` for the fp32 rows a replayed call writes and nobody reads:
    the plan's discard buffer (:func:`discard_rows`; no tensor) where it has one, else a fresh
    tensor of ``rows`` values on ``device``."""
    if discard_address is not None:
        return None, discard_address
    rows_tensor = torch.empty(rows, dtype=torch.float32, device=device)
    return rows_tensor, rows_tensor.data_ptr()


MAX_DISCARD_BYTES = 64 << 20  # past this, planned calls allocate their unread rows again
_DISCARDS: dict = {}  # (device, rows) -> fp32 buffer, kept for the process's lifetime


def discard_rows(device, rows: int):
    """An fp32 buffer of ``rows`` values on ``device`` that a planned call writes and nobody reads
    (a norm forward's rstd when no backward follows), or None.

    Why: each allocation is a few microseconds of an eager call's host time (a torch.empty on
    the H100 host), the same order as the gap to F.rms_norm's. Kept for the process's lifetime
    and shared by every plan of that size, so a CUDA graph captured with its address stays valid
    whatever happens to the plans; concurrent calls on two streams write the same unread values.
    None while a graph is captured (memory taken then belongs to the graph's pool) and once the
    kept buffers would pass :data:`MAX_DISCARD_BYTES`."""
    key = (device, rows)
    buffer = _DISCARDS.get(key)
    if buffer is None:
        kept = sum(b.numel() * 4 for b in _DISCARDS.values())
        if kept + rows * 4 > MAX_DISCARD_BYTES or torch.cuda.is_current_stream_capturing():
            return None
        buffer = _DISCARDS[key] = torch.empty(rows, dtype=torch.float32, device=device)
    return buffer
