"""A configuration's identity: its problem and tiles resolved against the spec, and its key.

A configuration is (variant, device, dtype, mode, problem, params) with the problem resolved
against the spec's knobs and the params against the variant's tile Params, so ``{}`` and the
explicit defaults are the same configuration (same :func:`config_key`). A notebook Session's
cache, a sweep's tasks and ``workbench sweep``'s resume all key configurations here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from kernels.spec import KernelSpec, Variant


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
