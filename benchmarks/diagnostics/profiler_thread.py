"""Where a process's first CUDA profiler session may run: does starting it on a thread other than
the main one print Kineto's ``External init callback must run in same thread as registerClient``,
and what, done first on the main thread, keeps that from happening, at what cost?

    python benchmarks/diagnostics/profiler_thread.py

Each case runs in a fresh process (the first session is once per process): torch imported and
CUDA started on the main thread, then the steps of the case; each step's seconds, and whether
Kineto's error reached stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

CASES = {
    "thread": ["cuda_session@thread"],
    "main": ["cuda_session@main", "cuda_session@thread"],
    "cpu_session_main": ["cpu_session@main", "cuda_session@thread"],
    "supported_activities_main": ["activities@main", "cuda_session@thread"],
    "kineto_available_main": ["kineto_available@main", "cuda_session@thread"],
}


def _child(steps: list[str]) -> None:
    import threading

    import torch

    torch.cuda.init()
    x = torch.ones(1024, device="cuda")
    timings = {}

    def cuda_session():
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]):
            (x * 2).sum().item()

    def cpu_session():
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]):
            (x * 2).sum().item()

    def activities():
        torch.profiler.supported_activities()

    def kineto_available():
        torch.autograd.kineto_available()

    work = {"cuda_session": cuda_session, "cpu_session": cpu_session, "activities": activities,
            "kineto_available": kineto_available}  # fmt: skip
    for step in steps:
        name, where = step.split("@")
        started = time.perf_counter()
        if where == "main":
            work[name]()
        else:
            t = threading.Thread(target=work[name])
            t.start()
            t.join()
        timings[step] = round(time.perf_counter() - started, 3)
    sys.stderr.flush()
    print(json.dumps(timings), flush=True)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child(sys.argv[2].split(","))
        return 0
    print(f"{'case':28s} {'kineto error':>12s}  seconds per step")
    for case, steps in CASES.items():
        out = subprocess.run([sys.executable, __file__, "--child", ",".join(steps)], capture_output=True, text=True)
        error = "registerClient" in out.stderr
        line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else f"(failed: {out.stderr.strip()[-300:]})"
        print(f"{case:28s} {str(error):>12s}  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
