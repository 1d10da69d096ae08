#!/usr/bin/env python
"""Write each family's Ascend910B table: today's compile-checked NPU defaults, untimed.

No NPU is reachable here, so nothing is timed: per size of the family's tune grid
(``KernelSpec.tuning``) the table holds the tiles the family's ``npu.resolve_tiles`` picks for
an Ascend910B (48 vector cores, ``on_npu=True``), the configurations ``workbench npu-check
--defaults-only`` compiles with the real Ascend front end in CI. The tables say so
(``"measured": false``; records that read them say ``(untimed)``). Run again when the NPU
defaults change::

    python benchmarks/npu_default_tables.py            # writes kernels/<family>/tuned/npu_Ascend910B.json
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import kernels
from kernels import tuned_tables
from kernels.block_sparse import npu as block_sparse_npu
from kernels.fused_add_rms_norm import npu as fused_npu
from kernels.rms_norm import npu as rms_npu
from kernels.scalar_ops import npu as scalar_npu
from workbench.provenance import code_version
from workbench.record import versions

KEY = "npu:Ascend910B"
CORES = 48  # Ascend 910B: 24 AI cores x 2 vector cores
BF16 = 2


def _rows(tuning):
    return tuning.problem.get("rows", 4096)


# family -> size -> the NPU defaults at that size (plain dict of tiles)
DEFAULTS = {
    "rms_norm": lambda t, h: rms_npu.resolve_tiles(_rows(t), h, CORES, BF16, on_npu=True),
    "fused_add_rms_norm": lambda t, h: fused_npu.resolve_tiles(_rows(t), h, CORES, BF16, on_npu=True),
    "scalar_ops": lambda t, n: scalar_npu.resolve_tiles(elem_bytes=BF16, on_npu=True),
    "block_sparse": lambda t, b: block_sparse_npu.resolve_tiles(
        1, t.problem["block_size"], t.problem["K"], b, CORES, on_npu=True
    ),
}


def table(family: str) -> dict:
    tuning = kernels.get(family).tuning
    buckets = []
    for size in tuning.sizes:
        tiles = dataclasses.asdict(DEFAULTS[family](tuning, size))
        buckets.append({"size": size, "tiles": tiles, "kernel_ms": None})
    return {
        "schema": tuned_tables.SCHEMA,
        "family": family,
        "device_key": KEY,
        "knob": tuning.knob,
        "variant": "npu" if family != "scalar_ops" else "triton_npu",
        "mode": tuning.mode,
        "dtype": tuning.dtype,
        "problem": dict(tuning.problem),
        "measured": False,
        "provenance": {
            "date": dt.date.today().isoformat(),
            "commit": code_version(),
            **{k: versions()[k] for k in ("torch", "triton")},
            "command": "python benchmarks/npu_default_tables.py",
            "note": "compile-checked defaults, no NPU to time on: the tiles npu.resolve_tiles picks for an "
            "Ascend910B (48 vector cores), compiled by `workbench npu-check --defaults-only` in CI",
        },
        "buckets": buckets,
    }


def main() -> int:
    for family in DEFAULTS:
        path = tuned_tables.table_dir(family) / tuned_tables.file_name(KEY)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(table(family), indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
