"""``workbench profile``: Nsight Compute counters for one configuration's kernels.

    workbench profile rms_norm --variant gpu_multirow --problem rows=4096,hidden=16384 \\
        --param BLOCK_SIZE=16384 --param num_warps=16 --device cuda [--dtype bf16] [--mode forward]
        [--ncu PATH] [--timeout-s 180] [--store FILE] [--no-record]

Runs ncu on one configuration (:mod:`workbench.ncu`) and prints, per kernel, DRAM throughput
(% of peak) and bytes read and written, L2 hit rate, achieved and theoretical occupancy, SM
throughput and the top warp-stall reasons. Then, unless ``--no-record``, measures the
configuration as ``workbench bench`` does and stores its record with the counters beside its
compile facts.

Bad input, no ncu, the profiler not allowed (ERR_NVGPUCTRPERM), a child that outlives
``--timeout-s``: one line on stderr, exit 2. Exit 1 when the configuration ran and was wrong.
"""

from __future__ import annotations

from workbench.cli.args import (
    Parser,
    UsageError,
    check_budget,
    checked_dtypes,
    checked_param,
    family,
    param_axes,
    problem_axes,
)
from workbench.progress import Progress

DESCRIPTION = """Nsight Compute counters for one configuration's kernels: per kernel, DRAM throughput
(% of peak) and bytes read and written (writes still in the L2 when the kernel ends are not
counted), L2 hit rate, achieved and theoretical occupancy, SM throughput and the top warp-stall
reasons. Then, unless --no-record, the configuration is measured as workbench bench measures it
and its record is stored with the counters beside its compile facts. No ncu, the profiler not
allowed (ERR_NVGPUCTRPERM) or a child past --timeout-s: one line, exit 2; a wrong result: exit 1."""

EXAMPLES = """examples:
  workbench profile rms_norm --variant gpu_row --problem hidden=4096 --device cuda
  workbench profile rms_norm --variant gpu_multirow --problem rows=4096,hidden=16384 \\
      --param BLOCK_SIZE=16384 --param num_warps=16 --no-record"""


def build_parser() -> Parser:
    p = Parser(
        prog="workbench profile",
        description=DESCRIPTION,
        epilog=EXAMPLES,
    )
    p.add_argument("family", help="the kernel family (workbench list shows them)")
    p.add_argument(
        "--variant", default=None, help="one of our gpu / npu variants (default: the family's first GPU variant)"
    )
    p.add_argument("--param", action="append", default=[], help="tile NAME=VALUE (repeatable)")
    p.add_argument("--problem", action="append", default=[], help="problem knobs k=v,… (one value each)")
    p.add_argument("--device", default="cuda", help="cuda (Nsight Compute profiles CUDA kernels only)")
    p.add_argument("--dtype", default=None, help="one dtype (default: bf16 where the family has it)")
    p.add_argument("--mode", default="forward", help="one of the variant's modes")
    p.add_argument("--seed", type=int, default=0, help="seed of the configuration's random inputs")
    p.add_argument("--quick", action="store_true", help="the family's small problem sizes")
    p.add_argument("--ncu", default=None, help="the ncu executable (default: PATH, then the usual install places)")
    p.add_argument("--timeout-s", type=float, default=180.0, help="time limit for ncu and its child")
    p.add_argument("--rep-ms", type=float, default=100.0, help="timing budget of the record")
    p.add_argument("--store", default=None, help="SQLite results file (default results/workbench.sqlite)")
    p.add_argument("--no-record", action="store_true", help="print the counters only; measure and store nothing")
    return p


def configuration(spec, args) -> dict:
    """The one configuration the options name, every value checked; UsageError on bad input."""
    if args.variant is None:
        ours = [v for v in spec.variants if v.backend == "gpu"]
        if not ours:
            raise UsageError(f"{spec.name} has no GPU variant; name one with --variant")
        var = ours[0]
    else:
        var = spec.variant(args.variant)
    if var.backend in ("torch", "peer"):
        raise UsageError(f"--variant {var.name} runs no kernel of ours; profile one of the gpu / npu variants")
    params = {
        name: checked_param(var, name, _one(values, "--param", name)) for name, values in param_axes(args.param).items()
    }
    problem = {name: _one(values, "--problem", name) for name, values in problem_axes(spec, args.problem).items()}
    dtype = _one(checked_dtypes(spec, args.dtype), "--dtype", "")
    if args.mode not in (var.modes or spec.modes):
        raise UsageError(
            f"--mode {args.mode} is not a mode of {var.name}; use one of {', '.join(var.modes or spec.modes)}"
        )
    return {
        "family": spec.name,
        "variant": var.name,
        "device": args.device,
        "dtype": dtype,
        "mode": args.mode,
        "problem": problem,
        "params": params,
        "seed": args.seed,
        "quick": args.quick,
    }


def _one(values: list, option: str, name: str):
    """The single value a profile takes for an option; UsageError for several."""
    if len(values) != 1:
        label = f"{option} {name}" if name else option
        raise UsageError(f"{label}: give one value (a profile is one configuration)")
    return values[0]


def main(argv) -> int:
    from workbench import ncu

    args = build_parser().parse_args(argv)
    spec = family(args.family)
    if args.device.split(":")[0] != "cuda":
        raise UsageError(f"--device {args.device}: Nsight Compute profiles CUDA kernels only; use --device cuda")
    if not args.timeout_s > 0:
        raise UsageError(f"--timeout-s {args.timeout_s:g}: give a positive number of seconds")
    check_budget(args.rep_ms)
    config = configuration(spec, args)
    exe = ncu.require_ncu(args.ncu)
    tiles = ", ".join(f"{k}={v}" for k, v in {**config["problem"], **config["params"]}.items())
    print(f"profiling {spec.name}/{config['variant']} {tiles} with {exe} (up to {args.timeout_s:g} s)…", flush=True)
    with Progress(None, "profile") as shown:
        shown.doing(f"Nsight Compute on {config['variant']}")
        kernels_seen = ncu.profile(config, ncu=exe, timeout_s=args.timeout_s)
    for kernel in kernels_seen:
        print("  " + ncu.summary_line(kernel))
    if args.no_record:
        return 0
    return _record(spec, config, ncu.as_record_counters(kernels_seen, exe), args)


def _record(spec, config: dict, counters: dict, args) -> int:
    """Measure the configuration, attach the counters, store the record."""
    from workbench.compile_facts import brief
    from workbench.measure import measure
    from workbench.store import Store

    rec = measure(
        spec,
        config["variant"],
        device=config["device"],
        dtype=config["dtype"],
        mode=config["mode"],
        problem=config["problem"],
        params=config["params"],
        seed=config["seed"],
        quick=config["quick"],
        rep_ms=args.rep_ms,
        on_error="record",
    )
    rec.counters = counters
    store = Store(args.store) if args.store else Store()
    store.append(rec)
    store.close()
    status = "PASS" if rec.passed else ("ERROR " + (rec.error or "") if rec.error else "FAIL")
    print(f"record: kernel {rec.kernel_ms} ms, regs/spills/occ {brief(rec.compile_facts)}, {status} -> {store.path}")
    return 1 if rec.error is None and rec.passed is False else 0
