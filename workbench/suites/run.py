"""Running a suite: measure every target's points side by side, judge them, report as we go.

Every measurement goes to the store the moment it is taken (:func:`workbench.measure.measure`
with ``on_error="record"``; the chain's records are appended the same way), so a later failure
loses nothing already measured. Runners are a registry by target kind.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch

from kernels.spec import DTYPES, get
from workbench.compiling import service as compile_service
from workbench.device import get_device
from workbench.measure import measure_many
from workbench.record import Record
from workbench.suites.chain import run_chain
from workbench.suites.compiled import run_compiled
from workbench.suites.context import RunContext, SuiteRun, new_record
from workbench.suites.judge import failures, rows_for, sweep_label
from workbench.suites.targets import PEER_BACKENDS, Defaults, Suite, Versus, get_suite
from workbench.timing import start_profiler


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


def _versus_configs(target: Versus, spec, peers: list[str], x) -> tuple[dict, list[str], list[dict]]:
    """(problem, variants, the configurations measured together) of a :class:`Versus` target at
    ``x``: ours and every peer whose variant has the target's mode (a kernel-only peer without
    it is timed by its bare kernel alone)."""
    problem = {**target.problem, spec.axis: x}
    names = [n for n in [target.ours] + peers if n == target.ours or _has_mode(spec.variant(n), target.mode)]
    return problem, names, [dict(variant=n, dtype=target.dtype, mode=target.mode, problem=problem) for n in names]


def _run_versus(target: Versus, ctx: RunContext, run: SuiteRun) -> None:
    spec = get(target.family)
    peers, missing = peer_plan(target, ctx.device.kind)
    run.missing[target.name] = missing
    for x in target.values:
        problem, names, configs = _versus_configs(target, spec, peers, x)
        everyone = [target.ours] + peers
        keys = [_taken_key(spec.name, name, target, problem) for name in everyone]
        if all(key in ctx.taken for key in keys):
            for key in keys:  # measured side by side by an earlier target: judge another timing
                for rec in ctx.taken[key]:
                    ctx.emit(rec)
            continue
        bare = [
            _bare_kernel(spec, spec.variant(name), problem, target, ctx)
            for name in everyone
            if name in target.kernel_only
        ]
        keys = [_taken_key(spec.name, name, target, problem) for name in names]
        # Ours and every peer at this x are timed together, their trials interleaved.
        recs = measure_many(
            spec,
            configs,
            device=ctx.device,
            warmup_ms=ctx.warmup_ms,
            rep_ms=ctx.rep_ms * target.budget_scale,
            store=ctx.store,
            on_error="record",
            extra=[(rec, fn) for rec, fn in bare if fn is not None],
            phases=ctx.phases,
            l2=target.l2,
            same_size_copy=target.same_size_copy,
        )
        for key, rec in zip(keys, recs):
            ctx.emit(rec)
            ctx.taken[key] = [rec]
        for bare_rec, _ in bare:
            ctx.emit(bare_rec, to_store=True)
            owner = _taken_key(spec.name, bare_rec.variant[: -len("_kernel")], target, problem)
            ctx.taken.setdefault(owner, []).append(bare_rec)


def _has_mode(var, mode: str) -> bool:
    return var.modes is None or mode in var.modes


def _taken_key(family: str, variant: str, target: Versus, problem: dict) -> tuple:
    problem_key = tuple(sorted((k, str(v)) for k, v in problem.items()))
    return (family, variant, target.mode, target.dtype, target.l2, problem_key)


def _bare_kernel(spec, var, problem: dict, target: Versus, ctx: RunContext) -> tuple[Record, Callable | None]:
    """A peer's bare kernel (its variant's ``kernel``) on the target's problem, as a record named
    ``<variant>_kernel`` and the call to time (None when it cannot run; the record says why).
    The variant's own record checks its result on our inputs."""
    dev = ctx.device
    prob = spec.resolve_problem(problem)
    mode = target.mode
    rec = new_record(
        spec.name, f"{var.name}_kernel", "peer", mode, target.dtype, dev, prob, {}, spec.axis, prob[spec.axis]
    )
    rec.min_bytes = int(spec.min_bytes(prob, mode, target.dtype))
    rec.precision = spec.precision_of(var, prob)
    try:
        with ctx.phases("setup"):
            inputs = spec.make_inputs(prob, DTYPES[target.dtype], dev.torch_device, 0)
        with ctx.phases("compile"):
            # A mode other than forward is asked for by name (a peer's kernel hook may take ``mode``).
            kernel = var.kernel(inputs, prob) if mode == "forward" else var.kernel(inputs, prob, mode=mode)

            def fn():
                with torch.no_grad():
                    return kernel()

            fn()
        rec.passed = True  # its result on our inputs is checked by the variant's own record
        return rec, fn
    except Exception as exc:  # noqa: BLE001 - a peer that cannot be timed is reported, not fatal
        rec.error, rec.passed = f"{type(exc).__name__}: {exc}"[:2000], False
        return rec, None


def _defaults_configs(target: Defaults, spec, device, x) -> tuple[list[dict], list[dict]]:
    """(the tiles, the configurations measured together) of a :class:`Defaults` target at ``x``:
    the declared defaults first, then the tuned entry and its neighbours, else a 1-D sweep."""
    var = spec.variant(target.variant)
    problem = {**target.problem, spec.axis: x}
    prob = spec.resolve_problem(problem)
    tiles = [{}] + (_tuned_alternatives(target, spec, prob, device) or _sweep_alternatives(target, var, prob, device))
    configs = [dict(variant=var, dtype=target.dtype, mode=target.mode, problem=problem, params=p) for p in tiles]
    return tiles, configs


def _run_defaults(target: Defaults, ctx: RunContext, run: SuiteRun) -> None:
    spec = get(target.family)
    for x in target.values:
        configs, planned = _defaults_configs(target, spec, ctx.device, x)
        # The default and every alternative tile at this x are timed together, interleaved.
        recs = measure_many(
            spec,
            planned,
            device=ctx.device,
            warmup_ms=ctx.warmup_ms,
            rep_ms=ctx.rep_ms,
            store=ctx.store,
            on_error="record",
            phases=ctx.phases,
        )
        for params, rec in zip(configs, recs):
            ctx.emit(rec, label=sweep_label(params))


def _tuned_alternatives(target: Defaults, spec, prob: dict, device) -> list[dict]:
    """The device's tuned-table entry at this size and its neighbours in the tune grid, or []
    where the target is not ``tuned`` or the device has no entry (then: the 1-D sweep)."""
    if not target.tuned or spec.tuning is None or spec.tuning.variant != target.variant:
        return []
    from kernels import tuned_tables
    from workbench.tune.space import Space

    found = tuned_tables.lookup(spec.name, tuned_tables.device_key(device), prob[spec.tuning.knob])
    if not found.tiles:
        return []
    space = Space.of(spec, quick=device.kind == "cpu")
    return [dict(found.tiles)] + space.neighbours(found.tiles, prob, target.dtype, device)


def _sweep_alternatives(target: Defaults, var, prob: dict, device) -> list[dict]:
    """A 1-D sweep of each tile parameter (``params``, at most ``max_values`` runnable values)."""
    names = [p.name for p in var.params] if target.params is None else list(target.params)
    configs = []
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
                    var.check(prob, var.resolve_params({pname: value}), target.dtype, device)
                except ValueError:
                    continue  # a value this problem cannot take: skipped, not measured
            configs.append({pname: value})
            taken += 1
    return configs


def start_prebuilds(targets, device_kind: str) -> list[str]:
    """Start every ``prebuild`` hook of the variants of the families these targets measure (a
    peer's compiles, in background processes), so that work overlaps the targets measured
    before the peer's first call instead of stalling it. Returns the variants started."""
    started = []
    for family in dict.fromkeys(t.family for t in targets):
        started += [f"{family}/{name}" for name in get(family).start_prebuilds(device_kind)]
    return started


def compile_ahead(targets, device) -> int:
    """Submit every configuration the targets will measure on ``device`` to this process's compile
    service (:mod:`workbench.compiling.service`), in the order they will be measured, so compile
    processes compile them while the GPU measures the ones before; how many were submitted (0 on
    a device where nothing is compiled ahead). Chain and compiled targets compile as they run."""
    if compile_service.for_kind(device.kind) is None:
        return 0
    submitted = 0
    for target in targets:
        try:
            spec = get(target.family)
            if target.kind == "versus":
                peers, _ = peer_plan(target, device.kind)
                planned = [c for x in target.values for c in _versus_configs(target, spec, peers, x)[2]]
            elif target.kind == "defaults":
                planned = [c for x in target.values for c in _defaults_configs(target, spec, device, x)[1]]
            else:
                continue
        except Exception:  # noqa: BLE001 - a target that cannot plan says why when it runs
            continue
        submitted += compile_service.submit_configs(spec, planned, device.kind)
    return submitted


_RUNNERS = {"versus": _run_versus, "chain": run_chain, "defaults": _run_defaults, "compiled": run_compiled}


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
    taken: dict = {}
    start_prebuilds(targets, dev.kind)
    if compile_ahead(targets, dev) and dev.kind == "cuda":
        # The profiler's first session now, on this thread, while the compile processes compile
        # the first targets: whatever it costs (16 ms on an H200 without Inductor's import,
        # workbench.timing.cuda_profiled_operations) stays out of the first timing.
        start_profiler()
    for target in targets:
        started = time.perf_counter()
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

        ctx = RunContext(dev, store, suite.rep_ms if rep_ms is None else rep_ms, suite.warmup_ms, emit, taken)
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
        run.target_wall[target.name] = ctx.phases.split(time.perf_counter() - started)
        service = compile_service.active()
        if service is not None:
            run.compile_ahead.update(service.summary())
        if on_target is not None:
            on_target(target, run)
    return run
