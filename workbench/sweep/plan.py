"""Sweep plans: which configurations a 1-D or 2-D sweep measures, derived from a KernelSpec alone.

A sweep is asked for once, as a :class:`SweepRequest` (its axes and values, the variants, mode,
problem, tile overrides, dtype and where it runs); :func:`plan_sweep` turns it into a
:class:`SweepPlan` in one call: every point with its configuration's key (:mod:`.config`), the
points a cache already holds, and one :class:`~workbench.sweep.tasks.SweepTask` per configuration
still to measure; :func:`workbench.sweep.engine.run_plan` measures it and returns its rows.

An axis is a problem knob (``"hidden"``, ``"rows"`` …) or a tile Param name (``"BLOCK_SIZE"`` …).
Sweeping a tile Param sweeps the variants that have it; the others are measured once at the same
problem (a flat reference line in a figure). ``params`` are tile overrides: ``{"BLOCK_SIZE": 1024}``
applies to every variant having that name, ``{"gpu_row": {"BLOCK_SIZE": 1024}}`` to one variant;
both forms mix. The notebook Session, the Explorer and ``workbench sweep`` all plan here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from kernels.spec import KernelSpec, Variant
from workbench.sweep.config import config_key, resolve_config


@dataclass(frozen=True)
class PlanItem:
    """One point of a sweep: a variant at a problem with tile params; ``x`` the swept value
    (None for a variant measured once as a reference line)."""

    variant: Variant
    problem: dict
    params: dict
    x: Any


def has_axis(spec: KernelSpec, variant: Variant, axis: str) -> bool:
    return any(k.name == axis for k in spec.knobs) or any(p.name == axis for p in variant.params)


def axis_kind(spec: KernelSpec, axis: str, variants: Iterable[Variant] = ()) -> str:
    """``"knob"`` for a problem knob, ``"param"`` for a tile Param of one of ``variants``
    (or of any variant of the spec); ValueError naming the choices otherwise."""
    if any(k.name == axis for k in spec.knobs):
        return "knob"
    pool = list(variants) or list(spec.variants)
    if any(p.name == axis for v in pool for p in v.params):
        return "param"
    knobs = ", ".join(k.name for k in spec.knobs)
    params = sorted({p.name for v in pool for p in v.params})
    raise ValueError(
        f"{spec.name} has no knob or tile parameter {axis!r}; knobs: {knobs}; tile parameters: {', '.join(params)}"
    )


def default_values(spec: KernelSpec, axis: str, variants: Sequence[Variant] = ()) -> list:
    """Values a sweep over ``axis`` visits when none are given: the knob's ``sweep`` (or its
    choices), or the tile Param's allowed values without ``"auto"``."""
    if axis_kind(spec, axis, variants) == "knob":
        knob = spec.knob(axis)
        if knob.sweep:
            return list(knob.sweep)
        if knob.values is not None:
            return list(knob.values)
        return [knob.default]
    for v in list(variants) or list(spec.variants):
        for p in v.params:
            if p.name == axis:
                return [x for x in p.values if x != "auto"]
    return []


def split_params(params: Mapping | None, variant: Variant) -> dict:
    """The part of ``params`` that applies to ``variant`` (module docstring: both forms)."""
    if not params:
        return {}
    names = {p.name for p in variant.params}
    out = {k: v for k, v in params.items() if k in names and not isinstance(v, Mapping)}
    nested = params.get(variant.name)
    if isinstance(nested, Mapping):
        out.update(nested)
    return out


def line_plan(
    spec: KernelSpec,
    variants: Sequence[Variant],
    axis: str,
    values: Sequence[Any] | None,
    problem: Mapping | None = None,
    params: Mapping | None = None,
) -> tuple[list[PlanItem], list]:
    """(plan, values) of a 1-D sweep of ``axis`` for ``variants`` (values default per axis)."""
    kind = axis_kind(spec, axis, variants or spec.variants)
    values = list(default_values(spec, axis, variants) if values is None else values)
    plan: list[PlanItem] = []
    base = dict(problem or {})
    for var in variants:
        tiles = split_params(params, var)
        if kind == "knob":
            plan.extend(PlanItem(var, {**base, axis: v}, dict(tiles), v) for v in values)
        elif any(p.name == axis for p in var.params):
            plan.extend(PlanItem(var, dict(base), {**tiles, axis: v}, v) for v in values)
        else:
            plan.append(PlanItem(var, dict(base), tiles, None))
    return plan, values


def grid_plan(
    spec: KernelSpec,
    variant: Variant,
    x_axis: str,
    x_values: Sequence[Any],
    y_axis: str,
    y_values: Sequence[Any],
    problem: Mapping | None = None,
    params: Mapping | None = None,
) -> list[PlanItem]:
    """A 2-D sweep of one variant, row-major over y then x (``x`` of each item: its x value)."""
    for a in (x_axis, y_axis):
        if not has_axis(spec, variant, a):
            axis_kind(spec, a, [variant])  # raises, naming the knobs and tile parameters
    kinds = {a: axis_kind(spec, a, [variant]) for a in (x_axis, y_axis)}
    plan = []
    for yv in y_values:
        for xv in x_values:
            prob, prm = dict(problem or {}), split_params(params, variant)
            for a, v in ((x_axis, xv), (y_axis, yv)):
                (prob if kinds[a] == "knob" else prm)[a] = v
            plan.append(PlanItem(variant, prob, prm, xv))
    return plan


# --- a sweep asked for once, and its plan ----------------------------------------------------------
@dataclass
class SweepRequest:
    """A 1-D sweep (``axis`` over ``values``) or, with ``y_axis``, a 2-D one of a single variant,
    as a notebook, the Explorer or a script asks for it; built once and passed down unchanged.
    ``variants``: names (None: every variant that can run here; a 2-D sweep takes one, or the
    first of ours having both axes). ``problem`` and ``params`` as in the module docstring."""

    axis: str
    values: Sequence[Any] | None = None
    y_axis: str | None = None
    y_values: Sequence[Any] | None = None
    variants: Sequence[str] | str | None = None
    mode: str = "forward"
    problem: Mapping | None = None
    params: Mapping | None = None
    dtype: str | None = None
    executor: Any = "local"  # "local" | "isolate" | "ray" | an executor object
    executor_options: Mapping | None = None

    @property
    def is_grid(self) -> bool:
        return self.y_axis is not None

    @property
    def label(self) -> str:
        return f"sweep {self.axis}" + (f" x {self.y_axis}" if self.is_grid else "")


@dataclass(frozen=True)
class Measuring:
    """How a sweep's configurations are measured: the spec, the device kind, the dtype when the
    request names none, the problem every point starts from, the seed and the timing budget."""

    spec: KernelSpec
    device: str
    dtype: str
    problem: Mapping
    seed: int = 0
    rep_ms: float = 100.0


@dataclass
class SweepPlan:
    """A request planned: ``items`` in figure order (row-major over y then x for a grid), each
    item's configuration ``keys``, the records a cache already held (``found``: item index ->
    record) and the ``tasks`` still to measure, each answering the items in ``slots[task.key]``."""

    request: SweepRequest
    variants: list[Variant]
    x_values: list
    y_values: list
    items: list[PlanItem]
    keys: list[tuple]
    found: dict = field(default_factory=dict)
    tasks: list = field(default_factory=list)
    slots: dict = field(default_factory=dict)

    @property
    def cached(self) -> int:
        return len(self.found)


def plan_sweep(
    request: SweepRequest,
    variants: Sequence[Variant],
    measuring: Measuring,
    known: Callable[[tuple], Any] | None = None,
) -> SweepPlan:
    """Plan ``request`` for ``variants`` (already checked to run here): the points, their keys,
    what ``known(key)`` (a cache) already holds, and a task per configuration left to measure."""
    from kernels.spec import dtype_name
    from workbench.sweep.tasks import make_task

    spec = measuring.spec
    if request.is_grid:
        x_values, y_values = list(request.values or []), list(request.y_values or [])
        items = grid_plan(
            spec, variants[0], request.axis, x_values, request.y_axis, y_values, request.problem, request.params
        )
    else:
        items, x_values = line_plan(spec, variants, request.axis, request.values, request.problem, request.params)
        y_values = []
    dtype = dtype_name(request.dtype or measuring.dtype)
    plan = SweepPlan(request, list(variants), list(x_values), y_values, items, keys=[])
    for i, item in enumerate(items):
        problem, params, _ = resolve_config(
            spec, item.variant, {**measuring.problem, **dict(item.problem or {})}, item.params, False
        )
        key = config_key(item.variant.name, measuring.device, dtype, request.mode, problem, params)
        plan.keys.append(key)
        hit = known(key) if known is not None else None
        if hit is not None:
            plan.found[i] = hit
            continue
        task = make_task(
            spec,
            item.variant,
            device=measuring.device,
            dtype=dtype,
            mode=request.mode,
            problem=problem,
            params=params,
            seed=measuring.seed,
            rep_ms=measuring.rep_ms,
            warmup_ms=min(25.0, measuring.rep_ms),
        )
        if task.key not in plan.slots:
            plan.tasks.append(task)
        plan.slots.setdefault(task.key, []).append(i)
    return plan
