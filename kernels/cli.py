"""``workbench`` command line: bench a family, list families; report and lab live in widgets.

    workbench bench rms_norm --device auto --dtype bf16 --hidden 1024,4096,16384 --mode forward,full
    workbench bench --suite h100 [--device auto] [--out reports/h100] [--rep-ms N] [--only TARGET,...]
    workbench list
    workbench report [--device auto] [--quick] [--out DIR]
    workbench lab

Sub-commands are a registry (name -> module:function), so a new one is one line.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import sys
import time

COMMANDS = {
    "bench": "kernels.cli:bench_main",
    "list": "kernels.cli:list_main",
    "report": "widgets.report:report_main",
    "lab": "widgets.report:lab_main",
    "npu-check": "kernels.npu_check:main",
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
    return int(target(rest) or 0)


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
    if not _:
        raise SystemExit(f"--param expects NAME=VALUE, got {text!r}")
    for cast in (int, float):
        try:
            return name, cast(value)
        except ValueError:
            pass
    return name, {"true": True, "false": False}.get(value.lower(), value)


def bench_main(argv) -> int:
    import kernels
    from kernels.bench import measure
    from kernels.store import Store, write_csv, write_json

    if any(a == "--suite" or a.startswith("--suite=") for a in argv):
        return suite_main(argv)
    head = argparse.ArgumentParser(prog="workbench bench", add_help=False)
    head.add_argument("family", nargs="?")
    known, _ = head.parse_known_args(argv)
    if known.family is None or known.family.startswith("-"):
        from kernels.suites import SUITES

        print(
            f"usage: workbench bench FAMILY [options]; families: {', '.join(kernels.families())}\n"
            f"       workbench bench --suite NAME [options]; suites: {', '.join(SUITES)}"
        )
        return 2
    try:
        spec = kernels.get(known.family)
    except ValueError as exc:
        print(f"workbench bench: {exc}", file=sys.stderr)
        return 2

    parser = argparse.ArgumentParser(prog=f"workbench bench {spec.name}", description=spec.doc)
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

    from kernels.device import get_device

    try:
        device = get_device(args.device)
    except ValueError as exc:
        print(f"workbench bench: {exc}", file=sys.stderr)
        return 2
    axes = {}
    for knob in spec.knobs:
        text = getattr(args, f"knob_{knob.name}")
        if text is not None:
            axes[knob.name] = [knob.parse(t) for t in _split(text)]
    variants = _split(args.variants) or [v.name for v in spec.variants if v.unavailable_reason(device.kind) is None]
    overrides = dict(_parse_param(p) for p in args.param)
    store = Store(args.store) if args.store else Store()
    records = []
    names = list(axes)
    for dtype, mode in itertools.product(_split(args.dtype), _split(args.mode)):
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


def suite_main(argv) -> int:
    """``workbench bench --suite NAME``: run a suite's targets, print a line per measurement and
    the ratio table, write records / ratios / environment and the HTML report into --out."""
    from pathlib import Path

    from kernels import suites as S
    from kernels.device import get_device
    from kernels.store import Store

    parser = argparse.ArgumentParser(
        prog="workbench bench --suite",
        description="Run a benchmark suite (targets with thresholds) and write its report.",
    )
    parser.add_argument("--suite", required=True, help=f"one of {', '.join(S.SUITES)}")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default=None, help="output folder (default reports/<suite>/)")
    parser.add_argument(
        "--rep-ms", type=float, default=None, help="timing budget per measurement (default: the suite's)"
    )
    parser.add_argument("--only", default="", help="comma list of target names (default: every target)")
    parser.add_argument("--store", default=None, help="SQLite results file (default results/workbench.sqlite)")
    parser.add_argument("--no-html", action="store_true", help="skip report.html (tables and files only)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the targets an earlier run of this suite wrote into --out (run a long suite in parts)",
    )
    args = parser.parse_args(argv)
    try:
        suite = S.get_suite(args.suite)
        only = _split(args.only)
        for name in only:
            suite.target(name)
        device = get_device(args.device)
    except ValueError as exc:
        print(f"workbench bench: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out or f"reports/{suite.name}")
    store = Store(args.store) if args.store else Store()
    peers = ", ".join(f"{k} {v}" for k, v in S.peer_versions().items())
    print(f"suite {suite.name}: {suite.title}")
    print(f"device: {device.name} ({device.kind}); peers: {peers}; out: {out}")
    if device.kind == "cpu":
        print("note: CPU times are Triton-interpreter (or CPU) wall times: ratios are not judged on the CPU")
    started = time.perf_counter()

    def on_record(rec):
        tag = getattr(rec, "label", None)
        print(f"{format_row(rec)}{f' [{tag}]' if tag else ''}  ({time.perf_counter() - started:.1f} s)", flush=True)

    # --resume: the earlier run's targets are read before the first target rewrites the files.
    earlier = S.load_previous(suite, device.kind, out) if args.resume else None
    if earlier is not None:
        print(f"resume: keeping {', '.join(earlier.target_records)} from {out} (unless measured again)")

    def on_target(target, run):
        S.write_files(S.combined(run, earlier, suite), suite, out)  # after every target: nothing is lost

    run = S.run_suite(
        suite, device=device, store=store, rep_ms=args.rep_ms, only=only, on_record=on_record, on_target=on_target
    )
    run = S.combined(run, earlier, suite)
    print()
    print(format_ratio_table(run.rows))
    S.write_files(run, suite, out)
    env = suite_environment(device, suite, argv)
    (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
    status = 0
    if args.no_html:
        print("\nreport.html: skipped (--no-html)")
    else:
        status = _write_html(out)
    print(
        f"\n{len(run.records)} records -> {store.path}; files in {out}: "
        + ", ".join(sorted(p.name for p in out.iterdir() if p.is_file()))
    )
    if run.failures:
        print("\nFAILED:\n  " + "\n  ".join(run.failures))
        return 1
    return status


def _write_html(out) -> int:
    """report.html from the files just written; a missing papermill / nbconvert skips it (0),
    a report that fails to render is an error (1)."""
    try:
        from widgets import suite_report
    except ImportError as exc:
        print(f"\nreport.html: skipped ({exc})")
        return 0
    reason = suite_report.html_unavailable_reason()
    if reason:
        print(f"\nreport.html: skipped ({reason}); the tables and CSV / JSON files are written")
        return 0
    try:
        path = suite_report.render_report(out)
    except Exception as exc:  # noqa: BLE001 - the measurements are on disk already; say what broke
        print(f"\nreport.html: FAILED ({type(exc).__name__}: {str(exc)[:2000]})")
        return 1
    print(f"\nreport.html: {path}")
    return 0


def suite_environment(device, suite, argv) -> dict:
    """The report's environment block (``widgets.report.environment`` where the widgets import)
    plus the suite, the command, installed peer versions and the device's copy bandwidth."""
    from kernels import suites as S

    try:
        from widgets.report import environment

        env = environment(device)
    except ImportError:
        from kernels.bench import git_commit, versions

        env = {**versions(), "git_commit": git_commit(), **device.describe()}
    env["suite"] = suite.name
    env["command"] = "workbench bench " + " ".join(argv)
    for dist, version in S.peer_versions().items():
        env[dist] = version
    try:
        bw = device.copy_bandwidth_gbps()
    except Exception as exc:  # noqa: BLE001
        bw = f"not measured ({exc})"
    env["copy_bw_gbps"] = round(bw, 1) if isinstance(bw, float) else (bw if bw is not None else "n/a (CPU)")
    return env


def _us(v) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if v < 1e5 else f"{v:.3g}"


def format_ratio_table(rows) -> str:
    """Per target and x: ours µs, best peer (name, µs), ratio, %BW, threshold, status."""
    header = (
        f"{'target':30s} {'x':>13s} {'ours':16s} {'µs':>9s} {'best peer / config':24s} {'µs':>9s} "
        f"{'ratio':>7s} {'%BW':>6s} {'threshold':18s} status"
    )
    lines = [header, "-" * len(header)]
    current = None
    for r in rows:
        if r.target != current:
            current = r.target
            notes = sorted({r2.note for r2 in rows if r2.target == r.target and r2.note and r2.kind != "defaults"})
            lines.append(f"# {r.title} [{r.family} {r.mode}]" + (f" -- {notes[0]}" if len(notes) == 1 else ""))
        x = f"{r.x_name}={r.x}"
        ratio = "-" if r.ratio is None else f"{r.ratio:.3g}"
        bw = "-" if r.pct_copy_bw is None else f"{r.pct_copy_bw:.1f}"
        extra = ""
        if r.alt_peer:
            alt = "-" if r.alt_ratio is None else f"{r.alt_ratio:.3g}"
            extra = f"  [vs {r.alt_peer}: {_us(r.alt_peer_us)} µs, ratio {alt}]"
        if r.kind == "defaults" and r.note:
            extra += f"  [{r.note}]"
        lines.append(
            f"{r.target:30s} {x:>13s} {r.ours[:16]:16s} {_us(r.ours_us):>9s} {(r.peer or '-')[:24]:24s} "
            f"{_us(r.peer_us):>9s} {ratio:>7s} {bw:>6s} {r.threshold():18s} {r.verdict()}{extra}"
        )
    counts = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines.append("")
    lines.append("summary: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return "\n".join(lines)


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
