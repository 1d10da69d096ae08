"""``workbench sweep``: a tile / shape sweep of one family, local or on Ray, resumable
(:data:`DESCRIPTION` and :data:`EXAMPLES` are its help)."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from workbench.cli.args import (
    Parser,
    UsageError,
    add_executor_options,
    check_budget,
    checked_dtypes,
    checked_modes,
    checked_param,
    executor_of,
    family,
    param_axes,
    problem_axes,
    split_list,
)

DESCRIPTION = """Sweep tile parameters and problem sizes of one family: every combination is one
configuration, checked against the reference and timed. Records go to OUT/records.sqlite as they
arrive (a second run into the same --out measures only what is missing), then records.csv,
records.json and report.html. A configuration that cannot run, crashes or hangs is a record with
its error; exit 1 only for a wrong result."""

EXAMPLES = """examples:
  workbench sweep rms_norm --param BLOCK_SIZE=64,128 --quick --device cpu          # the interpreter, small sizes
  workbench sweep rms_norm --param BLOCK_SIZE=1024,2048,4096 --param num_warps=4,8 \\
      --problem hidden=1024,4096,rows=4096                                          # 2 x 3 x 2 configurations
  workbench sweep rms_norm --param BLOCK_SIZE=1024,2048 --executor ray              # one actor per GPU
  workbench sweep block_sparse --param TILE_M=8,16,32 --problem batch=1,16 --executor ray --address HOST:6379"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="workbench sweep", description=DESCRIPTION, epilog=EXAMPLES)
    p.add_argument("family", help="the kernel family (workbench list shows them)")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        help="tile values NAME=V1,V2,…, e.g. BLOCK_SIZE=512,1024 (repeatable; each tile is an axis)",
    )
    p.add_argument(
        "--problem",
        action="append",
        default=[],
        help="problem knobs k=v,…; a knob with several values is an axis, e.g. hidden=1024,4096,rows=256",
    )
    p.add_argument("--variants", default="", help="comma list (default: our variants having every --param tile)")
    p.add_argument("--device", default="auto", help="auto, cuda, npu or cpu (the Triton interpreter)")
    p.add_argument("--dtype", default=None, help="comma list (default: bf16 where the family has it)")
    p.add_argument("--mode", default="forward", help="comma list of the family's modes, e.g. forward,full")
    add_executor_options(p, isolate=True)
    p.add_argument(
        "--out", default=None, help="folder for records.sqlite and the report (default: results/sweeps/FAMILY)"
    )
    p.add_argument("--no-resume", action="store_true", help="measure every configuration again")
    p.add_argument("--quick", action="store_true", help="the family's small sizes (for the CPU interpreter)")
    p.add_argument(
        "--rep-ms",
        type=float,
        default=None,
        help="timing budget per configuration, ms (default: 20 on cpu, 100 on a device)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every configuration's random inputs")
    p.add_argument(
        "--l2",
        default="cold",
        choices=("cold", "warm"),
        help="kernel timing with the L2 flushed before each call (cold) or left as the last call left it (warm)",
    )
    return p


def build_plan(spec, args, device_kind: str):
    """(variants, [(variant, problem, params)]) from the parsed options; UsageError on bad input."""
    problems = problem_axes(spec, args.problem)
    params = param_axes(args.param)
    if args.variants:
        variants = [spec.variant(n) for n in split_list(args.variants)]
    else:
        having = [
            v
            for v in spec.variants
            if v.unavailable_reason(device_kind) is None and all(any(p.name == n for p in v.params) for n in params)
        ]
        variants = [v for v in having if not v.is_peer] or having
        if not variants:
            tiles = sorted({p.name for v in spec.variants for p in v.params})
            raise UsageError(
                f"--param {', '.join(params)}: no variant of {spec.name} that runs on {device_kind} has such a "
                f"tile; tiles: {', '.join(tiles) or 'none'}"
            )
    for v in variants:
        reason = v.unavailable_reason(device_kind)
        if reason:
            raise UsageError(reason)
        for name, values in params.items():
            for value in values:
                checked_param(v, name, value)
    dtypes = checked_dtypes(spec, args.dtype)
    modes = checked_modes(spec, args.mode)
    pnames, knames = list(params), list(problems)
    items = []
    for dtype, mode in itertools.product(dtypes, modes):
        for kvals in itertools.product(*[problems[n] for n in knames]):
            problem = dict(zip(knames, kvals))
            for v in variants:
                for pvals in itertools.product(*[params[n] for n in pnames]):
                    items.append((dtype, mode, v, problem, dict(zip(pnames, pvals))))
    return variants, items


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    spec = family(args.family)
    check_budget(args.rep_ms)
    # the tool's modules (torch, the store, the engine) load once the arguments are known good
    from workbench.progress import Progress
    from workbench.reports.sweep import write_outputs
    from workbench.store import Store
    from workbench.sweep.engine import STORE_NAME, run_sweep
    from workbench.sweep.tasks import make_task

    executor = executor_of(args)
    device_kind = _device_kind(args.device, args.executor, args.address)
    variants, items = build_plan(spec, args, device_kind)
    rep_ms = args.rep_ms if args.rep_ms is not None else (20.0 if device_kind == "cpu" else 100.0)
    tasks, seen = [], set()
    for dtype, mode, var, problem, params in items:
        t = make_task(
            spec,
            var,
            device=device_kind,
            dtype=dtype,
            mode=mode,
            problem=problem,
            params=params,
            seed=args.seed,
            quick=args.quick,
            rep_ms=rep_ms,
            warmup_ms=min(25.0, rep_ms),
            l2=args.l2,
        )
        if t.key not in seen:
            seen.add(t.key)
            tasks.append(t)
    out = Path(args.out or f"results/sweeps/{spec.name}")
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out / STORE_NAME)
    print(
        f"sweep {spec.name}: {len(tasks)} configurations ({', '.join(v.name for v in variants)}) on {device_kind}, "
        f"executor {executor.describe()} -> {out}",
        flush=True,
    )
    try:
        with Progress(len(tasks), f"sweep {spec.name}") as shown:
            result = run_sweep(tasks, executor, store, resume=not args.no_resume, progress=shown.sweep())
    except KeyboardInterrupt:
        print(f"interrupted: {len(store)} records in {out / STORE_NAME}; run again to resume", flush=True)
        raise
    recs = result.records
    wrong = [r for r in recs if not r.get("error") and r.get("passed") is False]
    errors = [r for r in result.failed if r.get("error")]
    print(
        f"{len(recs)} measured, {len(result.skipped)} already recorded, {len(result.refused)} cannot run (refused "
        f"before launch), {len(errors)} failed / crashed / timed out, {len(wrong)} wrong results; "
        f"{result.progress.elapsed_s:.1f} s"
    )
    for r in result.refused[:20]:
        print(f"  cannot run: {r['variant']} {r.get('params')}: {r['error'][:200]}")
    if wrong:
        from workbench.record import failed_checks

        for r in wrong[:20]:
            print(f"  WRONG {r['variant']} {r.get('dtype')} {r.get('params')} {r.get('problem')}: {failed_checks(r)}")
    paths = write_outputs(out, store, title=f"Sweep {spec.name}")
    store.close()
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 1 if wrong else 0


def _device_kind(device: str, executor: str, address: str | None) -> str:
    if device not in ("auto", "cuda", "cpu", "npu"):
        raise UsageError(f"--device {device}: use auto, cuda, npu or cpu")
    if device != "auto":
        return device
    if executor == "ray" and address:
        return "cuda"  # a cluster is joined for its GPUs; --device cpu for the interpreter
    from workbench.device import get_device

    return get_device("auto").kind
