"""Where a configuration's first call spends its time when its kernels are already in Triton's
disk cache (compiled ahead), before and after the process's first profiler session.

    python benchmarks/diagnostics/first_call_cost.py

In one fresh process with an empty Triton cache: RMSNorm forwards at several tiles are compiled
ahead by this process's compile service (workbench/compiling/service.py) and settled; then half
of them get their first call (timed, and profiled with cProfile), the profiler's first session
runs, and the other half get theirs. Prints each first call's milliseconds and, for the slowest
of each half, the functions that took the most cumulative time.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="wb-first-call-"))
    import torch

    import kernels
    from workbench.compiling import service
    from workbench.compiling.jobs import job_of
    from workbench.timing import start_profiler

    spec = kernels.get("rms_norm")
    tiles = [{"BLOCK_SIZE_M": m, "num_warps": w} for m in (1, 2, 4) for w in (2, 4, 8)]
    configs = [
        dict(variant="gpu_multirow", dtype="bf16", mode="forward", problem={"hidden": 2048}, params=t) for t in tiles
    ]
    started = time.perf_counter()
    assert service.submit_configs(spec, configs, "cuda") == len(configs)
    svc = service.active()
    var = spec.variant("gpu_multirow")
    problem = spec.resolve_problem({"hidden": 2048})
    launchers = []
    for c in configs:
        job = job_of(spec, var, dtype="bf16", mode="forward", problem=c["problem"], params=c["params"])
        result = svc.settle(job, take_over=False)
        assert result and result["ok"], result
        launchers += [k.get("launcher_ms") for k in result["kernels"]]
    print(
        f"compiled ahead: {len(configs)} configurations in {time.perf_counter() - started:.1f} s; launchers built ms: {launchers}"
    )
    inputs = spec.make_inputs(problem, torch.bfloat16, torch.device("cuda"), 0)

    def call(tile):
        with torch.no_grad():
            return var.call(inputs, problem, var.resolve_params(tile))()

    call({"BLOCK_SIZE_M": 8, "num_warps": 1})  # the process's first launch (CUDA context, first compile)
    torch.cuda.synchronize()

    def first_calls(label, chosen):
        times, slowest = [], None
        for t in chosen:
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            call(t)
            torch.cuda.synchronize()
            prof.disable()
            ms = (time.perf_counter() - t0) * 1e3
            times.append(ms)
            if slowest is None or ms > slowest[0]:
                slowest = (ms, t, prof)
        print(f"{label}: first calls ms {', '.join(f'{m:.1f}' for m in times)}")
        out = io.StringIO()
        pstats.Stats(slowest[2], stream=out).sort_stats("cumulative").print_stats(18)
        print(f"  slowest ({slowest[1]}, {slowest[0]:.1f} ms), by cumulative time:")
        print("\n".join("    " + line for line in out.getvalue().splitlines()[6:30] if line.strip()))

    first_calls("before the profiler's first session", tiles[: len(tiles) // 2])
    t0 = time.perf_counter()
    start_profiler()
    print(f"profiler's first session: {time.perf_counter() - t0:.1f} s")
    first_calls("after it", tiles[len(tiles) // 2 :])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
