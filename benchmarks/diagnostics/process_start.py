"""What a fresh measuring process pays once, step by step: where a sweep actor's start goes.

    python benchmarks/diagnostics/process_start.py                       # every plan, 3 fresh processes each
    python benchmarks/diagnostics/process_start.py --plans actor --repeats 5 --out /tmp/res/process-start

Each plan is an order of steps run in a fresh Python process on one GPU, each step timed on its
own (wall milliseconds). A step named twice shows what its second run costs, that is, how much of
the first was once per process. A step ending in ``&`` starts in a thread of its own, and
``join`` waits for it: whether that step overlaps the ones in between (or holds the GIL).

Steps: ``import_torch``; ``cuda`` (the context and one tensor); ``import_workbench`` (Triton,
the workbench's measuring stack and the families); ``device_facts`` (Triton's driver and target,
as a measuring actor reads them); ``state_flush`` (NVML and the L2 flush buffer); ``profiler``
(one kernel-time profiler session over a small copy, as each kernel timing starts one);
``torch_profiler`` (a session opened with ``torch.profiler.profile``, whose start imports
Inductor in a process that has not; the workbench's sessions do not: ``workbench.timing``);
``copy_bandwidth`` (the device's copy bandwidth, the measuring actor's warm-up step);
``triton_key`` (Triton's cache key of itself); ``first_launch``
(:func:`workbench.compiling.first_compile.first_launch`, the smallest kernel compiled and run);
``rms_norm`` (a real family's forward, its tiles new to the process, at 16 x 1000 then at
24 x 3000: a new compile each time).

Prints per plan the median of each step over ``--repeats`` processes, with its range; ``--out``
writes ``process_start.json`` (every process's steps) beside the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PLANS = {
    # the measuring actor's warm-up as it is, then what its first configurations pay
    "actor": (
        "import_torch cuda import_workbench device_facts state_flush copy_bandwidth profiler "
        "triton_key first_launch first_launch rms_norm rms_norm"
    ),
    # Triton's first compile before the profiler's first session: is either's cost the other's?
    "compile_first": "import_torch cuda import_workbench device_facts first_launch profiler profiler rms_norm",
    # torch.profiler's own first session (Inductor's import inside it), then the workbench's
    "torch_profiler_first": "import_torch cuda import_workbench device_facts torch_profiler profiler",
    # the profiler's first session in a thread while the rest imports
    "profiler_beside_imports": "import_torch cuda profiler& import_workbench device_facts join profiler first_launch",
}


def _steps():
    """The steps by name: each a function of the process's shared state (a dict)."""

    def import_torch(state):
        import torch

        state["torch"] = torch

    def cuda(state):
        torch = state["torch"]
        state["x"] = torch.ones(1 << 20, device="cuda")
        torch.cuda.synchronize()

    def import_workbench(state):
        import triton  # noqa: F401

        import kernels  # noqa: F401
        import workbench.measure  # noqa: F401

    def device_facts(state):
        from workbench.compiling.target import device_facts as facts

        facts("cuda")

    def state_flush(state):
        from workbench.device import get_device

        dev = get_device("cuda")
        dev.state()
        dev.flush_l2()

    def copy_bandwidth(state):
        from workbench.device import get_device

        get_device("cuda").copy_bandwidth_gbps()

    def profiler(state):
        from workbench.timing import ProfilerKernelSampler

        torch = state["torch"]
        x = state["x"]
        y = torch.empty_like(x)
        ProfilerKernelSampler(lambda: y.copy_(x), calls=3).sample()

    def torch_profiler(state):
        from torch.profiler import ProfilerActivity, profile

        torch = state["torch"]
        with profile(activities=[ProfilerActivity.CUDA]):
            torch.empty_like(state["x"]).copy_(state["x"])
            torch.cuda.synchronize()

    def triton_key(state):
        try:
            from triton.runtime.cache import triton_key as key
        except ImportError:  # older Triton
            from triton.compiler.compiler import triton_key as key
        key()

    def first_launch(state):
        from workbench.compiling.first_compile import first_launch as launch

        launch("cuda")

    def rms_norm(state):
        from kernels.rms_norm import rms_norm as norm

        torch = state["torch"]
        rows, hidden = (16, 1000) if not state.get("rms_norm") else (24, 3000)
        state["rms_norm"] = True
        x = torch.randn(rows, hidden, device="cuda")
        norm(x, torch.ones(hidden, device="cuda"))
        torch.cuda.synchronize()

    return {f.__name__: f for f in (
        import_torch, cuda, import_workbench, device_facts, state_flush, copy_bandwidth, profiler, torch_profiler,
        triton_key,
        first_launch, rms_norm,
    )}  # fmt: skip


def child(plan: str) -> list[tuple[str, float]]:
    """Run ``plan``'s steps in this process; ``[(step, ms)]`` in order (a repeated step gets
    ``#2``, a threaded one its own row when joined)."""
    steps, state, timed, seen = _steps(), {}, [], {}
    background = None
    for word in plan.split():
        name = word.rstrip("&")
        seen[name] = seen.get(name, 0) + 1
        label = name if seen[name] == 1 else f"{name}#{seen[name]}"
        if word == "join":
            started = time.perf_counter()
            background[0].join()
            timed.append(("join (waited)", (time.perf_counter() - started) * 1e3))
            timed.append((background[1] + " (in its thread)", background[2][0]))
            continue
        if word.endswith("&"):
            spent = [0.0]

            def run(fn=steps[name], spent=spent):
                t0 = time.perf_counter()
                fn(state)
                spent[0] = (time.perf_counter() - t0) * 1e3

            background = (threading.Thread(target=run), label, spent)
            background[0].start()
            continue
        started = time.perf_counter()
        steps[name](state)
        timed.append((label, (time.perf_counter() - started) * 1e3))
    return timed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", nargs="*", default=list(PLANS), choices=list(PLANS))
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per plan")
    parser.add_argument("--out", type=Path, help="folder for process_start.json")
    parser.add_argument("--child", choices=list(PLANS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(PLANS[args.child])))
        return 0
    results = {}
    for plan in args.plans:
        runs = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, __file__, "--child", plan], capture_output=True, text=True, cwd=ROOT, check=False
            )
            if done.returncode != 0:
                print(f"plan {plan}: the process failed:\n{done.stderr[-2000:]}", file=sys.stderr)
                return 1
            steps = json.loads(done.stdout.strip().splitlines()[-1])
            runs.append({"steps": steps, "process_ms": (time.perf_counter() - started) * 1e3})
        results[plan] = runs
        print(f"\n{plan}: {PLANS[plan]}")
        print(f"{'step':32} {'median ms':>10} {'min':>8} {'max':>8}")
        for i, (label, _ms) in enumerate(runs[0]["steps"]):
            values = [run["steps"][i][1] for run in runs]
            print(f"{label:32} {statistics.median(values):10.1f} {min(values):8.1f} {max(values):8.1f}")
        whole = [run["process_ms"] for run in runs]
        print(
            f"{'whole process (from the parent)':32} {statistics.median(whole):10.1f} {min(whole):8.1f} {max(whole):8.1f}"
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "process_start.json").write_text(json.dumps({"plans": PLANS, "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
