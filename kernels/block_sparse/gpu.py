"""Block-sparse probabilistic-circuit layers on GPUs with Triton.

Notation (docs/families.md): ``element_mars [M, B]`` log-probabilities, batch innermost; ``G`` blocks of
``bs`` nodes; ``cids [G, K]`` child rows; ``pids [G, K]`` parameter offsets (node ``i`` of block
``g`` on edge ``k`` uses ``params[pids[g, k] + i]``).

Sum layer forward
-----------------
::

    out[g*bs + i, b] = log sum_k p[g, k, i] * exp(em[cids[g, k], b])

A program owns ``PROGRAM_M`` nodes of one block (walked in sub-tiles of ``TILE_M``) times
``BLOCK_B`` batch columns, and streams the K edges in chunks of ``TILE_K``, keeping a running
max ``m`` and an accumulator ``acc = sum_k p * exp(em - m)``; a chunk that raises the max
rescales ``acc`` by ``exp(m_old - m_new)``. At the end ``out = log(acc) + m``. Three forms (the
kernel's ``FORM``):

- Broadcast (any tile; ``FORM="node"``, the split rule's, or ``SHIFT="node"`` given): per node
  and column, over ``t = log p + em`` — ``m[i, b] = max_k t``, ``acc += sum_k exp(t - m)``. Exact whatever the
  weights: a zero weight is ``t = -inf`` and never sets the shift, so a child far above its node
  but not connected to it (weight 0) cannot push the real terms into underflow.
- ``tl.dot`` (``TILE_M, TILE_K, BLOCK_B >= 16``; IEEE fp32): the shift must not depend on the
  node, so ``m[b] = max_k (em + log w_k)`` with ``w_k`` the largest weight of edge k over the
  tile's nodes, and ``acc += p @ exp(min(em - m, 80))``. Edges no node of the tile uses do not
  set the shift; ``p * exp(em - m) <= p / w_k <= 1`` bounds every term. The clamp at 80 only
  keeps zero-weight edges finite (``0 * e^80 = 0``, never ``0 * inf``); it would bite only for a
  positive weight below ``e^-80`` on the dominant child. Nodes of one tile with very different
  weight patterns can still lose digits to underflow here (a node whose connected children are
  all ~87 nats below another node's); the broadcast form has no such case.
- Per-column broadcast (any tile; ``SHIFT="column"``, ``FORM="column"``): the ``tl.dot`` form's
  shift and bounds with ``acc += sum_k p * exp(min(em - m, 80))`` as broadcast products, so a
  chunk takes TILE_K x BLOCK_B exponentials and TILE_K logarithms instead of TILE_M x TILE_K x
  BLOCK_B of each; it shares the ``tl.dot`` form's underflow caveat. The small rule takes it at
  every batch below 16 (:data:`GPU_COLUMN_SHIFT_FROM_BATCH`): the exact form's exponentials and
  logarithms were a measured part of the cost, most of it with computed edges (edges.py).

-inf without selects: the shift used is ``max(m, -FLT_MAX)``, finite even when every child so far
is -inf. Then ``exp(-inf - shift) = 0``, a rescale from ``m_old = -inf`` is ``exp(-inf) = 0``, and a
node whose children are all -inf ends with ``acc = 0`` and ``log(0) + shift = -inf``. Padding
(edges beyond K, batch columns beyond B) is loaded as ``em = -inf`` and ``p = 0``, so it adds 0.

Two tilings (``heuristic``):

- ``large`` (designed for large batch): ``BLOCK_B`` 16 … 64 so the dot path applies (64 x 16
  chunks, 8 warps where the tile is big), and one program walks *all* ``bs`` nodes of its block
  (``PROGRAM_M = bs``). The grid is
  ``G x cdiv(B, BLOCK_B)``: at batch 1 with one block of 1024 nodes that is a single program,
  one SM busy — the small-batch pathology the issue describes.
- ``small``: node tiles of ``TILE_M = 4`` (8 at batch 1) are separate programs (``PROGRAM_M = TILE_M``),
  shifted per column from batch 2, and
  ``TILE_K`` is decoupled from the batch (as wide as the 16384-element broadcast tile allows), so
  batch 1 with 1024 nodes runs 128 programs. From batch 16 it takes the ``tl.dot`` form in
  16-node programs (64 at L = 1024) with a two-stage pipelined edge loop.
- ``auto``: ``large`` when its grid already has at least one program per SM, else ``small``.

Sum layer backward
------------------
With linear node flows ``F [G*bs, B]`` (autograd: ``F = d loss / d out``) the edge flows are::

    C[g, i, k, b] = F[g*bs + i, b] * p[g, k, i] * exp(em[cids[g, k], b] - out[g*bs + i, b])
                  = F * exp(log p + em - out)

computed in that log form so a zero weight on a child far above its node gives 0, not 0 * inf.
Nodes with ``out = -inf`` contribute nothing (their ``out`` is replaced by +inf in the tile, so
the exponential is 0): the same convention as the reference's gradient.

- Element flows ``eflows[cids[g, k], b] += sum_i C``: one program per (block, ``TILE_K`` edges,
  ``BLOCK_B`` columns) walks the block's nodes in ``TILE_M`` sub-tiles, then adds its
  ``[TILE_K, BLOCK_B]`` tile to the child rows with ``tl.atomic_add``.
- Parameter flows ``pflows[pids[g, k] + i] += sum_b C``: one program per (block, ``TILE_M``
  nodes, ``TILE_K`` edges) walks the whole batch in ``BLOCK_B`` chunks (every column, masked, so
  no flow is dropped when B is not a multiple of ``BLOCK_B``), then ``tl.atomic_add``.
  ``MUL_PARAMS=False`` drops the ``p`` factor, giving ``d loss / d params`` for autograd.

Two forms (``SHIFT``; the rule takes "column" from batch 16). "node" computes ``C`` per element
as above, ``TILE_M x TILE_K x BLOCK_B`` exponentials a tile: exact for any weights. "column"
factors it (tile_math): with ``a = log|F| - out`` and one shift ``c[b] >= max_i a[i, b]`` per
column over a tile's nodes, ``C = p * G * exp(em + c)`` where ``G = sign(F) * exp(a - c)`` is in
[-1, 1], so

- element flows ``= exp(em + c) * (p^T @ G)``, the shift running over the node sub-tiles as the
  forward's does over edges, and
- parameter flows ``= p * (G @ exp(em + c)^T)``, with ``c`` taken per batch chunk,

two matrix products (``tl.dot`` at ``PRECISION`` where every side is >= 16, which is how
PyJuice's flow kernels run; broadcast products otherwise and on the NPU) and
``(TILE_M + TILE_K) x BLOCK_B`` exponentials. The bound is the forward's: ``out_i >= log p[i, k]
+ em[k]`` gives ``em[k] + c <= max_i (log|F_i| - log p[i, k])``, so the edge factor is clamped
(at 64 for the parameter flows, whose columns add up, and at 160 in two halves for the element
flows) and the clamp can bite only where a tile's dominant node reaches an edge through a weight
below about ``e^-64`` while another node of the tile carries its flow. An edge no node uses gives
exactly 0.

Scatter policy: **atomics** where flows can collide — tied parameters (several edges or blocks
sharing ``pids``), children shared by several blocks, and the element flows' node splits (the
small-batch fan-out: a block's nodes over ``E_SPLITS`` programs, node tile capped at 64) — so they
sum correctly, in an unspecified order (fp32 results may differ in the last bits between runs).
**Plain stores** (load-add-store) where the host has established one writer per address (every
``cids`` entry distinct: element flows without node splits; disjoint ``pids`` runs: parameter
flows), e.g. the HMM's transition layer at ``G = 1``: deterministic.

Split-K forward (``SPLITS > 1``, heuristic ``split``; issue 16)
--------------------------------------------------------------
At small batch a node tile's K edges are split over ``SPLITS`` programs (program axis 2), each
running the same online log-sum-exp over its slice and storing its partial (shift, scaled sum)
per node and column to a ``2 x [SPLITS, G*bs, B]`` workspace; a flat combine kernel merges the
partials (``tile_math.combine_partials``). Wider node tiles (16-32 nodes) then read the
node-contiguous weights in coalesced runs while the splits keep every SM busy. ``auto`` takes
the device's measured choice from its tuned table (``tuned/``) where there is one.

Product layer
-------------
``prod[g*bs + i, b] = sum_k node_mars[cids[g, k] + i, b]``; programs of ``BLOCK_M`` nodes x
``BLOCK_B`` columns. ``large`` lets ``BLOCK_M`` grow to a whole block at small batch (few
programs); ``small`` caps ``BLOCK_M`` at 8. The backward adds the incoming gradient (flows pass
through a product unchanged) to each child row with atomics.

Why one long module: the forward (unsplit, split-K and its combine), both flows and their
host functions share one tiling vocabulary; the file reads top to bottom as one explanation.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from kernels import tuned_tables
from kernels.block_sparse.edges import GATHER, EdgeLayout
from kernels.block_sparse.tile_math import (
    block_edges,
    check_shift,
    combine_partials,
    element_flows_of,
    forward_buffers,
    load_children,
    load_edges,
    node_rows,
    node_tile_lse,
    param_flows_of,
    product_scatter,
    product_tile,
    scatter_add,
    store_result,
    tile_coords,
    used_splits,
)
from kernels.launch import launch as _launch
from kernels.launch import replay_of
from kernels.tiling import cdiv, next_power_of_2

HEURISTICS = ("auto", "large", "small", "split")
NUM_WARPS = (1, 2, 4, 8, 16, 32)
# Largest broadcast tile TILE_M x TILE_K x BLOCK_B (elements) a program may hold in registers.
MAX_3D_TILE = 16384
MAX_TILE = 1024  # largest single tile dimension accepted
SMALL_TILE_M = 8  # node tile of the small-batch heuristic (issue: 8 for occupancy; the NPU's default)
# GPU small-batch tiles from the H100 sweep (benchmarks/tune_tiles.py, L = 1024, batch 1-16): node
# tiles of 4 (256 programs at L = 1024: more programs hide the gather latency) below batch 16,
# and from batch 16 the tl.dot form in 16-node programs (39.7 us against 83 us at batch 16).
# At batch 1 node tiles of 8 (128 programs, each one 8 x 1024 step) won with the L2 warm and cold
# alike (H100, L = 1024: 4.77 / 6.88 us against 5.50 / 7.02; reports/block-sparse-small-batch).
# From batch 2 the broadcast tile shifts per column (SHIFT="column": TILE_K x BLOCK_B exponentials
# a chunk instead of TILE_M x TILE_K x BLOCK_B, and no logarithm per weight). H100, L = 1024, the
# rule's tiles, kernel time warm / cold, us: batch 2: 5.63 / 7.18 against 6.11 / 7.55 per node;
# 4: 6.34 / 7.90 against 6.62 / 8.14; 8: 7.97 / 10.56 against 9.60 / 11.26. At batch 1 the exact
# per-node form stayed ahead with gathered edges (4.80 / 6.93 against 4.99 / 7.15;
# reports/block-sparse-small-batch), but with computed edges (edges.py) the per-column shift wins
# at batch 1 too, at every tile tried: 2xH100 sweep at d2f1928, L = 1024, warm / cold, us, TILE_M 8
# with 4 warps 3.55 / 6.00 against 5.79 / 9.52 per node, the rule's 8 warps 3.87 / 6.08 against
# 4.80 / 8.08 (reports/h100-block-sparse/small_batch_sweep.md). The H100's table adds its tiles.
GPU_SMALL_TILE_M = 4
GPU_BATCH1_TILE_M = 8
GPU_COLUMN_SHIFT_FROM_BATCH = 1
GPU_SMALL_DOT_FROM_BATCH = 16
NUM_STAGES = (1, 2, 3, 4, 5)
PRODUCT_BLOCK_M_CAP = 8  # the product layer's BLOCK_M cap of the small heuristic
COMBINE_BLOCK = 1024  # flat elements per program of the split-K combine kernel
# The tl.dot form's input precisions (Triton's input_precision on NVIDIA): fp32 FMAs, TF32 tensor
# cores (about 3 decimal digits, what PyJuice's kernels use for fp32 from batch 16), 3xTF32.
PRECISIONS = ("ieee", "tf32", "tf32x3")
SPLIT_VALUES = (1, 2, 4, 8, 16, 32, 64)  # split-K counts accepted (the Explorer's SPLITS knob)
# Split-K rule (used where the device's tuned table has no entry): node tiles of 32 nodes at
# batch <= 2 and 16 beyond (node-contiguous weight loads coalesce), and enough edge splits that
# the grid holds SPLIT_PROGRAMS_PER_CORE programs per core, each keeping >= 16 edges.
SPLIT_PROGRAMS_PER_CORE = 4
SMALL_BWD_TILE_M = 64  # element flows at small batch: node tile cap, so node splits fan out
# The factored flows' tl.dot tiles from batch 16 (TILE_M, TILE_K, BLOCK_B cap), from the H100 sweep
# (benchmarks/tune_tiles.py --only block_sparse_backward, L = 1024, TF32, each kernel alone, atomics,
# us): parameter flows 20.0 / 21.6 / 24.9 at batch 16 / 32 / 64 with 32 x 64 x 16 (the first rule's
# 64 x 64 x 64: 38.7 / 40.0 / 70.3); element flows 13.4 / 15.8 / 18.6 with 32 x 64 x 32 and 8 node
# splits at batch 64 (the first rule's 32 x 32 x 64: 13.4 / 16.2 / 22.6).
DOT_BWD_E_TILES = (32, 64, 32)
DOT_BWD_P_TILES = (32, 64, 16)
DOT_BWD_NUM_WARPS = 8


# --- kernels -------------------------------------------------------------------------------
# The tile math is shared with the NPU kernels (tile_math.py); what is GPU-only here is the
# program-id tiling, int64 offsets (WIDE=True), the dead-node select and the tl.dot form.
@triton.jit
def _sum_forward_kernel(
    OUT_ptr, WS_MAX_ptr, WS_SUM_ptr, EM_ptr, P_ptr, CIDS_ptr, PIDS_ptr, n_batch, n_edges, block_size, n_rows,
    k_per_split, child0, child_step, param0, param_step, TILE_M: tl.constexpr, TILE_K: tl.constexpr,
    BLOCK_B: tl.constexpr, PROGRAM_M: tl.constexpr, FORM: tl.constexpr, SPLIT: tl.constexpr,
    PRECISION: tl.constexpr, AFFINE: tl.constexpr,
):  # fmt: skip
    """out = log sum_k p * exp(em) for PROGRAM_M nodes of one block x BLOCK_B batch columns.

    ``FORM``: "node" (broadcast, a shift per node and column), "column" (broadcast products, a
    shift per column) or "dot" (``tl.dot``, a shift per column); ``PRECISION``: the ``tl.dot``
    form's input precision (the broadcast forms are fp32 throughout).

    ``SPLIT`` (split-K): program axis 2 takes edges ``[s * k_per_split, (s + 1) * k_per_split)``
    and stores its partial (shift, scaled sum) to the workspace rows ``s * n_rows + row``
    instead of the output; :func:`_sum_combine_kernel` merges them.

    ``AFFINE``: the edges are computed from ``child0 .. param_step`` (edges.py), not loaded."""
    pid_m = tl.program_id(0)
    pid_b = tl.program_id(1)
    programs_per_block = tl.cdiv(block_size, PROGRAM_M)
    g = pid_m // programs_per_block
    node_start = (pid_m % programs_per_block) * PROGRAM_M
    cols = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    col_mask = cols < n_batch
    edge_row, child_base, param_base = block_edges(g, n_edges, child0, child_step, param0, param_step, True)
    split = tl.program_id(2)  # 0 without SPLIT (a 2-D grid)
    k_lo = split * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, n_edges)

    for sub in range(0, PROGRAM_M, TILE_M):
        nodes = node_start + sub + tl.arange(0, TILE_M)
        node_mask = nodes < block_size
        run_max, acc = node_tile_lse(
            EM_ptr, P_ptr, CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, block_size, k_lo, k_hi, nodes,
            node_mask, cols, col_mask, n_batch, TILE_M, TILE_K, BLOCK_B, AFFINE, True, FORM, PRECISION,
        )  # fmt: skip
        rows = node_rows(g, block_size, nodes, True)
        mask = node_mask[:, None] & col_mask[None, :]
        store_result(OUT_ptr, WS_MAX_ptr, WS_SUM_ptr, run_max, acc, rows, cols, mask, split, n_rows, n_batch, SPLIT)


@triton.jit
def _sum_combine_kernel(OUT_ptr, WS_MAX_ptr, WS_SUM_ptr, n_elements, n_splits, BLOCK: tl.constexpr):
    """out = the split-K partials merged (tile_math.combine_partials), BLOCK flat elements a program."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    out = combine_partials(WS_MAX_ptr, WS_SUM_ptr, offs, mask, n_splits, n_elements)
    tl.store(OUT_ptr + offs, out, mask=mask)


@triton.jit
def _sum_element_flows_kernel(
    EF_ptr, NF_ptr, EM_ptr, P_ptr, OUT_ptr, CIDS_ptr, PIDS_ptr, n_batch, n_edges, block_size, m_per_split,
    child0, child_step, param0, param_step, TILE_M: tl.constexpr, TILE_K: tl.constexpr, BLOCK_B: tl.constexpr,
    ATOMIC: tl.constexpr, FORM: tl.constexpr, PRECISION: tl.constexpr, AFFINE: tl.constexpr,
):  # fmt: skip
    """eflows[cids[g, k], b] += sum_i F * exp(log p + em - out) for TILE_K edges x BLOCK_B columns,
    over the nodes ``[s * m_per_split, (s + 1) * m_per_split)`` of program axis 2 (node splits:
    the small-batch fan-out; several splits add into one row, so they need ``ATOMIC``).

    ``FORM``: "node" (the exact broadcast form), "column" (factored, one shift per column, broadcast
    products) or "dot" (factored, ``tl.dot`` at ``PRECISION``). ``AFFINE``: the edges are computed
    from ``child0 .. param_step`` (edges.py), not loaded."""
    pid_k = tl.program_id(0)
    pid_b = tl.program_id(1)
    m_lo = tl.program_id(2) * m_per_split
    m_hi = tl.minimum(m_lo + m_per_split, block_size)
    k_tiles = tl.cdiv(n_edges, TILE_K)
    g = pid_k // k_tiles
    ks = (pid_k % k_tiles) * TILE_K + tl.arange(0, TILE_K)
    k_mask = ks < n_edges
    cols = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    col_mask = cols < n_batch
    edge_row, child_base, param_base = block_edges(g, n_edges, child0, child_step, param0, param_step, True)
    cid, pidx = load_edges(CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, ks, k_mask, block_size, AFFINE, True)
    kb_mask = k_mask[:, None] & col_mask[None, :]
    em = load_children(EM_ptr, cid, cols, kb_mask, n_batch)
    acc = element_flows_of(
        NF_ptr, OUT_ptr, P_ptr, g, m_lo, m_hi, pidx, k_mask, em, cols, col_mask, n_batch, block_size,
        TILE_M, TILE_K, BLOCK_B, True, True, FORM, PRECISION,
    )  # fmt: skip
    scatter_add(EF_ptr, cid[:, None] * n_batch + cols[None, :], acc, kb_mask, ATOMIC)


@triton.jit
def _sum_param_flows_kernel(
    PF_ptr, NF_ptr, EM_ptr, P_ptr, OUT_ptr, CIDS_ptr, PIDS_ptr, n_batch, n_edges, block_size, child0, child_step,
    param0, param_step, TILE_M: tl.constexpr, TILE_K: tl.constexpr, BLOCK_B: tl.constexpr, MUL_PARAMS: tl.constexpr,
    ATOMIC: tl.constexpr, FORM: tl.constexpr, PRECISION: tl.constexpr, AFFINE: tl.constexpr,
):  # fmt: skip
    """pflows[pids[g, k] + i] += sum_b F * exp((log p) + em - out) for TILE_M nodes x TILE_K edges;
    ``FORM``, ``PRECISION`` and ``AFFINE`` as in :func:`_sum_element_flows_kernel`."""
    pid = tl.program_id(0)
    m_tiles = tl.cdiv(block_size, TILE_M)
    k_tiles = tl.cdiv(n_edges, TILE_K)
    g = pid // (m_tiles * k_tiles)
    rest = pid % (m_tiles * k_tiles)
    nodes = (rest // k_tiles) * TILE_M + tl.arange(0, TILE_M)
    ks = (rest % k_tiles) * TILE_K + tl.arange(0, TILE_K)
    node_mask = nodes < block_size
    k_mask = ks < n_edges
    edge_row, child_base, param_base = block_edges(g, n_edges, child0, child_step, param0, param_step, True)
    cid, pidx = load_edges(CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, ks, k_mask, block_size, AFFINE, True)
    mk_mask = node_mask[:, None] & k_mask[None, :]
    rows = node_rows(g, block_size, nodes, True)
    acc = param_flows_of(
        NF_ptr, OUT_ptr, EM_ptr, P_ptr, rows, nodes, node_mask, cid, pidx, k_mask, mk_mask, n_batch, MUL_PARAMS,
        TILE_M, TILE_K, BLOCK_B, True, FORM, PRECISION,
    )  # fmt: skip
    scatter_add(PF_ptr, pidx[None, :] + nodes[:, None], acc, mk_mask, ATOMIC)


@triton.jit
def _product_forward_kernel(
    OUT_ptr, NM_ptr, CIDS_ptr, n_batch, n_edges, block_size, BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr,
):  # fmt: skip
    """prod[g*bs + i, b] = sum_k node_mars[cids[g, k] + i, b] for BLOCK_M nodes x BLOCK_B columns."""
    g, nodes, cols, mask = tile_coords(tl.program_id(0), tl.program_id(1), block_size, n_batch, BLOCK_M, BLOCK_B)
    acc = product_tile(NM_ptr, CIDS_ptr, g, nodes, cols, mask, n_edges, n_batch, BLOCK_M, BLOCK_B, True)
    rows = node_rows(g, block_size, nodes, True)
    tl.store(OUT_ptr + rows[:, None] * n_batch + cols[None, :], acc, mask=mask)


@triton.jit
def _product_backward_kernel(
    GRAD_IN_ptr, GRAD_OUT_ptr, CIDS_ptr, n_batch, n_edges, block_size, BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr,
):  # fmt: skip
    """grad_in[cids[g, k] + i, b] += grad_out[g*bs + i, b] (flows pass through a product)."""
    g, nodes, cols, mask = tile_coords(tl.program_id(0), tl.program_id(1), block_size, n_batch, BLOCK_M, BLOCK_B)
    rows = node_rows(g, block_size, nodes, True)
    grad = tl.load(GRAD_OUT_ptr + rows[:, None] * n_batch + cols[None, :], mask=mask, other=0.0)
    product_scatter(GRAD_IN_ptr, CIDS_ptr, grad, g, nodes, cols, mask, n_edges, n_batch, True)


# --- tiles ---------------------------------------------------------------------------------
def _pow2(v: int) -> int:
    return next_power_of_2(max(1, int(v)))


def is_power_of_two(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and (v & (v - 1)) == 0


def check_tile(name: str, value, low: int = 1, high: int = MAX_TILE):
    if not is_power_of_two(value) or not (low <= value <= high):
        raise ValueError(f"{name}={value!r} must be a power of two in [{low}, {high}] (or 'auto')")
    return value


def check_num_warps(value):
    if value not in NUM_WARPS:
        raise ValueError(f"num_warps={value!r} is not allowed; use one of {', '.join(map(str, NUM_WARPS))}")
    return value


def check_heuristic(value):
    if value not in HEURISTICS:
        raise ValueError(f"heuristic={value!r} is not allowed; use one of {', '.join(HEURISTICS)}")
    return value


@dataclass(frozen=True)
class SumForwardTiles:
    heuristic: str  # the resolved one: "large" | "small" | "custom"
    TILE_M: int
    TILE_K: int
    BLOCK_B: int
    PROGRAM_M: int
    USE_DOT: bool
    num_warps: int
    num_stages: int = 0  # 0: Triton's default software pipelining depth
    SPLITS: int = 1  # split-K: programs sharing one tile's edges (1: no split, no combine kernel)
    PRECISION: str = "ieee"  # the tl.dot form's input precision (PRECISIONS)
    SHIFT: str = "node"  # a broadcast tile's shift (tile_math.SHIFTS); "column" for tl.dot tiles
    source: str = "heuristic"  # where the tiles came from (records' tiles_source; kernels.tuned_tables)

    @property
    def form(self) -> str:
        """The kernel's FORM: "dot" for tl.dot tiles, else the broadcast tile's SHIFT."""
        return "dot" if self.USE_DOT else self.SHIFT

    def shared_bytes(self) -> int:
        """Shared memory per program of the tl.dot form, in bytes: Triton's pipeliner stages the
        fp32 loads, each of ``S`` stages a TILE_K x BLOCK_B tile of the inputs and ``S - 1`` of
        them a TILE_M x TILE_K tile of the weights (``S``: :attr:`pipeline_stages`). Exact for all 678 tl.dot tiles of a tune-sized sweep on H200s (Triton 3.6), those that
        ran and the 27 that failed at launch for want of it, after compiling for 44-70 s each.
        The broadcast form stages nothing: 0."""
        if not self.USE_DOT:
            return 0
        stages = self.pipeline_stages
        return 4 * self.TILE_K * (stages * self.BLOCK_B + (stages - 1) * self.TILE_M)

    @property
    def pipeline_stages(self) -> int:
        """The software pipeline's depth the kernel compiles with (num_stages; 0 is Triton's 3)."""
        return self.num_stages or 3

    def check_shared_memory(self, limit: int | None) -> None:
        """A ValueError naming the tiles to lower where :meth:`shared_bytes` exceeds ``limit``
        (a device's :attr:`kernels.runtime.DeviceInfo.shared_bytes_per_program`; None: unknown)."""
        need = self.shared_bytes()
        if limit is None or need <= limit:
            return
        stages = self.pipeline_stages
        raise ValueError(
            f"TILE_M={self.TILE_M}, TILE_K={self.TILE_K}, BLOCK_B={self.BLOCK_B} with {stages} pipeline stages "
            f"needs {need} bytes of shared memory per program (4 x TILE_K x ({stages} x BLOCK_B + {stages - 1} x "
            f"TILE_M)); this GPU gives a program at most {limit}: lower TILE_K, BLOCK_B or num_stages"
        )

    def grid(self, n_blocks: int, block_size: int, batch: int, n_edges: int = 1) -> tuple:
        programs = n_blocks * cdiv(block_size, self.PROGRAM_M)
        splits = used_splits(n_edges, self.SPLITS, self.TILE_K)
        if splits == 1:
            return (programs, cdiv(batch, self.BLOCK_B))
        return (programs, cdiv(batch, self.BLOCK_B), splits)


def _large_forward(block_size: int, n_edges: int, batch: int) -> dict:
    # TILE_K = 16: an IEEE fp32 tl.dot is FMA-based, and 64 x 64 chunks needed >255 registers and
    # spilled on sm_90 (cuobjdump), while 64 x 16 x 64 stays at ~190 registers with 8 warps.
    block_b = min(max(_pow2(batch), 16), 64)
    tile_m = min(_pow2(block_size), 64)
    tile_k = min(_pow2(n_edges), 16)
    if min(tile_m, tile_k) < 16:  # no dot possible: keep the broadcast tile bounded
        tile_k = min(_pow2(n_edges), max(1, 4096 // (tile_m * block_b)))
    return dict(TILE_M=tile_m, TILE_K=tile_k, BLOCK_B=block_b, PROGRAM_M=_pow2(block_size))


def _small_forward(block_size: int, n_edges: int, batch: int) -> dict:
    if batch >= GPU_SMALL_DOT_FROM_BATCH and block_size >= 16 and n_edges >= 16:
        tile_k = min(_pow2(n_edges), 64)
        return dict(TILE_M=16, TILE_K=tile_k, BLOCK_B=16, PROGRAM_M=16)
    block_b = min(_pow2(batch), 8)
    tile_m = min(_pow2(block_size), GPU_BATCH1_TILE_M if batch == 1 else GPU_SMALL_TILE_M)
    # TILE_K as wide as the broadcast tile's cap allows (fewer, longer steps over the edges). H100
    # sweep, L = 1024, kernel time cold: 7.1 / 7.5 / 8.1 / 11.3 us at batch 1 / 2 / 4 / 8
    # (TILE_K 1024, 1024, 1024, 512) against 10.5 / 12.5 / 11.7 / 19.3 at the former 4096-element
    # budget capped at 256; the H200 ran batch 1 in 6.4 us against 10.3.
    tile_k = min(_pow2(n_edges), widest_broadcast_tile_k(tile_m, block_b))
    shift = "column" if batch >= GPU_COLUMN_SHIFT_FROM_BATCH else "node"
    return dict(TILE_M=tile_m, TILE_K=tile_k, BLOCK_B=block_b, PROGRAM_M=tile_m, SHIFT=shift)


def broadcast_over_cap(tile_m: int, tile_k: int, block_b: int) -> bool:
    """A broadcast tile (a side under 16: no ``tl.dot``) holding more than MAX_3D_TILE elements."""
    return min(tile_m, tile_k, block_b) < 16 and tile_m * tile_k * block_b > MAX_3D_TILE


def widest_broadcast_tile_k(tile_m: int, block_b: int) -> int:
    """The widest TILE_K a broadcast tile of ``tile_m`` x ``block_b`` holds within MAX_3D_TILE."""
    return max(1, MAX_3D_TILE // (tile_m * block_b))


def _split_forward(n_blocks: int, block_size: int, n_edges: int, batch: int, num_cores: int) -> dict:
    """Split-K tiles: a node tile of 32 nodes at batch <= 2, else 16, x
    BLOCK_B columns, and edge splits up to SPLIT_PROGRAMS_PER_CORE programs per core. From batch
    16 the tile takes the tl.dot form (16 x 32 x 16); below it the broadcast form, TILE_K as
    wide as a 4096-element tile allows but no wider than one split's edges."""
    tm_ = min(_pow2(block_size), 32 if batch <= 2 else 16)
    dot = batch >= GPU_SMALL_DOT_FROM_BATCH and tm_ >= 16 and n_edges >= 16
    block_b = 16 if dot else min(_pow2(batch), 8)
    base = n_blocks * cdiv(block_size, tm_) * cdiv(batch, block_b)
    splits = 1
    while (
        splits < SPLIT_VALUES[-1] and base * splits < SPLIT_PROGRAMS_PER_CORE * num_cores and n_edges >= 2 * splits * 16
    ):
        splits *= 2
    per_split = _pow2(cdiv(n_edges, splits))
    tile_k = 32 if dot else max(1, min(per_split, 4096 // (tm_ * block_b), 256))
    return dict(TILE_M=tm_, TILE_K=min(tile_k, _pow2(n_edges)), BLOCK_B=block_b, PROGRAM_M=tm_, SPLITS=splits)


def check_precision(value):
    if value not in PRECISIONS:
        raise ValueError(
            f"precision={value!r} is not allowed; use one of {', '.join(PRECISIONS)} (the tl.dot form's input "
            f"precision: ieee is fp32, tf32 rounds inputs to 10-bit mantissas on tensor cores, tf32x3 sums "
            f"three TF32 products)"
        )
    return value


def check_splits(value):
    if value not in SPLIT_VALUES:
        raise ValueError(f"SPLITS={value!r} is not allowed; use one of {', '.join(map(str, SPLIT_VALUES))} (or 'auto')")
    return value


def _forward_tiles(
    n_blocks: int,
    block_size: int,
    n_edges: int,
    batch: int,
    num_cores: int,
    heuristic="auto",
    TILE_M="auto",
    TILE_K="auto",
    BLOCK_B="auto",
    PROGRAM_M="auto",
    num_warps="auto",
    num_stages="auto",
    SPLITS="auto",
    precision="ieee",
    SHIFT="auto",
) -> SumForwardTiles:
    """A heuristic's forward tiling with explicit tiles overriding it (no table: see
    :func:`resolve_forward_tiles`). ``SHIFT`` "auto": per column on a tl.dot tile; on a broadcast
    tile the small rule's (per column from batch 1, :data:`GPU_COLUMN_SHIFT_FROM_BATCH`), else
    per node and column (exact)."""
    check_heuristic(heuristic)
    check_precision(precision)
    custom = any(v != "auto" for v in (TILE_M, TILE_K, BLOCK_B, PROGRAM_M, SPLITS, SHIFT))
    if heuristic == "auto":
        large = _large_forward(block_size, n_edges, batch)
        programs = n_blocks * cdiv(block_size, large["PROGRAM_M"]) * cdiv(batch, large["BLOCK_B"])
        heuristic = "large" if programs >= num_cores else "small"
    if heuristic == "split":
        chosen = _split_forward(n_blocks, block_size, n_edges, batch, num_cores)
    else:
        chosen = (_large_forward if heuristic == "large" else _small_forward)(block_size, n_edges, batch)
        chosen["SPLITS"] = 1
    overrides = {"TILE_M": TILE_M, "TILE_K": TILE_K, "BLOCK_B": BLOCK_B, "PROGRAM_M": PROGRAM_M}
    if SPLITS != "auto":
        chosen["SPLITS"] = check_splits(SPLITS)
    for name, value in overrides.items():
        if value != "auto":
            chosen[name] = check_tile(name, value)
    if PROGRAM_M == "auto" and chosen["PROGRAM_M"] < chosen["TILE_M"]:
        chosen["PROGRAM_M"] = chosen["TILE_M"]
    if PROGRAM_M == "auto" and heuristic in ("small", "split"):
        chosen["PROGRAM_M"] = chosen["TILE_M"]
    if chosen["PROGRAM_M"] < chosen["TILE_M"]:
        raise ValueError(
            f"PROGRAM_M={chosen['PROGRAM_M']} must be >= TILE_M={chosen['TILE_M']} (a program walks PROGRAM_M "
            f"nodes in sub-tiles of TILE_M)"
        )
    tm, tk, tb = chosen["TILE_M"], chosen["TILE_K"], chosen["BLOCK_B"]
    if TILE_K == "auto" and broadcast_over_cap(tm, tk, tb):
        tk = widest_broadcast_tile_k(tm, tb)  # the rule's TILE_K, narrowed for a wider given tile
    use_dot = min(tm, tk, tb) >= 16
    if SHIFT == "auto":  # the rule's shift on a broadcast tile, else exact; a tl.dot tile's is per column
        SHIFT = "column" if use_dot else chosen.get("SHIFT", "node")
    shift = check_shift(SHIFT, use_dot)
    if broadcast_over_cap(tm, tk, tb):
        raise ValueError(
            f"TILE_M={tm} x TILE_K={tk} x BLOCK_B={tb} = {tm * tk * tb} elements exceeds the {MAX_3D_TILE}-element "
            f"broadcast tile (used when a tile is below 16, so tl.dot cannot); lower TILE_K or BLOCK_B"
        )
    if num_warps == "auto":
        # Broadcast tiles of at most 16 node-columns ran best with 8 warps (batch 1-4 sweep).
        num_warps = 8 if (use_dot and tm * tb >= 1024) or (not use_dot and tm * tb <= 16) else 4
    check_num_warps(num_warps)
    if num_stages == "auto":
        num_stages = 2 if use_dot and heuristic in ("small", "split") else 0  # 2 beat Triton's 3 at batch 16
    elif num_stages not in NUM_STAGES:
        raise ValueError(f"num_stages={num_stages!r} is not allowed; use one of {', '.join(map(str, NUM_STAGES))}")
    return SumForwardTiles(
        "custom" if custom else heuristic,
        tm,
        tk,
        tb,
        chosen["PROGRAM_M"],
        use_dot,
        num_warps,
        num_stages,
        chosen["SPLITS"],
        precision,
        shift,
    )


@functools.lru_cache(maxsize=4096)  # pure in its (hashable) arguments; asked on every call
def resolve_forward_tiles(
    n_blocks: int, block_size: int, n_edges: int, batch: int, num_cores: int, device_key=None, precision="ieee", **given
) -> SumForwardTiles:
    """The forward tiling: the device's tuned table where it has an entry, else a heuristic's
    choice, with explicit tiles (``given``: the keywords of :func:`_forward_tiles`) overriding it.

    ``device_key`` (:func:`kernels.tuned_tables.device_key`): a call that leaves every tile of
    :data:`TUNED_FORWARD_TILES` "auto" takes the table's entry for the nearest tuned batch
    (``kernels/block_sparse/tuned/``), all of its tiles together; an entry whose tiles do not
    fit this layer falls back to the heuristics, and ``source`` says why. Without an entry,
    ``auto`` is ``large`` when its grid fills the SMs, else ``small``. ``split`` is the split-K
    rule of :func:`_split_forward`. An explicit ``SPLITS`` splits any tiling's edges (``1``: no
    split). ``precision`` is the ``tl.dot`` form's input precision; broadcast tiles compute in
    fp32 whatever it is. ``source`` of the result: what records call ``tiles_source``."""
    found = tuned_tables.choose(FAMILY, device_key, batch, given, TUNED_FORWARD_TILES)
    source = found.source
    if found.tiles:  # an empty entry: the tune kept the rule at this size
        tiles = {**given, **found.tiles}
        if tiles.get("TILE_M", "auto") != "auto":
            tiles["TILE_M"] = min(tiles["TILE_M"], _pow2(block_size))
        if "heuristic" not in found.tiles:
            tiles["heuristic"] = "split" if tiles.get("SPLITS", "auto") not in ("auto", 1) else "small"
        try:
            chosen = _forward_tiles(n_blocks, block_size, n_edges, batch, num_cores, **tiles, precision=precision)
            return dataclasses.replace(chosen, heuristic=tiles["heuristic"], source=source)
        except ValueError as exc:
            source = f"heuristic (tuned tiles {found.tiles} do not fit this layer: {exc})"
    chosen = _forward_tiles(n_blocks, block_size, n_edges, batch, num_cores, **given, precision=precision)
    return dataclasses.replace(chosen, source=source)


FAMILY = "block_sparse"
# The forward tiles a tuned table sets (a call that sets one of them gets no table: "explicit").
TUNED_FORWARD_TILES = (
    "heuristic", "TILE_M", "TILE_K", "BLOCK_B", "PROGRAM_M", "num_warps", "num_stages", "SPLITS", "SHIFT",
)  # fmt: skip
tuned_tables.on_reload(resolve_forward_tiles.cache_clear)


@dataclass(frozen=True)
class SumBackwardTiles:
    heuristic: str
    # element-flow kernel: programs of TILE_K edges x BLOCK_B columns, walking nodes by TILE_M
    E_TILE_M: int
    E_TILE_K: int
    E_BLOCK_B: int
    # parameter-flow kernel: programs of TILE_M nodes x TILE_K edges, walking the batch by BLOCK_B
    P_TILE_M: int
    P_TILE_K: int
    P_BLOCK_B: int
    num_warps: int
    E_SPLITS: int = 1  # element flows: node splits of a block (the small-batch fan-out; atomics)
    SHIFT: str = "node"  # "node": the exact broadcast form; "column": the factored form (tile_math)
    PRECISION: str = "ieee"  # the factored form's tl.dot input precision (PRECISIONS)

    def e_nodes_per_split(self, block_size: int) -> int:
        """Nodes per element-flow split, a multiple of E_TILE_M."""
        return cdiv(cdiv(block_size, self.E_SPLITS), self.E_TILE_M) * self.E_TILE_M

    def form(self, tile_m: int, tile_k: int, block_b: int) -> str:
        """A flow kernel's FORM at its tile: "node", or with the per-column shift "dot" where every
        side is >= 16 (tl.dot's minimum), else "column" (broadcast products)."""
        if self.SHIFT == "node":
            return "node"
        return "dot" if min(tile_m, tile_k, block_b) >= 16 else "column"

    @property
    def element_form(self) -> str:
        return self.form(self.E_TILE_M, self.E_TILE_K, self.E_BLOCK_B)

    @property
    def param_form(self) -> str:
        return self.form(self.P_TILE_M, self.P_TILE_K, self.P_BLOCK_B)


@functools.lru_cache(maxsize=4096)  # pure in its (hashable) arguments; asked on every call
def resolve_backward_tiles(
    n_blocks: int,
    block_size: int,
    n_edges: int,
    batch: int,
    num_cores: int,
    heuristic="auto",
    TILE_M="auto",
    TILE_K="auto",
    BLOCK_B="auto",
    num_warps="auto",
    NODE_SPLITS="auto",
    SHIFT="auto",
    precision="ieee",
) -> SumBackwardTiles:
    """Backward tiles. Explicit TILE_M / TILE_K / BLOCK_B apply to both flow kernels.

    ``SHIFT`` ("auto" = "column" from batch GPU_SMALL_DOT_FROM_BATCH where the block and K are
    >= 16, else "node"): "node" is the exact broadcast form; "column" the factored form
    (tile_math), which takes ``tl.dot`` at ``precision`` where every side of a kernel's tile is
    >= 16. Its rule (the dot tiles, DOT_BWD_*, from the H100 sweep noted there): element flows in
    64-edge x up to 32-column programs walking 32-node sub-tiles, their nodes split until the grid
    has a program per core; parameter flows in 32 x 64 (node x edge) programs walking the batch by
    16 columns; 8 warps.

    The broadcast tiles: ``small`` (and ``split``) favours many programs (narrow edge tiles for
    the element flows, so 1024 edges make 128 programs at batch 1), and where that grid still has
    fewer than two programs per core it caps the element flows' node tile at SMALL_BWD_TILE_M and
    fans each block's nodes out over ``NODE_SPLITS`` programs (their partial sums meet with
    atomics); ``large`` uses wider edge and batch tiles (fewer, fatter programs, fine when the
    batch supplies the parallelism). Both keep the broadcast tile near 4096.
    """
    check_heuristic(heuristic)
    check_precision(precision)
    bs2, k2, b2 = _pow2(block_size), _pow2(n_edges), _pow2(batch)
    dot_fits = min(block_size, n_edges) >= 16
    if SHIFT == "auto":
        SHIFT = "column" if batch >= GPU_SMALL_DOT_FROM_BATCH and dot_fits else "node"
    check_shift(SHIFT)
    if heuristic == "auto":
        wide_programs = n_blocks * cdiv(n_edges, 32) * cdiv(batch, 32)
        heuristic = "large" if wide_programs >= num_cores else "small"
    e_splits = 1
    dot_rule = SHIFT == "column" and dot_fits and batch >= GPU_SMALL_DOT_FROM_BATCH
    if dot_rule:  # every side stays >= 16: block, K and batch are
        em_, ek, eb = (min(v, cap) for v, cap in zip((bs2, k2, b2), DOT_BWD_E_TILES))
        pm, pk, pb = (min(v, cap) for v, cap in zip((bs2, k2, b2), DOT_BWD_P_TILES))
        e_programs = n_blocks * cdiv(n_edges, ek) * cdiv(batch, eb)
        while e_splits * e_programs < num_cores and e_splits * em_ < block_size:
            e_splits *= 2
    else:
        if heuristic == "large":
            eb, ek = min(b2, 32), min(k2, 32)
            pb, pm, pk = min(b2, 16), min(bs2, 16), min(k2, 16)
        else:
            eb, ek = min(b2, 16), min(k2, 8)
            pb, pm, pk = min(b2, 16), min(bs2, 16), min(k2, 16)
        em_ = min(bs2, max(1, 4096 // (ek * eb)))
        pk = min(k2, max(pk, 4096 // (pm * pb)), 64)
        e_programs = n_blocks * cdiv(n_edges, ek) * cdiv(batch, eb)
        if heuristic != "large" and e_programs < 2 * num_cores:
            em_ = min(em_, SMALL_BWD_TILE_M)
            while e_splits * e_programs < 2 * num_cores and e_splits * em_ < block_size:
                e_splits *= 2
    custom = False
    if NODE_SPLITS != "auto":
        e_splits = check_splits(NODE_SPLITS)
        custom = True
    if TILE_M != "auto":
        em_ = pm = check_tile("TILE_M", TILE_M)
        custom = True
    if TILE_K != "auto":
        ek = pk = check_tile("TILE_K", TILE_K)
        custom = True
    if BLOCK_B != "auto":
        eb = pb = check_tile("BLOCK_B", BLOCK_B)
        custom = True
    if num_warps == "auto":
        num_warps = DOT_BWD_NUM_WARPS if dot_rule else 4
    check_num_warps(num_warps)
    tiles = SumBackwardTiles(
        "custom" if custom else heuristic, em_, ek, eb, pm, pk, pb, num_warps, e_splits, SHIFT, precision
    )
    for tm, tk, tb in ((em_, ek, eb), (pm, pk, pb)):
        if tiles.form(tm, tk, tb) != "dot" and tm * tk * tb > MAX_3D_TILE:
            raise ValueError(
                f"TILE_M={tm} x TILE_K={tk} x BLOCK_B={tb} = {tm * tk * tb} elements exceeds the backward's "
                f"{MAX_3D_TILE}-element broadcast tile; lower one of them (or, with SHIFT='column', make every "
                "side >= 16 for the tl.dot form)"
            )
    return tiles


@dataclass(frozen=True)
class ProductTiles:
    heuristic: str
    BLOCK_M: int
    BLOCK_B: int
    num_warps: int


@functools.lru_cache(maxsize=4096)  # pure in its (hashable) arguments; asked on every call
def resolve_product_tiles(
    n_blocks: int,
    block_size: int,
    batch: int,
    num_cores: int,
    heuristic="auto",
    BLOCK_M="auto",
    BLOCK_B="auto",
    num_warps="auto",
) -> ProductTiles:
    """``large``: BLOCK_M grows to ~4096 / BLOCK_B (a whole 1024-node block at batch <= 4);
    ``small``: BLOCK_M capped at 8, so small batches still spread over many programs."""
    check_heuristic(heuristic)
    block_b = min(_pow2(batch), 128)
    large_m = min(_pow2(block_size), max(1, 4096 // block_b))
    if heuristic == "auto":
        programs = n_blocks * cdiv(block_size, large_m) * cdiv(batch, block_b)
        heuristic = "large" if programs >= num_cores else "small"
    block_m = large_m if heuristic == "large" else min(large_m, PRODUCT_BLOCK_M_CAP)
    custom = False
    if BLOCK_M != "auto":
        block_m = check_tile("BLOCK_M", BLOCK_M)
        custom = True
    if BLOCK_B != "auto":
        block_b = check_tile("BLOCK_B", BLOCK_B)
        custom = True
    if block_m * block_b > MAX_3D_TILE:
        raise ValueError(
            f"BLOCK_M={block_m} x BLOCK_B={block_b} exceeds the {MAX_3D_TILE}-element tile; lower one of them"
        )
    if num_warps == "auto":
        num_warps = 4
    check_num_warps(num_warps)
    return ProductTiles("custom" if custom else heuristic, block_m, block_b, num_warps)


# --- host functions ------------------------------------------------------------------------
def launch(kernel, like: torch.Tensor, grid, *args, **kwargs):
    """:func:`kernels.device.launch`. In the interpreter numpy would warn about ``log(0)``, which
    these kernels take on purpose (-inf for zero weights and padding)."""
    if like.device.type == "cpu":
        with np.errstate(divide="ignore"):
            return _launch(kernel, like, grid, *args, **kwargs)
    return _launch(kernel, like, grid, *args, **kwargs)


def sum_forward(
    element_mars, params, cids, pids, block_size: int, tiles: SumForwardTiles, out=None, edges: EdgeLayout = GATHER
):
    """``out [G*block_size, B]`` (written into ``out`` when given). Inputs already validated.
    ``edges``: the layer's :func:`~kernels.block_sparse.edges.edge_layout` (affine: the kernel
    computes its edges instead of loading cids/pids); the default gathers.

    With ``tiles.SPLITS > 1`` the edges are split over that many programs per tile (split-K):
    partial (shift, scaled sum) pairs go to a ``2 x [SPLITS, G*bs, B]`` workspace and a second,
    flat kernel merges them into ``out``."""
    n_edges = cids.shape[1]
    n_rows = cids.shape[0] * block_size
    out, ws_max, ws_sum, k_per, splits = forward_buffers(element_mars, n_rows, n_edges, tiles.SPLITS, tiles.TILE_K, out)
    for kernel, grid, args, kwargs in _sum_forward_launches(
        out, ws_max, ws_sum, element_mars, params, cids, pids, block_size, tiles, edges, k_per, splits
    ):
        launch(kernel, element_mars, grid, *args, **kwargs)
    return out


def _sum_forward_launches(
    out, ws_max, ws_sum, element_mars, params, cids, pids, block_size, tiles, edges, k_per, splits
):
    """``[(kernel, grid, arguments, keywords)]`` of a sum-layer forward: the edge kernel, and
    with split-K the combine kernel after it."""
    n_blocks, n_edges = cids.shape
    batch = element_mars.shape[1]
    n_rows = n_blocks * block_size
    args = (out, ws_max, ws_sum, element_mars, params, cids, pids, batch, n_edges, block_size, n_rows, k_per)
    args += edges.kernel_args()
    kwargs = dict(
        TILE_M=tiles.TILE_M, TILE_K=tiles.TILE_K, BLOCK_B=tiles.BLOCK_B, PROGRAM_M=tiles.PROGRAM_M, FORM=tiles.form,
        SPLIT=splits > 1, PRECISION=tiles.PRECISION, AFFINE=edges.affine, num_warps=tiles.num_warps,
    )  # fmt: skip
    if tiles.num_stages:
        kwargs["num_stages"] = tiles.num_stages
    launches = [(_sum_forward_kernel, tiles.grid(n_blocks, block_size, batch, n_edges), args, kwargs)]
    if splits > 1:
        n = n_rows * batch
        combine = (out, ws_max, ws_sum, n, splits)
        launches.append(
            (_sum_combine_kernel, (cdiv(n, COMBINE_BLOCK),), combine, dict(BLOCK=COMBINE_BLOCK, num_warps=4))
        )
    return launches


class SumForwardReplay:
    """A sum-layer forward launched again from its tensors' addresses alone
    (:func:`kernels.launch.replay_of`: the edge kernel, then split-K's combine), for an eager
    plan (kernels/block_sparse/__init__.py and the HMM chain key everything else).

    ``replay(element_mars, params, cids, pids)`` allocates the output (and the split-K
    workspace) and returns it; :meth:`into` writes into given addresses and returns whether it
    launched. Either refuses (None, False) when a launch does: the caller goes the long way. A
    refused combine after a replayed edge kernel only costs that kernel again, since the long way
    rewrites the workspace and the output."""

    __slots__ = ("_forward", "_combine", "_out_shape", "workspace_shape", "_half", "_device")

    def __init__(self, forward, combine, out_shape, ws_shape, device):
        self._forward, self._combine, self._out_shape = forward, combine, out_shape
        self.workspace_shape = ws_shape  # (2, splits, rows, B) with split-K, else None
        self._device = device
        self._half = 0 if ws_shape is None else ws_shape[1] * ws_shape[2] * ws_shape[3] * 4  # bytes of ws[0]

    def __call__(self, element_mars, params, cids, pids):
        out = torch.empty(self._out_shape, dtype=torch.float32, device=self._device)
        ws = None  # held until launched
        if self.workspace_shape is not None:
            ws = torch.empty(self.workspace_shape, dtype=torch.float32, device=self._device)
        launched = self.into(
            out.data_ptr(), None if ws is None else ws.data_ptr(), element_mars.data_ptr(), params.data_ptr(),
            cids.data_ptr(), pids.data_ptr(),
        )  # fmt: skip
        return out if launched else None

    def into(self, out: int, workspace: int | None, element_mars: int, params: int, cids: int, pids: int) -> bool:
        """Launch into the output at address ``out``, with the split-K workspace (fp32, shaped
        ``workspace_shape``) at ``workspace``; without split-K the output stands in for it."""
        ws_max = ws_sum = out
        if workspace is not None:
            ws_max, ws_sum = workspace, workspace + self._half
        return self._forward(out, ws_max, ws_sum, element_mars, params, cids, pids) and (
            self._combine is None or self._combine(out, ws_max, ws_sum)
        )


def sum_forward_replay(element_mars, params, cids, pids, block_size: int, tiles: SumForwardTiles, out, edges):
    """After ``sum_forward(...)`` returned ``out``: a :class:`SumForwardReplay` of its launches,
    or None where one of them has no replay."""
    n_edges = cids.shape[1]
    n_rows = cids.shape[0] * block_size
    # The split-K workspace, if any, is a stand-in of the replay's own: the replay takes addresses.
    out, ws_max, ws_sum, k_per, splits = forward_buffers(element_mars, n_rows, n_edges, tiles.SPLITS, tiles.TILE_K, out)
    replays = replays_of(
        _sum_forward_launches(
            out, ws_max, ws_sum, element_mars, params, cids, pids, block_size, tiles, edges, k_per, splits
        ),
        element_mars,
    )
    if replays is None:
        return None
    ws_shape = None if splits == 1 else (2, splits, n_rows, out.shape[1])
    combine = replays[1] if len(replays) > 1 else None
    return SumForwardReplay(replays[0], combine, tuple(out.shape), ws_shape, out.device)


def replays_of(launches, like: torch.Tensor) -> list | None:
    """Replays (:func:`kernels.launch.replay_of`) of ``[(kernel, grid, arguments, keywords)]``
    just launched, each taking its tensor arguments' addresses in order; None where one has none."""
    replays = []
    for kernel, grid, args, kwargs in launches:
        replay = replay_of(kernel, like, grid, *args, **kwargs)
        if replay is None:
            return None
        replays.append(replay)
    return replays


def sum_backward(
    node_flows, element_mars, params, out, cids, pids, block_size: int, tiles: SumBackwardTiles, element_flows=True,
    param_flows=True, mul_params: bool = True, element_atomic: bool = True, param_atomic: bool = True,
    edges: EdgeLayout = GATHER,
):  # fmt: skip
    """``(eflows [M, B] | None, pflows [P] | None)``; ``edges`` as in :func:`sum_forward`.

    ``element_flows`` / ``param_flows``: True to allocate a zeroed buffer, a tensor to add into
    (accumulating across layers, as a chain of tied layers does), False/None to skip.
    ``mul_params=False`` returns ``d loss / d params`` instead of the parameter flows.
    ``element_atomic`` / ``param_atomic``: False only where the caller knows that no two edges
    of this call write one child row (every ``cids`` entry distinct) / one parameter (the runs
    ``pids[g, k] + [0, bs)`` disjoint); then each address has one writer and a plain
    load-add-store replaces the atomic. Node splits of the element flows always add atomically.
    """
    eflows = pflows = None
    if element_flows is not None and element_flows is not False:
        eflows = torch.zeros_like(element_mars) if element_flows is True else element_flows
    if param_flows is not None and param_flows is not False:
        pflows = torch.zeros_like(params) if param_flows is True else param_flows
    flows = (node_flows, element_mars, params, out, cids, pids, block_size, tiles, edges)
    for kernel, grid, args, kwargs in _sum_backward_launches(
        eflows, pflows, *flows, mul_params, element_atomic, param_atomic
    ):
        launch(kernel, element_mars, grid, *args, **kwargs)
    return eflows, pflows


def _sum_backward_launches(
    eflows, pflows, node_flows, element_mars, params, out, cids, pids, block_size, tiles, edges, mul_params,
    element_atomic, param_atomic,
):  # fmt: skip
    """``[(kernel, grid, arguments, keywords)]`` of a sum-layer backward: the element flows'
    kernel where ``eflows`` is a tensor, then the parameter flows' where ``pflows`` is."""
    n_blocks, n_edges = cids.shape
    batch = element_mars.shape[1]
    args = (node_flows, element_mars, params, out, cids, pids, batch, n_edges, block_size)
    launches = []
    if eflows is not None:
        m_per = tiles.e_nodes_per_split(block_size)
        splits = cdiv(block_size, m_per)
        grid = (n_blocks * cdiv(n_edges, tiles.E_TILE_K), cdiv(batch, tiles.E_BLOCK_B), splits)
        kwargs = dict(
            TILE_M=tiles.E_TILE_M, TILE_K=tiles.E_TILE_K, BLOCK_B=tiles.E_BLOCK_B,
            ATOMIC=bool(element_atomic) or splits > 1, FORM=tiles.element_form, PRECISION=tiles.PRECISION,
            AFFINE=edges.affine, num_warps=tiles.num_warps,
        )  # fmt: skip
        launches.append((_sum_element_flows_kernel, grid, (eflows, *args, m_per, *edges.kernel_args()), kwargs))
    if pflows is not None:
        grid = (n_blocks * cdiv(block_size, tiles.P_TILE_M) * cdiv(n_edges, tiles.P_TILE_K),)
        kwargs = dict(
            TILE_M=tiles.P_TILE_M, TILE_K=tiles.P_TILE_K, BLOCK_B=tiles.P_BLOCK_B, MUL_PARAMS=mul_params,
            ATOMIC=bool(param_atomic), FORM=tiles.param_form, PRECISION=tiles.PRECISION, AFFINE=edges.affine,
            num_warps=tiles.num_warps,
        )  # fmt: skip
        launches.append((_sum_param_flows_kernel, grid, (pflows, *args, *edges.kernel_args()), kwargs))
    return launches


def sum_backward_replays(
    node_flows, element_mars, params, out, cids, pids, block_size: int, tiles: SumBackwardTiles, eflows, pflows,
    mul_params: bool = True, element_atomic: bool = True, param_atomic: bool = True, edges: EdgeLayout = GATHER,
):  # fmt: skip
    """After ``sum_backward(...)`` added into ``eflows`` and ``pflows`` (tensors, or None for a
    side it skipped): its launches as replays, each of ``(its flows, node_flows, element_mars,
    params, out, cids, pids)`` addresses, in that order (element flows first); None where one has
    none. Each adds into its flows, so a caller that falls back after a refusal must run only
    the refused side the long way."""
    flows = (node_flows, element_mars, params, out, cids, pids, block_size, tiles, edges)
    launches = _sum_backward_launches(eflows, pflows, *flows, mul_params, element_atomic, param_atomic)
    return replays_of(launches, element_mars)


def product_forward(node_mars, cids, block_size: int, tiles: ProductTiles, out=None):
    n_blocks = cids.shape[0]
    batch = node_mars.shape[1]
    if out is None:
        out = torch.empty((n_blocks * block_size, batch), dtype=torch.float32, device=node_mars.device)
    kernel, grid, args, kwargs = _product_launch(_product_forward_kernel, out, node_mars, cids, block_size, tiles)
    launch(kernel, node_mars, grid, *args, **kwargs)
    return out


def product_backward(grad_out, cids, block_size: int, n_rows: int, tiles: ProductTiles, grad_in=None):
    """``grad_in [n_rows, B]``: each child row receives the gradient (flow) of its parents."""
    batch = grad_out.shape[1]
    if grad_in is None:
        grad_in = torch.zeros((n_rows, batch), dtype=torch.float32, device=grad_out.device)
    kernel, grid, args, kwargs = _product_launch(_product_backward_kernel, grad_in, grad_out, cids, block_size, tiles)
    launch(kernel, grad_out, grid, *args, **kwargs)
    return grad_in


def _product_launch(kernel, written, read, cids, block_size: int, tiles: ProductTiles):
    """``(kernel, grid, arguments, keywords)`` of a product layer's forward (``written`` the
    output, ``read`` the children) or backward (``written`` the children's flows, ``read`` the
    nodes' flows): both kernels take ``(written, read, cids)`` and the same tiles."""
    n_blocks, n_edges = cids.shape
    batch = read.shape[1]
    grid = (n_blocks * cdiv(block_size, tiles.BLOCK_M), cdiv(batch, tiles.BLOCK_B))
    kwargs = dict(BLOCK_M=tiles.BLOCK_M, BLOCK_B=tiles.BLOCK_B, num_warps=tiles.num_warps)
    return kernel, grid, (written, read, cids, batch, n_edges, block_size), kwargs


def product_replay(written, read, cids, block_size: int, tiles: ProductTiles, backward: bool = False):
    """After :func:`product_forward` (``written`` its output, ``read`` node_mars) or, with
    ``backward``, :func:`product_backward` (``written`` grad_in, ``read`` grad_out): its launch as
    a replay of ``(written, read, cids)`` addresses, or None."""
    kernel = _product_backward_kernel if backward else _product_forward_kernel
    replays = replays_of([_product_launch(kernel, written, read, cids, block_size, tiles)], read)
    return None if replays is None else replays[0]
