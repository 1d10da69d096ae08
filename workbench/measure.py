"""measure(): run one configuration of one variant, check it, time it, and return one record.

The protocol (DESIGN.md, "Measuring"):

1. Fresh random inputs from the spec (seeded), on the chosen device and dtype.
2. Correctness first: the variant's outputs, and for backward modes its gradients for a seeded
   random incoming gradient, against the spec's reference run on the same inputs upcast to
   fp32 (fp64 on the CPU). Max abs / max rel error, NaN/Inf mismatches, pass per tensor.
3. Time: ``Device.time`` (do_bench, L2 flushed, p20/p50/p80) and, separately, host wall time of
   one synchronised call, so launch overhead = wall - device is visible. On the CPU the times
   are interpreter (or CPU) wall times, labelled so, never compared with device numbers.
4. Peak memory above the baseline during one call; GB/s from the spec's minimum bytes and its
   share of the device's measured copy bandwidth.

A configuration that cannot run (bad tile, missing peer, unsupported device) raises ValueError
with ``on_error="raise"``; with ``on_error="record"`` it becomes a record whose ``error`` says why,
so sweeps keep going and show failed cells.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import platform
import subprocess
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from kernels.spec import DTYPES, KernelSpec, Variant, as_tuple, dtype_name, get
from kernels.testing import TensorCheck, compare
from workbench.device import Device, get_device


@dataclass
class Record:
    """One tidy row: one variant, one configuration, one mode, on one device."""

    kernel: str
    variant: str
    backend: str
    mode: str
    dtype: str
    device_kind: str
    device_name: str
    problem: dict
    params: dict
    axis: str
    x_value: Any
    timing_method: str = ""
    ms_p50: float | None = None
    ms_p20: float | None = None
    ms_p80: float | None = None
    wall_ms: float | None = None
    launch_overhead_ms: float | None = None
    compile_ms: float | None = None
    # Issue 14's three timings, each a median with its confidence interval and sample count.
    # kernel: device work only (method says how: cuda-graph, profiler, npu-events, cpu-wall);
    # call: a user's eager call, host included; host: the time to issue one call from Python.
    kernel_ms: float | None = None
    kernel_lo_ms: float | None = None
    kernel_hi_ms: float | None = None
    kernel_n: int | None = None
    kernel_method: str = ""
    call_ms: float | None = None
    call_lo_ms: float | None = None
    call_hi_ms: float | None = None
    call_n: int | None = None
    host_ms: float | None = None
    host_lo_ms: float | None = None
    host_hi_ms: float | None = None
    host_n: int | None = None
    noisy: bool | None = None
    device_state: dict = field(default_factory=dict)
    min_bytes: int | None = None
    gbps: float | None = None
    pct_copy_bw: float | None = None
    copy_bw_gbps: float | None = None
    peak_mb: float | None = None
    checks: list[dict] = field(default_factory=list)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    passed: bool | None = None
    error: str | None = None
    seed: int = 0
    versions: dict = field(default_factory=dict)
    commit: str = ""
    timestamp: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.passed)


@functools.lru_cache(maxsize=1)
def versions() -> dict:
    import triton

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": getattr(triton, "__version__", "?"),
    }


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() if out.returncode == 0 else ""
    except Exception:
        return ""


def reference_dtype(device: Device) -> torch.dtype:
    return torch.float64 if device.kind == "cpu" else torch.float32


def _upcast(inputs: Mapping[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    out = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            copy = value.detach().to(dtype)
            out[name] = copy.requires_grad_(value.requires_grad)
        else:
            out[name] = value
    return out


def _grad_inputs(inputs: Mapping[str, Any]) -> list[str]:
    return [n for n, v in inputs.items() if isinstance(v, torch.Tensor) and v.requires_grad]


def _sync_call(device: Device, fn) -> tuple[Any, float]:
    device.synchronize()
    t0 = time.perf_counter()
    out = fn()
    device.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


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
) -> Record:
    """Measure one configuration; see the module docstring for the protocol."""
    spec = get(spec) if isinstance(spec, str) else spec
    record = None
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
        prob = spec.resolve_problem(problem, quick=quick)
        record = Record(
            kernel=spec.name,
            variant=var.name,
            backend=var.backend,
            mode=mode,
            dtype=dt,
            device_kind=dev.kind,
            device_name=dev.name,
            problem=prob,
            params=dict(params or {}),
            axis=spec.axis,
            x_value=prob.get(spec.axis),
            seed=seed,
            versions=versions(),
            commit=git_commit(),
            timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        )
        reason = var.unavailable_reason(dev.kind)
        if reason:
            raise ValueError(reason)
        prm = var.resolve_params(params)
        record.params = prm
        if var.check is not None:
            var.check(prob, prm, dt, dev)
        _run_measurement(spec, var, dev, dt, mode, prob, prm, seed, warmup_ms, rep_ms, check, time_it, record)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a readable record or a ValueError
        if on_error == "raise":
            if isinstance(exc, (ValueError, AssertionError)):
                raise
            raise ValueError(f"{type(exc).__name__}: {exc}") from exc
        if record is None:
            record = Record(
                kernel=spec.name,
                variant=str(getattr(variant, "name", variant)),
                backend="?",
                mode=mode,
                dtype=str(dtype),
                device_kind=str(device),
                device_name="",
                problem=dict(problem or {}),
                params=dict(params or {}),
                axis=spec.axis,
                x_value=(problem or {}).get(spec.axis),
                seed=seed,
                versions=versions(),
                commit=git_commit(),
                timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            )
        record.error = _short_error(exc)
        record.passed = False
    if store is not None:
        store.append(record)
    return record


def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
    if not isinstance(exc, ValueError):
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            last = frames[-1]
            text += f" (at {Path(last.filename).name}:{last.lineno})"
    return text.strip()[:2000]


def _run_measurement(spec, var, dev, dt, mode, prob, prm, seed, warmup_ms, rep_ms, check, time_it, record):
    torch_dtype = DTYPES[dt]
    inputs = spec.make_inputs(prob, torch_dtype, dev.torch_device, seed)
    grad_names = _grad_inputs(inputs)
    backward_needed = mode in ("backward", "full")
    if backward_needed and not grad_names:
        raise ValueError(f"mode={mode!r} needs inputs that require grad; {spec.name} with {prob} has none")

    def forward():
        return as_tuple(var.run(inputs, prob, **prm))

    # First call: compile (or trace) plus one run, timed on the host.
    with torch.set_grad_enabled(backward_needed):
        outputs, first_ms = _sync_call(dev, forward)
    record.compile_ms = first_ms
    diff_outputs = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    grad_outs = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.device, o.dtype) for o in diff_outputs]
    grad_tensors = [inputs[n] for n in grad_names]

    def backward():
        return torch.autograd.grad(diff_outputs, grad_tensors, grad_outs, retain_graph=True)

    grads = None
    if backward_needed:
        if not diff_outputs:
            raise ValueError(f"{spec.name}/{var.name} returned no differentiable output for mode={mode!r}")
        grads, bwd_first_ms = _sync_call(dev, backward)
        record.compile_ms += bwd_first_ms

    if check:
        _check(spec, dev, dt, prob, inputs, outputs, grads, grad_names, grad_outs, record)

    if time_it:
        if mode == "forward":

            def step():
                with torch.no_grad():
                    return forward()

        elif mode == "backward":
            step = backward
        else:

            def step():
                outs = [o for o in forward() if isinstance(o, torch.Tensor) and o.requires_grad]
                return torch.autograd.grad(outs, grad_tensors, grad_outs)

        timing = dev.time(step, warmup_ms=warmup_ms, rep_ms=rep_ms)
        if dev.kind == "cpu" and var.backend in ("torch", "peer"):
            record.timing_method = "cpu-wall"
        else:
            record.timing_method = timing.method
        record.ms_p50, record.ms_p20, record.ms_p80 = timing.p50, timing.p20, timing.p80
        if dev.kind == "cpu":
            record.wall_ms = timing.p50
        else:
            record.wall_ms = dev.wall_per_call(step, rep_ms=min(rep_ms, 50)).p50
        record.launch_overhead_ms = max(0.0, record.wall_ms - timing.p50)
        record.min_bytes = int(spec.min_bytes(prob, mode, dt))
        if timing.p50 > 0 and dev.kind != "cpu":
            record.gbps = record.min_bytes / (timing.p50 * 1e-3) / 1e9
            record.copy_bw_gbps = dev.copy_bandwidth_gbps()
            if record.copy_bw_gbps:
                record.pct_copy_bw = 100.0 * record.gbps / record.copy_bw_gbps
        baseline = dev.reset_peak_memory()
        if baseline is not None:  # no allocator statistics on the CPU: skip the extra call
            step()
            peak = dev.peak_memory_above(baseline)
            record.peak_mb = None if peak is None else peak / 2**20
    else:
        record.min_bytes = int(spec.min_bytes(prob, mode, dt))


def _check(spec, dev, dt, prob, inputs, outputs, grads, grad_names, grad_outs, record):
    ref_dtype = reference_dtype(dev)
    ref_inputs = _upcast(inputs, ref_dtype)
    backward_needed = grads is not None
    with torch.set_grad_enabled(backward_needed):
        ref_outputs = as_tuple(spec.reference(ref_inputs, prob))
    atol, rtol = spec.tolerance(dt)
    checks: list[TensorCheck] = []
    names = list(spec.output_names)
    if len(names) != len(outputs) or len(ref_outputs) != len(outputs):
        raise AssertionError(
            f"{spec.name}: variant returned {len(outputs)} outputs, reference {len(ref_outputs)}, names {names}"
        )
    if record.mode in ("forward", "full"):
        for name, got, want in zip(names, outputs, ref_outputs):
            if isinstance(got, torch.Tensor):
                checks.append(compare(name, got, want, atol, rtol))
    if backward_needed:
        ref_diff = [o for o in ref_outputs if isinstance(o, torch.Tensor) and o.requires_grad]
        ref_tensors = [ref_inputs[n] for n in grad_names]
        ref_grads = torch.autograd.grad(ref_diff, ref_tensors, [g.to(ref_dtype) for g in grad_outs], allow_unused=True)
        for name, got, want in zip(grad_names, grads, ref_grads):
            if want is None:
                want = torch.zeros_like(ref_inputs[name])
            if got is None:
                got = torch.zeros_like(inputs[name])
            # Gradients sum over rows: scale the tolerance by the magnitude of the reference.
            scale = max(1.0, float(want.detach().abs().max())) if want.numel() else 1.0
            checks.append(compare(f"d{name}", got, want, atol * scale, rtol))
    record.checks = [asdict(c) for c in checks]
    record.max_abs_err = max((c.max_abs for c in checks), default=0.0)
    record.max_rel_err = max((c.max_rel for c in checks), default=0.0)
    record.passed = all(c.passed for c in checks) and not any(math.isnan(c.max_abs) for c in checks)
