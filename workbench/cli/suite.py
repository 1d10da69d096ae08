"""``workbench bench --suite NAME``: run a suite, print a line per measurement and the ratio
table, write records / ratios / environment and the HTML report into ``--out``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from workbench.cli.args import Parser, check_budget, check_output_path, split_list
from workbench.cli.tables import format_row
from workbench.suites.targets import SUITES, get_suite


def build_parser() -> Parser:
    parser = Parser(
        prog="workbench bench --suite",
        description="Run a benchmark suite: every target (a family, mode and sizes; ours against every "
        "installed peer, with a threshold) measured side by side, then the ratio table with a verdict per "
        "cell, and the files and report.html in --out.",
        epilog=EXAMPLES,
    )
    parser.add_argument("--suite", required=True, help=f"one of {', '.join(SUITES)}")
    parser.add_argument("--device", default="auto", help="auto (cuda, then npu, then cpu), cuda, npu or cpu")
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
    parser.add_argument("--show-code", action="store_true", help="keep the notebook's code in report.html")
    parser.add_argument(
        "--serial-compile",
        action="store_true",
        help="compile every kernel in this process, one after another, on the critical path (no compile "
        "processes: to compare against, or where the host has no cores to spare)",
    )
    parser.add_argument(
        "--baseline", default=None, help="an earlier run's folder: each cell of ours is compared with it (CI gate)"
    )
    parser.add_argument(
        "--fail-on-regression",
        type=float,
        default=None,
        metavar="PCT",
        help="exit 1 when a cell is slower than --baseline by more than PCT percent beyond the noise interval",
    )
    return parser


def main(argv) -> int:
    """Run a suite's targets (module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_budget(args.rep_ms)
    suite = get_suite(args.suite)
    only = split_list(args.only)
    for name in only:
        suite.target(name)
    # running a suite needs the store, the device and the report: loaded once the arguments are good
    from workbench import suites as S
    from workbench.device import get_device
    from workbench.phases import process_age_s
    from workbench.progress import Progress
    from workbench.reports import gate
    from workbench.reports.environment import suite_environment
    from workbench.store import Store

    pct = gate.check_pct(args.fail_on_regression, args.baseline is not None)
    baseline = gate.load_records(args.baseline, "--baseline") if args.baseline else None  # before measuring
    if args.serial_compile:
        from workbench.compiling.service import ENV_SWITCH

        os.environ[ENV_SWITCH] = "0"  # read when the suite starts its compile service
    device = get_device(args.device)
    out = Path(args.out or f"reports/{suite.name}")
    check_output_path(out, "--out", folder=True)
    store = Store(args.store) if args.store else Store()
    peers = ", ".join(f"{k} {v}" for k, v in S.peer_versions().items())
    print(f"suite {suite.name}: {suite.title}")
    print(f"device: {device.name} ({device.kind}); peers: {peers}; out: {out}")
    if device.kind == "cpu":
        print("note: CPU times are Triton-interpreter (or CPU) wall times: ratios are not judged on the CPU")
    started = time.perf_counter()

    targets = [t for t in suite.targets if not only or t.name in only]
    shown = Progress(None, f"suite {suite.name}")

    def on_record(rec):
        tag = getattr(rec, "label", None)
        shown.line(f"{format_row(rec)}{f' [{tag}]' if tag else ''}  ({time.perf_counter() - started:.1f} s)")

    # --resume: the earlier run's targets are read before the first target rewrites the files.
    earlier = S.load_previous(suite, device.kind, out) if args.resume else None
    if earlier is not None:
        print(f"resume: keeping {', '.join(earlier.target_records)} from {out} (unless measured again)")

    def on_target(target, run):
        S.write_files(S.combined(run, earlier, suite), suite, out)  # after every target: nothing is lost
        split = run.target_wall[target.name]
        parts = ", ".join(f"{k} {split[k]:.1f}" for k in ("setup", "compile", "check", "timing", "other"))
        elapsed = time.perf_counter() - started
        shown.line(f"-- {target.name}: {split['wall']:.1f} s ({parts})  ({elapsed:.1f} s)", count=False)
        later = [t.name for t in targets][len(run.target_wall) :]
        if later:
            shown.doing(f"target {len(run.target_wall) + 1}/{len(targets)}: {later[0]}")

    if targets:
        shown.doing(f"target 1/{len(targets)}: {targets[0].name}")
    with shown:
        run = S.run_suite(
            suite, device=device, store=store, rep_ms=args.rep_ms, only=only, on_record=on_record, on_target=on_target
        )
    measured_s = time.perf_counter() - started
    process_s = process_age_s()
    this_run_wall = dict(run.target_wall)
    run = S.combined(run, earlier, suite)
    print()
    print(format_ratio_table(run.rows))
    print("\nwall seconds per target (this command):")
    print(S.wall_table(this_run_wall))
    print(
        f"suite wall: {measured_s:.1f} s measuring"
        + (f", {process_s:.1f} s from the process's start" if process_s is not None else "")
    )
    print(_compile_ahead_line(run.compile_ahead, device.kind))
    S.write_files(run, suite, out)
    env = suite_environment(device, suite, argv)
    env["wall_s"] = {
        "measuring": round(measured_s, 1),
        "from_process_start": None if process_s is None else round(process_s, 1),
        "targets": this_run_wall,
    }
    env["compile_ahead"] = run.compile_ahead or {"off": _compile_ahead_line({}, device.kind)}
    (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
    result = gate.check(run.record_dicts(), baseline, pct, failures=run.failures, baseline_name=_shown(args.baseline))
    if baseline is not None:
        print("\n" + (result.table() or "no cell of ours in common with the baseline"))
        gate.write(result, out)
    else:
        (out / "baseline.json").unlink(missing_ok=True)  # a comparison from an earlier run no longer applies
    status = 0
    if args.no_html:
        print("\nreport.html: skipped (--no-html)")
    else:
        status = _write_html(out, show_code=args.show_code)
    print(
        f"\n{len(run.records)} records -> {store.path}; files in {out}: "
        + ", ".join(sorted(p.name for p in out.iterdir() if p.is_file()))
    )
    if run.failures:
        print("\nFAILED:\n  " + "\n  ".join(run.failures))
    if baseline is not None or run.failures:
        print("\n" + result.message())
    if not result.ok:
        return 1
    return status


EXAMPLES = """examples:
  workbench bench --suite smoke --device cpu --out /tmp/smoke        # the suite path at tiny sizes (CI)
  workbench bench --suite h100 --out reports/h100                    # every H100 target, peers beside ours
  workbench bench --suite h100 --only rms_norm_forward,fused_full    # some targets
  workbench bench --suite h100 --out reports/h100 --resume           # a long suite in parts
  workbench bench --suite h100 --baseline reports/h100 --fail-on-regression 5   # the CI gate"""


def _compile_ahead_line(summary: dict, device_kind: str) -> str:
    """One line on what the compile service did (workbench.compiling.service)."""
    if not summary:
        from workbench.compiling.service import enabled

        if device_kind != "cuda":
            return "compile ahead: none (nothing is compiled on this device)"
        return "compile ahead: off (--serial-compile)" if not enabled() else "compile ahead: none submitted"
    return (
        f"compile ahead: {summary.get('submitted', 0)} configurations submitted to {summary.get('workers', 0)} compile "
        f"processes; {summary.get('compiled', 0)} measured after their compile ahead ({summary.get('waited', 0)} waited "
        f"{summary.get('waited_s', 0.0):.1f} s for it), {summary.get('withdrawn', 0)} compiled here, "
        f"{summary.get('failed', 0)} failed ahead (log: {summary.get('log', '-')})"
    )


def _shown(path) -> str | None:
    """A folder as the report names it: relative to here when it is under here, else its name."""
    if path is None:
        return None
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return p.name


def _write_html(out, show_code: bool = False) -> int:
    """report.html from the files just written; a missing papermill / nbconvert skips it (0),
    a report that fails to render is an error (1)."""
    from workbench.reports.notebooks import html_unavailable_reason

    reason = html_unavailable_reason()
    if reason:
        print(f"\nreport.html: skipped ({reason}); the tables and CSV / JSON files are written")
        return 0
    from workbench.reports.suite import render_suite_report  # plotly: imported once it is known to be there

    try:
        path = render_suite_report(out, show_code=show_code)
    except Exception as exc:  # noqa: BLE001 - the measurements are on disk already; say what broke
        print(f"\nreport.html: FAILED ({type(exc).__name__}: {str(exc)[:2000]})")
        return 1
    print(f"\nreport.html: {path}")
    return 0


def _us(v) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if v < 1e5 else f"{v:.3g}"


def format_ratio_table(rows) -> str:
    """Per target and x: ours µs, best peer (name, µs), ratio, %BW (of the device's large copy),
    %same (of a copy of the same bytes in as many launches; "n/a (CPU)" on the CPU), threshold,
    status."""
    from workbench.reports.text import same_size_copy_text

    header = (
        f"{'target':30s} {'x':>13s} {'ours':16s} {'µs':>9s} {'best peer / config':24s} {'µs':>9s} "
        f"{'ratio':>7s} {'%BW':>6s} {'%same':>9s} {'threshold':18s} status"
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
        same = same_size_copy_text(r, interval=False)
        extra = ""
        if r.alt_peer:
            alt = "-" if r.alt_ratio is None else f"{r.alt_ratio:.3g}"
            extra = f"  [vs {r.alt_peer}: {_us(r.alt_peer_us)} µs, ratio {alt}]"
        if r.kind == "defaults" and r.note:
            extra += f"  [{r.note}]"
        lines.append(
            f"{r.target:30s} {x:>13s} {r.ours[:16]:16s} {_us(r.ours_us):>9s} {(r.peer or '-')[:24]:24s} "
            f"{_us(r.peer_us):>9s} {ratio:>7s} {bw:>6s} {same:>9s} {r.threshold():18s} {r.verdict()}{extra}"
        )
    counts = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines.append("")
    lines.append("summary: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return "\n".join(lines)
