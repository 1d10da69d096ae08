"""``workbench report``: run the notebooks headless into a report, re-render a suite run's report
from its files, or gate a run's records (the CI gate)."""

from __future__ import annotations

from pathlib import Path

from workbench.cli.args import Parser, check_output_path
from workbench.progress import Progress
from workbench.reports.reader import scrub_paths

DESCRIPTION = """Run every notebook in notebooks/ headless (papermill) and write an HTML report that opens
offline: index.html (a headline, a ratio chart, a row per notebook), a page per notebook, the
executed notebooks, each family's records and summary.md. Given a run's folder instead (--render
DIR, or DIR alone), rebuild its pages from the files it keeps, for every kind of run folder (a
suite, a notebook report, a sweep, a tune, a why-view, a sweep-scaling comparison) and every run
folder under DIR (reports/: all of them); or with --check gate its records: exit 1 on a wrong
result, and with --baseline on a regression beyond the noise."""

RUN_FOLDERS = "`workbench bench --suite NAME --out DIR` or `workbench report --out DIR`"

EXAMPLES = """examples:
  workbench report --device cpu --quick --out reports/latest      # every notebook on the CPU, small sizes
  workbench report --device cuda --out reports/gpu                 # a GPU report at full sizes
  workbench report --only rms_norm --show-code                     # one notebook, code kept in the page
  workbench report --render reports/h100                           # rebuild a run folder's report.html from its files
  workbench report --render reports --out results/pages            # every committed report's pages, one plotly.min.js
  workbench report reports/h100 --check                            # the CI gate: exit 1 on a wrong result
  workbench report out --check --baseline reports/h100 --fail-on-regression 5"""


def build_parser() -> Parser:
    parser = Parser(prog="workbench report", description=DESCRIPTION, epilog=EXAMPLES)
    parser.add_argument(
        "dir",
        nargs="?",
        default=None,
        help="a run's folder (a suite run, or notebook records): re-render its report, or with --check gate it",
    )
    parser.add_argument(
        "--render",
        metavar="DIR",
        default=None,
        help="rebuild the pages of the run folder DIR, or of every run folder under it, from their files "
        "(into --out, else beside the files)",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 on a wrong result (and, with --baseline, a regression)"
    )
    parser.add_argument("--baseline", default=None, help="an earlier run's folder to compare each cell of ours with")
    parser.add_argument(
        "--fail-on-regression",
        type=float,
        default=None,
        metavar="PCT",
        help="fail when a cell is slower than --baseline by more than PCT percent beyond the noise interval",
    )
    parser.add_argument("--show-code", action="store_true", help="keep the notebooks' code in the HTML pages")
    parser.add_argument("--device", default="auto", help="auto, cuda, npu or cpu (passed to every notebook)")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes everywhere (without it: small on the CPU, full on a device)"
    )
    parser.add_argument("--out", default=None, help="folder of a notebook run (default: reports/latest)")
    parser.add_argument("--dtype", default=None, help="override every notebook's dtype parameter, e.g. fp16")
    parser.add_argument("--notebooks", default=None, help="notebooks folder (default: ./notebooks)")
    parser.add_argument("--only", default="", help="comma list of notebook names, e.g. rms_norm,index (default: all)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds a cell may run")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at once (default 1: timings undisturbed)")
    parser.add_argument(
        "--no-warm-ahead",
        action="store_true",
        help="start each notebook's kernel at its turn (default on a GPU or NPU: started, imports made, "
        "while the notebook before runs)",
    )
    return parser


def main(argv) -> int:
    """``workbench report``: run the notebooks into a report (``--out``), or, given a run's folder,
    re-render its report from its files (``workbench report DIR``) or gate it (``--check``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: give 1 or more notebooks at once")
    if args.timeout < 1:
        raise ValueError(f"--timeout {args.timeout}: give a number of seconds of 1 or more")
    for folder, option in ((args.dir, ""), (args.baseline, "--baseline ")):
        if folder is not None and not Path(folder).is_dir():  # said before the report's modules load
            raise ValueError(f"{option}{folder}: no such folder; give a folder written by {RUN_FOLDERS}")
    from workbench.reports import gate
    from workbench.reports.notebook_report import build_report

    pct = gate.check_pct(args.fail_on_regression, args.baseline is not None)
    baseline = gate.load_records(args.baseline, "--baseline") if args.baseline else None
    if args.render is not None:
        if args.dir is not None or args.check or baseline is not None:
            raise ValueError("--render DIR rebuilds pages: give no other run folder, --check or --baseline with it")
        return _render(Path(args.render), Path(args.out) if args.out else None)
    if args.dir is not None:
        if args.out is not None:
            raise ValueError(
                "give either a run's folder DIR (re-render or --check it) or --out DIR (run the notebooks), not both"
            )
        folder = Path(args.dir)
        records = gate.load_records(folder, "")
        if args.check or baseline is not None:
            result = _gate(folder, records, baseline, pct, args.baseline)
            if args.check:
                return 0 if result.ok else 1
        return _render(folder, None)
    only = [t.strip() for t in args.only.split(",") if t.strip()] or None
    from workbench.device import get_device

    get_device(args.device)  # a device that is not here: say so once, before any notebook runs
    out = Path(args.out or "reports/latest")
    check_output_path(out, "--out", folder=True)
    from workbench.reports.notebooks import default_notebooks_dir, find_notebooks

    # one counted line per notebook: the count is known before the first one runs
    total = len(find_notebooks(Path(args.notebooks) if args.notebooks else default_notebooks_dir(), only))
    with Progress(total or None, "report") as shown:
        result = build_report(
            out,
            device=args.device,
            quick=args.quick,
            dtype=args.dtype,
            notebooks_dir=Path(args.notebooks) if args.notebooks else None,
            only=only,
            timeout=args.timeout,
            jobs=args.jobs,
            warm_ahead=False if args.no_warm_ahead else None,
            show_code=args.show_code,
            log=lambda text: shown.line(text, count=not text.startswith("report:")),  # a line per notebook
            on_start=lambda name: shown.doing(name),
        )
    status = 0 if result["ok"] else 1
    if args.check or baseline is not None:
        verdict = _gate(out, gate.load_records(out, "--out"), baseline, pct, args.baseline)
        if args.check and not verdict.ok:
            status = 1
    return status


def _render(folder: Path, out: Path | None) -> int:
    """The pages of the run folder ``folder`` (or of every run folder under it) into ``out``."""
    from workbench.reports import render

    if not folder.is_dir():
        raise ValueError(f"--render {folder}: no such folder")
    if out is not None:
        check_output_path(out, "--out", folder=True)
    if render.kind_of(folder) is not None:
        done = [render.render_folder(folder, out)]
    else:
        done = render.render_tree(folder, out)
    for r in done:
        print(f"{r.kind}: {r.page}")
    return 0


def _gate(folder: Path, records: list[dict], baseline, pct, baseline_dir):
    """Check ``folder``'s records (and compare them with ``baseline``); print the verdict."""
    from workbench.reports import gate

    result = gate.check(
        records,
        baseline,
        pct,
        failures=gate.load_failures(folder),
        baseline_name=scrub_paths(str(baseline_dir)) if baseline_dir else None,
    )
    if baseline is not None:
        print(result.table() or "no cell of ours in common with the baseline")
        gate.write(result, folder)
    print(result.message())
    return result
