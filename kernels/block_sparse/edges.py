"""How a sum layer's programs find their edges: gathered from ``cids`` / ``pids``, or computed.

Every sum-layer kernel starts a tile by reading the child rows ``cids[g, ks]`` and parameter
offsets ``pids[g, ks]`` of its edges, and only then can it issue the loads of the children and
the weights: two dependent trips to memory before any arithmetic. At small batch a program's
whole life is a few such trips, so the first one is a visible part of it: on the H100 the warm
forward at batch 2 (L = 1024, one tile) took 5.60 us gathering its edges and 4.54 computing them
(reports/h100-block-sparse/small_batch_sweep.md).

Many layers' indices are an affine function of the block and the edge. The HMM's transition
layer and the suite's layer (one block of L nodes over L children, parameters laid out
``[G, K, bs]``) are::

    cids[g, k] = child0 + g * child_step + k
    pids[g, k] = param0 + g * param_step + k * block_size

For such a layer the kernels compute both from four integers (``AFFINE=True``,
tile_math.load_edges) and load nothing to find their edges; the weights of a node tile are then
provably contiguous runs, which Triton can load as vectors. PyJuice's small-batch CUDA forward
makes the same check (contiguous children, ``block_size``-strided parameters) and falls back
to its gathering kernel otherwise; so do we.

On the NPU "auto" gathers: the Ascend compiler gives computed edges more Unified Buffer than the
calibrated model allows (``workbench npu-check``: both flow kernels overflow at the batch-1
default tile, 1.64 and 4.33 Mbit of 1.57; the forward fits only single-buffered), and there is no
NPU here to time whether they would pay. ``EDGES="affine"`` still runs them there.

:func:`edge_layout` tells which form a layer takes. It reads the indices (one host sync), so
callers remember its answer per index tensor and version (``kernels.block_sparse._memo``), as
they do the range checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# The call option: "auto" computes the edges where the layout allows on the GPU and gathers on the
# NPU (below); "affine" asks for computed edges (an error where the layout has no affine form);
# "gather" always loads them.
EDGES = ("auto", "affine", "gather")


@dataclass(frozen=True)
class EdgeLayout:
    """``affine``: the four integers below give every edge; else the kernels load cids/pids."""

    affine: bool = False
    child0: int = 0
    child_step: int = 0
    param0: int = 0
    param_step: int = 0

    def kernel_args(self) -> tuple:
        """The kernels' ``child0, child_step, param0, param_step`` arguments (zeros when gathered)."""
        return (self.child0, self.child_step, self.param0, self.param_step)


GATHER = EdgeLayout()


def check_edges(value) -> str:
    if value not in EDGES:
        raise ValueError(
            f"EDGES={value!r} is not allowed; use one of {', '.join(EDGES)} (auto computes each edge's child row "
            "and parameter offset on the GPU where cids/pids are affine in the block and edge, affine asks for "
            "that, gather always loads them)"
        )
    return value


def choose(option: str, impl: str, layout) -> EdgeLayout:
    """The layout the kernels take: ``layout()`` (the layer's :func:`edge_layout`, asked only
    when needed) for "affine", and for "auto" on the GPU; :data:`GATHER` otherwise."""
    if check_edges(option) == "gather" or (option == "auto" and impl == "npu"):
        return GATHER
    found = layout()
    if option == "affine" and not found.affine:
        raise ValueError(
            "EDGES='affine' needs cids[g, k] = child0 + g*child_step + k and pids[g, k] = param0 + g*param_step + "
            "k*block_size for every block g and edge k; this layer's indices are not of that form: use "
            "EDGES='auto' or 'gather'"
        )
    return found


def edge_layout(cids: torch.Tensor, pids: torch.Tensor, block_size: int) -> EdgeLayout:
    """The affine form of ``cids`` / ``pids [G, K]`` if they have one, else :data:`GATHER`.

    Affine: ``cids[g, k] = child0 + g * child_step + k`` and ``pids[g, k] = param0 + g * param_step
    + k * block_size`` for every ``g, k``. One host sync: the form is tested on the device, and the
    answer and the four integers come back together."""
    n_blocks, n_edges = cids.shape
    if cids.numel() == 0:
        return GATHER
    c = cids.to(torch.int64)
    p = pids.to(torch.int64)
    second = min(1, n_blocks - 1)  # one block: both steps are 0
    child0, param0 = c[0, 0], p[0, 0]
    child_step, param_step = c[second, 0] - child0, p[second, 0] - param0
    g = torch.arange(n_blocks, device=c.device)[:, None]
    k = torch.arange(n_edges, device=c.device)[None, :]
    fits = (c == child0 + g * child_step + k).all() & (p == param0 + g * param_step + k * block_size).all()
    affine, *ints = torch.stack([fits.to(torch.int64), child0, child_step, param0, param_step]).tolist()
    return EdgeLayout(True, *ints) if affine else GATHER
