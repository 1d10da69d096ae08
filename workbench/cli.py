"""``workbench`` command line: bench a family, list families; the other commands are modules.

    workbench bench rms_norm --device auto --dtype bf16 --hidden 1024,4096,16384 --mode forward,full
    workbench bench --suite h100 [--device auto] [--out reports/h100] [--rep-ms N] [--only TARGET,...]
    workbench list
    workbench report [--device auto] [--quick] [--out DIR] [--show-code]
    workbench report DIR                      # re-render a suite run's report.html + summary.md from its files
    workbench report DIR --check [--baseline DIR --fail-on-regression PCT]   # the CI gate
    workbench lab
    workbench sweep FAMILY --param NAME=V1,V2 [--problem k=v,...] --executor local|ray [--out DIR]
    workbench profile FAMILY --variant V --param K=V [--problem k=v,...] --device cuda   # Nsight Compute counters
    workbench tune FAMILY [--device cuda] [--strategy grid|random|bayes] [--executor local|ray] [--write]

Sub-commands are a registry (name -> module:function), so a new one is one line.

User errors: a command raises :class:`UsageError` (or ``ValueError``, the project's "what to
change" error) and :func:`main` prints it as one line, ``workbench CMD: message``, and exits 2,
never with a traceback. Exit 1 is kept for a wrong result or a failed check.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import sys
import time


class UsageError(ValueError):
    """Bad input from the command line: the message says what to change."""


class Parser(argparse.ArgumentParser):
    """argparse whose errors (a bad number, an unknown option) are a :class:`UsageError`, so
    :func:`main` prints them as one line with exit code 2 instead of argparse's usage block."""

    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


COMMANDS = {
    "bench": "workbench.cli:bench_main",
    "list": "workbench.cli:list_main",
    "report": "workbench.report:report_main",
    "lab": "workbench.report:lab_main",
    "npu-check": "workbench.npu_check:main",
    "sweep": "workbench.sweep.cli:sweep_main",
    "profile": "workbench.profiling:profile_main",
    "tune": "workbench.tune.cli:tune_main",
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: workbench {" + ",".join(COMMANDS) + "} ...")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"workbench: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module, func = COMMANDS[name].split(":")
    try:
        target = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        print(f"workbench {name}: not available ({exc})", file=sys.stderr)
        return 2
    try:
        return int(target(rest) or 0)
    except ValueError as exc:  # UsageError and the library's own "what to change" errors
        print(f"workbench {name}: {one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path given on the command line that cannot be read or written
        where = f" {exc.filename!r}" if getattr(exc, "filename", None) else ""
        print(
            f"workbench {name}: cannot use the path{where} ({exc.strerror or one_line(exc)}); choose another path",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"workbench {name}: interrupted; every record measured so far is in the store", file=sys.stderr)
        return 130


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def list_main(argv) -> int:
    import kernels

    status = 0
    for name in kernels.families():
        try:
            spec = kernels.get(name)
        except Exception as exc:  # a broken family must not hide the others
            print(f"{name:22s} (cannot load: {type(exc).__name__}: {exc})")
            status = 1
            continue
        print(f"{name:22s} {spec.title}: {', '.join(v.name for v in spec.variants)}")
    return status


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _parse_param(text: str):
    name, _, value = text.partition("=")
    if not _ or not name:
        raise UsageError(f"--param expects NAME=VALUE (e.g. --param BLOCK_SIZE=1024), got {text!r}")
    for cast in (int, float):
        try:
            return name, cast(value)
        except ValueError:
            pass
    return name, {"true": True, "false": False}.get(value.lower(), value)


def bench_main(argv) -> int:
    import kernels
    from workbench.measure import measure
    from workbench.store import Store, write_csv, write_json

    if any(a == "--suite" or a.startswith("--suite=") for a in argv):
        from workbench.suites.cli import suite_main

        return suite_main(argv)
    head = Parser(prog="workbench bench", add_help=False)
    head.add_argument("family", nargs="?")
    known, _ = head.parse_known_args(argv)
    if known.family is None or known.family.startswith("-"):
        from workbench.suites import SUITES

        print(
            f"usage: workbench bench FAMILY [options]; families: {', '.join(kernels.families())}\n"
            f"       workbench bench --suite NAME [options]; suites: {', '.join(SUITES)}"
        )
        return 2
    spec = kernels.get(known.family)

    parser = Parser(prog=f"workbench bench {spec.name}", description=spec.doc)
    parser.add_argument("family")
    parser.add_argument("--device", default="auto")
    default_dtype = "bf16" if "bf16" in spec.dtypes else spec.dtypes[0]
    parser.add_argument("--dtype", default=default_dtype, help=f"comma list of {', '.join(spec.dtypes)}")
    parser.add_argument("--mode", default="forward", help=f"comma list of {', '.join(spec.modes)}")
    parser.add_argument("--variants", default="", help="comma list (default: every variant that can run here)")
    parser.add_argument(
        "--param", action="append", default=[], help="tile override NAME=VALUE (all variants having it)"
    )
    parser.add_argument("--quick", action="store_true", help="small problem sizes (CPU interpreter)")
    parser.add_argument("--rep-ms", type=float, default=100)
    parser.add_argument("--store", default=None, help="SQLite results file (default results/workbench.sqlite)")
    parser.add_argument("--csv", default=None)
    parser.add_argument("--json", default=None)
    for knob in spec.knobs:
        parser.add_argument(f"--{knob.name.replace('_', '-')}", dest=f"knob_{knob.name}", default=None, help=knob.doc)
    args = parser.parse_args(argv)
    check_budget(args.rep_ms)
    check_output_path(args.csv, "--csv")
    check_output_path(args.json, "--json")

    from workbench.device import get_device

    device = get_device(args.device)
    axes = {}
    for knob in spec.knobs:
        text = getattr(args, f"knob_{knob.name}")
        if text is not None:
            axes[knob.name] = [knob.validate(knob.parse(t)) for t in _split(text)] or _empty(knob.name)
    dtypes, modes = _checked_dtypes_modes(spec, args.dtype, args.mode)
    variants = [spec.variant(n).name for n in _split(args.variants)] or [
        v.name for v in spec.variants if v.unavailable_reason(device.kind) is None
    ]
    overrides = dict(_parse_param(p) for p in args.param)
    _check_overrides(spec, variants, overrides)
    store = Store(args.store) if args.store else Store()
    records = []
    names = list(axes)
    for dtype, mode in itertools.product(dtypes, modes):
        for values in itertools.product(*[axes[n] for n in names]) if names else [()]:
            problem = dict(zip(names, values))
            for vname in variants:
                var = spec.variant(vname)
                params = {k: v for k, v in overrides.items() if any(p.name == k for p in var.params)}
                started = time.perf_counter()
                rec = measure(
                    spec,
                    var,
                    device=device,
                    dtype=dtype,
                    mode=mode,
                    problem=problem,
                    params=params,
                    quick=args.quick,
                    rep_ms=args.rep_ms,
                    store=store,
                    on_error="record",
                )
                records.append(rec)
                print(f"{format_row(rec)}  ({time.perf_counter() - started:.1f} s)", flush=True)
    print()
    print(format_table(records))
    if args.csv:
        write_csv(records, args.csv)
    if args.json:
        write_json(records, args.json)
    print(f"\n{len(records)} records -> {store.path}")
    failed = [r for r in records if r.error is None and r.passed is False]
    return 1 if failed else 0


def check_output_path(path, option: str, folder: bool = False) -> None:
    """Before anything is measured: ``path`` (a file to write, or with ``folder`` a folder) can be
    written: it is not the wrong kind of thing and no parent of it is a file."""
    if path is None:
        return
    from pathlib import Path

    p = Path(path)
    if p.exists() and (p.is_dir() != folder):
        raise UsageError(
            f"{option} {p} is {'a file' if folder else 'a folder'}; give {'a folder' if folder else 'a file name'}"
        )
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{option} {p}: {parent} is a file, not a folder; choose another path")
            break


def check_budget(rep_ms: float | None) -> None:
    if rep_ms is not None and not rep_ms > 0:
        raise UsageError(f"--rep-ms {rep_ms:g}: the timing budget must be a positive number of milliseconds")


def _empty(option: str):
    raise UsageError(f"--{option.replace('_', '-')} needs at least one value (a comma list)")


def _checked_dtypes_modes(spec, dtype_text: str, mode_text: str) -> tuple[list[str], list[str]]:
    """The comma lists of --dtype / --mode, each value checked against the family."""
    from kernels.spec import dtype_name

    dtypes = [dtype_name(d) for d in _split(dtype_text)] or _empty("dtype")
    for d in dtypes:
        if d not in spec.dtypes:
            raise UsageError(f"--dtype {d} is not supported by {spec.name}; use one of {', '.join(spec.dtypes)}")
    modes = _split(mode_text) or _empty("mode")
    for m in modes:
        if m not in spec.modes:
            raise UsageError(f"--mode {m} is not a mode of {spec.name}; use one of {', '.join(spec.modes)}")
    return dtypes, modes


def _check_overrides(spec, variants: list[str], overrides: dict) -> None:
    """Every --param names a tile of at least one chosen variant and a value it allows."""
    for name, value in overrides.items():
        having = [spec.variant(v) for v in variants if any(p.name == name for p in spec.variant(v).params)]
        if not having:
            known = sorted({p.name for v in variants for p in spec.variant(v).params})
            raise UsageError(
                f"--param {name}: no chosen variant has this tile; tiles of {', '.join(variants)}: "
                f"{', '.join(known) or 'none'}"
            )
        for var in having:
            var.param(name).validate(value)


def _fmt(v, spec="{:.3f}"):
    return "-" if v is None else spec.format(v)


def format_row(rec) -> str:
    status = "PASS" if rec.passed else ("ERROR" if rec.error else "FAIL")
    tail = f"  {rec.error}" if rec.error else ""
    return (
        f"{rec.kernel}/{rec.variant} {rec.mode} {rec.dtype} {rec.axis}={rec.x_value}: "
        f"{_fmt(rec.ms_p50)} ms [{rec.timing_method}] {status}{tail}"
    )


def format_table(records) -> str:
    """variant x size: ms (p50), GB/s, % copy BW, peak MB, max err, pass."""
    header = f"{'mode':8s} {'dtype':5s} {'x':>7s} {'variant':18s} {'ms':>9s} {'GB/s':>8s} {'%BW':>6s} {'peakMB':>8s} {'max_err':>9s} {'pass':>5s} {'timing':16s}"
    lines = [header, "-" * len(header)]
    for r in records:
        lines.append(
            f"{r.mode:8s} {r.dtype:5s} {str(r.x_value):>7s} {r.variant:18s} {_fmt(r.ms_p50, '{:9.4f}')} "
            f"{_fmt(r.gbps, '{:8.1f}')} {_fmt(r.pct_copy_bw, '{:6.1f}')} {_fmt(r.peak_mb, '{:8.1f}')} "
            f"{_fmt(r.max_abs_err, '{:9.2e}')} {('yes' if r.passed else ('err' if r.error else 'NO')):>5s} "
            f"{r.timing_method or (r.error or '')[:40]}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
