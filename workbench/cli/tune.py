"""``workbench tune``: search a family's tiles per size on a device and write the tuned table.

    workbench tune FAMILY [--device cuda] [--executor local|ray] [--address ADDR] [--sizes 1,16,64]
        [--part forward|backward] [--dtype bf16] [--strategy grid|random|bayes] [--seed N] [--trials N]
        [--budget-s N] [--rep-ms N] [--out DIR] [--write]

It measures the family's tune grid (``KernelSpec.tuning``: the variant, its tile values and the
sizes; ``--part backward``: ``KernelSpec.backward_tuning``, the backward kernel's own tiles timed
forward+backward, in tables of their own under ``tuned/backward/``) with the sweep engine, picks one
configuration per size (workbench/tune/pick.py) and writes the candidate table to
``OUT/tuned/<device>.json``, the records to ``OUT/records.sqlite`` / ``.csv`` / ``.json``, and the
tune report to ``OUT/report.html`` and ``OUT/summary.md``. Without ``--write`` it prints the diff
against the installed table (a built-in family's ``kernels/<family>/tuned/<device>.json``; a user's
family's ``tuned/`` beside its module, or ``$KERNELS_TUNED_DIR/<family>/``); with it, it installs the
candidate there. ``--dtype``: the dtype the tune times in, one of the family's tune dtypes; the
tiles it chooses are then checked in every dtype the family declares. The candidate holds the
sizes this run measured and keeps the installed table's other sizes as they were
(:func:`workbench.tune.table.merge`).
``--device cpu`` tunes the interpreter at the family's quick sizes (a check of the path; its
times are interpreter wall time). Bad input, or an installed table that cannot be read, is one
line on stderr and exit 2 (the table is left as it was); a configuration with a wrong result, or
chosen tiles wrong in any dtype the family declares, is exit 1, each named, and nothing is installed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.cli.args import (
    Parser,
    UsageError,
    add_executor_options,
    check_output_path,
    executor_of,
    family,
    positive,
    split_list,
)

DESCRIPTION = """Search a family's tiles per size on a device and write the tuned table. It measures the
family's tune grid (its variant, tile values and sizes) with the sweep engine, picks one
configuration per size and writes the candidate table to OUT/tuned/<device>.json, the records to
OUT/records.sqlite, .csv and .json, and the tune report to OUT/report.html and summary.md.
Without --write it prints the difference from the installed table (kernels/FAMILY/tuned/ for a
built-in family; for a user's family, tuned/ beside the module that declares it, or
$KERNELS_TUNED_DIR/FAMILY/); with it, it installs the candidate there, keeping the installed
table's other sizes. --part backward tunes the backward kernel's own tiles of a family that has
them (the norms), timed forward+backward, into tables of their own (.../tuned/backward/). --dtype
times in another of the family's tune dtypes. The tiles chosen per size are then checked in every
dtype the family declares. A wrong result in any of them: exit 1, each named, and nothing is
installed."""

EXAMPLES = """examples:
  workbench tune rms_norm --device cpu                                  # the path at the interpreter's sizes
  workbench tune rms_norm --device cuda                                 # the full grid, diff against the table
  workbench tune block_sparse --sizes 1,16,64 --strategy bayes --trials 40 --executor ray
  workbench tune rms_norm --write                                       # install kernels/rms_norm/tuned/<gpu>.json
  workbench tune MY_FAMILY --dtype fp16 --write                         # a user's family: tuned/ beside its module
  workbench tune rms_norm --part backward --write                       # ... kernels/rms_norm/tuned/backward/<gpu>.json"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="workbench tune", description=DESCRIPTION, epilog=EXAMPLES)
    p.add_argument("family", help="the kernel family (workbench list shows them)")
    p.add_argument("--device", default="cuda", help="cuda, npu, or cpu (the interpreter at quick sizes)")
    add_executor_options(p, isolate=False)
    p.add_argument("--sizes", default=None, help="comma list of the tune knob's values (default: the family's)")
    p.add_argument(
        "--part",
        default="forward",
        help="which tiles: forward (default), or backward (the norms' backward kernel, timed forward+backward)",
    )
    p.add_argument("--strategy", default="grid", help="grid (every configuration), random, or bayes (Optuna's TPE)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random and bayes strategies")
    p.add_argument(
        "--trials",
        type=int,
        default=None,
        help="random / bayes: configurations per size (default: 30%% of the grid, at least 8)",
    )
    p.add_argument(
        "--budget-s", type=float, default=None, help="stop asking for configurations after N s (default: no limit)"
    )
    p.add_argument(
        "--rep-ms",
        type=float,
        default=None,
        help="timing budget per configuration, ms (default: 5 on cpu, 100 on a device)",
    )
    p.add_argument("--out", default=None, help="folder (default: results/tune/FAMILY-DEVICE)")
    p.add_argument("--dtype", default=None, help="the dtype to time in (default: the family's first tune dtype)")
    p.add_argument(
        "--write",
        action="store_true",
        help="install the table (kernels/FAMILY/tuned/; a user's family: tuned/ beside its module)",
    )
    return p


def _sizes(space, text: str | None) -> tuple:
    if text is None:
        return space.sizes
    knob = space.spec.knob(space.tuning.knob)
    try:
        values = tuple(knob.validate(knob.parse(v)) for v in split_list(text))
    except ValueError as exc:
        raise UsageError(f"--sizes: {exc}") from None
    if not values:
        raise UsageError(f"--sizes needs at least one {knob.name} value (a comma list)")
    return values


def _host_device(kind: str, executor: str, address: str | None):
    """The device configurations are checked against on the driver; a stand-in with the GPU's
    usual core count where the driver joins a cluster without one."""
    from workbench.device import get_device

    try:
        return get_device(kind)
    except ValueError:
        if executor == "ray" and address:
            from kernels.runtime import described_device

            return described_device(kind, name="?", num_cores=132, shared_bytes_per_program=None)
        raise


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    family(args.family)
    if args.device not in ("cuda", "npu", "cpu"):
        raise UsageError(f"--device {args.device}: use cuda, npu or cpu")
    # the tool's modules (torch, the sweep engine) load once the arguments above are known good
    import kernels
    from workbench.progress import Progress
    from workbench.reports import tune as report
    from workbench.reports.reader import scrub_command
    from workbench.tune.job import tune_family
    from workbench.tune.run import TuneOptions
    from workbench.tune.search import STRATEGIES, import_optuna
    from workbench.tune.space import Space

    if args.strategy not in STRATEGIES:
        raise UsageError(f"--strategy {args.strategy}: use one of {', '.join(STRATEGIES)}")
    if args.strategy == "bayes":
        import_optuna()
    for value, option in ((args.budget_s, "--budget-s"), (args.rep_ms, "--rep-ms")):
        positive(value, option)
    if args.trials is not None and args.trials < 1:
        raise UsageError(f"--trials {args.trials}: must be at least 1")
    try:
        space = Space.of(kernels.get(args.family), quick=args.device == "cpu", part=args.part)
    except ValueError as exc:
        raise UsageError(f"--part {args.part}: {exc}") from None
    space = space.with_sizes(_sizes(space, args.sizes))
    if args.dtype is not None:
        try:
            space = space.with_dtype(args.dtype)
        except ValueError as exc:
            raise UsageError(f"--dtype {args.dtype}: {exc}") from None
    out = Path(args.out or f"results/tune/{args.family}-{args.device}")
    check_output_path(out, "--out", folder=True)
    host = _host_device(args.device, args.executor, args.address)
    executor = executor_of(args)
    rep_ms = args.rep_ms if args.rep_ms is not None else (5.0 if args.device == "cpu" else 100.0)
    options = TuneOptions(args.strategy, args.seed, args.budget_s, args.trials, rep_ms)
    print(
        f"tune {args.family} ({space.part}, {space.tuning.dtype}): {space.tuning.knob} = "
        f"{', '.join(map(str, space.sizes))}; "
        f"strategy {args.strategy}; "
        f"{executor.describe()} on {args.device} -> {out}",
        flush=True,
    )
    with Progress(None, f"tune {args.family}") as shown:
        tuned = tune_family(
            space, options, executor, host, args.device, out,
            command=scrub_command(["workbench", "tune", *argv]), progress=shown.sweep(),
        )  # fmt: skip
    paths = report.write_tuned(tuned, out, options)
    for line in report.size_rows(tuned.result):
        print("  " + ", ".join(f"{k}: {v}" for k, v in line.items()))
    print("\n".join(tuned.diff))
    print(f"wrote {tuned.table_path}, " + ", ".join(str(p) for p in paths))
    if tuned.wrong:
        print(tuned.wrong_message())
        return 1
    if args.write:
        print(f"installed {tuned.install()}")
    else:
        print(f"not installed (add --write to install it as {tuned.installed_path()})")
    return 0
