# ruff: noqa: B023, E731  (the lambdas are timed inside the loop that defines them)
"""Where the time goes on the GPU machine: host cost of each piece of a call, and kernel times.

    python3 benchmarks/profile_calls.py --out /tmp/res            # on the GPU machine

1. Host issue time per call (back-to-back, no sync inside the loop) of the pieces of an RMSNorm
   call at 4096 x 1024 bf16: allocations, a raw Triton launch, our launcher, a compiled-kernel
   runner, an empty autograd.Function, the dw reduction, and whole calls of ours and peers.
2. torch.profiler kernel lists (device µs per kernel) of one full RMSNorm step, ours and
   F.rms_norm, at hidden 1024 / 4096 / 32768.
3. The same for the block-sparse sum forward at L = 1024, batch 1 / 4 / 8 / 16, ours and PyJuice.
4. do_bench of our host functions (``rms_norm_forward`` / ``rms_norm_backward``) for a tile
   grid, so heuristics can be set from data and not from a host-bound full step.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

from kernels.launch import launcher  # noqa: E402
from kernels.rms_norm import gpu as rms_gpu  # noqa: E402
from kernels.rms_norm import rms_norm  # noqa: E402
from workbench.device import get_device  # noqa: E402

OUT: dict = {}


def issue_us(fn, n=300):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def bench_us(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100) * 1e3


def section(name):
    def wrap(fn):
        def run(*a, **k):
            print(f"\n=== {name} ===", flush=True)
            t0 = time.time()
            try:
                fn(*a, **k)
            except Exception:
                traceback.print_exc()
                OUT.setdefault("errors", []).append(name)
            print(f"[{name}: {time.time() - t0:.1f} s]", flush=True)

        return run

    return wrap


@section("host pieces")
def host_pieces():
    rows, hidden = 4096, 1024
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    rstd = torch.empty(rows, device="cuda", dtype=torch.float32)
    tiles = rms_gpu.tiles_for(x)
    kern = rms_gpu._rms_norm_forward_kernel
    grid = (triton.cdiv(rows, tiles.BLOCK_SIZE_M),)
    args = (y, x, w, rstd, x.stride(0), rows, hidden, 1e-6, 0.0)
    meta = dict(CASTING_MODE=0, HAS_WEIGHT=True, BLOCK_SIZE=tiles.BLOCK_SIZE, BLOCK_SIZE_M=tiles.BLOCK_SIZE_M)
    compiled = kern[grid](*args, **meta, num_warps=tiles.num_warps)
    res = {}
    res["torch.empty_like"] = issue_us(lambda: torch.empty_like(x))
    res["torch.empty(rows) fp32"] = issue_us(lambda: torch.empty(rows, device="cuda", dtype=torch.float32))
    res["raw kernel[grid]"] = issue_us(lambda: kern[grid](*args, **meta, num_warps=tiles.num_warps))
    res["launcher(kernel,x)[grid]"] = issue_us(
        lambda: launcher(kern, x)[grid](*args, **meta, num_warps=tiles.num_warps)
    )
    for label, call_args in (("runner(args)", args), ("runner(args+constexpr)", args + tuple(meta.values()))):
        try:
            runner = compiled[(grid[0], 1, 1)]
            runner(*call_args)
            torch.cuda.synchronize()
            res[f"CompiledKernel {label}"] = issue_us(lambda r=runner, a=call_args: r(*a))
        except Exception as exc:
            res[f"CompiledKernel {label}"] = f"error: {type(exc).__name__}: {exc}"[:200]
    res["rms_gpu.rms_norm_forward"] = issue_us(lambda: rms_gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", tiles))
    with torch.no_grad():
        res["rms_norm() no_grad"] = issue_us(lambda: rms_norm(x, w))
        res["F.rms_norm no_grad"] = issue_us(lambda: torch.nn.functional.rms_norm(x, (hidden,), w, 1e-6))

    class Noop(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a.view_as(a)

        @staticmethod
        def backward(ctx, g):
            return g, None

    xg = x.clone().requires_grad_()
    wg = w.clone().requires_grad_()
    dy = torch.randn_like(x)
    res["Noop.apply"] = issue_us(lambda: Noop.apply(xg, wg))
    res["Noop.apply + autograd.grad"] = issue_us(lambda: torch.autograd.grad(Noop.apply(xg, wg), [xg], dy))
    part = torch.randn(132, hidden, device="cuda")
    res["partial.sum(0).to(bf16)"] = issue_us(lambda: part.sum(0).to(torch.bfloat16))
    res["ours full (autograd.grad)"] = issue_us(lambda: torch.autograd.grad(rms_norm(xg, wg), [xg, wg], dy))
    res["F.rms_norm full"] = issue_us(
        lambda: torch.autograd.grad(torch.nn.functional.rms_norm(xg, (hidden,), wg, 1e-6), [xg, wg], dy)
    )
    rs = rms_norm(xg, wg)
    rstd_saved = torch.empty(rows, device="cuda", dtype=torch.float32)
    rms_gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", tiles)
    res["rms_gpu.rms_norm_backward"] = issue_us(
        lambda: rms_gpu.rms_norm_backward(dy, x, w, rstd_saved, 0.0, "llama", tiles)
    )
    del rs
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        res["liger full"] = issue_us(
            lambda: torch.autograd.grad(LigerRMSNormFunction.apply(xg, wg, 1e-6, 0.0, "llama", False), [xg, wg], dy)
        )
    except Exception as exc:
        res["liger full"] = f"missing: {exc}"[:100]
    for k, v in res.items():
        print(f"{k:36s} {v if isinstance(v, str) else f'{v:8.1f} us'}")
    OUT["host_pieces_us"] = res
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        torch.autograd.grad(rms_norm(xg, wg), [xg, wg], dy)
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    print(text.getvalue())


def kernel_table(fn, label, n=5):
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    rows = []
    for evt in prof.key_averages():
        dev_us = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        if dev_us and evt.device_type.name == "CUDA":
            rows.append((evt.key[:70], evt.count / n, dev_us / n))
    rows.sort(key=lambda r: -r[2])
    total = sum(r[2] for r in rows)
    print(f"-- {label}: device total {total:.1f} us per call")
    for key, count, us in rows[:8]:
        print(f"   {us:9.1f} us  x{count:.0f}  {key}")
    OUT.setdefault("kernels", {})[label] = {"total_us": total, "kernels": rows[:8]}


@section("rms_norm kernels")
def rms_kernels():
    for hidden in (1024, 4096, 32768):
        x = torch.randn(4096, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn_like(x)
        kernel_table(lambda: torch.autograd.grad(rms_norm(x, w), [x, w], dy), f"ours full h={hidden}")
        kernel_table(
            lambda: torch.autograd.grad(torch.nn.functional.rms_norm(x, (hidden,), w, 1e-6), [x, w], dy),
            f"F.rms_norm full h={hidden}",
        )


@section("rms_norm host-function tile grid")
def rms_tiles():
    res = []
    for hidden in (1024, 4096, 16384, 32768):
        x = torch.randn(4096, hidden, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        best = {}
        for bm in (1, 2, 4, 8):
            for nw in (4, 8, 16, 32):
                for grid in ("auto", 264):
                    try:
                        t = rms_gpu.resolve_tiles(4096, hidden, 132, BLOCK_SIZE_M=bm, num_warps=nw, GRID=grid)
                    except ValueError:
                        continue
                    row = {"hidden": hidden, "BLOCK_SIZE_M": bm, "num_warps": nw, "GRID": grid}
                    if grid == "auto":
                        _, rstd = rms_gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", t)
                        row["fwd_us"] = bench_us(lambda t=t: rms_gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", t))
                    else:
                        _, rstd = rms_gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", t)
                    row["bwd_us"] = bench_us(
                        lambda t=t, rstd=rstd: rms_gpu.rms_norm_backward(dy, x, w, rstd, 0.0, "llama", t)
                    )
                    res.append(row)
                    for key in ("fwd_us", "bwd_us"):
                        if key in row and row[key] < best.get(key, (1e9, None))[0]:
                            best[key] = (row[key], (bm, nw, grid))
        dflt = rms_gpu.resolve_tiles(4096, hidden, 132, BLOCK_SIZE_M="auto")
        print(f"hidden {hidden}: best {best}; auto-m default {dflt}", flush=True)
    OUT["rms_tiles"] = res


@section("block_sparse sum forward kernels")
def block_sparse():
    from kernels.block_sparse import _shape, make_layer, peer, spec, sum_layer

    for batch in (1, 4, 8, 16):
        problem = spec.resolve_problem({"nodes": 1024, "batch": batch, "layer": "sum"})
        layer = make_layer(problem, device="cuda")
        em, params, cids, pids = (layer[k] for k in ("element_mars", "params", "cids", "pids"))
        bs = _shape(problem)["bs"]
        for heur in ("auto", "small", "large"):
            with torch.no_grad():
                fn = lambda h=heur: sum_layer(em, params, cids, pids, bs, heuristic=h)
                us_ = bench_us(fn)
                print(f"batch {batch} ours {heur}: do_bench {us_:.1f} us, issue {issue_us(fn, 100):.1f} us")
                if heur == "auto":
                    kernel_table(fn, f"ours sum fwd batch {batch}")
        if peer.available() is None:
            inputs = {"element_mars": em, "params": params, "cids": cids, "pids": pids}
            fn = lambda: peer.pyjuice_sum_layer(inputs, _shape(problem), problem)
            print(f"batch {batch} pyjuice variant: do_bench {bench_us(fn):.1f} us, issue {issue_us(fn, 100):.1f} us")
            kernel_table(fn, f"pyjuice variant sum fwd batch {batch}")
            hmm, pj_layer, _, _ = peer.layer_for(_shape(problem), params, pids, em.device)
            pc = hmm.pc
            raw = lambda: pj_layer(pc.node_mars, pc.element_mars, pc.params)
            print(
                f"batch {batch} pyjuice layer only: do_bench {bench_us(raw):.1f} us, issue {issue_us(raw, 100):.1f} us"
            )
            kernel_table(raw, f"pyjuice layer sum fwd batch {batch}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/res")
    ap.add_argument("--only", default="")
    args = ap.parse_args(argv)
    dev = get_device("cuda")
    print(dev.name, torch.__version__, triton.__version__)
    steps = {"host": host_pieces, "kernels": rms_kernels, "block_sparse": block_sparse, "tiles": rms_tiles}
    for name, fn in steps.items():
        if not args.only or name in args.only.split(","):
            fn()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "profile.json").write_text(json.dumps(OUT, indent=1, default=str))


if __name__ == "__main__":
    main()
