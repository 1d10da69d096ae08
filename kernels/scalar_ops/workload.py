"""Measurements for the scalar-operand family, shared by the notebook and the benchmark script.

- :func:`timing_rows` / :func:`timing_table`: host wall µs per synchronised call and device time
  per strategy, op, dtype and size (0-d up to tens of millions of elements).
- :func:`materialization_rows` / :func:`materialization_table`: an RMSNorm-backward-shaped step
  (the two scalar operations autograd runs per norm: the mean's backward divides by the hidden
  size, the backward of ``x.pow(2)`` computes ``x.pow(1.0)``) under each strategy, counting what
  each step really did: scalar-op calls, full-shape materialisations and their bytes, cache uploads.
- :func:`capture_demo`: capture a CUDA (or NPU) graph that uses the cached, python and triton
  strategies, replay it on new data and compare with eager results.

Host time is wall time of one call including a device synchronisation (the issue's "host µs per
call, wall, synchronised"). Device time is ``Device.time`` (do_bench, L2 flushed); on the CPU
there is no device timer, so it is left empty rather than invented. The timers are the measuring
tool's: the timing functions take its device (``workbench.device.get_device(...)``, or a
notebook Session's ``s.device``), since the library itself imports nothing of the tool.

Why one long module: the workload's runners, its materialisation rows and its timing rows
share the same cases and helpers; split, each piece would import the others.
"""

from __future__ import annotations

import math
import time
from typing import Iterable, Sequence

import torch

from kernels.runtime import device_info
from kernels.scalar_ops import STRATEGIES, ScalarCache, counting, random_input, scalar_op
from kernels.scalar_ops.reference import OPS, scalar_op_reference
from kernels.spec import DEFAULT_TOLERANCES, DTYPES, dtype_name
from kernels.testing import judge

# 0-d; the (2, 128, 64); 1 Mi; the (2, 2048, 4096); 64 Mi elements.
DEFAULT_SHAPES: tuple[tuple[int, ...], ...] = ((), (2, 128, 64), (1024, 1024), (2, 2048, 4096), (64, 1024, 1024))
QUICK_SHAPES: tuple[tuple[int, ...], ...] = ((), (7,), (2, 128, 64))
DEFAULT_VALUES = {"div": 4096.0, "sub": 0.5, "pow": 2.0}


def as_shape(size) -> tuple[int, ...]:
    """A shape from a shape tuple or a flat element count (``()`` is 0-d)."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size < 1:
            raise ValueError(f"size={size!r}: a flat size needs at least one element; use () for 0-d")
        return (size,)
    shape = tuple(size)
    if not all(isinstance(s, int) and s >= 0 for s in shape):
        raise ValueError(f"size={size!r} is not a shape (a tuple of non-negative ints) or an element count")
    return shape


def make_x(shape, dtype, device, op: str = "div", value: float = 1.0, seed: int = 0) -> torch.Tensor:
    """Random x for an operation (:func:`kernels.scalar_ops.random_input`) on a device and dtype."""
    x = random_input(as_shape(shape), op, value, seed)
    return x.to(device_info(device).torch_device, DTYPES[dtype_name(dtype)])


def strategy_runner(strategy: str):
    """``(op, x, value) -> z`` for a strategy name; ``triton_npu`` is the NPU kernel anywhere."""
    if strategy == "triton_npu":
        return lambda op, x, value: scalar_op(op, x, value, "triton", impl="npu")
    if strategy == "triton_gpu":
        return lambda op, x, value: scalar_op(op, x, value, "triton", impl="gpu")
    if strategy not in STRATEGIES:
        raise ValueError(
            f"strategy={strategy!r} is not allowed; use one of {', '.join(STRATEGIES + ('triton_gpu', 'triton_npu'))}"
        )
    return lambda op, x, value: scalar_op(op, x, value, strategy)


def _truth_dtype(device) -> torch.dtype:
    """float64 where the device computes it, else float32 (an NPU)."""
    return torch.float32 if device_info(device).kind == "npu" else torch.float64


def _judged(name: str, z: torch.Tensor, op: str, x: torch.Tensor, value: float):
    """``z = op(x, value)`` against the truth, judged by the reference's own error in x's dtype
    inside the family's tolerance (:func:`kernels.testing.judge`)."""
    truth = scalar_op_reference(op, x.to(_truth_dtype(x.device)), value)
    atol, rtol = DEFAULT_TOLERANCES[dtype_name(x.dtype)]
    return judge(name, z, truth, scalar_op_reference(op, x, value), atol=atol, rtol=rtol)


# --- host and device time per call ---------------------------------------------------------
def _timer_device(device):
    """The measuring tool's device object, which has the timers (``time``, ``wall_per_call``)."""
    if not (hasattr(device, "time") and hasattr(device, "wall_per_call")):
        raise ValueError(
            f"device={device!r}: timing needs the workbench's device object; pass "
            "workbench.device.get_device(...) or a Session's s.device"
        )
    return device


def time_strategy(
    op: str,
    strategy: str,
    shape,
    dtype="fp16",
    device="auto",
    value: float | None = None,
    rep_ms: float = 50,
    device_time: bool = True,
    max_calls: int = 200,
) -> dict:
    """One row: host µs per synchronised call (p20/p50/p80) and device µs (do_bench) if any.

    The first call is made before timing (it compiles Triton kernels and fills the cache), and
    its result is checked (against the float64 truth, judged by the reference's own error in the
    dtype: :func:`kernels.testing.judge`) so a timing is never of a wrong answer.
    """
    dev = _timer_device(device)
    value = DEFAULT_VALUES[op] if value is None else float(value)
    x = make_x(shape, dtype, dev, op, value)
    run = strategy_runner(strategy)
    fn = lambda: run(op, x, value)
    z = fn()
    check = _judged("z", z, op, x, value)
    host = dev.wall_per_call(fn, rep_ms=rep_ms, max_calls=max_calls)
    row = {
        "op": op,
        "strategy": strategy,
        "dtype": dtype_name(dtype),
        "shape": str(tuple(x.shape)),
        "numel": x.numel(),
        "value": value,
        "host_us": host.p50 * 1e3,
        "host_us_p20": host.p20 * 1e3,
        "host_us_p80": host.p80 * 1e3,
        "calls": host.n,
        "device_us": None,
        "device_us_p20": None,
        "device_us_p80": None,
        "device_method": "none (cpu: host wall only)" if dev.kind == "cpu" else "",
        "max_abs_err": check.max_abs,
        "passed": check.passed,
        "device_kind": dev.kind,
        "device_name": dev.name,
    }
    if device_time and dev.kind != "cpu":
        timing = dev.time(fn, warmup_ms=10, rep_ms=max(rep_ms, 20))
        row.update(
            device_us=timing.p50 * 1e3,
            device_us_p20=timing.p20 * 1e3,
            device_us_p80=timing.p80 * 1e3,
            device_method=timing.method,
        )
    return row


def timing_table(*args, **kwargs):
    """:func:`timing_rows` as a pandas DataFrame (same arguments)."""
    import pandas as pd

    return pd.DataFrame(timing_rows(*args, **kwargs))


def timing_rows(
    ops: Sequence[str] = OPS,
    strategies: Sequence[str] = STRATEGIES,
    shapes: Iterable = DEFAULT_SHAPES,
    dtypes: Sequence[str] = ("fp16",),
    device="auto",
    rep_ms: float = 50,
    device_time: bool = True,
    max_interpreted_numel: int = 1 << 15,
    progress=None,
):
    """:func:`time_strategy` over ops x strategies x shapes x dtypes: a list of row dicts.

    On the CPU, Triton runs in the interpreter (about a millisecond per program), so Triton rows
    above ``max_interpreted_numel`` elements are skipped there; the other strategies run at every size.
    """
    dev = _timer_device(device)
    rows = []
    for dtype in dtypes:
        for op in ops:
            for shape in shapes:
                shape = as_shape(shape)
                numel = math.prod(shape)
                for strategy in strategies:
                    if dev.kind == "cpu" and strategy.startswith("triton") and numel > max_interpreted_numel:
                        continue
                    row = time_strategy(op, strategy, shape, dtype, dev, rep_ms=rep_ms, device_time=device_time)
                    rows.append(row)
                    if progress:
                        progress(row)
    return rows


# --- an RMSNorm-backward-shaped step ------------------------------------------------------
def rmsnorm_forward(x: torch.Tensor, eps: float = 1e-6):
    """Llama-style RMSNorm without weight, as eager ops: returns y and what the backward needs."""
    xf = x.float()
    var = xf.pow(2).mean(-1, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    return (xf * rstd).to(x.dtype), xf, rstd


def rmsnorm_backward(xf: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, run, calls: list) -> torch.Tensor:
    """dx of :func:`rmsnorm_forward` written as the ops autograd runs, with its two tensor-scalar
    operations sent through ``run(op, x, value)`` (a strategy). ``calls`` collects their names.

        y = xf * rstd,  rstd = (mean(xf^2) + eps)^-1/2
        d(xf) = dy * rstd  +  [mean backward: expand(dvar) / hidden] * 2 * xf.pow(1.0)
    """
    hidden = xf.shape[-1]
    g = dy.float()
    dxf = g * rstd
    drstd = (g * xf).sum(-1, keepdim=True)
    dvar = drstd * (-0.5) * rstd * rstd * rstd
    dsq = run("div", dvar.expand_as(xf), float(hidden))  # MeanBackward: grad.expand(shape) / numel
    calls.append("div")
    dxf = dxf + dsq * 2.0 * run("pow", xf, 1.0)  # PowBackward of x**2: grad * 2 * x.pow(1.0)
    calls.append("pow")
    return dxf.to(dy.dtype)


def rmsnorm_backward_step(xs: Sequence[torch.Tensor], dys: Sequence[torch.Tensor], strategy: str) -> dict:
    """One training-step-shaped pass: the backward of every norm (one per x) under a strategy.

    Returns the dx's and what the step really did, from the instrumentation: scalar-op calls,
    full-shape materialisations and their bytes, cache uploads, on-device capture fills.
    """
    run = strategy_runner(strategy)
    calls: list[str] = []
    dev = device_info(xs[0].device)
    with torch.no_grad(), counting() as counts:
        saved = [rmsnorm_forward(x)[1:] for x in xs]
        dev.synchronize()
        t0 = time.perf_counter()
        dxs = [rmsnorm_backward(xf, rstd, dy, run, calls) for (xf, rstd), dy in zip(saved, dys)]
        dev.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
    return {
        "dx": dxs,
        "scalar_op_calls": len(calls),
        "full_shape_materializations": counts.materializations,
        "materialized_mb": counts.materialized_bytes / 2**20,
        "cache_uploads": counts.uploads,
        "capture_fills": counts.capture_fills,
        "host_ms": ms,
    }


def materialization_table(*args, **kwargs):
    """:func:`materialization_rows` as a pandas DataFrame (same arguments)."""
    import pandas as pd

    return pd.DataFrame(materialization_rows(*args, **kwargs))


def materialization_rows(
    strategies: Sequence[str] = STRATEGIES,
    rows: int = 1024,
    hidden: int = 896,
    n_norms: int = 25,
    steps: int = 3,
    dtype="bf16",
    device="auto",
    seed: int = 0,
    fresh_cache: bool = True,
):
    """Run ``steps`` RMSNorm-backward-shaped steps of ``n_norms`` norms per strategy.

    Defaults: a small Qwen2-like model (hidden 896) whose step makes about 50 scalar-operand
    calls (two per norm). One row per strategy and step, with the counts from
    :func:`rmsnorm_backward_step`, the host time of the step and the largest error of dx against
    autograd on the same inputs (float64), and ``passed``: judged by autograd's own error in
    ``dtype`` inside the family's tolerance (:func:`kernels.testing.judge`).
    ``fresh_cache`` empties the global scalar cache first so the first step's uploads are visible.
    """
    from kernels.scalar_ops import SCALAR_CACHE

    dev = device_info(device)
    torch_dtype = DTYPES[dtype_name(dtype)]
    atol, rtol = DEFAULT_TOLERANCES[dtype_name(dtype)]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    xs = [torch.randn(rows, hidden, generator=gen).to(dev.torch_device, torch_dtype) for _ in range(n_norms)]
    dys = [torch.randn(rows, hidden, generator=gen).to(dev.torch_device, torch_dtype) for _ in range(n_norms)]
    truth_dtype = _truth_dtype(dev)

    def autograd_dx(x, dy, dt):
        xr = x.to(dt).requires_grad_()
        y = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-6)
        return torch.autograd.grad(y, xr, dy.to(dt))[0]

    # The truth (float64 where the device has it) and autograd in x's own dtype, whose error is the
    # yardstick of the rule (kernels.testing.judge).
    want = [(autograd_dx(x, dy, truth_dtype), autograd_dx(x, dy, x.dtype)) for x, dy in zip(xs, dys)]
    table = []
    for strategy in strategies:
        if fresh_cache:
            SCALAR_CACHE.clear()
        for step in range(1, steps + 1):
            result = rmsnorm_backward_step(xs, dys, strategy)
            checks = [judge("dx", dx, w, low, atol=atol, rtol=rtol) for dx, (w, low) in zip(result.pop("dx"), want)]
            table.append(
                {
                    "strategy": strategy,
                    "step": step,
                    "norms": n_norms,
                    "shape": f"({rows}, {hidden})",
                    "dtype": dtype_name(dtype),
                    **result,
                    "max_abs_err_vs_autograd": max(c.max_abs for c in checks),
                    "passed": all(c.passed for c in checks),
                    "device_kind": dev.kind,
                }
            )
    return table


# --- graph capture --------------------------------------------------------------------------
def _graph_api(dev):
    """(runtime module, graph class, capture context) of a device, or None without graphs."""
    backend = dev.backend
    graph_cls = getattr(backend, "CUDAGraph", None) or getattr(backend, "NPUGraph", None)
    graph_ctx = getattr(backend, "graph", None)
    if dev.kind == "cpu" or graph_cls is None or graph_ctx is None:
        return None
    return backend, graph_cls, graph_ctx


def capture_demo(device="auto", dtype="fp16", shape=(2, 128, 64), replays: int = 3, seed: int = 0) -> dict:
    """Capture one graph using the cached (one value cached before capture, one not), python and
    triton strategies; replay it on fresh data and compare with eager results.

    Returns a dict with ``passed``; on a device without graphs, ``{"skipped": reason}``.
    Checks: results equal eager after every replay; the capture created no cache entry (the
    uncached value came from an on-device fill, counted in ``capture_fills``); the materialized
    strategy is refused inside capture (it would record a host-to-device copy).
    """
    dev = device_info(device)
    api = _graph_api(dev)
    if api is None:
        return {"skipped": f"no graph capture on {dev.kind} ({dev.name}); run on a CUDA or NPU device"}
    backend, graph_cls, graph_ctx = api
    torch_dtype = DTYPES[dtype_name(dtype)]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    static_x = torch.randn(as_shape(shape), generator=gen).to(dev.torch_device, torch_dtype)
    cache = ScalarCache(maxsize=8)
    cached_before, uncached = float(math.prod(static_x.shape[-1:])), 0.5
    plan = [
        ("div", cached_before, "cached"),  # entry made before capture: used as it is
        ("sub", uncached, "cached"),  # no entry: on-device fill during capture, nothing kept
        ("pow", 2.0, "python"),
        ("div", 3.0, "triton"),
    ]

    def run_plan(x, c):
        return [
            scalar_op(op, x, value, strategy, cache=c if strategy == "cached" else None) for op, value, strategy in plan
        ]

    # Warm up on a side stream (Triton compiles, torch loads its kernels, including the on-device
    # fill) with a throwaway cache, and make the one entry that capture is allowed to use.
    side = backend.Stream()
    side.wait_stream(backend.current_stream())
    with backend.stream(side):
        run_plan(static_x, ScalarCache())
        torch.sub(static_x, torch.full((), uncached, dtype=torch_dtype, device=static_x.device))
        cache.get(cached_before, torch_dtype, static_x.device)
    backend.current_stream().wait_stream(side)
    backend.synchronize()
    before = cache.info()

    graph = graph_cls()
    with counting() as counts, graph_ctx(graph):
        outputs = run_plan(static_x, cache)
    after = cache.info()

    refused = ""
    probe = graph_cls()
    with graph_ctx(probe):
        try:
            scalar_op("div", static_x, 7.0, "materialized")
        except ValueError as exc:
            refused = str(exc)
        scalar_op("div", static_x, 7.0, "python")  # keep the probe graph non-empty

    # Each replay must give exactly what the same strategies give eagerly on the same data, and
    # pass the correctness rule against the reference (kernels.testing.judge).
    checks = []
    for r in range(replays):
        fresh = torch.randn(static_x.shape, generator=gen).to(dev.torch_device, torch_dtype)
        static_x.copy_(fresh)
        graph.replay()
        backend.synchronize()
        eager = run_plan(fresh, ScalarCache())
        for (op, value, strategy), got, want in zip(plan, outputs, eager):
            check = _judged("z", got, op, fresh, value)
            same = bool(torch.equal(got, want))
            checks.append(
                {
                    "replay": r + 1,
                    "op": op,
                    "value": value,
                    "strategy": strategy,
                    "bitwise_equal_to_eager": same,
                    "max_abs_err_vs_reference": check.max_abs,
                    "passed": same and check.passed,
                }
            )
    passed = (
        all(c["passed"] for c in checks)
        and after["size"] == before["size"]
        and after["misses"] == before["misses"]
        and counts.uploads == 0
        and counts.capture_fills == 1
        and bool(refused)
    )
    return {
        "passed": passed,
        "device": dev.name,
        "dtype": dtype_name(dtype),
        "shape": str(tuple(static_x.shape)),
        "cache_before": before,
        "cache_after": after,
        "uploads_during_capture": counts.uploads,
        "capture_fills": counts.capture_fills,
        "materialized_refused": refused,
        "replays": checks,
    }
