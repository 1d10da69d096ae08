"""``workbench npu-check``: compile every family's NPU kernels with the real Ascend compiler.

    workbench npu-check [--defaults-only] [--family rms_norm,...] [--match TEXT] [--out DIR] [--jobs N]
    workbench npu-check --calibrate rms_norm      # sweep tiles, record the UB boundary next to the family

No machine here has an Ascend NPU, but the compiler's front half runs on a CPU: triton-ascend
lowers a kernel to Ascend adapter IR (``.ttadapter``) and BiShengIR (``bishengir-compile``) plans
its Unified Buffer and lowers it through BiShengHIR, stopping only at CANN's ``hivmc``. That is
enough to know whether a configuration compiles, overflows the UB, or uses something
triton-ascend rejects.

How: :mod:`.env` builds or reuses a separate virtualenv with triton-ascend (it replaces
``triton``); :mod:`.worker` runs inside it (``jobs`` processes, cases sharded between them),
compiles every :class:`kernels.spec.NpuCompileCase` that the families' ``npu.npu_compile_cases()``
return, and :mod:`.classify` reads the verdict. :func:`run_check` does all of it for a
:class:`CheckOptions` and writes CSV/JSON; :mod:`workbench.cli.npu_check` prints the table.

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
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
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


def families_of(requested: str) -> list[str]:
    """The families a comma list names (every family for an empty one); ValueError for an unknown one."""
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


@dataclass
class CheckOptions:
    """What ``workbench npu-check`` asks for (its options, one field each)."""

    families: list[str]
    out: Path
    defaults_only: bool = False
    match: list[str] = field(default_factory=list)
    jobs: int = 2
    venv: Path | None = None
    wheels: Path | None = None
    download: bool = True
    install_timeout: float = 480.0
    timeout: float = 900.0
    case_timeout: float = 300.0
    cases: str | None = None  # MODULE:FUNC providing the cases
    calibrate: bool = False  # sweep the one family's ub_calibration_cases and record the boundary
    keep: bool = False


@dataclass
class CheckOutcome:
    rows: list[dict]
    notes: list[dict]
    problems: list[str]
    summary: dict
    versions: dict
    calibration: Path | None = None

    @property
    def failed_defaults(self) -> list[dict]:
        return [r for r in self.rows if r.get("default") and r.get("verdict") != "OK"]

    @property
    def ok(self) -> bool:
        return not (self.failed_defaults or [n for n in self.notes if n.get("error")] or self.problems)


class Unchecked(RuntimeError):
    """The triton-ascend environment could not be built or reused: nothing was compiled."""


def run_check(options: CheckOptions, log=print) -> CheckOutcome:
    """Build or reuse the environment, compile every case, classify, write ``npu_check.csv`` /
    ``.json`` (and the calibration with ``calibrate``) into ``options.out``; ``log`` gets the
    progress lines. :class:`Unchecked` when the environment cannot be had."""
    from workbench.npu_check import env as npu_env

    t0 = time.perf_counter()
    families = options.families
    cases_provider = f"kernels.{families[0]}.npu:ub_calibration_cases" if options.calibrate else options.cases
    out_dir = Path(options.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log(f"npu-check: families {', '.join(families)}; preparing the triton-ascend environment …")
    with open(out_dir / "env.log", "a") as env_log:
        try:
            env = npu_env.ensure_env(
                options.venv,
                options.wheels,
                download=options.download,
                timeout=options.install_timeout,
                log=env_log,
            )
        except npu_env.EnvUnavailable as exc:
            raise Unchecked(f"{exc} (log: {out_dir / 'env.log'})") from exc
    versions = _versions(env.python)
    how = f"built in {env.seconds:.0f} s" if env.built else "reused"
    log(f"npu-check: environment {env.venv} ({how}): " + ", ".join(f"{k} {v}" for k, v in versions.items()))

    work = Path(tempfile.mkdtemp(prefix="npu-check-", dir=out_dir if options.keep else None))
    t1 = time.perf_counter()
    rows, notes, problems = run_workers(
        env.python,
        families,
        work,
        max(1, options.jobs),
        defaults_only=options.defaults_only,
        match=options.match,
        cases=cases_provider,
        case_timeout=options.case_timeout,
        total_timeout=options.timeout,
        keep=options.keep,
    )
    compile_seconds = time.perf_counter() - t1
    for shard_log in work.glob("shard*.log"):
        shutil.copy(shard_log, out_dir / f"worker-{shard_log.name}")
    if not options.keep:
        shutil.rmtree(work, ignore_errors=True)

    from workbench.npu_check.classify import UB_BITS_910B

    rows = [_annotate(r, r.get("available_bits") or UB_BITS_910B) for r in rows]
    counts = {v: sum(1 for r in rows if r.get("verdict") == v) for v in ("OK", "UB overflow", "compile error")}
    disagree = [r for r in rows if r.get("model_agrees") is False]
    summary = {
        "cases": len(rows),
        "defaults": sum(1 for r in rows if r.get("default")),
        "failed_defaults": sum(1 for r in rows if r.get("default") and r.get("verdict") != "OK"),
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
    outcome = CheckOutcome(rows, notes, problems, summary, versions)
    if options.calibrate:
        from workbench.npu_check.calibration import write_calibration

        outcome.calibration = write_calibration(families[0], rows, versions)
    return outcome
