"""``workbench bench``: measure a family over sizes, dtypes, modes and variants, or run a suite.

``workbench bench --suite NAME`` is :mod:`workbench.cli.suite`; everything else measures one
family (:func:`workbench.bench.run_bench`), printing a line per configuration as it is measured
and the table at the end.
"""

from __future__ import annotations

import time

from workbench.cli import args as A
from workbench.cli.tables import format_row, format_table
from workbench.progress import Progress

EXAMPLES = """examples:
  workbench bench rms_norm --device cpu --quick                 # every variant at the interpreter's small sizes
  workbench bench rms_norm --hidden 1024,4096,16384 --mode forward,full --dtype bf16
  workbench bench block_sparse --batch 1,8,64 --variants gpu,pyjuice --csv out.csv
  workbench bench rms_norm --variants gpu_multirow --param BLOCK_SIZE_M=4
  workbench bench swiglu --device cpu --quick --mode full --edges    # also one row, odd sizes, extreme tiles
  workbench bench rms_norm --hidden 1024 --mode full --same-size-copy  # also % of a same-size copy
  workbench bench --suite h100 --out reports/h100               # a suite: targets, peers, verdicts"""

# On the interpreter a kernel's programs run one by one in Python: past about this many elements
# per configuration a run takes minutes, and the command says so before it starts.
INTERPRETER_SLOW_ELEMENTS = 1 << 20


def main(argv) -> int:
    if any(a == "--suite" or a.startswith("--suite=") for a in argv):
        from workbench.cli import suite

        return suite.main(argv)
    import kernels

    # The options every family shares are checked before the family's spec loads (which
    # imports torch and the kernels): a mistyped family or option answers at once.
    known, _ = build_parser(None, add_help=False).parse_known_args(argv)
    if known.family is None:
        if any(a in ("-h", "--help") for a in argv):
            build_parser(None).print_help()
            return 0
        raise A.UsageError(
            f"give a family: workbench bench FAMILY [options] (families: {', '.join(kernels.families())}), "
            "or a suite: workbench bench --suite NAME; workbench bench --help lists the options"
        )
    spec = A.family(known.family)
    args = build_parser(spec).parse_args(argv)
    A.check_budget(args.rep_ms)
    A.check_output_path(args.csv, "--csv")
    A.check_output_path(args.json, "--json")

    from workbench.bench import BenchPlan, run_bench
    from workbench.device import get_device
    from workbench.store import Store, write_csv, write_json

    device = get_device(args.device)
    axes = {}
    for knob in spec.knobs:
        text = getattr(args, f"knob_{knob.name}")
        if text is not None:
            values = [knob.validate(knob.parse(t)) for t in A.split_list(text)]
            if not values:
                raise A.UsageError(f"--{knob.name.replace('_', '-')} needs at least one value (a comma list)")
            axes[knob.name] = values
    variants = [spec.variant(n).name for n in A.split_list(args.variants)] or [
        v.name for v in spec.variants if v.unavailable_reason(device.kind) is None
    ]
    overrides = dict(A.parse_param(p) for p in args.param)
    A.check_overrides(spec, variants, overrides)
    plan = BenchPlan(
        spec=spec,
        device=device,
        dtypes=A.checked_dtypes(spec, args.dtype),
        modes=A.checked_modes(spec, args.mode),
        variants=variants,
        axes=axes,
        overrides=overrides,
        quick=args.quick,
        rep_ms=args.rep_ms,
        edges=args.edges,
        same_size_copy=args.same_size_copy,
    )
    store = Store(args.store) if args.store else Store()
    total = plan.count()
    print(f"bench {spec.name}: {total} configurations ({', '.join(variants)}) on {device.kind} ({device.name})")
    if device.kind == "cpu":
        biggest = max(_elements(spec, p, args.quick) for _, _, p, _, _ in plan.configurations())
        if not args.quick and biggest > INTERPRETER_SLOW_ELEMENTS:
            print(
                f"note: on the CPU the kernels run in the Triton interpreter; at these sizes (up to {biggest:,} "
                "elements) each configuration takes seconds to minutes. Add --quick for the interpreter's small sizes."
            )
    started = time.perf_counter()
    with Progress(total, f"bench {spec.name}") as progress:
        records = run_bench(
            plan,
            store,
            on_record=lambda rec: progress.line(f"{format_row(rec)}  ({time.perf_counter() - started:.1f} s)"),
        )
    print()
    print(format_table(records))
    if args.csv:
        write_csv(records, args.csv)
    if args.json:
        write_json(records, args.json)
    print(f"\n{len(records)} records -> {store.path}")
    failed = [r for r in records if r.error is None and r.passed is False]
    return 1 if failed else 0


def _elements(spec, problem: dict, quick: bool) -> int:
    """The largest tensor a configuration's problem implies, roughly: the product of its integer knobs."""
    try:
        resolved = spec.resolve_problem(problem, quick=quick)
    except ValueError:
        return 0
    size = 1
    for value in resolved.values():
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            size *= value
    return size


def build_parser(spec=None, add_help: bool = True) -> A.Parser:
    """The options of ``workbench bench FAMILY``: those every family shares, and with ``spec``
    that family's problem knobs (``--hidden``, ``--batch`` …) and its dtypes, modes and doc."""
    import kernels

    families = ", ".join(kernels.families())
    if spec is None:
        about = (
            "Measure a kernel family over sizes, dtypes, modes and variants: each configuration is checked "
            "against the PyTorch reference and timed (kernel, call and host time); every record goes to the "
            f"store as it is made.\n\nFamilies: {families}. Each family adds its problem knobs as options "
            "(workbench bench FAMILY --help lists them). With --suite NAME it runs a benchmark suite instead "
            "(workbench bench --suite NAME --help)."
        )
    else:
        about = (
            f"Measure {spec.title} ({spec.name}) over sizes, dtypes, modes and variants: each "
            "configuration is checked against the PyTorch reference and timed (kernel, call and host time); "
            "every record goes to the store as it is made.\n\n" + (spec.doc or "")
        )
    parser = A.Parser(
        prog="workbench bench" if spec is None else f"workbench bench {spec.name}",
        usage="workbench bench FAMILY [options]   (or: workbench bench --suite NAME [options])"
        if spec is None
        else f"workbench bench {spec.name} [options]",
        description=about,
        epilog=EXAMPLES,
        add_help=add_help,
    )
    parser.add_argument(
        "family",
        nargs=None if spec is not None else "?",
        help=f"the kernel family: {families} (workbench list shows their variants)",
    )
    parser.add_argument("--device", default="auto", help="auto (cuda, then npu, then cpu), cuda, npu or cpu")
    if spec is None:
        parser.add_argument(
            "--dtype",
            default=None,
            help="comma list of the family's dtypes, e.g. bf16,fp32 (default: bf16 where the "
            "family has it, else its first)",
        )
        parser.add_argument(
            "--mode", default="forward", help="comma list of the family's modes: forward, backward, full"
        )
    else:
        parser.add_argument("--dtype", default=A.default_dtype(spec), help=f"comma list of {', '.join(spec.dtypes)}")
        parser.add_argument("--mode", default="forward", help=f"comma list of {', '.join(spec.modes)}")
    parser.add_argument(
        "--variants", default="", help="comma list of variants (default: every variant that can run here)"
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        help="tile override NAME=VALUE for every variant having that tile, e.g. BLOCK_SIZE=1024 (repeatable)",
    )
    parser.add_argument("--quick", action="store_true", help="the family's small sizes (for the CPU interpreter)")
    parser.add_argument("--rep-ms", type=float, default=100, help="timing budget per configuration and timing, ms")
    parser.add_argument(
        "--edges",
        action="store_true",
        help="also check our kernels at edge shapes derived from the declaration (one row, odd sizes, the "
        "smallest and largest accepted tiles, strided inputs where taken); a failed edge fails the record",
    )
    parser.add_argument(
        "--same-size-copy",
        action="store_true",
        help="also time a device copy of each configuration's minimum bytes in as many launches as its call "
        "made, and show its share of it (%%same) beside its share of the large copy (%%BW); n/a on the CPU",
    )
    parser.add_argument("--store", default=None, help="SQLite results file (default: results/workbench.sqlite)")
    parser.add_argument("--csv", default=None, help="also write the records to this CSV file")
    parser.add_argument("--json", default=None, help="also write the records to this JSON file")
    for knob in spec.knobs if spec is not None else ():
        parser.add_argument(
            f"--{knob.name.replace('_', '-')}",
            dest=f"knob_{knob.name}",
            metavar="V[,V…]",
            default=None,
            help=f"{knob.doc or knob.name}: comma list of values to measure (default: {knob.default})",
        )
    return parser
