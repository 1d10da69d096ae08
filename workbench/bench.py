"""A family measured over the product of its sizes, dtypes, modes and variants (``workbench bench``).

:func:`run_bench` measures every configuration a :class:`BenchPlan` names, one after another in
this process (:func:`workbench.measure.measure`), appends each record to the store as it is
made and hands it to ``on_record`` (the command line prints a line per record). A configuration
that cannot run is a record with its error, never an exception. On a GPU every configuration is
first submitted to the compile service (:mod:`workbench.compiling.service`), so compile processes
compile the later ones while the earlier ones are measured.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from workbench.sweep.plan import split_params


@dataclass
class BenchPlan:
    """What to measure: problem knob values to cross (``axes``), dtypes, modes, variants and the
    tile overrides each variant having that tile takes."""

    spec: Any  # kernels.spec.KernelSpec
    device: Any  # workbench.device.Device
    dtypes: list[str]
    modes: list[str]
    variants: list[str]
    axes: dict[str, list] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    quick: bool = False
    rep_ms: float = 100.0
    edges: bool = False  # also check our kernels at the edge shapes of their declaration (workbench.edges)
    same_size_copy: bool = False  # also time a copy of each cell's bytes in its launches (measure_same_size_copy)

    def configurations(self):
        """(dtype, mode, problem, variant name, params) in the order they are measured."""
        names = list(self.axes)
        tiles = {vname: split_params(self.overrides, self.spec.variant(vname)) for vname in self.variants}
        for dtype, mode in itertools.product(self.dtypes, self.modes):
            for values in itertools.product(*[self.axes[n] for n in names]) if names else [()]:
                problem = dict(zip(names, values))
                for vname in self.variants:
                    yield dtype, mode, problem, vname, dict(tiles[vname])

    def count(self) -> int:
        return sum(1 for _ in self.configurations())


def run_bench(plan: BenchPlan, store, on_record: Callable | None = None) -> list:
    """Measure every configuration of ``plan`` (module docstring); returns the records in order."""
    from workbench.compiling import service as compile_service
    from workbench.measure import measure

    configs = [
        dict(variant=vname, dtype=dtype, mode=mode, problem=problem, params=params)
        for dtype, mode, problem, vname, params in plan.configurations()
    ]
    compile_service.submit_configs(plan.spec, configs, plan.device.kind, quick=plan.quick)  # compiled while others run
    records = []
    for dtype, mode, problem, vname, params in plan.configurations():
        rec = measure(
            plan.spec,
            plan.spec.variant(vname),
            device=plan.device,
            dtype=dtype,
            mode=mode,
            problem=problem,
            params=params,
            quick=plan.quick,
            rep_ms=plan.rep_ms,
            store=store,
            on_error="record",
            edges=plan.edges,
            same_size_copy=plan.same_size_copy,
        )
        records.append(rec)
        if on_record is not None:
            on_record(rec)
    return records
