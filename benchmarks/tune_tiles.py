# ruff: noqa: B023, E731  (the lambdas are timed inside the loop that defines them)
"""Tile sweeps that set the GPU defaults from data (run on the GPU machine).

    python3 benchmarks/tune_tiles.py --out /tmp/res [--only block_sparse,block_sparse_backward,rms_backward,rms_forward]

Times the plain host functions (``sum_forward``, ``sum_backward``, ``rms_norm_forward``, ``rms_norm_backward``),
not the autograd path, so the numbers are kernel time and not host time: each point is the
smaller of two ``do_bench`` medians (L2 flushed), which keeps a host hiccup in one of them
from deciding a default. Prints the best configurations per size and writes tune.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton.testing  # noqa: E402

from kernels.block_sparse import _shape, make_layer  # noqa: E402
from kernels.block_sparse import gpu as bs_gpu
from kernels.block_sparse import spec as bs_spec
from kernels.rms_norm import gpu as rms_gpu  # noqa: E402

RESULTS: dict = {}


def us(fn):
    fn()
    return min(triton.testing.do_bench(fn, warmup=10, rep=40) for _ in range(2)) * 1e3


def show_best(label, rows, key="us", n=5):
    ok = sorted((r for r in rows if r.get(key) is not None), key=lambda r: r[key])
    default = [r for r in rows if r.get("default")]
    print(f"-- {label}: {len(ok)} configurations")
    if default:
        print(f"   default {default[0][key]:.1f} us  {default[0]['config']}")
    for r in ok[:n]:
        print(f"   {r[key]:8.1f} us  {r['config']}")


def issue_layer(batch: int):
    """The issue's sum layer (L = 1024, one block, K = 1024) at ``batch`` on the GPU: its shape
    and ``(element_mars, params, cids, pids)``."""
    problem = bs_spec.resolve_problem({"nodes": 1024, "batch": batch, "layer": "sum"})
    lay = make_layer(problem, device="cuda")
    return _shape(problem), tuple(lay[k] for k in ("element_mars", "params", "cids", "pids"))


def block_sparse(deadline):
    batches = (1, 2, 4, 8, 16)
    for i, batch in enumerate(batches):
        batch_deadline = time.time() + (deadline - time.time()) / (len(batches) - i)
        s, (em, p, cids, pids) = issue_layer(batch)
        out = torch.empty((s["G"] * s["bs"], batch), device="cuda")
        rows = []
        small = [
            ("small", dict(heuristic="small", TILE_M=tm, BLOCK_B=bb, num_warps=nw, num_stages=ns))
            for tm, bb, nw, ns in itertools.product((4, 8), (1, 2, 4, 8, 16), (2, 4, 8), (1, 3))
            if bb <= batch
        ]
        dot = [
            ("dot", dict(TILE_M=tm, PROGRAM_M=tm, TILE_K=tk, BLOCK_B=16, num_warps=nw, num_stages=ns))
            for tm, tk, nw, ns in itertools.product((16, 32), (16, 32, 64), (4, 8), (2, 3))
        ]
        configs = [("default", {})] + (dot + small if batch >= 8 else small + dot)
        for kind, cfg in configs:
            if time.time() > batch_deadline:
                break
            try:
                tiles = bs_gpu.resolve_forward_tiles(s["G"], s["bs"], s["K"], batch, 132, **cfg)
            except ValueError:
                continue
            try:
                t = us(lambda: bs_gpu.sum_forward(em, p, cids, pids, s["bs"], tiles, out=out))
            except Exception as exc:  # a config that does not compile (e.g. shared memory)
                rows.append({"config": cfg, "kind": kind, "us": None, "error": str(exc)[:120]})
                continue
            rows.append({"config": cfg, "kind": kind, "us": t, "default": kind == "default", "tiles": str(tiles)})
        show_best(f"block_sparse sum forward batch {batch}", rows)
        RESULTS[f"block_sparse_b{batch}"] = rows


def block_sparse_backward(deadline):
    """The sum layer's flows at batch 16-64: the exact broadcast form ("node") and the rule's
    factored tiles at ieee and TF32 (both kernels together), then each kernel's tiles swept alone
    at TF32 (element flows with param_flows off, and the other way round), from the rule's tiles."""
    batches = (16, 32, 64)
    for i, batch in enumerate(batches):
        batch_deadline = time.time() + (deadline - time.time()) / (len(batches) - i)
        s, (em, p, cids, pids) = issue_layer(batch)
        fwd = bs_gpu.resolve_forward_tiles(s["G"], s["bs"], s["K"], batch, 132)
        out = bs_gpu.sum_forward(em, p, cids, pids, s["bs"], fwd)
        flows = torch.rand_like(out)
        shape = (s["G"], s["bs"], s["K"], batch, 132)

        def both(t):
            return us(lambda: bs_gpu.sum_backward(flows, em, p, out, cids, pids, s["bs"], t))

        rows = []
        for label, kw in (("node", {"SHIFT": "node"}), ("rule ieee", {}), ("rule tf32", {"precision": "tf32"})):
            t = bs_gpu.resolve_backward_tiles(*shape, **kw)
            rows.append({"config": label, "us": both(t), "default": label == "rule ieee", "tiles": str(t)})
        show_best(f"block_sparse backward batch {batch} (both kernels)", rows, n=3)
        rule = bs_gpu.resolve_backward_tiles(*shape, precision="tf32")
        b2 = 1 << (batch - 1).bit_length()
        sides = {
            "element": (
                dict(element_flows=True, param_flows=False),
                [
                    dict(E_TILE_M=tm, E_TILE_K=tk, E_BLOCK_B=bb, E_SPLITS=sp, num_warps=nw)
                    for tm, tk, bb, sp, nw in itertools.product(
                        (32, 64), (32, 64), sorted({min(b2, 32), min(b2, 64)}), (2, 4, 8, 16), (4, 8)
                    )
                ],
            ),
            "param": (
                dict(element_flows=False, param_flows=True),
                [
                    dict(P_TILE_M=tm, P_TILE_K=tk, P_BLOCK_B=bb, num_warps=nw)
                    for tm, tk, bb, nw in itertools.product(
                        (32, 64), (32, 64, 128), sorted({16, min(b2, 32), min(b2, 64)}), (4, 8)
                    )
                ],
            ),
        }
        for side, (which, configs) in sides.items():
            side_rows = []
            for cfg in [{}] + configs:
                if time.time() > batch_deadline:
                    break
                t = dataclasses.replace(rule, **cfg)
                try:
                    side_us = us(lambda: bs_gpu.sum_backward(flows, em, p, out, cids, pids, s["bs"], t, **which))
                except Exception as exc:  # a config that does not compile (e.g. shared memory)
                    side_rows.append({"config": cfg, "us": None, "error": str(exc)[:120]})
                    continue
                side_rows.append({"config": cfg or "rule", "us": side_us, "default": not cfg, "tiles": str(t)})
            show_best(f"block_sparse backward batch {batch}, {side} flows alone, tf32", side_rows)
            rows += [dict(r, side=side) for r in side_rows]
        RESULTS[f"block_sparse_backward_b{batch}"] = rows


def rms_backward(deadline):
    for hidden in (8192, 16384, 32768):
        x = torch.randn(4096, hidden, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        rows = []
        configs = [{"_default": True}]
        for chunk, bm, nw in itertools.product((1024, 2048, 4096, 8192, 65536), (1, 2, 4), (4, 8, 16, 32)):
            configs.append({"BWD_CHUNK": chunk, "BLOCK_SIZE_M": bm, "num_warps": nw})
        for cfg in configs:
            if time.time() > deadline:
                break
            is_default = cfg.pop("_default", False)
            try:
                t = rms_gpu.resolve_tiles(4096, hidden, 132, **cfg)
            except ValueError:
                continue
            _, rstd = rms_gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", t)
            try:
                b = us(lambda: rms_gpu.rms_norm_backward(dy, x, w, rstd, 0.0, "llama", t))
            except Exception as exc:
                rows.append({"config": cfg, "us": None, "error": str(exc)[:120]})
                continue
            rows.append({"config": cfg, "us": b, "default": is_default, "tiles": str(t)})
        show_best(f"rms_norm backward hidden {hidden}", rows)
        RESULTS[f"rms_bwd_{hidden}"] = rows


def rms_forward(deadline):
    for hidden in (1024, 2048, 4096, 8192):
        x = torch.randn(4096, hidden, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        rows = []
        configs = [{"_default": True}]
        configs += [{"BLOCK_SIZE_M": bm, "num_warps": nw} for bm in (1, 2, 4, 8, 16) for nw in (1, 2, 4, 8, 16)]
        for cfg in configs:
            if time.time() > deadline:
                break
            is_default = cfg.pop("_default", False)
            if is_default:
                cfg = {"BLOCK_SIZE_M": "auto"}
            try:
                t = rms_gpu.resolve_tiles(4096, hidden, 132, **cfg)
            except ValueError:
                continue
            f = us(lambda: rms_gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", t))
            _, rstd = rms_gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", t)
            b = us(lambda: rms_gpu.rms_norm_backward(dy, x, w, rstd, 0.0, "llama", t))
            rows.append({"config": cfg, "us": f, "bwd_us": b, "default": is_default, "tiles": str(t)})
        show_best(f"rms_norm forward hidden {hidden}", rows)
        show_best(f"rms_norm backward (whole rows) hidden {hidden}", rows, key="bwd_us")
        RESULTS[f"rms_fwd_{hidden}"] = rows


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/res")
    ap.add_argument("--only", default="block_sparse,rms_backward,rms_forward")
    ap.add_argument(
        "--budget-s",
        default="block_sparse=240,block_sparse_backward=200,rms_backward=100,rms_forward=100",
        help="seconds per section",
    )
    args = ap.parse_args(argv)
    steps = {
        "block_sparse": block_sparse,
        "block_sparse_backward": block_sparse_backward,
        "rms_backward": rms_backward,
        "rms_forward": rms_forward,
    }
    budgets = {k: float(v) for k, v in (item.split("=") for item in args.budget_s.split(","))}
    for name in args.only.split(","):
        t0 = time.time()
        print(f"\n=== {name} ===", flush=True)
        try:
            steps[name](t0 + budgets.get(name, 100))
        except Exception as exc:
            print(f"{name} failed: {type(exc).__name__}: {exc}")
        print(f"[{name}: {time.time() - t0:.0f} s]", flush=True)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "tune.json").write_text(json.dumps(RESULTS, indent=1, default=str))


if __name__ == "__main__":
    main()
