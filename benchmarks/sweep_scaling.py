"""Sweep scaling (issue 17): the same sweep on 1 GPU and on every GPU of a host, through Ray.

    python benchmarks/sweep_scaling.py --gpus 1 --out RES/sweep     # first device call
    python benchmarks/sweep_scaling.py --gpus 4 --out RES/sweep     # second device call
    python benchmarks/sweep_scaling.py --compare RES/sweep           # the table (any machine)
    python benchmarks/sweep_scaling.py --gpus 2 --device cpu --quick --out /tmp/sw   # CPU smoke run
    python benchmarks/sweep_scaling.py --gpus 2 --warm --out RES/sweep-warm  # workers started first
    python benchmarks/sweep_scaling.py --gpus 4 --sweep tune --out RES/sweep-tune  # every family's tune space
    python benchmarks/sweep_scaling.py --gpus 4 --nodes 2 --out RES/sweep  # two Ray nodes of 2 GPUs, caches apart

The sweep: RMSNorm forward (gpu_multirow: BLOCK_SIZE_M x num_warps x hidden) plus the
block-sparse sum layer (gpu_large: TILE_M x TILE_K x BLOCK_B x batch), 208 configurations, one
Ray actor per GPU on an embedded Ray limited to ``--gpus`` GPUs. Each run goes to OUT/gpus<N>/
(records.sqlite, records.json, run.json); a run cut short resumes into the same folder and its
wall times add up. Each run has its own, empty, Triton cache (a new temporary folder), so the
second run compiles everything again, like the first.

The times in run.json: ``sweep_s``, from the sweep's start to its last record stored (what the
speed-up compares); apart from it ``ray_start_s``, ``workers_s`` (with ``--warm``: the
measuring actors and compile workers started before the sweep, as a session that sweeps several
times starts them once; without it they start inside the sweep) and ``close_s`` (Ray's stop),
all summed in ``session_s`` (run.json files written before 555fc44 count Ray's stop in
``sweep_s``).
``where``: each actor's start step by step and each actor's busy and waiting time, from the
executor's timeline (the raw events in ``timeline``). ``cpus``: the host's CPUs and where the
measuring actors and compile workers ran (apart, unless ``--shared-cpus``:
:mod:`workbench.sweep.cpus`).

Compile-ahead (on by default; ``--compile-workers 0`` turns it off): CPU-side Ray actors compile
queued configurations' kernels for the GPU into the run's Triton cache while the GPUs measure
(:mod:`workbench.sweep.compile_ahead`), so a measuring actor's first call loads them. The work is
still done in every run, from an empty cache; run.json's ``compile_ahead`` says how much of it,
for which target (``target``: read by the driver from its GPUs, or ``WORKBENCH_COMPILE_TARGET``,
or waited for from the first measuring actor), and each record's ``compile_facts.compiled_ahead``
whether its first call found its kernels.

``--nodes N``: the GPUs split over N Ray nodes started on this machine (``ray.cluster_utils``),
each with GPUs of its own (``CUDA_VISIBLE_DEVICES``), CPUs of its own and a Triton cache folder of
its own, and the executor joining that cluster by its address: a cluster whose nodes share no
disk, each node compiling ahead for its own measuring actors. Its run goes to
OUT/gpus<N>-nodes<M>/; the compile-ahead summary adds how many records were compiled on their
measuring node and found in its cache before their first call.

``--compare`` prints, per run: configurations, failed, sweep time, configurations/s, the
speedup over the 1-GPU run, and the session's time and speed-up; whether both runs recorded the
same configurations; and per shape whether the best configuration agrees (the same one, or the
two bests' kernel-time intervals overlap in either run: "within noise"). Writes OUT/scaling.json
and OUT/report.html.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def plan(quick: bool):
    """[(family, variant, problem, params)] of the benchmark sweep."""
    items = []
    if quick:  # CPU interpreter smoke run: a handful of small configurations
        for hidden in (64, 128):
            for m in (1, 2):
                for w in (2, 4):
                    items.append(
                        ("rms_norm", "gpu_multirow", {"rows": 8, "hidden": hidden}, {"BLOCK_SIZE_M": m, "num_warps": w})
                    )
        for tk in (4, 8):
            items.append(("block_sparse", "gpu_large", {"nodes": 48, "batch": 3}, {"TILE_K": tk}))
        return items
    for hidden in (1024, 2048, 4096, 8192, 16384):
        for m in (1, 2, 4, 8, 16):
            for w in (2, 4, 8, 16):
                items.append(
                    ("rms_norm", "gpu_multirow", {"rows": 4096, "hidden": hidden}, {"BLOCK_SIZE_M": m, "num_warps": w})
                )
    for batch in (8, 32, 128):
        for tm in (16, 32, 64):
            for tk in (16, 32, 64, 128):
                for bb in (8, 16, 32):
                    items.append(
                        (
                            "block_sparse",
                            "gpu_large",
                            {"layer": "sum", "nodes": 1024, "batch": batch},
                            {"TILE_M": tm, "TILE_K": tk, "BLOCK_B": bb},
                        )
                    )
    return items


def tune_plan(device: str, quick: bool):
    """[(family, variant, problem, params, mode, dtype)]: every built-in family's tune space at
    its sizes (what ``workbench tune`` measures over all families: the suites' sizes), the
    configurations the variant's check refuses on ``device`` left out, as the tune leaves them."""
    import kernels
    from workbench.device import get_device
    from workbench.tune.space import Space

    dev = get_device(device)
    items = []
    for name in kernels.families():
        spec = kernels.get(name)
        if spec.tuning is None:
            continue
        space = Space.of(spec, quick)
        for size in space.sizes:
            for params in space.candidates(size, dev):
                items.append((name, space.tuning.variant, space.problem(size), params, space.tuning.mode,
                              space.tuning.dtype))  # fmt: skip
    return items


def tasks_for(items, device: str, rep_ms: float, quick: bool):
    import kernels
    from workbench.sweep.tasks import make_task

    out = []
    for family, variant, problem, params, *mode_dtype in items:
        spec = kernels.get(family)
        mode, dtype = mode_dtype or ("forward", "bf16" if "bf16" in spec.dtypes else spec.dtypes[0])
        out.append(
            make_task(
                spec,
                variant,
                device=device,
                dtype=dtype,
                mode=mode,
                problem=problem,
                params=params,
                quick=quick,
                rep_ms=rep_ms,
                warmup_ms=min(25.0, rep_ms),
            )
        )
    return out


def run(args) -> int:
    from workbench.progress import Progress
    from workbench.store import Store, write_json
    from workbench.sweep.engine import STORE_NAME, opened, run_sweep
    from workbench.sweep.ray_executor import RayExecutor

    out = Path(args.out) / (f"gpus{args.gpus}" + (f"-nodes{args.nodes}" if args.nodes > 1 else ""))
    out.mkdir(parents=True, exist_ok=True)
    # This run's own (empty) Triton cache root, outside OUT so the results stay small.
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"wb-sweep-triton-gpus{args.gpus}-")
    cluster = start_nodes(args, out / "logs") if args.nodes > 1 else None
    items = tune_plan(args.device, args.quick) if args.sweep == "tune" else plan(args.quick)
    if args.limit:  # every k-th configuration: a smaller sweep over the same ranges
        step = max(1, len(items) // args.limit)
        items = items[::step][: args.limit]
    tasks = tasks_for(items, args.device, args.rep_ms, args.quick)
    store = Store(out / STORE_NAME)
    t0 = time.perf_counter()
    if cluster is not None:
        slots = dict(address=cluster.address, gpus_per_task=1)
    elif args.device == "cpu":
        slots = dict(num_cpus=args.gpus, num_gpus=0)
    else:
        slots = dict(num_gpus=args.gpus, gpus_per_task=1)
        if args.ray_cpus is not None:
            slots["num_cpus"] = args.ray_cpus
    ex = RayExecutor(
        **slots,
        timeout_s=args.timeout_s,
        compile_workers=args.compile_workers,
        place_cpus=not args.shared_cpus,
        cluster_cache=not args.no_cluster_cache,
        log_dir=out / "logs",
        preload=not args.no_preload,
    )
    with opened(ex):  # Ray's start is timed apart from the sweep
        ray_started = time.perf_counter()
        ray_cpus = ex.ray.cluster_resources().get("CPU")  # Ray starts a worker process per CPU
        warm_up = {}
        if args.warm:  # the workers' start, timed apart too
            ex.warm_up(args.device)
            warm_up = ex.timeline
        started = time.perf_counter()
        with Progress(len(tasks), "sweep") as shown:
            result = run_sweep(tasks, ex, store, progress=shown.sweep(every_s=30))
        swept = time.perf_counter()
        timeline = ex.timeline
    if cluster is not None:
        cluster.shutdown()
    done = time.perf_counter()
    split = time_split(result, ex, ray_started - t0, swept - started)
    ahead = compile_ahead_summary(result, ex)
    where = timeline_summary(warm_up, timeline)
    runs_path = out / "run.json"
    runs = json.loads(runs_path.read_text())["runs"] if runs_path.exists() else []
    runs.append(
        {
            "gpus": args.gpus,
            "nodes": args.nodes,
            "device": args.device,
            "slots": ex.slots,
            "configurations": len(tasks),
            "measured": len(result.records),
            "skipped": len(result.skipped),
            "failed": len(result.failed),
            "cannot_run": len(result.refused),
            "warm": bool(args.warm),
            "preload": not args.no_preload,
            "sweep_s": swept - started,
            "to_last_record_s": swept - t0,
            "ray_start_s": ray_started - t0,
            "workers_s": started - ray_started,
            "close_s": done - swept,
            "session_s": done - t0,
            "split_s": split,
            "compile_ahead": ahead,
            "cpus": cpu_facts(ex),
            "ray_cpus": ray_cpus,
            "worker_processes": len(list((out / "logs").glob("worker-*.log"))),  # each writes its log
            "where": where,
            "timeline": {"warm_up": warm_up, "run": timeline},
        }
    )
    runs_path.write_text(json.dumps({"runs": runs}, indent=1))
    write_json(store.records(), out / "records.json")
    print(
        f"{args.gpus} {args.device} slot(s): {len(result.records)} measured ({len(result.refused)} cannot run, "
        f"{len(result.failed)} failed), {len(result.skipped)} already recorded; sweep {swept - started:.1f} s; apart "
        f"from it: Ray's start {ray_started - t0:.1f} s, the workers' start {started - ray_started:.1f} s, Ray's stop "
        f"{done - swept:.1f} s (from the call to the last record {swept - t0:.1f} s, session {done - t0:.1f} s)"
    )
    print("where the time went (s): " + ", ".join(f"{k} {v:.1f}" for k, v in split.items()))
    for line in describe_where(where):
        print(line)
    if ahead:
        print(
            f"compile-ahead: {ahead['workers']} worker(s) for the {ahead['target']}'s target"
            f"{' (corrected by the first actor)' if ahead['retargeted'] else ''}, "
            f"{ahead['compiled']} compiled, {ahead['failed']} not, "
            f"{ahead['busy_s']:.1f} s of CPU beside the GPUs; first calls from the cache: "
            f"{ahead['first_call_cached']}/{len(result.records)}; compiled on the measuring node "
            f"{ahead['compiled_on_its_node']}, found in its cache before the first call {ahead['found_on_node']}"
        )
        kernels = ahead.get("kernels") or {}
        if kernels:
            print(
                f"kernels compiled in the cluster: {kernels['distinct']} distinct, {kernels['compiles']} compiles "
                f"(counted from the records; {kernels['more_than_once']} compiled more than once); the cluster "
                f"cache's own count: {kernels.get('store')}"
            )
    return 0


def cpu_facts(executor) -> dict:
    """The host's logical CPUs and physical cores (as this process may use them), and the
    executor's placement of the measuring actors and compile workers on them (None: shared)."""
    import dataclasses

    from workbench.sweep.cpus import available_cpus, physical_cores

    placement = executor.placement
    return {
        "logical": len(available_cpus()),
        "physical_cores": len(physical_cores()),
        "placement": dataclasses.asdict(placement) if placement is not None else None,
    }


def compile_ahead_summary(result, executor) -> dict:
    """The executor's compile-ahead summary (workers, compiled, failed, busy_s: its compile
    seconds, overlapped with measuring, so no part of the wall time), plus how many records'
    first call found every kernel compiled ahead (``first_call_cached``) and that first call's
    seconds summed over them (``cached_first_call_s``). Empty without compile-ahead."""
    from workbench.compiling.note import first_call_cached, note_of
    from workbench.reports import scaling

    summary = dict(executor.compile_ahead)
    if not summary:
        return {}
    cached = [r for r in result.records if first_call_cached(r)]
    summary["first_call_cached"] = len(cached)
    summary["cached_first_call_s"] = sum((r.get("compile_ms") or 0.0) for r in cached) / 1e3
    notes = [(note_of(r), (r.get("worker") or {}).get("node")) for r in result.records]
    summary["compiled_on_its_node"] = sum(1 for note, node in notes if note.get("ok") and note.get("node") == node)
    summary["found_on_node"] = sum(1 for note, _node in notes if note.get("found_on_node"))
    shared = summary.get("cluster_cache")
    if shared:
        summary["fetched_from_cluster"] = sum(
            1 for note, _node in notes if "cluster cache" in (note.get("fetched") or {}).values()
        )
        summary["kernels"] = scaling.kernel_compiles(result.records, shared)
        summary["cluster_cache"] = {k: v for k, v in shared.items() if k != "per_kernel"}
    return summary


def start_nodes(args, log_dir: Path):
    """``args.nodes`` Ray nodes on this machine, the GPUs (or, with ``--device cpu``, the CPU
    workers) split evenly between them, each with its own CPUs' share, ``CUDA_VISIBLE_DEVICES``
    and Triton cache folder (below this run's): a cluster of hosts that share no disk. Their
    workers import the measuring stack as they start (unless ``--no-preload``) and write their
    output to ``log_dir``, as an embedded Ray's do."""
    from ray.cluster_utils import Cluster

    from workbench.children import import_path
    from workbench.sweep.ray_executor import LOG_DIR_ENV, PRELOAD_CONFIG

    if args.gpus % args.nodes:
        raise SystemExit(f"--gpus {args.gpus} does not split evenly over --nodes {args.nodes}")
    per = args.gpus // args.nodes
    cpus = max(per, (os.cpu_count() or 2) // args.nodes)
    os.environ["PYTHONPATH"] = os.pathsep.join(import_path())  # the nodes' workers import the checkout
    base = Path(os.environ["TRITON_CACHE_DIR"])
    nodes = []
    for i in range(args.nodes):
        env = {"TRITON_CACHE_DIR": str(base / f"node{i}"), LOG_DIR_ENV: str(log_dir)}
        if args.device == "cpu":
            nodes.append({"num_cpus": per, "num_gpus": 0, "env_vars": env})
        else:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in range(i * per, (i + 1) * per))
            nodes.append({"num_cpus": cpus, "num_gpus": per, "env_vars": env})
    if not args.no_preload:
        nodes[0]["_system_config"] = dict(PRELOAD_CONFIG)  # the cluster's: every node's raylet reads it
    cluster = Cluster(initialize_head=True, head_node_args=nodes[0])
    for node in nodes[1:]:
        cluster.add_node(**node)
    cluster.wait_for_nodes()
    return cluster


ACTOR_STEPS = (
    "init",
    "imported",
    "device",
    "warm_versions",
    "warm_state",
    "warm_flush",
    "warm_copy_bandwidth",
    "warm_profiler",
    "warm_first_compile",
    "warmed",
    "seen",
)


def timeline_summary(warm_up: dict, run: dict) -> dict:
    """Where a run's time went, in seconds, from the executor's timelines
    (:class:`~workbench.sweep.timeline.Timeline`) of its warm-up (empty without ``--warm``)
    and its sweep:

    - ``actors``: per measuring actor, each step of its start after the one before (``asked`` by
      the driver -> actor ``init`` -> ``imported`` -> ``device`` started -> the warm-up's steps
      ``warm_*`` -> ``warmed`` -> ``seen`` ready by the driver); ``process_at`` (its process's
      start: Ray may have started it before it was asked for), ``asked_at``, ``ready_at`` and
      ``first_task_at``, from the sweep's start (negative: before it, in the warm-up); ``cpus``;
    - ``tasks``: per actor, configurations run, ``busy`` (started -> record arrived, summed),
      ``median_task``, ``waiting`` (free -> given its next configuration: the driver's turn-around
      and any wait for a compile-ahead, summed), ``dispatch`` (given -> started, summed) and
      ``last_at`` (its last record, from the sweep's start)."""
    begun = run.get("begun")
    if begun is None:
        return {}
    actors = []
    for entry in (warm_up.get("actors") or []) + (run.get("actors") or []):
        steps, before = {}, entry.get("asked")
        for name in ACTOR_STEPS:
            at = entry.get(name)
            if at is None:
                continue
            if before is not None:
                steps[name] = round(at - before, 3)
            before = at
        mine = [t["started"] for t in run.get("tasks") or [] if t["actor"] == entry["actor"] and t.get("started")]
        actors.append(
            {
                "actor": entry["actor"],
                "steps": steps,
                **{
                    f"{name}_at": round(entry[name] - begun, 3) if entry.get(name) else None
                    for name in ("process", "preload_begun", "preloaded", "asked")
                },
                "cpus": entry.get("cpus"),
                "ready_at": round(entry["seen"] - begun, 3) if entry.get("seen") else None,
                "first_task_at": round(min(mine) - begun, 3) if mine else None,
            }
        )
    tasks, durations = {}, {}
    for t in run.get("tasks") or []:
        row = tasks.setdefault(t["actor"], {"actor": t["actor"], "n": 0, "busy": 0.0, "waiting": 0.0, "dispatch": 0.0})
        mine = durations.setdefault(t["actor"], [])
        row["n"] += 1
        if t.get("started") is not None and t.get("arrived") is not None:
            mine.append(t["arrived"] - t["started"])
            row["busy"] += mine[-1]
        if t.get("idle") is not None:
            row["waiting"] += t["sent"] - t["idle"]
        if t.get("started") is not None:
            row["dispatch"] += t["started"] - t["sent"]
        if t.get("arrived") is not None:
            row["last_at"] = max(row.get("last_at", 0.0), t["arrived"] - begun)
    for actor, row in tasks.items():
        times = sorted(durations[actor])
        row["median_task"] = times[len(times) // 2] if times else None
        for key in ("busy", "waiting", "dispatch", "median_task", "last_at"):
            if row.get(key) is not None:
                row[key] = round(row[key], 3)
    return {"actors": actors, "tasks": sorted(tasks.values(), key=lambda r: r["actor"])}


def describe_where(where: dict) -> list[str]:
    """:func:`timeline_summary` as lines of text."""
    lines = []
    for a in where.get("actors") or []:
        steps = ", ".join(f"{k} +{v:.2f}" for k, v in a["steps"].items())
        first = a["first_task_at"]
        process = a.get("process_at")
        cpus = a.get("cpus")
        preloaded = a.get("preloaded_at")
        preload = "" if preloaded is None else f"imports preloaded at {preloaded:.2f} s, "
        lines.append(
            f"actor {a['actor']} start: process at {'-' if process is None else f'{process:.2f} s'}, {preload}"
            f"asked at {a['asked_at']:.2f} s, {steps}; ready at {a['ready_at']:.2f} s, "
            f"first configuration at {'-' if first is None else f'{first:.2f} s'}"
            f"{f'; on CPUs {cpus}' if cpus else ''}"
        )
    for t in where.get("tasks") or []:
        median = "-" if t["median_task"] is None else f"{t['median_task']:.3f}"
        lines.append(
            f"actor {t['actor']}: {t['n']} configurations, busy {t['busy']:.1f} s (median {median} s), "
            f"waiting for the next {t['waiting']:.2f} s, dispatch {t['dispatch']:.2f} s, "
            f"last record at {t.get('last_at', 0.0):.1f} s"
        )
    return lines


def time_split(result, executor, startup_s: float, sweep_s: float) -> dict:
    """The run's wall time in parts that do not parallelise alike, in seconds:

    - ``startup``: Ray's start (before the first task is sent);
    - ``first_result``: from the start of the sweep to the first record (a worker process
      importing torch / triton / the workbench, then its first compile and measurement);
    - ``compile``: the records' first-call times (Triton compiles, or cache loads where the
      kernels were compiled ahead) summed, over the slots;
    - ``measure``: the rest of the busy time over the slots (inputs, checks, timing);
    - ``write``: the driver appending records to the store (its one writer);
    - ``tail``: from the last task sent to the last record, beyond one configuration's mean
      time (slots idle while the last configurations finish).
    """
    slots = max(executor.slots, 1)
    n = len(result.records)
    first = result.arrived_s[0] if result.arrived_s else 0.0
    compile_s = sum((r.get("compile_ms") or 0.0) for r in result.records) / 1e3 / slots
    mean_task = sweep_s * slots / n if n else 0.0
    drained = executor.drained_s if getattr(executor, "drained_s", None) is not None else sweep_s
    tail = max(0.0, sweep_s - drained - mean_task)
    measure = max(0.0, sweep_s - first - compile_s - result.write_s - tail)
    return {
        "startup": startup_s,
        "first_result": first,
        "compile": compile_s,
        "measure": measure,
        "write": result.write_s,
        "tail": tail,
    }


def compare(args) -> int:
    """The table of the runs under ``--compare`` (workbench/reports/scaling.py), scaling.json and report.html."""
    from workbench.reports import scaling

    root = Path(args.compare)
    runs = scaling.load_runs(root)
    if not runs:
        print(f"sweep_scaling: no runs under {root}", file=sys.stderr)
        return 2
    result = scaling.compare(runs)
    print("\n".join(scaling.table_lines(result, scaling.order(runs)[0])))
    (root / "scaling.json").write_text(json.dumps(result, indent=1))
    (root / "report.html").write_text(scaling.page(root))
    print(f"wrote {root / 'scaling.json'}, {root / 'report.html'}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=None, help="GPUs (CPU workers with --device cpu) of this run")
    p.add_argument("--device", default="cuda", help="cuda, or cpu (interpreter smoke run)")
    p.add_argument("--quick", action="store_true", help="a few small configurations (CPU)")
    p.add_argument("--rep-ms", type=float, default=40.0)
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--limit", type=int, default=None, help="at most this many configurations (evenly spread)")
    p.add_argument(
        "--sweep",
        choices=("scaling", "tune"),
        default="scaling",
        help="scaling: the 208-configuration sweep above; tune: every family's tune space at its sizes (a tune-sized run)",
    )
    p.add_argument(
        "--compile-workers",
        type=int,
        default=None,
        help="compile-ahead actors (default on cuda: 4 per GPU and 4 more, at most half the CPUs the GPUs leave; 0: off)",
    )
    p.add_argument(
        "--warm",
        action="store_true",
        help="start the measuring actors and compile workers before the sweep (timed apart: workers_s)",
    )
    p.add_argument(
        "--shared-cpus",
        action="store_true",
        help="let the measuring actors and compile workers share every CPU (default: apart)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="split the GPUs over this many Ray nodes on this machine, each with a Triton cache of its own",
    )
    p.add_argument(
        "--no-cluster-cache",
        action="store_true",
        help="no Triton cache shared by the nodes (each node compiles what its actors need, as before issue 60)",
    )
    p.add_argument(
        "--ray-cpus",
        type=int,
        default=None,
        help="the CPUs the embedded Ray declares, one worker process started per CPU (default: the "
        "processes the sweep places; give the host's CPU count to start one per CPU, Ray's own default)",
    )
    p.add_argument(
        "--no-preload",
        action="store_true",
        help="Ray's worker processes do not import the measuring stack as they start (as before issue 60)",
    )
    p.add_argument("--out", default="results/sweep_scaling")
    p.add_argument("--compare", default=None, help="print the table of the runs under this folder")
    args = p.parse_args(argv)
    if args.compare:
        return compare(args)
    if not args.gpus:
        p.error("--gpus N (or --compare DIR)")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
