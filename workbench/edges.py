"""Edge shapes: the correctness check at shapes derived from a family's declaration, for every
family (a user's included) without the family writing them.

From a record's problem (the quick one on the CPU) and the variant's declaration
(:func:`edge_cases`):

- **one row**: every size knob but the plots' axis at its smallest (one row, one batch entry);
  where the axis is the only size, the axis at its smallest;
- **one element**: every size knob at its smallest;
- **odd sizes**: every size knob at the next odd value above the record's that is not a power of
  two (a row whose length no tile divides, so the masks do work);
- **smallest / largest <tile>**: each tile the family tunes (every numeric tile where it tunes none
  of the variant's: :func:`tile_ranges`) at the smallest and the largest of its values that the
  variant's ``check`` accepts at the odd sizes, the other tiles "auto";
- **strided inputs**: the odd sizes with every input of two or more axes a view of its rows in a
  wider buffer, where the family declares it takes them (``KernelSpec.strided``).

A size knob is an integer knob with a range (rows, hidden, numel, batch …) whose value is not 0 (0
stands for "derive it" in some families). Each case is judged like any measurement
(:func:`kernels.testing.judge`: NaN or Inf where the reference has none fails it). Its verdict:
``passed`` True / False, or None with ``refused`` where the declaration refuses the shape or tile
(the problem's knobs or ``check`` raise ValueError; not a failure). A shape the declaration
accepts but the kernel cannot run is a failure (``error``).

Each case is a configuration of its own (another shape, another tile), so on a GPU each first call
is a Triton compile: the rms_norm notebook's ``s.correctness(mode="full", edges=True)`` runs 32 of
them. :func:`plan` resolves every case (refused, or with the configuration that runs it);
:func:`workbench.measure.check_edges` and :func:`workbench.measure.check_records` hand them all to
the compile service (:mod:`workbench.compiling.service`) before the first runs, then run them one
after another in the measuring process, those whose kernels are compiled first, so that a case
whose compile takes long (a tile that spills registers: 20 s for one warp over a row of 8192 on an
H200 host) holds up no other. What runs and every verdict stay as they were without it (each
case's inputs come from its own seed); on the CPU nothing is submitted (the interpreter compiles
nothing) and the cases run in order. Each verdict says what its case cost (seconds, whether it
was compiled ahead, any wait: :func:`summary`). :func:`attach` stores the verdicts in a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kernels.spec import KernelSpec, Knob, Variant, dtype_name


def size_knobs(spec: KernelSpec, problem: Mapping[str, Any]) -> list[Knob]:
    """The integer knobs with a range whose value in ``problem`` is a size (not 0)."""
    return [
        k
        for k in spec.knobs
        if k.values is None
        and isinstance(k.default, int)
        and not isinstance(k.default, bool)
        and (k.low is not None or k.high is not None)
        and problem.get(k.name)
    ]


def _smallest(knob: Knob) -> int:
    return max(1, knob.low if knob.low is not None else 1)


def _odd_above(value: int, knob: Knob) -> int:
    """The next odd value above ``value`` that is not a power of two (within the knob's range)."""
    candidate = value + 1
    while candidate % 2 == 0 or candidate & (candidate - 1) == 0 or candidate < 3:
        candidate += 1
    return candidate if knob.high is None or candidate <= knob.high else value


def _numeric(values) -> list:
    return sorted(v for v in values if isinstance(v, int) and not isinstance(v, bool))


def tile_ranges(spec: KernelSpec, variant: Variant) -> dict[str, list]:
    """The tiles whose extremes are edges, each with its values: the tiles the family tunes
    (``KernelSpec.tuning`` / ``backward_tuning``) that the variant has, over the tune grid's values
    for the tuned variant and the Param's own for another; a variant with none of them: every
    numeric tile it has (a user's family tunes all of its tiles)."""
    params = {p.name: p for p in variant.params}
    tuned: dict[str, list] = {}
    for t in (spec.tuning, spec.backward_tuning):
        if t is None:
            continue
        for name, values in t.params.items():
            if name in params:
                grid = values if t.variant == variant.name else params[name].values
                tuned[name] = sorted(set(tuned.get(name, [])) | set(_numeric(grid)))
    if tuned:
        return tuned
    return {name: _numeric(p.values) for name, p in params.items()}


def edge_cases(spec: KernelSpec, variant: Variant, problem: Mapping[str, Any], dtype: str, device) -> list[dict]:
    """The edge cases of ``variant`` around the resolved ``problem`` (module docstring): dicts with
    ``edge`` (the label), ``problem``, ``params`` and ``layout``; a tile edge the declaration
    refuses at every value is left out."""
    sizes = size_knobs(spec, problem)
    cases = []
    if sizes:
        others = [k for k in sizes if k.name != spec.axis] or sizes
        cases.append(("one row", {k.name: _smallest(k) for k in others}))
        if len(others) < len(sizes):
            cases.append(("one element", {k.name: _smallest(k) for k in sizes}))
        odd = {k.name: _odd_above(int(problem[k.name]), k) for k in sizes}
        cases.append(("odd sizes", odd))
    else:
        odd = {}
    names = [k.name for k in sizes]

    def case(label, prob, params=None, layout="contiguous"):
        return {"edge": label, "problem": prob, "params": dict(params or {}), "layout": layout,
                "sizes": {n: prob[n] for n in names}}  # fmt: skip

    out = [case(label, {**problem, **p}) for label, p in cases]
    at = {**problem, **odd}
    for param, values in tile_ranges(spec, variant).items():
        if len(values) < 2:
            continue
        accepted = [v for v in values if _accepts(variant, at, {param: v}, dtype, device)]
        for label, value in (("smallest", accepted[:1]), ("largest", accepted[-1:])):
            if value and not (label == "largest" and len(accepted) == 1):
                out.append(case(f"{label} {param}", at, {param: value[0]}))
    if spec.strided:
        out.append(case("strided inputs", at, layout="strided"))
    return out


def _accepts(variant: Variant, problem, params, dtype, device) -> bool:
    try:
        resolved = variant.resolve_params(params)
        if variant.check is not None:
            variant.check(problem, resolved, dtype, device)
    except ValueError:
        return False
    return True


@dataclass
class EdgeCase:
    """One case to run: its verdict so far, and the configuration that runs it (None where the
    declaration refuses it; the verdict says why)."""

    verdict: dict
    config: dict | None


def plan(spec: KernelSpec, variant: Variant, problem: Mapping[str, Any], params: Mapping[str, Any] | None,
         *, dtype: str, mode: str, device, seed: int = 0) -> list[EdgeCase]:  # fmt: skip
    """The edge cases of ``variant`` around ``problem`` (:func:`edge_cases`; on the CPU around the
    family's quick problem) on ``device`` (a :class:`workbench.device.Device`), each refused by the
    declaration or ready to run with the tiles of ``params`` that are not "auto"."""
    dt = dtype_name(dtype)
    base = spec.resolve_problem(problem if device.kind != "cpu" else {**dict(problem), **_quick_sizes(spec)})
    fixed = {k: v for k, v in dict(params or {}).items() if v != "auto"}
    cases = []
    for case in edge_cases(spec, variant, base, dt, device):
        merged = {**fixed, **case["params"]}
        verdict = {**case, "params": merged, "passed": None, "err_ratio": None, "failed": []}
        try:
            prob = spec.resolve_problem(case["problem"])
            resolved = variant.resolve_params(merged)
            if variant.check is not None:
                variant.check(prob, resolved, dt, device)
        except ValueError as exc:
            verdict["refused"] = str(exc)[:300]
            cases.append(EdgeCase(verdict, None))
            continue
        verdict["problem"] = prob
        config = dict(
            variant=variant, dtype=dt, mode=mode, problem=prob, params=merged, seed=seed, layout=case["layout"]
        )
        cases.append(EdgeCase(verdict, config))
    return cases


def _quick_sizes(spec: KernelSpec) -> dict:
    """The family's quick values of its size knobs (the interpreter's edge shapes start there)."""
    names = {k.name for k in size_knobs(spec, {**{k.name: k.default for k in spec.knobs}, **spec.quick})}
    return {k: v for k, v in spec.quick.items() if k in names}


def attach(record, verdicts: list[dict]) -> None:
    """Store ``verdicts`` in ``record``: its ``edges``; each failed edge's checks (or its error) join
    ``checks`` under the edge's label, and the record fails."""
    record.edges = verdicts
    failed = [v for v in verdicts if v["passed"] is False]
    for v in failed:
        label = describe(v)
        if v.get("error"):
            record.checks.append(_error_check(label, v["error"]))
        for c in v["failed"]:
            record.checks.append({**c, "name": f"{c['name']} [{label}]"})
    if failed and record.passed:
        record.passed = False


def describe(verdict: Mapping) -> str:
    """``"largest BLOCK_SIZE (BLOCK_SIZE=65536; rows=39, hidden=301)"``: an edge, its tiles and the
    sizes it ran at."""
    tiles = ", ".join(f"{k}={v}" for k, v in (verdict.get("params") or {}).items())
    sizes = ", ".join(f"{k}={v}" for k, v in (verdict.get("sizes") or {}).items())
    return f"{verdict['edge']} ({'; '.join(p for p in (tiles, sizes) if p)})"


def _error_check(label: str, error: str) -> dict:
    return {"name": f"- [{label}]", "max_abs": float("nan"), "max_rel": float("nan"), "atol": 0.0, "rtol": 0.0,
            "nan_mismatch": 0, "passed": False, "note": f"could not run: {error}"}  # fmt: skip


def summary(verdicts: list[dict]) -> str:
    """One line: how many edge shapes passed, failed and were refused, naming the failed ones."""
    passed = sum(1 for v in verdicts if v["passed"] is True)
    failed = [describe(v) for v in verdicts if v["passed"] is False]
    refused = sum(1 for v in verdicts if v["passed"] is None)
    text = f"edge shapes: {passed} passed, {len(failed)} failed, {refused} refused by the declaration"
    ran = [v for v in verdicts if v.get("seconds") is not None]
    if ran:
        text += f" ({cost(ran)})"
    return text + (": " + "; ".join(failed) if failed else "")


def cost(verdicts: list[dict]) -> str:
    """``"in 12.3 s; 10 of 12 compiled ahead; waited 3.1 s"``: what running ``verdicts`` cost
    (each verdict's ``seconds``, ``compiled_ahead`` and ``waited_ms``, from
    :func:`workbench.measure.run_edges`); the compile part only where something compiles."""
    text = f"in {sum(v['seconds'] for v in verdicts):.1f} s"
    known = [v["compiled_ahead"] for v in verdicts if v.get("compiled_ahead") is not None]
    if known:
        text += f"; {sum(known)} of {len(known)} compiled ahead"
    waited = sum(v.get("waited_ms") or 0.0 for v in verdicts)
    if waited:
        text += f"; waited {waited / 1e3:.1f} s"
    return text
