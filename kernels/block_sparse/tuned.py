"""Measured small-batch tiles for the sum-layer forward, per device name: what the heuristics ask first.

``TUNED[device name][batch]`` is the best configuration that ``benchmarks/tune_block_sparse.py``
found on that device for the HMM transition layer (L = 1024: one block of 1024 nodes, K = 1024)
at that batch, by kernel time (profiler, L2 flushed): ``{"SPLITS": s, "TILE_M": m}`` and,
where the sweep chose it, ``num_warps``. ``SPLITS = 1`` means an unsplit tiling won there: the
entry then names it (``"heuristic": "small" | "large"``) with its node tile. The script prints this
table ready to paste; paste it, keep the comment line it prints above each device (date,
Triton and torch versions, commit), and commit it with the records it wrote.

:func:`lookup` answers for the nearest tuned batch at or below the asked one (batches between
two tuned points take the smaller one's tiles; beyond the largest tuned batch nothing is
returned, so large batches keep the rule-based heuristics). An unknown device gets None and the
heuristics fall back to their rules (gpu.py). Nothing here is imported by the tool: plain data.
"""

from __future__ import annotations

# device name (torch.cuda.get_device_name) -> {batch: tiles}, as benchmarks/tune_block_sparse.py printed it.
TUNED: dict[str, dict[int, dict]] = {
    # 2026-11-23: benchmarks/tune_block_sparse.py --budget 0.15, torch 2.11.0+cu130, triton 3.6.0, commit 4019f82
    # (+ the wip/blocksparse kernels merged as fd33707). Forward kernel µs, best vs PyJuice's layer kernel:
    # b1 10.5 vs 12.4, b2 12.5 vs 8.3, b4 11.7 vs 8.7, b8 19.1 vs 12.3, b16 20.3 vs 26.6, b32 28.8 vs 55.4,
    # b64 46.9 vs 79.0.
    "NVIDIA H100 80GB HBM3": {
        1: {"SPLITS": 1, "TILE_M": 4, "heuristic": "small"},
        2: {"SPLITS": 1, "TILE_M": 4, "heuristic": "small"},
        4: {"SPLITS": 1, "TILE_M": 4, "heuristic": "small"},
        8: {"SPLITS": 1, "TILE_M": 4, "heuristic": "small"},
        16: {"SPLITS": 8, "TILE_M": 16, "num_warps": 4},
        32: {"SPLITS": 4, "TILE_M": 16, "num_warps": 4},
        64: {"SPLITS": 1, "TILE_M": 16, "heuristic": "small"},
    },
}

TUNED_SHAPE = {"nodes": 1024, "block_size": 1024, "K": 1024}  # the layer the table was measured on
MAX_TUNED_BATCH = 64


def lookup(device_name: str | None, batch: int, table: dict | None = None) -> dict | None:
    """The tuned tiles for ``batch`` on ``device_name`` (a copy), or None (module docstring)."""
    entries = (TUNED if table is None else table).get(device_name or "")
    if not entries or batch > max(entries):
        return None
    below = [b for b in entries if b <= batch]
    if not below:
        return None
    return dict(entries[max(below)])
