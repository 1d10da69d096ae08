"""Host cost per call of each RMSNorm variant: how long Python and the launch path take.

Device time from do_bench hides host time only up to the L2-flush memset that precedes each
timed call; a kernel of ~10 us behind ~100 us of Python shows the Python. This prints, per
variant, the back-to-back issue time per call (no sync inside the loop: host-bound when the
kernel is short) for forward and for forward+backward, and a cProfile of our full step.

    python benchmarks/host_overhead.py --device cuda --rows 4096 --hidden 1024
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

from kernels.rms_norm.spec import spec
from workbench.device import get_device


def issue_time_us(dev, fn, n=300):
    fn()
    dev.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    dev.synchronize()
    return (t1 - t0) / n * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--profile", default="gpu_row")
    args = ap.parse_args(argv)
    dev = get_device(args.device)
    problem = spec.resolve_problem({"rows": args.rows, "hidden": args.hidden})
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    print(f"{dev.name}: rows={args.rows} hidden={args.hidden} {args.dtype}; host issue time per call (us)")
    print(f"{'variant':18s} {'forward':>9s} {'fwd+bwd':>9s}")
    for var in spec.variants:
        if var.unavailable_reason(dev.kind):
            continue
        inputs = spec.make_inputs(problem, dtype, dev.torch_device, 0)
        grads = [inputs["x"], inputs["weight"]]
        dy = torch.randn(args.rows, args.hidden, device=dev.torch_device, dtype=dtype)

        def fwd(var=var, inputs=inputs):
            with torch.no_grad():
                return var.run(inputs, problem)

        def full(var=var, inputs=inputs, grads=grads, dy=dy):
            return torch.autograd.grad(var.run(inputs, problem), grads, dy)

        print(f"{var.name:18s} {issue_time_us(dev, fwd):9.1f} {issue_time_us(dev, full):9.1f}", flush=True)
        if var.name == args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(200):
                full()
            prof.disable()
            dev.synchronize()
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(18)
            profile_text = text.getvalue()
    print(profile_text)


if __name__ == "__main__":
    main()
