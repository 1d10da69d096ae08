"""Sweep plans: which configurations a 1-D or 2-D sweep measures, derived from a KernelSpec alone.

A configuration is (variant, device, dtype, mode, problem, params) with the problem resolved
against the spec's knobs and the params against the variant's tile Params, so ``{}`` and the
explicit defaults are the same configuration (same :func:`config_key`).

An axis is a problem knob (``"hidden"``, ``"rows"`` …) or a tile Param name (``"BLOCK_SIZE"`` …).
Sweeping a tile Param sweeps the variants that have it; the others are measured once at the same
problem (a flat reference line in a figure). ``params`` are tile overrides: ``{"BLOCK_SIZE": 1024}``
applies to every variant having that name, ``{"gpu_row": {"BLOCK_SIZE": 1024}}`` to one variant;
both forms mix. The notebook Session, the Explorer and ``workbench sweep`` all plan here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from kernels.spec import KernelSpec, Variant


@dataclass(frozen=True)
class PlanItem:
    """One point of a sweep: a variant at a problem with tile params; ``x`` the swept value
    (None for a variant measured once as a reference line)."""

    variant: Variant
    problem: dict
    params: dict
    x: Any


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def config_key(variant: str, device: str, dtype: str, mode: str, problem: Mapping, params: Mapping) -> tuple:
    """The key of one configuration (hashable, order-independent)."""
    return (variant, device, dtype, mode, _freeze(problem), _freeze(params))


def resolve_config(
    spec: KernelSpec, variant: Variant, problem: Mapping | None, params: Mapping | None, quick: bool
) -> tuple[dict, dict, str | None]:
    """Problem and params resolved against the spec, or the raw ones plus the reason they are invalid."""
    problem = dict(problem or {})
    params = dict(params or {})
    try:
        problem = spec.resolve_problem(problem, quick=quick)
    except ValueError as exc:
        return problem, params, str(exc)
    try:
        params = variant.resolve_params(params)
    except ValueError as exc:
        return problem, params, str(exc)
    return problem, params, None


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


def with_axis(record, axis: str, x_value: Any):
    """A copy of ``record`` whose x axis is the swept one (for figures and CSV x_name/x_value)."""
    return dataclasses.replace(
        record,
        axis=axis,
        x_value=x_value,
        problem=dict(record.problem),
        params=dict(record.params),
        checks=list(record.checks),
    )
