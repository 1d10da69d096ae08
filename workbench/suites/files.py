"""A suite run's files: records (CSV / JSON), judged rows, suite.json; resuming a run in parts."""

from __future__ import annotations

import csv
import importlib.metadata as md
import json
from dataclasses import asdict
from pathlib import Path

from workbench.store import write_csv, write_json
from workbench.suites.context import SuiteRun
from workbench.suites.judge import RatioRow
from workbench.suites.targets import PEER_DISTRIBUTIONS, Suite


def load_previous(suite: Suite, device_kind: str, out) -> SuiteRun | None:
    """An earlier run of ``suite`` on ``device_kind`` as ``out``'s suite.json / records.json hold
    it (None when there is none, or it is another suite or device kind)."""
    out = Path(out)
    try:
        body = json.loads((out / "suite.json").read_text())
        records = json.loads((out / "records.json").read_text())
    except (OSError, ValueError):
        return None
    if body.get("suite") != suite.name or body.get("device_kind") != device_kind:
        return None
    run = SuiteRun(suite.name, device_kind, body.get("device_name", ""))
    for info in body.get("targets", []):
        name = info["name"]
        start = len(run.records)
        run.records.extend(records[i] for i in info.get("records", []))
        run.target_records[name] = list(range(start, len(run.records)))
        if info.get("wall"):
            run.target_wall[name] = dict(info["wall"])
    run.rows = [RatioRow(**row) for row in body.get("rows", [])]
    run.failures = list(body.get("failures", []))
    run.missing = dict(body.get("missing", {}))
    return run


def combined(run: SuiteRun, earlier: SuiteRun | None, suite: Suite) -> SuiteRun:
    """``run`` plus every target of ``earlier`` that ``run`` did not measure: a suite too long
    for one command runs in parts (``--only`` ... ``--resume``) into one folder."""
    if earlier is None:
        return run
    both = SuiteRun(run.suite, run.device_kind, run.device_name)
    for source in (earlier, run):
        for name, indices in source.target_records.items():
            if source is earlier and name in run.target_records:
                continue
            start = len(both.records)
            both.records.extend(source.records[i] for i in indices)
            both.target_records[name] = list(range(start, len(both.records)))
            both.rows.extend(r for r in source.rows if r.target == name)
            both.failures.extend(f for f in source.failures if f.startswith(f"{name}:"))
            if name in source.missing:
                both.missing[name] = source.missing[name]
            if name in source.target_wall:
                both.target_wall[name] = source.target_wall[name]
    order = {t.name: i for i, t in enumerate(suite.targets)}
    both.rows.sort(key=lambda r: order.get(r.target, len(order)))  # stable: keeps x order per target
    return both


def peer_versions() -> dict[str, str]:
    """Installed version of each peer library (``not installed`` otherwise)."""
    out = {}
    for dist in PEER_DISTRIBUTIONS:
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def target_info(target) -> dict:
    """A target as plain data (for ``suite.json``; the report reads it)."""
    info = {
        "name": target.name,
        "title": target.title,
        "kind": target.kind,
        "family": target.family,
        "mode": target.mode,
        "axis": target.axis(),
        "values": list(target.values),
        "ours": target.ours,
        "peers": None if getattr(target, "peers", None) is None else list(target.peers),
        "min_ratio": [asdict(r) for r in target.min_ratio],
        "min_pct_bw": [asdict(r) for r in getattr(target, "min_pct_bw", ())],
    }
    if target.kind == "chain":
        info.update({"T": target.T, "L": target.L, "V": target.V, "alt_peer": target.alt_peer})
    return info


RATIO_COLUMNS = tuple(RatioRow.__dataclass_fields__)


def wall_table(target_wall: dict) -> str:
    """Per target: wall seconds and their split into setup, compile, check, timing and other."""
    cols = ("wall", "setup", "compile", "check", "timing", "other")
    lines = [f"{'target':32s} " + " ".join(f"{c:>8s}" for c in cols)]
    for name, split in target_wall.items():
        lines.append(f"{name:32s} " + " ".join(f"{split.get(c, 0.0):8.1f}" for c in cols))
    totals = {c: sum(split.get(c, 0.0) for split in target_wall.values()) for c in cols}
    lines.append(f"{'all targets':32s} " + " ".join(f"{totals[c]:8.1f}" for c in cols))
    return "\n".join(lines)


def write_files(run: SuiteRun, suite: Suite, out) -> dict:
    """``records.csv`` / ``records.json`` (every record), ``ratios.csv`` (the judged rows) and
    ``suite.json`` (targets, which records each took, rows, failures) into ``out``."""

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records = run.record_dicts()
    paths = {
        "records_csv": write_csv(records, out / "records.csv"),
        "records_json": write_json(records, out / "records.json"),
    }
    with (out / "ratios.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["suite", *RATIO_COLUMNS])
        writer.writeheader()
        for row in run.rows:
            writer.writerow({"suite": run.suite, **row.to_dict()})
    paths["ratios_csv"] = out / "ratios.csv"
    taken = [t for t in suite.targets if t.name in run.target_records]
    body = {
        "suite": suite.name,
        "title": suite.title,
        "device_kind": run.device_kind,
        "device_name": run.device_name,
        "targets": [
            {**target_info(t), "records": run.target_records[t.name], "wall": run.target_wall.get(t.name)}
            for t in taken
        ],
        "missing": run.missing,
        "rows": [r.to_dict() for r in run.rows],
        "failures": run.failures,
        "compile_ahead": run.compile_ahead,
    }
    (out / "suite.json").write_text(json.dumps(body, indent=1, default=str))
    paths["suite_json"] = out / "suite.json"
    return paths
