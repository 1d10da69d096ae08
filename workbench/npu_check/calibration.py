"""Recorded compiler verdicts for a family's tile sweep, and the UB boundary they show.

``workbench npu-check --calibrate FAMILY`` compiles ``kernels.FAMILY.npu.ub_calibration_cases()``
and writes ``kernels/FAMILY/ub_calibration.json``: one point per case (its tiles, the verdict,
the UB the memory plan used or the overflow's requirement) and, per kernel and dtype, the
boundary — the largest tile that compiled and the smallest that overflowed. The family's UB
model (``NpuCompileCase.ub_bytes``) is tested against these points without the compiler
(tests/test_npu_check.py), so a model change that disagrees with the compiler fails a test.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.npu_check.classify import UB_BITS_910B
from workbench.npu_check.worker import BISHENGIR_FLAGS, TARGET_ARCH

FILE_NAME = "ub_calibration.json"


def calibration_path(family: str) -> Path:
    """``kernels/FAMILY/ub_calibration.json``: the calibration lives beside the family's kernels."""
    import kernels

    return Path(kernels.__file__).resolve().parent / family / FILE_NAME


def load_calibration(family: str) -> dict | None:
    path = calibration_path(family)
    return json.loads(path.read_text()) if path.exists() else None


def _group(row: dict) -> str:
    # "forward untiled fp32 M=2 N=64" -> "forward untiled fp32": the case name without its tiles
    return " ".join(w for w in row["case"].split() if "=" not in w)


def _axis(tiles: dict) -> str | None:
    """The tile the boundary runs along: the last integer BLOCK*/TILE* tile of the case."""
    names = [k for k, v in tiles.items() if isinstance(v, int) and not isinstance(v, bool)]
    return names[-1] if names else None


def boundaries(points: list[dict]) -> dict:
    """The observed UB boundary: for every group of cases (kernel, strategy, dtype) and every value
    of the other tiles (e.g. BLOCK_SIZE_M), the largest value of the last tile (e.g. BLOCK_SIZE_N)
    that compiled, the largest that compiled still multi-buffered, and the smallest that overflowed."""
    out: dict = {}
    for p in points:
        axis = _axis(p["tiles"])
        if axis is None or p["verdict"] not in ("OK", "UB overflow"):
            continue
        rest = " ".join(f"{k}={v}" for k, v in p["tiles"].items() if k != axis and not isinstance(v, bool))
        entry = out.setdefault(_group(p), {}).setdefault(
            rest or "-", {"axis": axis, "largest_ok": None, "largest_multi_buffered": None, "smallest_overflow": None}
        )
        value = p["tiles"][axis]
        if p["verdict"] == "OK":
            entry["largest_ok"] = max(value, entry["largest_ok"] or value)
            if not p.get("single_buffered"):
                entry["largest_multi_buffered"] = max(value, entry["largest_multi_buffered"] or value)
        else:
            entry["smallest_overflow"] = min(value, entry["smallest_overflow"] or value)
    return out


def write_calibration(family: str, rows: list[dict], versions: dict) -> Path:
    keep = ("case", "kernel", "dtype", "tiles", "verdict", "single_buffered", "used_bits", "required_bits", "message")
    points = []
    for r in rows:
        p = {k: r.get(k) for k in keep}
        if p["verdict"] != "compile error":
            p.pop("message")
        points.append(p)
    data = {
        "family": family,
        "what": "Ascend compiler verdicts for the UB calibration sweep (npu.ub_calibration_cases)",
        "generated_by": f"workbench npu-check --calibrate {family}",
        "compiler": {**versions, "target": TARGET_ARCH, "bishengir_flags": list(BISHENGIR_FLAGS)},
        "available_bits": UB_BITS_910B,
        "boundary": boundaries(points),
        "points": points,
    }
    path = calibration_path(family)
    path.write_text(_dump(data))
    return path


def _dump(data: dict) -> str:
    """JSON with one line per point and per boundary row: small diffs when it is re-recorded."""
    lines = ["{"]
    items = list(data.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key in ("points", "boundary") and value:
            inner = value if key == "points" else list(value.items())
            lines.append(f" {json.dumps(key)}: {'[' if key == 'points' else '{'}")
            for j, item in enumerate(inner):
                sep = "," if j < len(inner) - 1 else ""
                if key == "points":
                    lines.append(f"  {json.dumps(item)}{sep}")
                else:
                    lines.append(f"  {json.dumps(item[0])}: {json.dumps(item[1])}{sep}")
            lines.append(f" {']' if key == 'points' else '}'}{comma}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"
