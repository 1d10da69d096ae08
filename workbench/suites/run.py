"""Running a suite: measure every target's points side by side, judge them, report as we go.

Every measurement goes to the store the moment it is taken (:func:`workbench.measure.measure`
with ``on_error="record"``; the chain's records are appended the same way), so a later failure
loses nothing already measured. Runners are a registry by target kind.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from kernels.spec import DTYPES, get
from workbench.device import get_device
from workbench.measure import Record, measure
from workbench.suites.chain import run_chain
from workbench.suites.context import RunContext, SuiteRun, new_record
from workbench.suites.judge import failures, rows_for, sweep_label
from workbench.suites.targets import PEER_BACKENDS, Defaults, Suite, Versus, get_suite


def peer_plan(target: Versus, device_kind: str) -> tuple[list[str], dict[str, str]]:
    """(peers to measure here, {peer: why it cannot run here}) for a :class:`Versus` target."""
    spec = get(target.family)
    if target.peers is None:
        names = [
            v.name
            for v in spec.variants
            if v.backend in PEER_BACKENDS and v.name != target.ours and (v.modes is None or target.mode in v.modes)
        ]
    else:
        names = list(target.peers)
    run, missing = [], {}
    for name in names:
        var = spec.variant(name)
        reason = (var.available() if var.available else None) or var.unavailable_reason(device_kind)
        if reason:
            missing[name] = reason
        else:
            run.append(name)
    return run, missing


def _run_versus(target: Versus, ctx: RunContext, run: SuiteRun) -> None:
    spec = get(target.family)
    peers, missing = peer_plan(target, ctx.device.kind)
    run.missing[target.name] = missing
    axis = spec.axis
    for x in target.values:
        problem = {**target.problem, axis: x}
        for name in [target.ours] + peers:
            rec = measure(
                spec,
                name,
                device=ctx.device,
                dtype=target.dtype,
                mode=target.mode,
                problem=problem,
                warmup_ms=ctx.warmup_ms,
                rep_ms=ctx.rep_ms,
                store=ctx.store,
                on_error="record",
            )
            ctx.emit(rec)
            if name in target.kernel_only:
                ctx.emit(_bare_kernel_record(spec, spec.variant(name), problem, target, ctx), to_store=True)


def _bare_kernel_record(spec, var, problem: dict, target: Versus, ctx: RunContext) -> Record:
    """A peer's bare kernel (its variant's ``kernel``) timed on the target's problem, recorded as
    ``<variant>_kernel``; the variant's own record has checked its result on our inputs."""
    dev = ctx.device
    prob = spec.resolve_problem(problem)
    rec = new_record(
        spec.name, f"{var.name}_kernel", "peer", "forward", target.dtype, dev, prob, {}, spec.axis, prob[spec.axis]
    )
    try:
        inputs = spec.make_inputs(prob, DTYPES[target.dtype], dev.torch_device, 0)
        fn = var.kernel(inputs, prob)
        with torch.no_grad():
            fn()
            timing = dev.time(fn, warmup_ms=ctx.warmup_ms, rep_ms=ctx.rep_ms)
        rec.timing_method = timing.method
        rec.ms_p50, rec.ms_p20, rec.ms_p80 = timing.p50, timing.p20, timing.p80
        rec.min_bytes = int(spec.min_bytes(prob, "forward", target.dtype))
        if dev.kind != "cpu" and timing.p50 > 0:
            rec.gbps = rec.min_bytes / (timing.p50 * 1e-3) / 1e9
            rec.copy_bw_gbps = dev.copy_bandwidth_gbps()
            if rec.copy_bw_gbps:
                rec.pct_copy_bw = 100.0 * rec.gbps / rec.copy_bw_gbps
        rec.passed = True  # its result on our inputs is checked by the variant's own record
    except Exception as exc:  # noqa: BLE001 - a peer that cannot be timed is reported, not fatal
        rec.error, rec.passed = f"{type(exc).__name__}: {exc}"[:2000], False
    return rec


def _run_defaults(target: Defaults, ctx: RunContext, run: SuiteRun) -> None:
    spec = get(target.family)
    var = spec.variant(target.variant)
    axis = spec.axis
    names = [p.name for p in var.params] if target.params is None else list(target.params)
    for x in target.values:
        problem = {**target.problem, axis: x}
        configs: list[dict] = [{}]
        prob = spec.resolve_problem(problem)
        for pname in names:
            p = var.param(pname)
            taken = 0
            for value in p.values:
                if value == p.default:
                    continue
                if target.max_values is not None and taken >= target.max_values:
                    break
                if var.check is not None:
                    try:
                        var.check(prob, var.resolve_params({pname: value}), target.dtype, ctx.device)
                    except ValueError:
                        continue  # a value this problem cannot take: skipped, not measured
                configs.append({pname: value})
                taken += 1
        for params in configs:
            rec = measure(
                spec,
                var,
                device=ctx.device,
                dtype=target.dtype,
                mode=target.mode,
                problem=problem,
                params=params,
                warmup_ms=ctx.warmup_ms,
                rep_ms=ctx.rep_ms,
                store=ctx.store,
                on_error="record",
            )
            ctx.emit(rec, label=sweep_label(params))


_RUNNERS = {"versus": _run_versus, "chain": run_chain, "defaults": _run_defaults}


def run_suite(
    suite: Suite | str,
    *,
    device="auto",
    store=None,
    rep_ms: float | None = None,
    warmup_ms: float | None = None,
    only: Sequence[str] | None = None,
    on_record: Callable[[Any], None] | None = None,
    on_target: Callable[[Any, SuiteRun], None] | None = None,
) -> SuiteRun:
    """Measure every target (or those in ``only``) and judge it; see the module docstring.

    ``on_record(record)`` is called after each measurement (the CLI prints a line), and
    ``on_target(target, run)`` after each target (the CLI rewrites its files)."""
    suite = get_suite(suite) if isinstance(suite, str) else suite
    targets = [suite.target(n) for n in only] if only else list(suite.targets)
    dev = get_device(device)
    run = SuiteRun(suite.name, dev.kind, dev.name)
    for target in targets:
        mine: list = []

        def emit(rec, *, label=None, to_store=False, _mine=mine):
            if label is not None:
                rec.label = label  # which configuration of a tile sweep (kept in records.json)
            if to_store and store is not None:
                store.append(rec)
            _mine.append(len(run.records))
            run.records.append(rec)
            if on_record is not None:
                on_record(rec)

        ctx = RunContext(dev, store, suite.rep_ms if rep_ms is None else rep_ms, suite.warmup_ms, emit)
        if warmup_ms is not None:
            ctx.warmup_ms = warmup_ms
        run.target_records[target.name] = mine
        try:
            _RUNNERS[target.kind](target, ctx, run)
        except Exception as exc:  # noqa: BLE001 - a target that cannot start is reported; the rest go on
            run.failures.append(f"{target.name}: could not run: {type(exc).__name__}: {exc}")
        recs = [run.records[i] for i in mine]
        run.rows.extend(rows_for(target, recs, run.missing.get(target.name)))
        run.failures.extend(failures(target, recs))
        if on_target is not None:
            on_target(target, run)
    return run
