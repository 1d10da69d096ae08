"""``workbench npu-check``: compile every family's NPU kernels with the real Ascend compiler.

    workbench npu-check [--defaults-only] [--family rms_norm,...] [--match TEXT] [--out DIR] [--jobs N]
    workbench npu-check --calibrate rms_norm      # sweep tiles, record the UB boundary next to the family

No machine here has an Ascend NPU, but the compiler's front half runs on a CPU: triton-ascend
lowers a kernel to Ascend adapter IR (``.ttadapter``) and BiShengIR (``bishengir-compile``) plans
its Unified Buffer and lowers it through BiShengHIR, stopping only at CANN's ``hivmc``. That is
enough to know whether a configuration compiles, overflows the UB, or uses something
triton-ascend rejects.

How: :mod:`.env` builds or reuses a separate virtualenv with triton-ascend (it replaces
``triton``); :mod:`.worker` runs inside it (``--jobs`` processes, cases sharded between them),
compiles every :class:`kernels.spec.NpuCompileCase` that the families' ``npu.npu_compile_cases()``
return, and :mod:`.classify` reads the verdict. This module prints the table and writes CSV/JSON.

Exit codes: 0 every default configuration is OK; 1 a default configuration is not OK (or a
family's NPU module cannot be loaded, or a worker died); 2 usage; 3 could not check (the
triton-ascend environment could not be built, e.g. the registry is unreachable) — with
``--warn-unchecked`` that last case prints a warning and exits 0, for CI.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNCHECKED = 3

CSV_COLUMNS = (
    "family",
    "case",
    "kernel",
    "dtype",
    "tiles",
    "default",
    "verdict",
    "single_buffered",
    "used_bits",
    "required_bits",
    "available_bits",
    "ub_model_bytes",
    "model_predicts_overflow",
    "model_agrees",
    "seconds",
    "front_seconds",
    "bishengir_seconds",
    "stage",
    "message",
    "constants",
)


def _families(requested: str) -> list[str]:
    import kernels

    known = kernels.families()
    if not requested:
        return known
    wanted = [f.strip() for f in requested.split(",") if f.strip()]
    unknown = [f for f in wanted if f not in known]
    if unknown:
        raise ValueError(f"unknown family {', '.join(unknown)}; families: {', '.join(known)}")
    return wanted


def _tiles_text(tiles: dict) -> str:
    parts = []
    for key, value in tiles.items():
        short = key.replace("BLOCK_SIZE_", "").replace("BLOCK_", "")
        parts.append(f"{short}={int(value) if isinstance(value, bool) else value}")
    return " ".join(parts)


def _annotate(row: dict, ub_bits: int) -> dict:
    """Add the UB model's prediction and whether the compiler agrees with it."""
    model = row.get("ub_model_bytes")
    verdict = row.get("verdict")
    if model is None or verdict not in ("OK", "UB overflow"):
        row["model_predicts_overflow"] = None if model is None else model * 8 > ub_bits
        row["model_agrees"] = None
    else:
        predicted = model * 8 > ub_bits
        row["model_predicts_overflow"] = predicted
        row["model_agrees"] = predicted == (verdict == "UB overflow")
    return row


def format_table(rows: list[dict]) -> str:
    header = (
        f"{'family':19s} {'case':62s} {'dtype':5s} {'tiles':24s} {'verdict':13s} "
        f"{'bits used|req / avail':>23s} {'model KB':>8s} {'pred':>4s} {'s':>5s}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        bits = r.get("required_bits") if r.get("verdict") == "UB overflow" else r.get("used_bits")
        avail = r.get("available_bits")
        bits_text = f"{bits if bits is not None else '-'} / {avail if avail is not None else '-'}"
        verdict = r.get("verdict", "?") + ("*" if r.get("single_buffered") else "")
        model = r.get("ub_model_bytes")
        pred = r.get("model_predicts_overflow")
        pred_text = "-" if pred is None else ("OVF" if pred else "ok")
        if r.get("model_agrees") is False:
            pred_text += "!"
        name = ("[D] " if r.get("default") else "    ") + r.get("case", "")
        lines.append(
            f"{r.get('family', ''):19.19s} {name:62.62s} {r.get('dtype', ''):5s} {_tiles_text(r.get('tiles', {})):24.24s} "
            f"{verdict:13s} {bits_text:>23s} {('-' if model is None else f'{model / 1024:.1f}'):>8s} "
            f"{pred_text:>4s} {r.get('seconds', 0) or 0:5.2f}"
        )
    return "\n".join(lines)


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            flat = dict(r)
            flat["tiles"] = _tiles_text(r.get("tiles", {}))
            flat["constants"] = json.dumps(r.get("constants", {}), sort_keys=True)
            writer.writerow(flat)


def _versions(python: Path) -> dict:
    code = (
        "import importlib.metadata as m, json;"
        "print(json.dumps({p: m.version(p) for p in ('triton-ascend', 'ascendnpu-ir', 'torch')}))"
    )
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
        return json.loads(out.stdout)
    except Exception:
        return {}


def run_workers(
    python: Path,
    families: list[str],
    workdir: Path,
    jobs: int,
    defaults_only: bool = False,
    match: list[str] | tuple = (),
    cases: str | None = None,
    case_timeout: float = 300.0,
    total_timeout: float = 900.0,
    keep: bool = False,
    log=None,
) -> tuple[list[dict], list[dict], list[str]]:
    """Run ``jobs`` worker processes over the cases; (case rows, notes, problems)."""
    from workbench.npu_check import env as npu_env
    from workbench.npu_check import worker

    root = npu_env.repo_root()
    workdir.mkdir(parents=True, exist_ok=True)
    procs = []
    for shard in range(jobs):
        out = workdir / f"shard{shard}.jsonl"
        out.write_text("")
        cmd = [
            str(python),
            worker.__file__,
            "--kernels-root",
            str(root),
            "--workdir",
            str(workdir / f"shard{shard}"),
            "--out",
            str(out),
            "--families",
            ",".join(families),
            "--shard",
            str(shard),
            "--shards",
            str(jobs),
            "--timeout",
            str(case_timeout),
        ]
        if defaults_only:
            cmd.append("--defaults-only")
        for text in match:
            cmd += ["--match", text]
        if cases:
            cmd += ["--cases", cases]
        if keep:
            cmd.append("--keep")
        logfile = open(workdir / f"shard{shard}.log", "w")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET", "PYTHONHOME")}
        procs.append(
            (subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT, env=env, cwd=workdir), out, logfile)
        )
    deadline = time.monotonic() + total_timeout
    problems = []
    for proc, _, logfile in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            problems.append(f"worker pid {proc.pid} stopped after the {total_timeout:.0f} s limit")
        logfile.close()
    rows, notes = [], []
    for shard, (proc, out, _) in enumerate(procs):
        done = False
        for line in out.read_text().splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            kind = obj.pop("type", None)
            if kind == "case":
                rows.append(obj)
            elif kind == "note":
                notes.append(obj)
            elif kind == "done":
                done = True
        if not done:
            tail = (workdir / f"shard{shard}.log").read_text(errors="replace").strip().splitlines()[-5:]
            problems.append(f"worker {shard} did not finish (exit {proc.returncode}): {' | '.join(tail)}")
    rows.sort(key=lambda r: r.get("index", 0))
    return rows, notes, problems


def main(argv=None) -> int:
    from workbench.cli import Parser  # argparse errors as one line, exit 2

    parser = Parser(prog="workbench npu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="", help="comma list (default: every family)")
    parser.add_argument("--defaults-only", action="store_true", help="only the families' default configurations")
    parser.add_argument(
        "--match", action="append", default=[], help="only cases whose name contains this text (repeatable: any)"
    )
    parser.add_argument("--out", default="results/npu_check", help="folder for npu_check.csv / .json and logs")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="parallel compile processes")
    parser.add_argument(
        "--venv", default=None, help="triton-ascend virtualenv (default $WORKBENCH_NPU_VENV or .npu-venv)"
    )
    parser.add_argument("--wheels", default=None, help="wheel cache (default ~/.cache/kernel-workbench/npu-wheels)")
    parser.add_argument("--no-download", action="store_true", help="build the environment from the wheel cache only")
    parser.add_argument("--install-timeout", type=float, default=480.0, help="seconds allowed to build the environment")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed for all compiles")
    parser.add_argument("--case-timeout", type=float, default=300.0, help="seconds allowed for one bishengir-compile")
    parser.add_argument(
        "--cases", default=None, help="MODULE:FUNC that returns the cases (instead of npu_compile_cases)"
    )
    parser.add_argument(
        "--calibrate", default=None, metavar="FAMILY", help="sweep ub_calibration_cases, record the boundary"
    )
    parser.add_argument("--keep", action="store_true", help="keep the .ttir/.ttadapter files under --out")
    parser.add_argument(
        "--warn-unchecked", action="store_true", help="exit 0 with a warning when it could not check (CI)"
    )
    parser.add_argument("--quiet", action="store_true", help="print only failures and the summary")
    args = parser.parse_args(argv)

    from workbench.npu_check import env as npu_env

    t0 = time.perf_counter()
    if args.calibrate:
        families = _families(args.calibrate)
        if len(families) != 1:
            print("npu-check: --calibrate takes one family", file=sys.stderr)
            return EXIT_USAGE
        cases_provider = f"kernels.{families[0]}.npu:ub_calibration_cases"
    else:
        families = _families(args.family)
        cases_provider = args.cases
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    print(f"npu-check: families {', '.join(families)}; preparing the triton-ascend environment …", flush=True)
    with open(out_dir / "env.log", "a") as env_log:
        try:
            env = npu_env.ensure_env(
                Path(args.venv) if args.venv else None,
                Path(args.wheels) if args.wheels else None,
                download=not args.no_download,
                timeout=args.install_timeout,
                log=env_log,
            )
        except npu_env.EnvUnavailable as exc:
            print(f"npu-check: COULD NOT CHECK — {exc} (log: {out_dir / 'env.log'})", file=sys.stderr)
            if args.warn_unchecked:
                print("npu-check: WARNING: NPU kernels were not compiled this time (registry or install problem)")
                return EXIT_OK
            return EXIT_UNCHECKED
    versions = _versions(env.python)
    how = f"built in {env.seconds:.0f} s" if env.built else "reused"
    print(f"npu-check: environment {env.venv} ({how}): " + ", ".join(f"{k} {v}" for k, v in versions.items()))

    work = Path(tempfile.mkdtemp(prefix="npu-check-", dir=out_dir if args.keep else None))
    t1 = time.perf_counter()
    rows, notes, problems = run_workers(
        env.python,
        families,
        work,
        max(1, args.jobs),
        defaults_only=args.defaults_only,
        match=args.match,
        cases=cases_provider,
        case_timeout=args.case_timeout,
        total_timeout=args.timeout,
        keep=args.keep,
    )
    compile_seconds = time.perf_counter() - t1
    for shard_log in work.glob("shard*.log"):
        shutil.copy(shard_log, out_dir / f"worker-{shard_log.name}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)

    from workbench.npu_check.classify import UB_BITS_910B

    rows = [_annotate(r, r.get("available_bits") or UB_BITS_910B) for r in rows]
    shown = rows if not args.quiet else [r for r in rows if r.get("default") and r.get("verdict") != "OK"]
    if shown:
        print(format_table(shown))
    for note in notes:
        print(f"npu-check: {note['family']}: {'ERROR: ' if note.get('error') else ''}{note['message']}")
    for problem in problems:
        print(f"npu-check: ERROR: {problem}")
    errors = [r for r in rows if r.get("verdict") == "compile error"]
    for r in errors:
        print(f"npu-check: compile error in {r['family']} / {r['case']}: {r.get('message', '')}")

    failed_defaults = [r for r in rows if r.get("default") and r.get("verdict") != "OK"]
    failed_notes = [n for n in notes if n.get("error")]
    counts = {v: sum(1 for r in rows if r.get("verdict") == v) for v in ("OK", "UB overflow", "compile error")}
    disagree = [r for r in rows if r.get("model_agrees") is False]
    summary = {
        "cases": len(rows),
        "defaults": sum(1 for r in rows if r.get("default")),
        "failed_defaults": len(failed_defaults),
        **{k.replace(" ", "_").lower(): v for k, v in counts.items()},
        "model_disagreements": len(disagree),
        "compile_seconds": round(compile_seconds, 1),
        "total_seconds": round(time.perf_counter() - t0, 1),
        "environment_seconds": round(env.seconds, 1),
        "environment_built": env.built,
    }
    payload = {
        "summary": summary,
        "environment": {"venv": str(env.venv), **versions, "python": platform.python_version()},
        "target": "Ascend910B3",
        "notes": notes,
        "problems": problems,
        "cases": rows,
    }
    (out_dir / "npu_check.json").write_text(json.dumps(payload, indent=1, default=str))
    write_csv(rows, out_dir / "npu_check.csv")
    if args.calibrate:
        from workbench.npu_check.calibration import write_calibration

        path = write_calibration(families[0], rows, versions)
        print(f"npu-check: calibration written to {path}")

    print(
        f"\nnpu-check: {summary['cases']} cases ({summary['defaults']} default): {counts['OK']} OK, "
        f"{counts['UB overflow']} UB overflow, {counts['compile error']} compile error; "
        f"UB model disagrees on {len(disagree)}; compiles {compile_seconds:.0f} s, total {summary['total_seconds']:.0f} s "
        f"-> {out_dir / 'npu_check.csv'}, {out_dir / 'npu_check.json'}\n"
        "legend: [D] default configuration (must be OK); verdict* fits only single-buffered; pred = UB model's "
        "prediction (OVF overflow, ok fits), ! = the compiler disagrees with the model"
    )
    if failed_defaults or failed_notes or problems:
        for r in failed_defaults:
            print(f"npu-check: FAIL default {r['family']} / {r['case']}: {r.get('verdict')} {r.get('message', '')}")
        return EXIT_FAILED
    return EXIT_OK
