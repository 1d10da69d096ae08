# ruff: noqa: E731  (the lambdas are the calls being timed)
"""Host µs per eager call of each family, with the fast launch path on and off (issue 15).

    python3 benchmarks/diagnostics/host_profile.py [--rows 64] [--calls 400] [--rounds 7] [--out DIR]
    bash benchmarks/gpu_run.sh run python3 benchmarks/diagnostics/host_profile.py     # on the GPU machine

Host µs = wall time of ``--calls`` back-to-back calls (no synchronisation inside the loop) over
their number. The problems are small (``--rows`` rows, hidden 1024) so that the GPU finishes each
kernel before the host issues the next and the loop measures the host, not the device. Fast
launch on and off are measured interleaved, ``--rounds`` times each, and the medians printed
with the spread; ``fast_launch.status()`` after the "on" rounds shows the path replayed (hits)
rather than fell back. A last column gives one call's cProfile top entries (with ``--profile``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kernels import fast_launch  # noqa: E402
from kernels.block_sparse import make_layer, product_layer, sum_layer  # noqa: E402
from kernels.fused_add_rms_norm import fused_add_rms_norm  # noqa: E402
from kernels.rms_norm import rms_norm  # noqa: E402
from kernels.scalar_ops import scalar_op  # noqa: E402


def calls(rows: int, hidden: int, device: str = "cuda", nodes: int = 1024) -> dict:
    """One eager call per family (and forward+backward for the differentiable ones)."""
    dt = torch.bfloat16
    x = torch.randn(rows, hidden, device=device, dtype=dt)
    r = torch.randn(rows, hidden, device=device, dtype=dt)
    w = torch.randn(hidden, device=device, dtype=dt)
    dy = torch.randn_like(x)
    xg, rg, wg = (t.clone().requires_grad_() for t in (x, r, w))
    layer = make_layer({"layer": "sum", "nodes": nodes, "block_size": 32, "K": 0, "batch": 4, "tied": False}, device)
    product = make_layer(
        {"layer": "product", "nodes": nodes, "block_size": 32, "K": 2, "batch": 4, "tied": False}, device
    )

    def no_grad(fn):
        def run():
            with torch.no_grad():
                fn()

        return run

    return {
        "rms_norm fwd": no_grad(lambda: rms_norm(x, w)),
        "rms_norm fwd+bwd": lambda: torch.autograd.grad(rms_norm(xg, wg), (xg, wg), dy),
        "F.rms_norm fwd (peer)": no_grad(lambda: torch.nn.functional.rms_norm(x, (hidden,), w, 1e-6)),
        "fused_add_rms_norm fwd": no_grad(lambda: fused_add_rms_norm(x, r, w)),
        "fused_add_rms_norm fwd+bwd": lambda: torch.autograd.grad(fused_add_rms_norm(xg, rg, wg)[0], (xg, rg, wg), dy),
        "scalar_op triton pow": no_grad(lambda: scalar_op("pow", x, 1.5, strategy="triton")),
        "sum_layer fwd (L=1024, B=4)": no_grad(
            lambda: sum_layer(layer["element_mars"], layer["params"], layer["cids"], layer["pids"], 32)
        ),
        "product_layer fwd (L=1024, B=4)": no_grad(lambda: product_layer(product["node_mars"], product["cids"], 32)),
    }


def host_us(fn, n: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / n * 1e6


def set_fast_launch(on: bool) -> None:
    os.environ[fast_launch.ENV_SWITCH] = "1" if on else "0"
    fast_launch.reset()


def profile_one(fn, top: int = 8) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(50):
        fn()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries per call, path on")
    parser.add_argument("--out", type=Path, default=None, help="also write host_profile.json here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("host_profile.py needs a CUDA device (the fast launch path is CUDA-only)")
        return 2
    import triton

    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    print(f"rows {args.rows}, hidden {args.hidden}, bf16; {args.calls} calls x {args.rounds} rounds per cell\n")
    results = {}
    for name, fn in calls(args.rows, args.hidden).items():
        samples = {True: [], False: []}
        for on in (True, False):  # warm-up: compiles, fills the launch cache and the plans
            set_fast_launch(on)
            for _ in range(5):
                fn()
        for _ in range(args.rounds):
            for on in (True, False):
                set_fast_launch(on)
                fn()  # one miss per kernel refills the cache that reset() emptied
                samples[on].append(host_us(fn, args.calls))
        set_fast_launch(True)
        for _ in range(3):
            fn()
        status = fast_launch.status()
        on, off = statistics.median(samples[True]), statistics.median(samples[False])
        results[name] = {
            "fast_on_us": on,
            "fast_off_us": off,
            "on_samples": samples[True],
            "off_samples": samples[False],
            "hits": status["hits"],
            "fallbacks": status["fallbacks"],
            "unfilled": status["unfilled"],
        }
        spread = f"[{min(samples[True]):.1f}-{max(samples[True]):.1f}] vs [{min(samples[False]):.1f}-{max(samples[False]):.1f}]"
        print(f"{name:34s} on {on:7.1f} us   off {off:7.1f} us   saved {off - on:6.1f} us   {spread}", flush=True)
        if status["fallbacks"] or status["unfilled"]:
            print(f"{'':34s} fallbacks {status['fallbacks']} unfilled {status['unfilled']}")
        if args.profile:
            print(profile_one(fn))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "host_profile.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
