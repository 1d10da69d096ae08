"""Does measuring on one GPU slow down while another GPU of the host measures too? No Ray here.

    python benchmarks/concurrent_measure.py                        # every GPU, 15 s per phase
    python benchmarks/concurrent_measure.py --gpus 2 --seconds 20 --out /tmp/res/concurrent

One process per GPU (``CUDA_VISIBLE_DEVICES``), each on its slot's CPUs as a sweep's measuring
actor is (:class:`workbench.sweep.cpus.Placement`; ``--shared-cpus``: not pinned), measures the
sweep-scaling benchmark's configurations (every ``--every``-th of ``sweep_scaling.plan``) round
and round, each one a :func:`workbench.sweep.tasks.run_task` as in a sweep. After one pass to
compile them, the phases: each process alone in turn, then all of them at once, then each alone
again (drift). Per process and phase it reports configurations per second and, per
configuration, the median ratio to its own "alone" time of the task's wall time, its host time
and its call time (kernel time for reference).

Why: in a warm 2xH200 scaling run (bd2a53c) the same configurations took 5.8% longer summed over
the two actors than on one GPU, with host times 14% higher. This separates what two measuring
processes do to each other on the host from what Ray, the compile-ahead and the order of the
queue add.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def child(slots: int, every: int, pinned: bool) -> int:
    """One measuring process (its GPU: the one ``CUDA_VISIBLE_DEVICES`` names): pin it as a
    sweep's measuring actor is pinned, compile every configuration once, print ``ready``; then
    for each ``run SECONDS`` line on stdin, measure round and round for that long and print one
    JSON line of ``[key, wall s, host ms, call ms, kernel ms]`` rows."""
    from workbench.sweep.cpus import Placement, physical_cores, pin_to_slot

    cpus = pin_to_slot(Placement.plan(slots, physical_cores())) if pinned else None
    from sweep_scaling import plan, tasks_for

    from workbench.sweep.tasks import run_task

    tasks = tasks_for(plan(False)[::every], "cuda", rep_ms=100.0, quick=False)
    for task in tasks:
        run_task(task)
    print(json.dumps({"ready": True, "cpus": sorted(cpus) if cpus else None}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "run":
            break
        deadline = time.perf_counter() + float(words[1])
        rows, i = [], 0
        while time.perf_counter() < deadline:
            task = tasks[i % len(tasks)]
            started = time.perf_counter()
            rec = run_task(task)
            wall = time.perf_counter() - started
            if not rec.get("error"):
                rows.append([task.key, wall, rec.get("host_ms"), rec.get("call_ms"), rec.get("kernel_ms")])
            i += 1
        print(json.dumps({"rows": rows}), flush=True)
    return 0


def _median_ratio(rows: list, alone: dict, column: int) -> float | None:
    ratios = [r[column] / alone[r[0]][column] for r in rows if r[0] in alone and r[column] and alone[r[0]][column]]
    return statistics.median(ratios) if ratios else None


def _by_key(rows: list) -> dict:
    """Per configuration key, the median of each column over its rows."""
    grouped: dict = {}
    for r in rows:
        grouped.setdefault(r[0], []).append(r)
    return {
        key: [key] + [statistics.median(x[c] for x in rs if x[c] is not None) for c in range(1, 5)]
        for key, rs in grouped.items()
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, help="processes, one per GPU (default: every GPU)")
    parser.add_argument("--seconds", type=float, default=15.0, help="per phase")
    parser.add_argument("--every", type=int, default=8, help="every k-th configuration of the sweep")
    parser.add_argument("--shared-cpus", action="store_true", help="leave the processes unpinned")
    parser.add_argument("--out", type=Path, help="folder for concurrent_measure.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.gpus, args.every, not args.shared_cpus)
    if args.gpus is None:
        import torch

        args.gpus = torch.cuda.device_count()
    if args.gpus < 2:
        print("concurrent_measure: needs at least 2 GPUs", file=sys.stderr)
        return 2
    procs = []
    for slot in range(args.gpus):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(slot))
        cmd = [sys.executable, __file__, "--child", "--gpus", str(args.gpus), "--every", str(args.every)]
        cmd += ["--shared-cpus"] if args.shared_cpus else []
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env))
    ready = [json.loads(p.stdout.readline()) for p in procs]

    def phase(which: list[int]) -> dict:
        for slot in which:
            procs[slot].stdin.write(f"run {args.seconds}\n")
            procs[slot].stdin.flush()
        return {slot: json.loads(procs[slot].stdout.readline())["rows"] for slot in which}

    phases = {"alone": {}, "together": {}, "alone again": {}}
    for slot in range(args.gpus):
        phases["alone"].update(phase([slot]))
    phases["together"] = phase(list(range(args.gpus)))
    for slot in range(args.gpus):
        phases["alone again"].update(phase([slot]))
    for p in procs:
        p.stdin.close()
        p.wait(timeout=60)

    print(f"{args.gpus} processes, {'unpinned' if args.shared_cpus else 'pinned'}; CPUs {[r['cpus'] for r in ready]}")
    print(
        f"{'GPU':>3} {'phase':12} {'configs/s':>9} {'wall':>7} {'host':>7} {'call':>7} {'kernel':>7}  (median ratio to alone)"
    )
    for slot in range(args.gpus):
        alone = _by_key(phases["alone"][slot])
        for name, data in phases.items():
            rows = data[slot]
            rate = len(rows) / args.seconds
            ratios = [_median_ratio(rows, alone, c) for c in (1, 2, 3, 4)]
            text = " ".join(f"{r:7.3f}" if r is not None else f"{'-':>7}" for r in ratios)
            print(f"{slot:>3} {name:12} {rate:9.2f} {text}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "concurrent_measure.json").write_text(json.dumps({"ready": ready, "phases": phases}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
