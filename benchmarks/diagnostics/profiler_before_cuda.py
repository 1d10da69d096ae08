"""Can a process pay the profiler's first-session cost before CUDA starts, and leave the choice of
its GPU open? A Ray worker imports the measuring stack before an actor (and its GPU) is placed in
it (workbench/sweep/preload.py); the measuring actor then opens the process's first CUDA profiler
session in its warm-up, 4-6 s on an H200 host through ``torch.profiler`` (reports/sweep-h200x4).
What a CPU-only session paid ahead was Inductor's import, which ``torch.profiler``'s start
triggers; the workbench's own sessions skip it (``workbench.timing.cuda_profiled_operations``),
and this script's sessions keep ``torch.profiler`` to show what it was.

    python benchmarks/diagnostics/profiler_before_cuda.py

Each case runs in a fresh process and prints its steps' seconds:
- ``cuda_only``: CUDA started, then a CUDA profiler session (what an actor pays today);
- ``cpu_first``: a CPU-only profiler session with CUDA not started, then CUDA, then a CUDA session;
- ``cpu_first_then_hidden``: the CPU-only session, then ``CUDA_VISIBLE_DEVICES=""`` and CUDA's
  device count. 0 means the session left CUDA's driver unstarted, so a GPU chosen afterwards
  (as Ray chooses one) is still honoured; more means it started the driver with every GPU in view.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CASES = ("cuda_only", "cpu_first", "cpu_first_then_hidden")


def _session(activities) -> None:
    from torch.profiler import profile

    with profile(activities=activities):
        pass


def _child(case: str) -> dict:
    seconds: dict = {}

    def step(name, fn):
        t0 = time.perf_counter()
        value = fn()
        seconds[name] = round(time.perf_counter() - t0, 3)
        return value

    torch = step("import_torch", lambda: __import__("torch"))
    from torch.profiler import ProfilerActivity

    out: dict = {"case": case, "seconds": seconds}
    if case != "cuda_only":
        step("cpu_session", lambda: _session([ProfilerActivity.CPU]))
        out["torch_cuda_initialized_after_cpu_session"] = torch.cuda.is_initialized()
    if case == "cpu_first_then_hidden":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        out["devices_seen_after_hiding"] = step("device_count", torch.cuda.device_count)
        return out
    step("cuda_start", lambda: torch.ones(1024, device="cuda").sum().item())
    step("cuda_session", lambda: _session([ProfilerActivity.CUDA]))
    step("second_cuda_session", lambda: _session([ProfilerActivity.CUDA]))
    return out


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(_child(sys.argv[2])))
        return 0
    for case in CASES:
        done = subprocess.run([sys.executable, __file__, "--child", case], capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        result = json.loads(lines[-1]) if lines else {"case": case, "error": done.stderr.strip()[-400:]}
        kineto_error = "registerClient" in done.stderr
        print(json.dumps({**result, "kineto_error_line": kineto_error}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
