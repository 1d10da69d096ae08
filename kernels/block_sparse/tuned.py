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

# device name (torch.cuda.get_device_name) -> {batch: tiles}. Empty until a device run fills it:
# the lead's H100 run of benchmarks/tune_block_sparse.py prints the entry to paste here.
TUNED: dict[str, dict[int, dict]] = {}

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
