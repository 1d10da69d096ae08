"""The tune's search space: a family's :class:`~kernels.spec.Tuning` turned into the valid
configurations at each size, and the problem each size is measured on.

A candidate is one combination of the Tuning's ``params`` that its ``keep(size, params)``
accepts and the variant's ``check`` allows (a configuration that cannot run is dropped here,
on the host, before anything is launched). ``quick`` takes the Tuning's interpreter sizes, grid
and problem (``--device cpu``).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from kernels import tuned_tables
from kernels.spec import KernelSpec, Tuning


@dataclass(frozen=True)
class Space:
    """What one tune measures: the family's Tuning, read for the device (quick on the CPU)."""

    spec: KernelSpec
    tuning: Tuning
    quick: bool

    @classmethod
    def of(cls, spec: KernelSpec, quick: bool, part: str = tuned_tables.FORWARD) -> Space:
        """The space of ``spec``'s ``part`` (ValueError where the family tunes no such part)."""
        return cls(spec, spec.tuning_of(part), quick)

    @property
    def part(self) -> str:
        """Which of the family's tiles this space tunes (its table's part)."""
        return self.tuning.part

    def with_sizes(self, sizes) -> Space:
        """This space measuring ``sizes`` instead of the Tuning's (its quick sizes on the CPU)."""
        field = "quick_sizes" if self.quick else "sizes"
        return dataclasses.replace(self, tuning=dataclasses.replace(self.tuning, **{field: tuple(sizes)}))

    def with_dtype(self, dtype: str) -> Space:
        """This space timed in ``dtype``: one of the Tuning's ``timed_dtypes`` (ValueError naming them)."""
        from kernels.spec import dtype_name

        dt = dtype_name(dtype)
        if dt not in self.tuning.timed_dtypes:
            raise ValueError(f"{self.spec.name} tunes in {', '.join(self.tuning.timed_dtypes)}, not {dt}")
        return dataclasses.replace(self, tuning=dataclasses.replace(self.tuning, dtype=dt))

    @property
    def sizes(self) -> tuple:
        return tuple(self.tuning.quick_sizes or self.tuning.sizes) if self.quick else tuple(self.tuning.sizes)

    @property
    def grid(self) -> dict:
        t = self.tuning
        return dict(t.quick_params if self.quick and t.quick_params is not None else t.params)

    def problem(self, size) -> dict:
        t = self.tuning
        base = t.quick_problem if self.quick and t.quick_problem is not None else t.problem
        return {**base, t.knob: size}

    def candidates(self, size, device) -> list[dict]:
        """Every valid combination of the grid at ``size`` on ``device`` (a Device or DeviceInfo)."""
        spec, t = self.spec, self.tuning
        variant = spec.variant(t.variant)
        problem = spec.resolve_problem(self.problem(size), quick=self.quick)
        names = list(self.grid)
        out = []
        for values in itertools.product(*(self.grid[n] for n in names)):
            params = dict(zip(names, values))
            if t.keep is not None and not t.keep(size, params):
                continue
            try:
                resolved = variant.resolve_params(params)
                if variant.check is not None:
                    variant.check(problem, resolved, t.dtype, device)
            except ValueError:
                continue
            out.append(params)
        return out

    def neighbours(self, tiles: dict, problem: dict, dtype: str, device) -> list[dict]:
        """``tiles`` with one tile moved one step down or up in the grid (the others kept), for
        each tile: those the variant can run on ``problem`` (a resolved problem)."""
        t = self.tuning
        variant = self.spec.variant(t.variant)
        out = []
        for name, value in tiles.items():
            values = list(self.grid.get(name, ()))
            if value not in values:
                continue
            i = values.index(value)
            for j in (i - 1, i + 1):
                if not 0 <= j < len(values):
                    continue
                params = {**tiles, name: values[j]}
                if t.keep is not None and not t.keep(problem[t.knob], params):
                    continue
                try:
                    resolved = variant.resolve_params(params)
                    if variant.check is not None:
                        variant.check(problem, resolved, dtype, device)
                except ValueError:
                    continue
                out.append(params)
        return out

    def simplicity(self, params: dict) -> tuple:
        """Sort key of a configuration's simplicity: the Tuning's ``simpler`` tiles, smaller first
        (a tile the configuration leaves to the rule counts as simplest)."""
        return tuple(params.get(n, 0) if params.get(n, 0) != "auto" else 0 for n in self.tuning.simpler)
