"""Does a process that ran a CUDA profiler session exit, and how long after its work is done?

    bash benchmarks/gpu_run.sh run python3 benchmarks/diagnostics/profiled_exit.py --limit 20

Each case runs in a child Python that does its work, prints a line, and returns from its script.
The parent times from that line to the child's exit, up to ``--limit`` seconds; a child still
there at the limit has its stacks dumped (``py-spy dump --native``, where py-spy is found: the GPU
runs carry it in .whl) and is killed. A GPU test's child (tests/test_timing.py) printed its
result on an H200 and was still there 100 s later; the cases split where that comes from: CUDA
alone (``cuda-only``), torch.profiler's own session, the workbench's sessions, and those with
Kineto's CUPTI teardown switched off and on by its ``TEARDOWN_CUPTI`` variable. Each case also
reports the host's time per launch after its sessions: CUPTI left attached (no teardown) may
slow launches, which the call and host timings would see.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_COPY = "x = torch.ones(1 << 24, device='cuda'); y = torch.empty_like(x)\n"
_SAMPLE = (
    "from workbench import timing\n"
    "from workbench.device import get_device\n"
    "timing.start_profiler()\n"
    "timing.ProfilerKernelSampler(lambda: y.copy_(x), calls=10, flush=get_device('cuda').flush_l2).sample()\n"
)
CASES: dict[str, tuple[str, dict]] = {
    "cuda-only": (_COPY + "y.copy_(x); torch.cuda.synchronize()\n", {}),
    "torch-profiler": (
        _COPY + "with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):\n"
        "    y.copy_(x); torch.cuda.synchronize()\n",
        {},
    ),
    "workbench": (_COPY + _SAMPLE, {}),
    "workbench-teardown0": (_COPY + _SAMPLE, {"TEARDOWN_CUPTI": "0"}),
    "workbench-teardown1": (_COPY + _SAMPLE, {"TEARDOWN_CUPTI": "1"}),
    # the variable set by the process itself after torch's import, before its first session
    "workbench-teardown0-set-late": ("import os\nos.environ['TEARDOWN_CUPTI'] = '0'\n" + _COPY + _SAMPLE, {}),
}
DONE = "work done"
# After the work: the host's time per launch of a tiny op (median of 30 batches of 200 launches,
# queued without a sync), so a case that leaves CUPTI attached shows what that costs the launches
# a wall-clock timing measures after a profiler session.
_LAUNCH = (
    "import statistics, time\n"
    "small = torch.ones(8, device='cuda')\n"
    "samples = []\n"
    "for _ in range(31):\n"
    "    torch.cuda.synchronize(); t = time.perf_counter()\n"
    "    for _ in range(200): small.add_(1)\n"
    "    samples.append((time.perf_counter() - t) / 200 * 1e6)\n"
    "print('launch_us', statistics.median(samples[1:]), flush=True)\n"
)


def _py_spy() -> str | None:
    return shutil.which("py-spy") or next((p for p in ("/tmp/site/bin/py-spy",) if os.path.exists(p)), None)


def run_case(name: str, body: str, env: dict, limit: float) -> dict:
    script = "import torch\n" + body + _LAUNCH + f"print({DONE!r}, flush=True)\n"
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    for line in child.stdout:  # until the work is done (or the child ends without saying so)
        lines.append(line.rstrip())
        if line.strip() == DONE:
            break
    done_at = time.perf_counter()
    launch = next((float(x.split()[1]) for x in lines if x.startswith("launch_us ")), None)
    try:
        child.wait(timeout=limit)
        return {
            "case": name,
            "exit_s": time.perf_counter() - done_at,
            "rc": child.returncode,
            "output": lines,
            "launch_us": launch,
        }
    except subprocess.TimeoutExpired:
        spy = _py_spy()
        stacks = "(no py-spy here)"
        if spy:  # what py-spy says on either stream: a refused ptrace says so on stderr
            dump = subprocess.run(
                [spy, "dump", "--native", "--pid", str(child.pid)], capture_output=True, text=True, timeout=30
            )
            stacks = (dump.stdout + dump.stderr).strip() or f"(py-spy printed nothing, rc {dump.returncode})"
        child.kill()
        child.wait()
        return {"case": name, "exit_s": None, "rc": None, "output": lines, "stacks": stacks, "launch_us": launch}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=float, default=20.0, help="seconds a child may take to exit after its work")
    parser.add_argument("--only", default="", help="comma list of case names (default: every case)")
    args = parser.parse_args(argv)
    wanted = [c.strip() for c in args.only.split(",") if c.strip()] or list(CASES)
    results = [run_case(name, *CASES[name], args.limit) for name in wanted]
    print(f"{'case':24s} {'exit after its work':>22s} {'host us per launch after':>26s}")
    for r in results:
        shown = (
            f"{r['exit_s']:.2f} s (rc {r['rc']})" if r["exit_s"] is not None else f"still there at {args.limit:.0f} s"
        )
        launch = f"{r['launch_us']:.2f}" if r["launch_us"] is not None else "-"
        print(f"{r['case']:24s} {shown:>22s} {launch:>26s}")
    for r in results:
        if r.get("stacks") or (r["output"] and r["output"][-1] != DONE):
            print(f"\n--- {r['case']}: output\n" + "\n".join(r["output"][-20:]))
            if r.get("stacks"):
                print(f"--- {r['case']}: stacks at the limit\n" + r["stacks"][:6000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
