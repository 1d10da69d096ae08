"""measure(): run one configuration of one variant, check it, time it, and return one record.

The protocol (docs/measuring.md and docs/architecture.md, "The measuring contract"), run in the
same order by every caller (CLI, Session, suites, sweeps):

1. Prepare each configuration (:mod:`workbench.prepare`): resolve it, settle what a compile
   process compiled of it ahead (:func:`workbench.compiling.service.settle`), make its seeded
   random inputs (made once per problem in a process and kept, each configuration timing its
   own fresh copy), and run it once, which compiles it.
2. Correctness first (:mod:`workbench.correctness`): the variant's outputs, and for backward
   modes its gradients for a seeded random incoming gradient, against the spec's reference run
   on the same inputs upcast to float64 (the truth; float32 on a device without float64),
   judged by how far the same reference errs in the measured dtype
   (:func:`kernels.testing.judge`, the family's ``error_rule``) inside the dtype's atol / rtol.
   Max abs / max rel error, the error ratio against the reference's, NaN/Inf mismatches, pass
   per tensor.
3. Time (here): ``Device.timings`` takes the three timings of :mod:`workbench.timing` (kernel:
   the profiler's device-kernel sum with the L2 flushed; call: device events around one eager
   call; host: the time to issue it), each a median with its interval, trials of configurations
   measured together interleaved. On the CPU the times are interpreter (or CPU) wall times,
   labelled so, never compared with device numbers. On a device the timings run with the
   Python heap frozen out of the collector's way (``gc.freeze``: the steady state of a training
   loop, whose long-lived objects the collector no longer walks); the record's
   ``device_state["python_heap"]`` says so.
4. Peak memory above the baseline during one call; GB/s from the spec's minimum bytes and its
   share of the device's measured copy bandwidth (a 512 MiB copy). With ``same_size_copy``, also
   its share of a device copy of the same bytes in as many launches as the call made, timed
   the same way right after it (:mod:`workbench.same_size_copy`): the limit at the cell's own
   size, where launch and tail costs weigh as they do on the kernel.
5. With ``edges``, each configuration of our own kernels also checked, untimed, at the edge
   shapes derived from its declaration (:mod:`workbench.edges` plans them; :func:`run_edges`
   runs them). The edge runs live here because each case is measured by :func:`measure_many`,
   which runs them in turn.

A configuration that cannot run (bad tile, missing peer, unsupported device) raises ValueError
with ``on_error="raise"``; with ``on_error="record"`` it becomes a record whose ``error`` says why,
so sweeps keep going and show failed cells. The record itself is :class:`workbench.record.Record`.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from typing import Any, Callable, Mapping, Sequence

from kernels.spec import PEER_BACKENDS, KernelSpec, Variant, get
from kernels.testing import compare  # noqa: F401 - compare: public here too
from workbench import device_state, timing
from workbench import edges as edges_module
from workbench.compiling import service as compile_service
from workbench.device import Device, check_l2, get_device
from workbench.errors import short_error
from workbench.kept_inputs import forget_inputs  # noqa: F401 - forget_inputs: public here too
from workbench.phases import Phases
from workbench.prepare import Prepared, Shared, prepare
from workbench.record import Record
from workbench.same_size_copy import measure_same_size_copy
from workbench.timing import DEFAULT_REL_WIDTH


def measure(
    spec: KernelSpec | str,
    variant: str | Variant,
    *,
    device: str | Device = "auto",
    dtype: str = "bf16",
    mode: str = "forward",
    problem: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    warmup_ms: float = 25,
    rep_ms: float = 100,
    quick: bool = False,
    check: bool = True,
    time_it: bool = True,
    store=None,
    on_error: str = "raise",
    rel_width: float = DEFAULT_REL_WIDTH,
    phases: Phases | None = None,
    l2: str = "cold",
    edges: bool = False,
    same_size_copy: bool = False,
) -> Record:
    """Measure one configuration; see the module docstring for the protocol (``l2``, ``edges``
    and ``same_size_copy``: as :func:`measure_many`)."""
    config = dict(variant=variant, dtype=dtype, mode=mode, problem=problem, params=params, seed=seed)
    return measure_many(
        spec,
        [config],
        device=device,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
        quick=quick,
        check=check,
        time_it=time_it,
        store=store,
        on_error=on_error,
        rel_width=rel_width,
        phases=phases,
        l2=l2,
        edges=edges,
        same_size_copy=same_size_copy,
    )[0]


def measure_many(
    spec: KernelSpec | str,
    configs: Sequence[Mapping[str, Any]],
    *,
    device: str | Device = "auto",
    warmup_ms: float = 25,
    rep_ms: float = 100,
    quick: bool = False,
    check: bool = True,
    time_it: bool = True,
    store=None,
    on_error: str = "raise",
    rel_width: float = DEFAULT_REL_WIDTH,
    extra: Sequence[tuple[Record, Callable[[], object]]] = (),
    phases: Phases | None = None,
    l2: str = "cold",
    edges: bool = False,
    same_size_copy: bool = False,
) -> list[Record]:
    """Measure several configurations of one family side by side, their timing trials interleaved.

    Each config is a mapping with ``variant`` and optionally ``dtype``, ``mode``, ``problem``,
    ``params`` and ``seed`` (the keywords of :func:`measure`). Every configuration is prepared
    and checked first; then all of them are timed together, trials alternating (A B C, B C A, ...)
    so that drift in clocks or temperature hits each alike, and a ratio between two of them is
    a ratio of numbers taken under the same conditions. ``rep_ms`` is the time budget per
    configuration and timing; sampling stops earlier once every median's interval is within
    ``rel_width``.

    ``extra``: (record, call) pairs timed in the same rounds, for calls that are not a variant
    (a peer's bare kernel); their records get the timings and nothing else. ``phases`` adds
    the wall seconds spent on inputs, first calls, checks and timing (:mod:`workbench.phases`).
    ``l2``: "cold" (the L2 flushed before each kernel-timed call) or "warm" (left as the previous
    call left it); the records' ``kernel_method`` says which (:meth:`Device.samplers`).
    ``edges``: also check each configuration of our own kernels (not a peer's) at the edge shapes
    derived from the declaration (:func:`check_records`: every record's cases compiled ahead
    where a GPU measures); a failed edge fails the record.
    ``same_size_copy``: after the timings, time a device copy of each timed record's minimum bytes
    in as many launches as its call made (:func:`measure_same_size_copy`), with the same budget,
    interval width and L2 state; the copies are kept per device, bytes and launches in the process.
    """
    check_l2(l2)
    spec = get(spec) if isinstance(spec, str) else spec
    phases = phases if phases is not None else Phases()
    shared = Shared(device, quick, check, on_error, phases)
    prepared: list[Prepared] = []
    records: list[Record] = []
    for config in configs:
        rec, prep = prepare(spec, config, shared)
        records.append(rec)
        if prep is not None and time_it:
            prepared.append(prep)
    if time_it and extra:
        dev = get_device(device)
        prepared += [Prepared(rec, spec, dev, rec.problem, fn) for rec, fn in extra]
    if prepared:
        with phases("timing"):
            _time_together(prepared, warmup_ms, rep_ms, rel_width, on_error, l2)
            if same_size_copy:
                for prep in prepared:
                    measure_same_size_copy(prep.record, prep.device, budget_s=rep_ms / 1e3, rel_width=rel_width, l2=l2)
    for prep in prepared:
        prep.step = None  # drop the inputs and graphs before the next configuration allocates
    if edges and check:
        with phases("check"):
            ours = [(rec, c["variant"]) for rec, c in zip(records, configs) if rec.backend not in PEER_BACKENDS]
            checked = [(rec, var) for rec, var in ours if rec.error is None]
            for (rec, _), verdicts in zip(checked, check_records(spec, checked, device)):
                edges_module.attach(rec, verdicts)
    for rec in records:
        if store is not None:
            store.append(rec)
    return records


def check_edges(
    spec: KernelSpec | str,
    variant: Variant | str,
    *,
    device: str | Device = "auto",
    dtype: str,
    mode: str,
    problem: Mapping[str, Any],
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> list[dict]:
    """Run every edge case of ``variant`` around ``problem`` (:func:`workbench.edges.plan`: on the
    CPU around the family's quick problem), compiled ahead where a GPU measures, checked and not
    timed, and return one verdict each (:func:`run_edges`)."""
    spec = get(spec) if isinstance(spec, str) else spec
    dev = get_device(device)
    var = spec.variant(variant) if isinstance(variant, str) else variant
    cases = edges_module.plan(spec, var, problem, params, dtype=dtype, mode=mode, device=dev, seed=seed)
    _submit_edges(spec, cases, dev)
    return run_edges(spec, cases, dev)


def check_records(
    spec: KernelSpec, checked: Sequence[tuple[Record, Variant | str]], device: str | Device, seed: int | None = None
) -> list[list[dict]]:
    """The edge verdicts of each (record, variant) in ``checked`` at the record's dtype, mode,
    problem and tiles (and seed, unless ``seed`` is given). Every record's cases are planned and
    submitted to the compile service before the first runs, so the compile processes work through
    the later ones while the earlier ones run. One list of verdicts per pair."""
    dev = get_device(device)
    plans = []
    for rec, variant in checked:
        var = spec.variant(variant) if isinstance(variant, str) else variant
        plans.append(edges_module.plan(spec, var, rec.problem, rec.params, dtype=rec.dtype, mode=rec.mode, device=dev,
                                       seed=rec.seed if seed is None else seed))  # fmt: skip
    flat = [case for cases in plans for case in cases]
    _submit_edges(spec, flat, dev)
    verdicts = iter(run_edges(spec, flat, dev))
    return [[next(verdicts) for _ in cases] for cases in plans]


def _submit_edges(spec: KernelSpec, cases: Sequence[edges_module.EdgeCase], device: Device) -> None:
    """The cases that run, to the compile service in the order they will run (nothing on a device
    that compiles nothing ahead)."""
    configs = [c.config for c in cases if c.config is not None]
    if configs:
        compile_service.submit_configs(spec, configs, device.kind)


def run_edges(spec: KernelSpec, cases: Sequence[edges_module.EdgeCase], device: Device) -> list[dict]:
    """Run planned edge cases one after another, checked and not timed, one verdict each, in the
    cases' order. They run in the order their compiles become ready
    (:func:`workbench.compiling.service.in_readiness_order`: one whose kernels take long to
    compile no longer holds up those behind it); each case's inputs come from its own seed, so
    the order changes no verdict. Each verdict:
    ``edge``, ``sizes``, ``problem``, ``params``, ``layout``, ``passed`` (None where the
    declaration refuses the case, with ``refused`` saying why), ``err_ratio``, ``checks`` (each
    output's and gradient's verdict, in short), ``failed`` (the checks that failed, whole) and
    ``error`` (a case the declaration accepts that could not run); a case that ran also says what
    it cost: ``seconds`` (its whole run, first call and any wait for compiles included),
    ``compile_ms`` (its first call) and
    ``compiled_ahead`` (True when the compile service had compiled every kernel of its first call,
    False when one came from the measuring process or its cache, None where nothing compiles),
    with ``waited_ms`` where it waited for compiles in flight (its own, or before it was picked)."""
    verdicts: list[dict] = [dict(case.verdict) for case in cases]
    runnable = [i for i, case in enumerate(cases) if case.config is not None]
    order = compile_service.in_readiness_order(spec, [cases[i].config for i in runnable])
    while True:
        asked = time.perf_counter()
        k = next(order, None)
        if k is None:
            break
        case, verdict = cases[runnable[k]], verdicts[runnable[k]]
        started = time.perf_counter()
        (rec,) = measure_many(spec, [case.config], device=device, time_it=False, on_error="record")
        verdict.update(_edge_cost(rec, time.perf_counter() - asked, compiles=device.kind != "cpu"))
        if started - asked > 0.001:  # waited for one of the compiles in flight before this case
            verdict["waited_ms"] = round((verdict.get("waited_ms") or 0.0) + (started - asked) * 1e3, 1)
        if rec.error:
            verdict.update(passed=False, error=rec.error[:300])
        else:
            verdict.update(passed=bool(rec.passed), err_ratio=rec.err_ratio)
            verdict["failed"] = [c for c in rec.checks if not c["passed"]]
            verdict["checks"] = [{k: c.get(k) for k in _EDGE_CHECK_FIELDS} for c in rec.checks]
    return verdicts


_EDGE_CHECK_FIELDS = ("name", "err_ratio", "worst", "judged_by", "within_tolerance", "passed", "note")


def _edge_cost(rec: Record, seconds: float, compiles: bool) -> dict:
    """What an edge case's run cost (:func:`run_edges`), from its record's compile facts;
    ``compiles``: False on the CPU (the interpreter compiles nothing)."""
    ahead = (rec.compile_facts or {}).get("compiled_ahead") or {}
    compiled_ahead = None
    if compiles and ahead.get("first_call_cached") is not None:
        compiled_ahead = bool(ahead["first_call_cached"])
    elif compiles and (rec.compile_facts or {}).get("kernels"):
        compiled_ahead = False
    cost = {"seconds": round(seconds, 3), "compile_ms": rec.compile_ms, "compiled_ahead": compiled_ahead}
    if ahead.get("waited_ms") is not None:
        cost["waited_ms"] = ahead["waited_ms"]
    return cost


def _time_together(prepared: list[Prepared], warmup_ms, rep_ms, rel_width, on_error, l2="cold") -> None:
    """Time every prepared configuration, interleaved; one that fails is retried alone."""
    dev = prepared[0].device
    for prep in prepared:
        _warm_up(prep, warmup_ms)
    state_start = dev.state()
    try:
        steps = {i: p.step for i, p in enumerate(prepared)}
        with _frozen_heap(dev.kind != "cpu") as heap:
            results = dev.timings(steps, rel_width=rel_width, budget_s=rep_ms / 1e3, l2=l2)
    except Exception:  # noqa: BLE001 - isolate the configuration that failed
        if len(prepared) == 1:
            return _timing_failed(prepared[0], on_error)
        for prep in prepared:
            _time_together([prep], 0, rep_ms, rel_width, on_error, l2)
        return
    state = device_state.around(state_start, dev.state())
    if heap:
        state["python_heap"] = heap
    for i, prep in enumerate(prepared):
        _fill_timings(prep, results[i], state)
    for prep in prepared:
        _peak_memory(prep)


@contextlib.contextmanager
def _frozen_heap(freeze: bool):
    """Time with the collector kept off the process's existing objects (``gc.freeze``), as a
    steady-state loop has them: the suite's process holds hundreds of thousands of objects
    (torch.compile, the peers, every record), and a collection walking them lands in whichever
    call happens to trigger it. Yields the state a record states ({} when not frozen)."""
    if not freeze:
        yield {}
        return
    gc.freeze()  # with objects frozen before (a library may freeze a few), all of them thawed after
    try:
        # No count of the frozen objects: gc.get_freeze_count walks them all (33 ms a record in a
        # notebook's heap on an H200, more than the timing of a small kernel).
        yield {"collector": "frozen while timing (gc.freeze)"}
    finally:
        gc.unfreeze()


def _warm_up(prep: Prepared, warmup_ms: float) -> None:
    if prep.device.kind == "cpu":
        return  # the interpreter's first call already ran; its wall time needs no warm clocks
    deadline = time.perf_counter() + warmup_ms / 1e3
    prep.device.synchronize()
    prep.step()
    while time.perf_counter() < deadline:
        prep.step()
        prep.device.synchronize()


def _timing_failed(prep: Prepared, on_error: str) -> None:
    exc = sys.exc_info()[1]
    if on_error == "raise":
        raise ValueError(f"timing {prep.record.kernel}/{prep.record.variant} failed: {short_error(exc)}") from exc
    prep.record.error = "timing failed: " + short_error(exc)
    prep.record.passed = False


def _fill_timings(prep: Prepared, est: dict, state: dict) -> None:
    rec, dev = prep.record, prep.device
    for name in ("kernel", "call", "host"):
        if name in est:
            for field_name, value in est[name].fields(name).items():
                setattr(rec, field_name, value)
    kernel = est["kernel"]
    rec.kernel_method = kernel.method + (f"; {est['note']}" if est.get("note") else "")
    if est.get("launches"):  # the profiler's count: torch's operations inside the call included
        rec.launches, rec.launches_source = est["launches"], "profiler"
    # Noisy: the headline (kernel) median's interval is wider than asked. Call and host times
    # carry the host's jitter and rarely reach +-2%; their intervals say how far they got.
    rec.noisy = not kernel.converged
    rec.device_state = state
    # The headline speed (ms_p50, what figures and rankings read) is the kernel time: what a tile
    # changes. The call and host times stand beside it.
    rec.ms_p50, rec.ms_p20, rec.ms_p80 = kernel.median, kernel.p20, kernel.p80
    if dev.kind == "cpu":
        rec.timing_method = "cpu-wall" if rec.backend in ("torch", "peer") else "interpreter-wall"
        rec.kernel_method = rec.timing_method
        rec.wall_ms = kernel.median
        rec.call_ms = rec.call_lo_ms = rec.call_hi_ms = rec.call_n = None
    else:
        rec.timing_method = kernel.method
        rec.wall_ms = est["call"].median
        rec.launch_overhead_ms = est["host"].median
    if kernel.median > 0 and dev.kind != "cpu" and rec.min_bytes:  # no bytes known: no bandwidth share
        rec.gbps = rec.min_bytes / (kernel.median * 1e-3) / 1e9
        # a first number taken before the profiler started: no probe now (it times with the profiler)
        bandwidth = dev.copy_bandwidth_facts(measure=not timing.deferring())
        if bandwidth:
            rec.copy_bw_gbps = bandwidth["gbps"]
            rec.pct_copy_bw = 100.0 * rec.gbps / rec.copy_bw_gbps
            where = {k: bandwidth[k] for k in ("source", "measured_at", "age_s")}
            rec.device_state = {**rec.device_state, "copy_bandwidth": where}


def _peak_memory(prep: Prepared) -> None:
    dev = prep.device
    baseline = dev.reset_peak_memory()
    if baseline is not None:  # no allocator statistics on the CPU: skip the extra call
        prep.step()
        peak = dev.peak_memory_above(baseline)
        prep.record.peak_mb = None if peak is None else peak / 2**20
