"""``workbench npu-check``: compile every family's NPU kernels with the real Ascend compiler, no NPU needed.

Exit codes: 0 every default configuration is OK; 1 a default configuration is not OK (or a
family's NPU module cannot be loaded, or a worker died); 2 usage; 3 could not check (the
triton-ascend environment could not be built, e.g. the registry is unreachable); with
``--warn-unchecked`` that last case prints a warning and exits 0, for CI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from workbench.cli.args import Parser, UsageError
from workbench.progress import Progress

DESCRIPTION = """Compile every family's NPU kernels for an Ascend 910B with the real front end:
triton-ascend lowers each kernel to Ascend IR and BiShengIR plans its Unified Buffer, on this CPU.
Each case is OK, a UB overflow (the tile does not fit the 192 KB Unified Buffer) or a compile
error; every default configuration must be OK. The first run builds a separate virtualenv with
triton-ascend (.npu-venv); later runs reuse it. Exit 0: every default OK; 1: one is not; 2: bad
input; 3: could not check (no environment), or 0 with a warning under --warn-unchecked."""

EXAMPLES = """examples:
  workbench npu-check --defaults-only                    # every family's default configurations (CI)
  workbench npu-check --family rms_norm --match chunked  # some cases of one family
  workbench npu-check --calibrate rms_norm               # sweep tiles, record the UB boundary beside the family"""


def build_parser() -> Parser:
    p = Parser(prog="workbench npu-check", description=DESCRIPTION, epilog=EXAMPLES)
    p.add_argument("--family", default="", help="comma list of families (default: every family)")
    p.add_argument("--defaults-only", action="store_true", help="only the families' default configurations")
    p.add_argument(
        "--match", action="append", default=[], help="only cases whose name contains this text (repeatable: any)"
    )
    p.add_argument("--out", default="results/npu_check", help="folder for npu_check.csv / .json and logs")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="compile processes at once")
    p.add_argument("--venv", default=None, help="triton-ascend virtualenv (default: $WORKBENCH_NPU_VENV or .npu-venv)")
    p.add_argument("--wheels", default=None, help="wheel cache (default: ~/.cache/kernel-workbench/npu-wheels)")
    p.add_argument("--no-download", action="store_true", help="build the environment from the wheel cache only")
    p.add_argument("--install-timeout", type=float, default=480.0, help="seconds allowed to build the environment")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds allowed for all compiles")
    p.add_argument("--case-timeout", type=float, default=300.0, help="seconds allowed for one bishengir-compile")
    p.add_argument("--cases", default=None, help="MODULE:FUNC that returns the cases (instead of npu_compile_cases)")
    p.add_argument(
        "--calibrate",
        default=None,
        metavar="FAMILY",
        help="sweep the family's UB calibration cases, record the boundary",
    )
    p.add_argument("--keep", action="store_true", help="keep the .ttir / .ttadapter files under --out")
    p.add_argument("--warn-unchecked", action="store_true", help="exit 0 with a warning when it could not check (CI)")
    p.add_argument("--quiet", action="store_true", help="print only failures and the summary")
    return p


def main(argv=None) -> int:
    from workbench import npu_check as N

    args = build_parser().parse_args(argv)
    families = N.families_of(args.calibrate if args.calibrate else args.family)
    if args.calibrate and len(families) != 1:
        raise UsageError("--calibrate takes one family")
    options = N.CheckOptions(
        families=families,
        out=Path(args.out),
        defaults_only=args.defaults_only,
        match=args.match,
        jobs=args.jobs,
        venv=Path(args.venv) if args.venv else None,
        wheels=Path(args.wheels) if args.wheels else None,
        download=not args.no_download,
        install_timeout=args.install_timeout,
        timeout=args.timeout,
        case_timeout=args.case_timeout,
        cases=args.cases,
        calibrate=bool(args.calibrate),
        keep=args.keep,
    )
    try:
        with Progress(None, "npu-check") as shown:
            shown.doing("preparing the triton-ascend environment, then compiling")
            outcome = N.run_check(options, log=lambda line: shown.line(line, count=False))
    except N.Unchecked as exc:
        print(f"npu-check: COULD NOT CHECK — {exc}", file=sys.stderr)
        if args.warn_unchecked:
            print("npu-check: WARNING: NPU kernels were not compiled this time (registry or install problem)")
            return N.EXIT_OK
        return N.EXIT_UNCHECKED
    rows, s = outcome.rows, outcome.summary
    shown = rows if not args.quiet else outcome.failed_defaults
    if shown:
        print(N.format_table(shown))
    for note in outcome.notes:
        print(f"npu-check: {note['family']}: {'ERROR: ' if note.get('error') else ''}{note['message']}")
    for problem in outcome.problems:
        print(f"npu-check: ERROR: {problem}")
    for r in rows:
        if r.get("verdict") == "compile error":
            print(f"npu-check: compile error in {r['family']} / {r['case']}: {r.get('message', '')}")
    if outcome.calibration is not None:
        print(f"npu-check: calibration written to {outcome.calibration}")
    out = Path(args.out)
    print(
        f"\nnpu-check: {s['cases']} cases ({s['defaults']} default): {s['ok']} OK, "
        f"{s['ub_overflow']} UB overflow, {s['compile_error']} compile error; "
        f"UB model disagrees on {s['model_disagreements']}; compiles {s['compile_seconds']:.0f} s, "
        f"total {s['total_seconds']:.0f} s -> {out / 'npu_check.csv'}, {out / 'npu_check.json'}\n"
        "legend: [D] default configuration (must be OK); verdict* fits only single-buffered; pred = UB model's "
        "prediction (OVF overflow, ok fits), ! = the compiler disagrees with the model"
    )
    if not outcome.ok:
        for r in outcome.failed_defaults:
            print(f"npu-check: FAIL default {r['family']} / {r['case']}: {r.get('verdict')} {r.get('message', '')}")
        return N.EXIT_FAILED
    return N.EXIT_OK
