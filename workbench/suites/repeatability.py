"""How far two runs of one suite agree: the same verdicts, and kernel times within a tolerance.

Issue 14's test of the timing itself: run a suite twice (two processes, two device calls) and
compare. Two figures come out, with the cells behind them:

* verdict agreement - the share of judged cells (MET / MISSED / within noise) that got the
  same verdict in both runs;
* kernel agreement - the share of records of 10 us or more (kernel time) whose medians agree
  within 3%, matched by configuration (target, variant, mode, x, tile label).

Both runs are read from the files a suite run writes (``suite.json`` and ``records.json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from workbench.store import kept_path, read_json, read_records
from workbench.suites.targets import MET, MISSED, TIE

JUDGED = (MET, MISSED, TIE)
MIN_US = 10.0
TOLERANCE = 0.03


def _load(folder) -> tuple[list[dict], list[dict], list[dict]]:
    folder = Path(folder)
    try:
        body = read_json(kept_path(folder, "suite.json") or folder / "suite.json")
        records = read_records(kept_path(folder, "records.json") or folder / "records.json")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{folder}: not a suite run folder (suite.json and records.json): {exc}") from None
    targets = body.get("targets", [])
    return body.get("rows", []), records, targets


def _record_keys(records: list[dict], targets: list[dict]) -> dict[tuple, dict]:
    out = {}
    for info in targets:
        for i in info.get("records", []):
            r = records[i]
            key = (info["name"], r.get("variant"), r.get("mode"), str(r.get("x_value")), r.get("label") or "")
            out[key] = r
    return out


def compare(first, second) -> dict[str, Any]:
    """Verdict and kernel-time agreement between two suite run folders (see the module docstring)."""
    rows_a, recs_a, targets_a = _load(first)
    rows_b, recs_b, targets_b = _load(second)
    by_cell = {(r["target"], str(r["x"])): r for r in rows_a}
    cells, same, flips = 0, 0, []
    moves: dict[str, list[float]] = {}
    for rb in rows_b:
        ra = by_cell.get((rb["target"], str(rb["x"])))
        if ra is None or ra["status"] not in JUDGED or rb["status"] not in JUDGED:
            continue
        cells += 1
        if ra.get("ratio") and rb.get("ratio"):
            timing = (rb.get("timing") or "kernel").split()[0]
            moves.setdefault(timing, []).append(abs(rb["ratio"] / ra["ratio"] - 1))
        if ra["status"] == rb["status"]:
            same += 1
        else:
            flips.append(
                {
                    "target": rb["target"],
                    "x": rb["x"],
                    "first": f"{ra['status']} {_ratio(ra)}",
                    "second": f"{rb['status']} {_ratio(rb)}",
                }
            )
    keys_a, keys_b = _record_keys(recs_a, targets_a), _record_keys(recs_b, targets_b)
    timed, agree, apart = 0, 0, []
    for key, rb in keys_b.items():
        ra = keys_a.get(key)
        ka, kb = (ra or {}).get("kernel_ms"), rb.get("kernel_ms")
        if ka is None or kb is None or min(ka, kb) * 1e3 < MIN_US:
            continue
        timed += 1
        change = kb / ka - 1
        if abs(change) <= TOLERANCE:
            agree += 1
        else:
            apart.append(
                {"cell": " ".join(map(str, key)), "first_us": ka * 1e3, "second_us": kb * 1e3, "change": change}
            )
    apart.sort(key=lambda d: -abs(d["change"]))
    return {
        "verdict_cells": cells,
        "verdict_same": same,
        "verdict_share": same / cells if cells else None,
        "verdict_flips": flips,
        "kernel_cells": timed,
        "kernel_within": agree,
        "kernel_share": agree / timed if timed else None,
        "kernel_apart": apart,
        "min_us": MIN_US,
        "tolerance": TOLERANCE,
        "ratio_moves": {timing: _spread(timing, v) for timing, v in sorted(moves.items())},
    }


def _spread(timing: str, moves: list[float]) -> dict:
    """How far the judged ratios of one timing moved between the runs (|second / first - 1|),
    beside the run-to-run spread the judge allows for that timing (judge.RUN_SPREAD)."""
    from workbench.suites.judge import RUN_SPREAD

    x = np.asarray(moves, dtype=float)
    return {
        "cells": int(x.size),
        "median": float(np.median(x)),
        "p95": float(np.quantile(x, 0.95)),
        "max": float(x.max()),
        "allowed": RUN_SPREAD.get(timing),
    }


def _ratio(row: dict) -> str:
    if row.get("ratio") is None:
        return ""
    lo, hi = row.get("ratio_lo"), row.get("ratio_hi")
    return f"{row['ratio']:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "")


def summary_lines(result: dict) -> list[str]:
    """The two figures and the cells behind them, as printable lines."""

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"

    lines = [
        f"verdicts: {result['verdict_same']}/{result['verdict_cells']} cells the same ({pct(result['verdict_share'])})",
        f"kernel medians >= {result['min_us']:g} us within {100 * result['tolerance']:g}%: "
        f"{result['kernel_within']}/{result['kernel_cells']} ({pct(result['kernel_share'])})",
    ]
    for timing, m in result.get("ratio_moves", {}).items():
        allowed = "" if m["allowed"] is None else f" (the judge allows {100 * m['allowed']:g}%)"
        lines.append(
            f"{timing} ratios moved by {100 * m['median']:.1f}% at the median, {100 * m['p95']:.1f}% at the "
            f"95th percentile, {100 * m['max']:.1f}% at most, over {m['cells']} cells{allowed}"
        )
    for f in result["verdict_flips"]:
        lines.append(f"  verdict changed: {f['target']} x={f['x']}: {f['first']} -> {f['second']}")
    for a in result["kernel_apart"]:
        lines.append(
            f"  kernel apart: {a['cell']}: {a['first_us']:.1f} -> {a['second_us']:.1f} us ({100 * a['change']:+.1f}%)"
        )
    return lines
