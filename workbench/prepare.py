"""Preparing a configuration: resolved, its inputs made, run once (compiled) and checked.

:func:`prepare` takes one configuration of a family (``variant`` and optionally ``dtype``,
``mode``, ``problem``, ``params``, ``seed``, ``layout``) and makes it ready to time, the steps
:mod:`workbench.measure` runs before its timings:

1. Resolve it: the variant, mode, dtype, problem, tiles and layout the spec allows, and the
   record it fills (:func:`workbench.record.new_record`). A refusal here (the variant's check, a
   tile or problem the spec rejects, a dtype or mode it lacks) is a record that cannot run.
2. What a compile process compiled of it ahead is settled
   (:func:`workbench.compiling.service.settle`): its first call then loads the kernels.
3. Random inputs from the spec (seeded), on the chosen device and dtype: made once per problem
   in a process and kept (:class:`Shared`, :mod:`workbench.kept_inputs`), each configuration
   getting its own fresh copy; with ``layout="strided"`` floating inputs of two or more axes are
   views of their rows inside a wider buffer (:func:`strided_view`).
4. The first call (and the backward's, for backward modes) compiles and runs once, timed on the
   host (``compile_ms``); its launches give the compile facts (:mod:`workbench.compile_facts`)
   and the launch count.
5. Correctness: the outputs and gradients against the truth (:mod:`workbench.correctness`).

It returns the record and a :class:`Prepared` whose ``step`` is the call to time: the forward
without gradients, the backward alone, or both (``mode``). A configuration that fails becomes
the record's ``error`` (``on_error="record"``) or raises ValueError. :func:`prepared_call` is one
configuration prepared unchecked, for a profiler to time (:mod:`workbench.profile_child`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from kernels.launch import recording
from kernels.spec import DTYPES, KernelSpec, as_tuple, dtype_name, get
from workbench import compile_facts
from workbench.compiling import service as compile_service
from workbench.compiling.graphs import inductor_cache_counts
from workbench.compiling.note import noted
from workbench.correctness import check_outputs
from workbench.device import Device, get_device
from workbench.errors import short_error
from workbench.kept_inputs import kept, own_copy
from workbench.phases import Phases
from workbench.record import Record, new_record

LAYOUTS = ("contiguous", "strided")
ROW_PAD = 8  # elements between one row's end and the next's start in a strided layout


def strided_view(value):
    """A floating tensor of two or more axes as the view of its rows inside a buffer whose rows are
    ``ROW_PAD`` elements longer (the same values, a row stride longer than a row); others as given."""
    if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() >= 2 and value.numel()):
        return value
    buffer = value.new_empty(*value.shape[:-1], value.shape[-1] + ROW_PAD)
    view = buffer[..., : value.shape[-1]]
    view.copy_(value.detach())
    return view.detach().requires_grad_(value.requires_grad)


def _grad_inputs(inputs: Mapping[str, Any]) -> list[str]:
    return [n for n, v in inputs.items() if isinstance(v, torch.Tensor) and v.requires_grad]


def _sync_call(device: Device, fn) -> tuple[Any, float]:
    device.synchronize()
    t0 = time.perf_counter()
    out = fn()
    device.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


def prepared_call(
    spec: KernelSpec | str, config: Mapping[str, Any], *, device: str | Device = "auto", quick: bool = False
) -> tuple[Record, Callable[[], object]]:
    """One configuration made ready and run once (compiled), unchecked and untimed: its record
    (compile facts filled) and the call a profiler times. ``config`` as in
    :func:`workbench.measure.measure_many`. A configuration that cannot run raises ValueError."""
    spec = get(spec) if isinstance(spec, str) else spec
    record, prep = prepare(spec, config, Shared(device, quick, False, "raise", Phases()))
    return record, prep.step


@dataclass
class Shared:
    """What the configurations measured together share: the device and options, the phase
    clock, and their random inputs and incoming gradients, made once per (problem, dtype, seed)
    in this process (:func:`workbench.kept_inputs.kept`) and copied to each configuration."""

    device: Any
    quick: bool
    check: bool
    on_error: str
    phases: Phases

    def inputs(self, spec: KernelSpec, prob: dict, torch_dtype, dev: Device, seed: int) -> dict:
        key = ("inputs", spec.name, repr(sorted(prob.items())), torch_dtype, dev.torch_device, seed)
        made = kept(key, lambda: spec.make_inputs(prob, torch_dtype, dev.torch_device, seed))
        return {name: own_copy(value) for name, value in made.items()}

    def grad_outputs(self, outputs: list, seed: int) -> list:
        """Seeded random incoming gradients, one per differentiable output."""
        key = ("grads", tuple((tuple(o.shape), o.dtype, o.device) for o in outputs), seed)

        def make():
            gen = torch.Generator(device="cpu").manual_seed(seed + 1)
            return [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.device, o.dtype) for o in outputs]

        return [own_copy(g) for g in kept(key, make)]


@dataclass
class Prepared:
    """A configuration that ran and was checked, ready to be timed."""

    record: Record
    spec: KernelSpec
    device: Device
    prob: dict
    step: Callable[[], object] | None


def prepare(spec, config, shared: Shared) -> tuple[Record, Prepared | None]:
    """Resolve, run once (compile), check; a failure becomes the record's error (or raises)."""
    variant, mode = config["variant"], config.get("mode", "forward")
    dtype, seed = config.get("dtype", "bf16"), config.get("seed", 0)
    layout = config.get("layout", "contiguous")
    problem, params = config.get("problem"), config.get("params")
    device, on_error = shared.device, shared.on_error
    record, launched = None, False
    try:
        dev = get_device(device)
        dt = dtype_name(dtype)
        var = spec.variant(variant) if isinstance(variant, str) else variant
        if mode not in spec.modes or (var.modes is not None and mode not in var.modes):
            allowed = var.modes or spec.modes
            raise ValueError(
                f"mode={mode!r} is not available for {spec.name}/{var.name}; use one of {', '.join(allowed)}"
            )
        if dt not in spec.dtypes:
            raise ValueError(f"dtype={dt!r} is not supported by {spec.name}; use one of {', '.join(spec.dtypes)}")
        prob = spec.resolve_problem(problem, quick=shared.quick)
        record = new_record(spec, var.name, var.backend, mode, dt, dev.kind, dev.name, prob, params, seed)
        record.precision = spec.precision_of(var, prob)
        if layout not in LAYOUTS:
            raise ValueError(f"layout={layout!r}: use one of {', '.join(LAYOUTS)}")
        record.layout = layout
        reason = var.unavailable_reason(dev.kind)
        if reason:
            raise ValueError(reason)
        prm = var.resolve_params(params)
        record.params = prm
        if var.check is not None:
            var.check(prob, prm, dt, dev)
        if var.tiles_source is not None:
            record.tiles_source = var.tiles_source(prob, prm, dev)
        launched = True  # from here on a failure is the configuration's own, not a refusal
        with shared.phases("compile"):  # a compile process may be finishing it (workbench.compiling.service)
            ahead = compile_service.settle(spec, var, dt, mode, prob, prm)
        step = _run_and_check(spec, var, dev, dt, mode, prob, prm, seed, record, shared)
        if ahead is not None:
            record.compile_facts = noted(record.compile_facts, ahead)
        moved = spec.min_bytes(prob, mode, dt)
        record.min_bytes = None if moved is None else int(moved)  # None: the family declares no bytes
        return record, Prepared(record, spec, dev, prob, step)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a readable record or a ValueError
        if on_error == "raise":
            if isinstance(exc, (ValueError, AssertionError)):
                raise
            raise ValueError(f"{type(exc).__name__}: {exc}") from exc
        if record is None:
            name = str(getattr(variant, "name", variant))
            record = new_record(spec, name, "?", mode, str(dtype), str(device), "", dict(problem or {}), params, seed)
        record.error = short_error(exc)
        record.passed = False
        record.cannot_run = isinstance(exc, ValueError) and not launched
        return record, None


def _run_and_check(spec, var, dev, dt, mode, prob, prm, seed, record, shared: Shared) -> Callable[[], object]:
    """Run the configuration once (compiling it), check it, and return the call to time."""
    phases = shared.phases
    with phases("setup"):
        inputs = shared.inputs(spec, prob, DTYPES[dt], dev, seed)
        if record.layout == "strided":
            inputs = {name: strided_view(value) for name, value in inputs.items()}
    grad_names = _grad_inputs(inputs)
    backward_needed = mode in ("backward", "full")
    if backward_needed and not grad_names:
        raise ValueError(f"mode={mode!r} needs inputs that require grad; {spec.name} with {prob} has none")

    call = var.call(inputs, prob, prm)  # the user's call, its arguments looked up once (Variant.call)

    def forward():
        return as_tuple(call())

    # First call: compile (or trace) plus one run, timed on the host; its launches give the
    # compile facts (the backward's first call adds its own). A torch.compile peer's graphs are
    # counted as Inductor found them in its cache (compiled ahead by a graph process) or not.
    graphs_before = (inductor_cache_counts() or {"hit": 0, "miss": 0}) if var.inductor_peer else None
    with torch.set_grad_enabled(backward_needed), phases("compile"), recording() as launches:
        outputs, first_ms = _sync_call(dev, forward)
    record.compile_ms = first_ms
    diff_outputs = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
    with phases("setup"):
        grad_outs = shared.grad_outputs(diff_outputs, seed)
    grad_tensors = [inputs[n] for n in grad_names]

    def backward():
        return torch.autograd.grad(diff_outputs, grad_tensors, grad_outs, retain_graph=True)

    grads = None
    if backward_needed:
        if not diff_outputs:
            raise ValueError(f"{spec.name}/{var.name} returned no differentiable output for mode={mode!r}")
        with phases("compile"), recording() as backward_launches:
            grads, bwd_first_ms = _sync_call(dev, backward)
        record.compile_ms += bwd_first_ms
        launches += backward_launches
    record.compile_facts = _facts(launches, dev, spec, var, prob, prm, dt)
    if graphs_before is not None:
        after = inductor_cache_counts() or graphs_before
        record.compile_facts["inductor_cache"] = {k: after[k] - graphs_before[k] for k in ("hit", "miss")}
    # What the timed call launches: the backward's launches alone for mode "backward", else all.
    timed_launches = len(backward_launches) if mode == "backward" else len(launches)
    if timed_launches:
        record.launches, record.launches_source = timed_launches, "launch path"
    if shared.check:
        with phases("check"):
            check_outputs(spec, dev, dt, prob, inputs, outputs, grads, grad_names, grad_outs, record)

    if mode == "forward":

        def step():
            with torch.no_grad():
                return forward()

        return step
    if mode == "backward":
        return backward

    def step():
        outs = [o for o in forward() if isinstance(o, torch.Tensor) and o.requires_grad]
        return torch.autograd.grad(outs, grad_tensors, grad_outs)

    return step


def _facts(launches, dev, spec, var, prob, prm, dt) -> dict:
    """The compile facts of the first call's launches, with the milliseconds reading them took
    (``collect_ms``); ``WORKBENCH_COMPILE_FACTS=0`` turns reading them off (to measure what they
    cost: ``benchmarks/diagnostics/explorer_latency.py --facts off``)."""
    if os.environ.get(compile_facts.ENV_SWITCH, "1").strip().lower() in ("0", "off", "false", "no"):
        return {"available": False, "reason": f"not read ({compile_facts.ENV_SWITCH}=0)", "kernels": []}
    started = time.perf_counter()
    facts = compile_facts.collect(launches, dev, ub_bytes=_ub_estimate(spec, var, prob, prm, dt))
    facts["collect_ms"] = (time.perf_counter() - started) * 1e3
    return facts


def _ub_estimate(spec, var, prob, prm, dt) -> int | None:
    """The family's Unified Buffer model for an NPU variant's tiles (None for other variants)."""
    if var.backend != "npu" or spec.ub_estimate is None:
        return None
    try:
        return spec.ub_estimate(prob, prm, dt)
    except ValueError:  # tiles that do not resolve for this problem: the run says why
        return None
