# ruff: noqa: E731  (the lambdas are the calls being measured)
"""Why an eager call costs what it costs: the same call under several timing protocols, in a
fresh process and again after the suite's own measurement of the same cell.

    python3 benchmarks/diagnostics/call_breakdown.py [--rows 4096] [--hidden 1024] [--out DIR]
    bash benchmarks/gpu_run.sh run python3 benchmarks/diagnostics/call_breakdown.py    # on the GPU machine

For single launches of a kernel that writes one value (Triton's through the fast path and as a
replay, torch's ``zero_``: :func:`launch_floors`), for RMSNorm forward and forward+backward (ours,
F.rms_norm, an empty autograd.Function, and the floors of a Python autograd op that launches: one
launch through kernels/launch.py in its backward, or one in each direction as ours makes, each into
a fresh tensor, and the latter with a gradient for w too, as ours gives), the fused add+RMSNorm
forward (ours against F.rms_norm of x + r), the calls the suite times for the forward cells
(``suite step: ...``: the variant's bound call as ``workbench.prepare.prepared_call`` makes it),
the block-sparse sum layer's forward at batch 1 and 16 beside PyJuice's layer call (L = 1024,
PyJuice where installed), and two bare driver calls, each a median over many calls, in µs
(``WORKBENCH_FAST_LAUNCH=0`` times ours through Triton's own launch):

- ``host``: issue time of one call, the device idle before it (the suite's host timing);
- ``loop``: back-to-back calls, wall time per call (what an eager loop pays when host-bound);
- ``call``: device events around one call after an L2 flush (the suite's call timing): while
  the flush runs on the device the host already issues the call, so host time up to the
  flush's length is hidden;
- ``call+sync``: the same with the device drained after the flush, so the events see the whole
  issue time (the suite's call protocol);
- ``idle call``: ``call+sync`` without the flush: what the flush itself adds to a call's time;
- ``blocks``: Python memory blocks left allocated per call, outputs kept (:func:`blocks_left_alive`);
- ``syncs``: whether one call synchronises with the device (torch's sync debug mode).

After the fresh table, five kernel-timing profiler sessions (the suite's kernel sampler) run
and the table is taken again: CUPTI stays attached after a session unless Kineto tears it down
(``TEARDOWN_CUPTI=1``), and every later CUDA call pays for it. Then the norm calls' host times
are sampled as the suite samples a cell (:func:`interleaved`: the host sampler alone, beside the
call sampler, beside both others, and with an untimed call before each host batch), which
shows which part of the suite's protocol moves them from the fresh loop's. Then the suite's own
``measure_many`` of the same cell runs in this process (profiler sessions, torch.compile and
Liger loaded), then the forward cell again beside fewer or other neighbours
(:func:`suite_neighbours`), and the table is taken again, and once more after the process's objects are
frozen out of the garbage collector's way (``gc.freeze``). Run it with and without
``TEARDOWN_CUPTI=1`` to see what the teardown buys and what a session costs with it
(``--sessions-only`` stops after the second table: the profiler's after-effect alone).
``--residual-only`` takes one forward call's time apart instead (:func:`call_residual`), in a fresh
process and after the suite's measurement of the norm cells.

Why one long file: every table here is taken in the same process, one after another, so each
reads what the steps before it left behind (CUPTI, the suite's objects, the collector's state);
split into separate scripts, that order, which is the finding, would be lost.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels import fast_launch  # noqa: E402
from kernels.fused_add_rms_norm import fused_add_rms_norm  # noqa: E402
from kernels.launch import launch, replay_of  # noqa: E402
from kernels.rms_norm import rms_norm  # noqa: E402
from kernels.spec import as_tuple  # noqa: E402
from workbench.device import get_device  # noqa: E402
from workbench.measure import measure_many  # noqa: E402
from workbench.prepare import prepared_call  # noqa: E402
from workbench.timing import HostSampler, ProfilerKernelSampler, run_interleaved  # noqa: E402


class Empty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g, None


@triton.jit
def _touch(Y_ptr):
    tl.store(Y_ptr, 0.0)


class Floor(torch.autograd.Function):
    """The floor of a Python autograd op that launches: nothing but one launch through
    kernels.launch.launch in the backward (and, with ``both``, one in the forward, as ours makes),
    each into a fresh output, as ours allocates dx."""

    @staticmethod
    def forward(ctx, x, w, both):
        ctx.both = both
        if both:
            y = torch.empty_like(x)
            launch(_touch, y, (1,), y)
            return y
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        dx = torch.empty_like(g)
        launch(_touch, dx, (1,), dx)
        return dx, None, None


class FloorWithDw(torch.autograd.Function):
    """:class:`Floor` with both launches and a gradient for w as well, as ours and F.rms_norm
    give: the backward returns dx (launched into) and a fresh, unwritten dw."""

    @staticmethod
    def forward(ctx, x, w):
        y = torch.empty_like(x)
        launch(_touch, y, (1,), y)
        return y

    @staticmethod
    def backward(ctx, g):
        dx = torch.empty_like(g)
        launch(_touch, dx, (1,), dx)
        return dx, torch.empty(g.shape[-1], dtype=g.dtype, device=g.device)


def calls(rows: int, hidden: int) -> dict:
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    f = torch.nn.functional.rms_norm

    def no_grad(fn):
        def run():
            with torch.no_grad():
                return fn()

        return run

    r = torch.randn_like(x)
    return {
        **driver_calls(x),
        **launch_floors(x),
        "ours fwd": no_grad(lambda: rms_norm(x, w)),
        "F.rms_norm fwd": no_grad(lambda: f(x, (hidden,), w, 1e-6)),
        **suite_steps(rows, hidden),
        **block_sparse_calls(),
        "ours fused fwd": no_grad(lambda: fused_add_rms_norm(x, r, w)),
        "F.rms_norm(x + r) fwd": no_grad(lambda: f(x + r, (hidden,), w, 1e-6)),
        "ours fwd+bwd": lambda: torch.autograd.grad(rms_norm(x, w), (x, w), dy),
        "F.rms_norm fwd+bwd": lambda: torch.autograd.grad(f(x, (hidden,), w, 1e-6), (x, w), dy),
        "empty Function fwd+bwd": lambda: torch.autograd.grad(Empty.apply(x, w), (x,), dy),
        "floor: 1 launch (bwd)": lambda: torch.autograd.grad(Floor.apply(x, w, False), (x,), dy),
        "floor: 2 launches": lambda: torch.autograd.grad(Floor.apply(x, w, True), (x,), dy),
        "floor: 2 launches, dx and dw": lambda: torch.autograd.grad(FloorWithDw.apply(x, w), (x, w), dy),
    }


def launch_floors(x) -> dict:
    """One launch of a kernel that writes one value, no Python around it: Triton's through the
    fast path (the key, then a hit), the same as a replay (what a planned call launches with),
    a replay into a fresh output shaped like x (what a planned forward does), and torch's own
    launch (``zero_`` of one value). Their ``call+sync - host`` is what the device adds after
    the host has issued a launch of each kind."""
    one = torch.empty(1, device=x.device)
    launch(_touch, one, (1,), one)
    replay = replay_of(_touch, one, (1,), one)

    def replay_into_fresh():
        out = torch.empty_like(x)
        replay(out.data_ptr())
        return out

    return {
        "launch: Triton, fast path": lambda: launch(_touch, one, (1,), one),
        "launch: Triton, replay": lambda: replay(one.data_ptr()),
        "launch: Triton, replay, fresh x": replay_into_fresh,
        "launch: torch zero_": lambda: one.zero_(),
    }


def front_pieces(x, w) -> dict:
    """Our planned forward built up piece by piece, each a call of its own: the replay into a
    fresh output (:func:`launch_floors`), then with a plan key of x's and w's layouts looked up
    in a dict first, then with the checks ``rms_norm`` makes before the key (compiling, grad
    mode, requires_grad), then ``rms_norm`` itself under ``torch.no_grad``: as ``rms_norm(x, w)``,
    with eps by position, and that bound call inside the suite's forward step (``as_tuple`` of a
    ``functools.partial``); last, F.rms_norm called straight, to compare with the suite's
    F.rms_norm step. Which piece a drained device makes slow shows in :func:`call_residual`."""
    one = torch.empty(1, device=x.device)
    launch(_touch, one, (1,), one)
    replay = replay_of(_touch, one, (1,), one)
    plans: dict = {}

    def key():
        w_layout = (w.shape, w.stride(), w.dtype, w.get_device())
        return (x.shape, x.stride(), x.dtype, x.get_device(), x.data_ptr() & 15, w_layout, 1e-6, 0.0, "llama", "auto",
                ())  # fmt: skip

    plans[key()] = replay

    def keyed():
        planned = plans.get(key())
        out = torch.empty_like(x)
        planned(out.data_ptr())
        return out

    def checked():
        if torch.compiler.is_compiling():
            return None
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
            return None
        if type(x) is torch.Tensor and x.is_cuda:
            return keyed()
        return None

    def ours():
        with torch.no_grad():
            return rms_norm(x, w)

    def ours_eps():
        with torch.no_grad():
            return rms_norm(x, w, 1e-6)

    bound = functools.partial(rms_norm, x, w, 1e-6)

    def ours_wrapped():  # workbench.prepare's forward step around the variant's bound call
        with torch.no_grad():
            return as_tuple(bound())

    def functional():
        with torch.no_grad():
            return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)

    return {
        "+ plan key": keyed,
        "+ checks": checked,
        "rms_norm, no_grad": ours,
        "rms_norm(x, w, eps)": ours_eps,
        "same, as suite wraps": ours_wrapped,
        "F.rms_norm, no_grad": functional,
    }


def suite_steps(rows: int, hidden: int) -> dict:
    """The calls the suite times for its call and host cells (workbench.prepare.prepared_call:
    the variant's bound call under ``torch.no_grad``), in this process's state."""
    problem = {"rows": rows, "hidden": hidden}
    steps = {}
    for name, variant in (("suite step: ours fwd", "gpu_multirow"), ("suite step: F.rms_norm fwd", "torch_functional")):
        steps[name] = prepared_call("rms_norm", dict(variant=variant, dtype="bf16", mode="forward", problem=problem))[1]
    return steps


def block_sparse_calls(nodes: int = 1024, batches=(1, 16)) -> dict:
    """The block-sparse sum layer's eager forward (the HMM transition layer of the suite's
    block_sparse_forward_call, L = ``nodes``) beside PyJuice's layer call on its own buffers, and
    ours as the suite times it; PyJuice's rows are left out where it is not installed."""
    from kernels import block_sparse
    from kernels.block_sparse import peer

    out = {}
    for batch in batches:
        problem = {"layer": "sum", "nodes": nodes, "block_size": 0, "K": 0, "tied": False, "batch": batch}
        layer = block_sparse.make_layer(problem, device="cuda")
        args = (layer["element_mars"], layer["params"], layer["cids"], layer["pids"], min(nodes & -nodes, 1024))

        def ours(args=args):
            with torch.no_grad():
                return block_sparse.sum_layer(*args)

        out[f"ours block-sparse b{batch}"] = ours
        config = dict(variant="gpu", dtype="fp32", mode="forward", problem=problem)
        out[f"suite step: ours block-sparse b{batch}"] = prepared_call("block_sparse", config)[1]
        if peer.available() is None:
            spec = block_sparse.spec
            prob = spec.resolve_problem(problem)
            kernel = spec.variant("pyjuice").kernel(spec.make_inputs(prob, torch.float32, "cuda", 0), prob)

            def pyjuice(kernel=kernel):
                with torch.no_grad():
                    return kernel()

            out[f"PyJuice layer b{batch}"] = pyjuice
    return out


def driver_calls(tensor) -> dict:
    """Two CUDA driver calls alone, through ctypes: the pointer check Triton's launcher makes
    for every tensor it is given (``cuPointerGetAttribute``) and a call that touches no memory
    (``cuCtxGetCurrent``); ctypes adds the same cost to both. CUPTI instruments the driver API,
    so these show what a session left attached does to a driver call."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    address, out, ctx = ctypes.c_uint64(tensor.data_ptr()), ctypes.c_uint64(), ctypes.c_void_p()
    device_pointer = 2  # CU_POINTER_ATTRIBUTE_DEVICE_POINTER
    return {
        "driver cuPointerGetAttribute": lambda: cuda.cuPointerGetAttribute(ctypes.byref(out), device_pointer, address),
        "driver cuCtxGetCurrent": lambda: cuda.cuCtxGetCurrent(ctypes.byref(ctx)),
    }


def _median_us(samples) -> float:
    return round(statistics.median(samples) * 1e3, 1)


def protocols(fn, flush, n: int = 200) -> dict:
    sync = torch.cuda.synchronize
    for _ in range(20):
        fn()
    sync()
    host, call, call_sync, idle = [], [], [], []
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
    sync()
    for flushed, drain, out in ((True, False, call), (True, True, call_sync), (False, True, idle)):
        for _ in range(n):
            if flushed:
                flush()
            if drain:
                sync()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end))
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    loop = (time.perf_counter() - t0) * 1e3 / n
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
        syncs = "none"
    except RuntimeError as exc:
        syncs = str(exc).splitlines()[0][:80]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return {
        "host": _median_us(host),
        "loop": round(loop * 1e3, 1),
        "call": _median_us(call),
        "call+sync": _median_us(call_sync),
        "idle call": _median_us(idle),
        "blocks": blocks_left_alive(fn),
        "syncs": syncs,
    }


def blocks_left_alive(fn, n: int = 500) -> float:
    """Python memory blocks still allocated per call after ``n`` calls, their outputs kept and
    the collector off: the output's objects plus whatever the call leaves behind (an autograd
    graph, cache entries). What outlives a call is what the collector walks later."""
    kept = [None] * n
    fn()
    gc.collect()
    gc.disable()
    try:
        before = sys.getallocatedblocks()
        for i in range(n):
            kept[i] = fn()
        after = sys.getallocatedblocks()
    finally:
        gc.enable()
    del kept
    torch.cuda.synchronize()
    return round((after - before) / n, 2)


def sampled_frozen(samplers: dict) -> dict:
    """``run_interleaved`` over ``samplers`` keyed ``(call, timing)``, one group per timing, with
    the heap collected and frozen as the suite freezes it; samplers with a ``close`` are closed."""
    gc.collect()
    gc.freeze()
    try:
        return run_interleaved(samplers, budget_s=1.0 * len(samplers), group=lambda key: key[1])
    finally:
        gc.unfreeze()
        for sampler in samplers.values():
            getattr(sampler, "close", lambda: None)()


def interleaved(fns: dict, dev, names) -> dict:
    """Host µs of ``names`` sampled as the suite samples a cell (``workbench.timing.run_interleaved``
    over every call's samplers, the heap frozen), with the suite's other timings beside the host
    one or not, with and without the untimed call that starts each batch
    (``HostSampler(warm_call=...)``, the suite's ``True``): which part of the protocol moves its
    host times away from the fresh loop's."""
    cases = (
        ("host alone, no warm call", ("host",), False),
        ("call + host, no warm call", ("call", "host"), False),
        ("kernel + call + host, no warm call", ("kernel", "call", "host"), False),
        ("the suite's: warm call per batch", ("kernel", "call", "host"), True),
    )
    out = {}
    for label, which, warm_call in cases:
        samplers = {}
        for name in names:
            per_fn, _ = dev.samplers(fns[name], which)
            per_fn["host"] = HostSampler(fns[name], sync=dev.synchronize, warm_call=warm_call)
            samplers |= {(name, timing): sampler for timing, sampler in per_fn.items()}
        est = sampled_frozen(samplers)
        out[label] = {name: round(est[(name, "host")].median * 1e3, 1) for name in names}
    print(f"{'host µs':40s} " + " ".join(f"{name[:22]:>22s}" for name in names))
    for label, row in out.items():
        print(f"{label:40s} " + " ".join(f"{row[name]:22.1f}" for name in names))
    return out


def suite_neighbours(dev, problem: dict) -> dict:
    """The forward cell's host and call µs as ``measure_many`` records them, timed beside
    different neighbours (every variant's samplers interleave with the others'): whether the
    heavier peers' calls (torch.compile's, Liger's) raise ours and F.rms_norm's. Printed with
    what else runs in the process (threads, a profile or trace hook), which would raise every
    host time alike."""
    import threading

    hooks = {"sys.getprofile": sys.getprofile(), "sys.gettrace": sys.gettrace()}
    print(f"\n== process: threads {[t.name for t in threading.enumerate()]}, {hooks}")
    groups = {
        "ours + F.rms_norm": ["gpu_multirow", "torch_functional"],
        "+ torch.compile": ["gpu_multirow", "torch_functional", "torch_compile"],
        "+ Liger": ["gpu_multirow", "torch_functional", "liger"],
        "all four": ["gpu_multirow", "torch_functional", "torch_compile", "liger"],
    }
    out = {}
    print("== the forward cell timed beside different neighbours (measure_many; host / call µs)")
    for label, variants in groups.items():
        configs = [dict(variant=v, dtype="bf16", mode="forward", problem=problem) for v in variants]
        recs = measure_many("rms_norm", configs, device=dev, on_error="record")
        row = {r.variant: [_us(r.host_ms), _us(r.call_ms)] for r in recs}
        out[label] = row
        print(f"{label:20s} " + "  ".join(f"{v} {h} / {c}" for v, (h, c) in row.items()))
    return out


class CallWithHostInside:
    """The suite's call sampler (``workbench.timing.EventCallSampler``: an untimed call, then per
    sample the L2 flushed, the device drained, device events around one call) that also keeps
    the host time of each timed call, taken between the start event's record and the call's
    return (``inside``). ``flushed=False`` leaves the flush out."""

    method = "device-events, idle start"

    def __init__(self, fn, flush, flushed: bool = True, batch: int = 5):
        self.fn, self.flush, self.flushed, self.batch = fn, flush, flushed, batch
        self.inside: list[float] = []

    def sample(self) -> list[float]:
        out = []
        self.fn()
        for _ in range(self.batch):
            if self.flushed:
                self.flush()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            self.fn()
            self.inside.append((time.perf_counter() - t0) * 1e3)
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end))
        return out


def call_residual(dev, problem: dict) -> dict:
    """Where a call's time goes beyond its host time and kernel time, sampled as the suite
    samples the forward cell (every sampler of ours and F.rms_norm interleaved, the heap frozen):
    kernel, call (flushed and drained, as the suite's), the host time spent inside those same
    timed calls, the call without the flush, and the host sampler's host time. ``call - inside``
    is what the device adds after the host has issued the call; ``inside - host`` is what the
    flush and drain cost the host's issue of the next call. Beside them, two floors from
    :func:`launch_floors`: a Triton replay into a fresh output shaped like x (the least a planned
    forward does) and torch's launch of ``zero_`` on one value; between them our forward built
    up from that replay (:func:`front_pieces`); last, ours and F.rms_norm's steps sampled again
    at the end of each round."""
    x = torch.randn(problem["rows"], problem["hidden"], device="cuda", dtype=torch.bfloat16)
    floors = launch_floors(x)

    def step(variant):
        return prepared_call("rms_norm", dict(variant=variant, dtype="bf16", mode="forward", problem=problem))[1]

    steps = {
        "ours": step("gpu_multirow"),
        "F.rms_norm": step("torch_functional"),
        "replay, fresh x": floors["launch: Triton, replay, fresh x"],
        **front_pieces(x, torch.randn(problem["hidden"], device="cuda", dtype=torch.bfloat16)),
        "torch zero_": floors["launch: torch zero_"],
    }
    # The same two steps again at the end of each round: whether a call's place in the round
    # (the first follows the round's estimates) moves its times.
    steps["ours, sampled last"] = steps["ours"]
    steps["F.rms_norm, sampled last"] = steps["F.rms_norm"]
    samplers, inside = {}, {}
    for name, fn in steps.items():
        per_fn, _ = dev.samplers(fn, ("kernel", "host"))
        samplers[(name, "kernel")] = per_fn["kernel"]
        for label, flushed in (("call", True), ("idle call", False)):
            sampler = CallWithHostInside(fn, dev.flush_l2, flushed=flushed)
            samplers[(name, label)] = sampler
            inside[(name, label)] = sampler.inside
        samplers[(name, "host")] = per_fn["host"]
    est = sampled_frozen(samplers)
    out = {}
    print("\n== a call's time taken apart, sampled as the suite samples the forward cell (µs, medians)")
    print(
        f"{'':24s} {'kernel':>8s} {'call':>8s} {'inside':>8s} {'call-in':>8s} {'idle':>8s} {'inside':>8s} {'host':>8s}"
    )
    for name in steps:
        row = {
            "kernel": est[(name, "kernel")].median * 1e3,
            "call": est[(name, "call")].median * 1e3,
            "inside call": statistics.median(inside[(name, "call")]) * 1e3,
            "idle call": est[(name, "idle call")].median * 1e3,
            "inside idle call": statistics.median(inside[(name, "idle call")]) * 1e3,
            "host": est[(name, "host")].median * 1e3,
        }
        row["call - inside"] = row["call"] - row["inside call"]
        out[name] = {k: round(v, 1) for k, v in row.items()}
        print(
            f"{name:24s} {row['kernel']:8.1f} {row['call']:8.1f} {row['inside call']:8.1f} {row['call - inside']:8.1f}"
            f" {row['idle call']:8.1f} {row['inside idle call']:8.1f} {row['host']:8.1f}"
        )
    return out


def _us(ms):
    return None if ms is None else round(ms * 1e3, 1)


def table(fns: dict, flush) -> dict:
    out = {name: protocols(fn, flush) for name, fn in fns.items()}
    print(
        f"{'µs':36s} {'host':>8s} {'loop':>8s} {'call':>8s} {'call+sync':>10s} {'idle call':>10s} {'blocks':>7s}  syncs"
    )
    for name, r in out.items():
        print(
            f"{name:36s} {r['host']:8.1f} {r['loop']:8.1f} {r['call']:8.1f} {r['call+sync']:10.1f}"
            f" {r['idle call']:10.1f} {r['blocks']:7.2f}  {r['syncs']}"
        )
    print("fast launch:", {k: v for k, v in fast_launch.status().items() if k in ("enabled", "hits", "fallbacks")})
    return out


def python_calls(fn, n: int = 200) -> list[str]:
    """Every Python-level function one call of ``fn`` runs, with calls and own µs per call
    (cProfile over ``n`` calls; its overhead inflates the µs, not the counts)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(prof).stats
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])
    lines = []
    for (path, line, name), (_, ncalls, tottime, cumtime, _) in rows:
        where = f"{Path(path).name}:{line}" if line else path
        lines.append(
            f"{ncalls / n:6.1f} calls {tottime / n * 1e6:7.2f} us own {cumtime / n * 1e6:8.2f} cum  {name} ({where})"
        )
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--out", default="/tmp/res")
    ap.add_argument("--sessions-only", action="store_true", help="stop after the table taken after the sessions")
    ap.add_argument("--residual-only", action="store_true", help="only take a call's time apart (call_residual)")
    args = ap.parse_args(argv)
    dev = get_device("cuda")
    flush = dev.flush_l2
    print(f"{dev.name}, torch {torch.__version__}; rows {args.rows}, hidden {args.hidden}, bf16\n")
    problem = {"rows": args.rows, "hidden": args.hidden}
    if args.residual_only:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        residual = {"fresh process": call_residual(dev, problem)}
        variants = ["gpu_multirow", "torch_functional", "torch_compile", "liger"]
        configs = [
            dict(variant=v, dtype="bf16", mode=m, problem=problem) for m in ("forward", "full") for v in variants
        ]
        measure_many("rms_norm", configs, device=dev, on_error="record")
        print("\n(after the suite's measure_many of the forward and full cells)")
        residual["after the suite's cells"] = call_residual(dev, problem)
        Path(args.out, "call_residual.json").write_text(json.dumps(residual, indent=1))
        return
    cupti = os.environ.get("TEARDOWN_CUPTI", "(unset)")
    lazy = os.environ.get("DISABLE_CUPTI_LAZY_REINIT", "(unset)")
    print(f"== a fresh process (TEARDOWN_CUPTI={cupti}, DISABLE_CUPTI_LAZY_REINIT={lazy})")
    fns = calls(args.rows, args.hidden)  # made once: every table times the same calls on the same tensors
    fresh = table(fns, flush)
    sampler = ProfilerKernelSampler(fns["ours fwd+bwd"], flush=flush)
    session_ms = []
    for _ in range(5):
        t0 = time.perf_counter()
        sampler.sample()
        session_ms.append(round((time.perf_counter() - t0) * 1e3, 1))
    print(f"\n== after 5 kernel-timing profiler sessions of 10 calls each (ms per session: {session_ms})")
    after_profiler = table(fns, flush)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    print("\n== host times sampled as the suite samples them, in this process")
    names = ["ours fwd", "F.rms_norm fwd", "suite step: ours fwd", "suite step: F.rms_norm fwd"]
    interleaved_hosts = interleaved(fns, dev, names + ["ours fwd+bwd", "F.rms_norm fwd+bwd"])
    if args.sessions_only:
        body = {"teardown_cupti": cupti, "disable_lazy_reinit": lazy, "fresh": fresh}
        body |= {"profiler_session_ms": session_ms, "after_profiler_sessions": after_profiler}
        name = f"call_breakdown_teardown{cupti}_lazy{lazy}.json".replace("(unset)", "-")
        Path(args.out, name).write_text(json.dumps(body, indent=1, default=str))
        return
    variants = ["gpu_multirow", "torch_functional", "torch_compile", "liger"]
    configs = [dict(variant=v, dtype="bf16", mode=m, problem=problem) for m in ("forward", "full") for v in variants]
    recs = measure_many("rms_norm", configs, device=dev, on_error="record")
    print("\n== the suite's measure_many of this cell (call / host µs as it recorded them; the heap as it states)")
    for rec in recs:
        call = None if rec.call_ms is None else round(rec.call_ms * 1e3, 1)
        host = None if rec.host_ms is None else round(rec.host_ms * 1e3, 1)
        heap = (rec.device_state or {}).get("python_heap", {}).get("collector", "not frozen")
        print(f"{rec.mode:8s} {rec.variant:18s} call {call}  host {host}  ({heap}) {rec.error or ''}")
    neighbours = suite_neighbours(dev, problem)
    listings = {}
    for name in ("ours fwd+bwd", "ours fwd", "ours block-sparse b1", "PyJuice layer b1"):
        fn = fns.get(name)
        if fn is not None:
            print(f"\n== Python functions of one {name} call (fresh-ish process, cProfile)")
            listings[name] = python_calls(fn)
            print("\n".join(listings[name][:40]))
    listing = listings["ours fwd+bwd"]
    print("\n== the same process afterwards")
    after = table(fns, flush)
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    print(
        f"\n== after gc.collect() + gc.freeze() ({(time.perf_counter() - t0) * 1e3:.0f} ms, {gc.get_freeze_count()} objects)"
    )
    frozen = table(fns, flush)
    gc.unfreeze()
    body = {
        "teardown_cupti": cupti,
        "fresh": fresh,
        "profiler_session_ms": session_ms,
        "after_profiler_sessions": after_profiler,
        "interleaved_hosts": interleaved_hosts,
        "after_suite_cell": after,
        "frozen": frozen,
        "suite_cell": [r.to_dict() for r in recs],
        "suite_neighbours": neighbours,
        "python_calls": listing,
        "python_calls_by_call": listings,
    }
    Path(args.out, "call_breakdown.json").write_text(json.dumps(body, indent=1, default=str))


if __name__ == "__main__":
    main()
