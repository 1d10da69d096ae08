"""Measuring for the widgets: a cache keyed by configuration, and sweep plans.

Nothing here knows a kernel family: everything comes from a :class:`kernels.spec.KernelSpec`.
A configuration is (variant, device, dtype, mode, problem, params) with the problem resolved
against the spec's knobs and the params against the variant's tile Params, so ``{}`` and the
explicit defaults are the same configuration and hit the same cache entry.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any, Iterable, Mapping, Sequence

from kernels.bench import Record
from kernels.spec import KernelSpec, Variant

# Metrics a figure can plot: (record field, label, "higher is better").
METRICS: dict[str, tuple[str, str, bool]] = {
    "ms": ("ms_p50", "time per call (ms, p50)", False),
    "wall_ms": ("wall_ms", "host wall time per call (ms)", False),
    "gbps": ("gbps", "achieved GB/s", True),
    "pct_copy_bw": ("pct_copy_bw", "% of copy bandwidth", True),
}


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return value  # 1.0 and 1 hash alike; keep floats as they are
    return value


def config_key(variant: str, device: str, dtype: str, mode: str, problem: Mapping, params: Mapping) -> tuple:
    """The cache key of one configuration (hashable, order-independent)."""
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


class ResultCache:
    """Thread-safe ``config_key -> Record`` map with hit / miss counters."""

    def __init__(self):
        self._lock = threading.Lock()
        self._data: dict[tuple, Record] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple) -> Record | None:
        with self._lock:
            rec = self._data.get(key)
            if rec is None:
                self.misses += 1
            else:
                self.hits += 1
            return rec

    def peek(self, key: tuple) -> Record | None:
        """Like :meth:`get` without counting."""
        with self._lock:
            return self._data.get(key)

    def put(self, key: tuple, record: Record) -> None:
        with self._lock:
            self._data[key] = record

    def discard(self, key: tuple) -> None:
        with self._lock:
            self._data.pop(key, None)

    def records(self) -> list[Record]:
        with self._lock:
            return list(self._data.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._data


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
    """The part of ``params`` that applies to ``variant``.

    ``params`` is either ``{"BLOCK_SIZE": 1024, ...}`` (applied to every variant that has the
    name) or ``{"gpu_row": {...}, "npu": {...}}`` (per variant), or a mix of both.
    """
    if not params:
        return {}
    names = {p.name for p in variant.params}
    out = {k: v for k, v in params.items() if k in names and not isinstance(v, Mapping)}
    nested = params.get(variant.name)
    if isinstance(nested, Mapping):
        out.update(nested)
    return out


def with_axis(record: Record, axis: str, x_value: Any) -> Record:
    """A copy of ``record`` whose x axis is the swept one (for figures and CSV x_name/x_value)."""
    return dataclasses.replace(
        record,
        axis=axis,
        x_value=x_value,
        problem=dict(record.problem),
        params=dict(record.params),
        checks=list(record.checks),
    )


def short_reason(error: str | None, limit: int = 160) -> str:
    if not error:
        return ""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_config(problem: Mapping, params: Mapping) -> str:
    items = [f"{k}={v}" for k, v in params.items()] + [f"{k}={v}" for k, v in problem.items()]
    return ", ".join(items)


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
