"""Block-sparse probabilistic-circuit layers on GPUs with Triton.

Notation (DESIGN.md): ``element_mars [M, B]`` log-probabilities, batch innermost; ``G`` blocks of
``bs`` nodes; ``cids [G, K]`` child rows; ``pids [G, K]`` parameter offsets (node ``i`` of block
``g`` on edge ``k`` uses ``params[pids[g, k] + i]``).

Sum layer forward
-----------------
::

    out[g*bs + i, b] = log sum_k p[g, k, i] * exp(em[cids[g, k], b])

A program owns ``PROGRAM_M`` nodes of one block (walked in sub-tiles of ``TILE_M``) times
``BLOCK_B`` batch columns, and streams the K edges in chunks of ``TILE_K``, keeping a running
max ``m`` and an accumulator ``acc = sum_k p * exp(em - m)``; a chunk that raises the max
rescales ``acc`` by ``exp(m_old - m_new)``. At the end ``out = log(acc) + m``. Two forms:

- Broadcast (any tile, batch 1 included; ``USE_DOT=False``): per node and column, over
  ``t = log p + em`` — ``m[i, b] = max_k t``, ``acc += sum_k exp(t - m)``. Exact whatever the
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
- ``small``: node tiles of ``TILE_M = 4`` are separate programs (``PROGRAM_M = TILE_M``) and
  ``TILE_K`` is decoupled from the batch (as wide as a ~4096-element register tile allows), so
  batch 1 with 1024 nodes runs 256 programs. From batch 16 it takes the ``tl.dot`` form in
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

Scatter policy: **atomics** into zero-initialised buffers. Tied parameters (several edges or
blocks sharing ``pids``) and children shared by several blocks are therefore summed correctly; the
order of the additions is then unspecified (fp32 results may differ in the last bits between
runs). Where every parameter / child row has a single writer (an untied layer, and the HMM's
element flows when ``G = 1``) each address receives one add onto zero, which is deterministic.

Product layer
-------------
``prod[g*bs + i, b] = sum_k node_mars[cids[g, k] + i, b]``; programs of ``BLOCK_M`` nodes x
``BLOCK_B`` columns. ``large`` lets ``BLOCK_M`` grow to a whole block at small batch (few
programs); ``small`` caps ``BLOCK_M`` at 8. The backward adds the incoming gradient (flows pass
through a product unchanged) to each child row with atomics.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from kernels.launch import launch as _launch

NEG_FLT_MAX = tl.constexpr(-3.4028234663852886e38)  # the most negative finite fp32
HEURISTICS = ("auto", "large", "small")
NUM_WARPS = (1, 2, 4, 8, 16, 32)
# Largest broadcast tile TILE_M x TILE_K x BLOCK_B (elements) a program may hold in registers.
MAX_3D_TILE = 16384
MAX_TILE = 1024  # largest single tile dimension accepted
SMALL_TILE_M = 8  # node tile of the small-batch heuristic (issue: 8 for occupancy; the NPU's default)
# GPU small-batch tiles from the H100 sweep (benchmarks/tune_tiles.py, L = 1024, batch 1-16): node
# tiles of 4 (256 programs at L = 1024: more programs hide the gather latency) below batch 16,
# and from batch 16 the tl.dot form in 16-node programs (39.7 us against 83 us at batch 16).
GPU_SMALL_TILE_M = 4
GPU_SMALL_DOT_FROM_BATCH = 16
NUM_STAGES = (1, 2, 3, 4, 5)
PRODUCT_BLOCK_M_CAP = 8  # the product layer's BLOCK_M cap of the small heuristic


# --- kernels -------------------------------------------------------------------------------
@triton.jit
def _sum_forward_kernel(
    OUT_ptr,
    EM_ptr,
    P_ptr,
    CIDS_ptr,
    PIDS_ptr,
    n_batch,
    n_edges,
    block_size,
    TILE_M: tl.constexpr,
    TILE_K: tl.constexpr,
    BLOCK_B: tl.constexpr,
    PROGRAM_M: tl.constexpr,
    USE_DOT: tl.constexpr,
):
    """out = log sum_k p * exp(em) for PROGRAM_M nodes of one block x BLOCK_B batch columns."""
    pid_m = tl.program_id(0)
    pid_b = tl.program_id(1)
    programs_per_block = tl.cdiv(block_size, PROGRAM_M)
    g = pid_m // programs_per_block
    node_start = (pid_m % programs_per_block) * PROGRAM_M
    cols = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    col_mask = cols < n_batch
    edge_row = g * n_edges

    for sub in range(0, PROGRAM_M, TILE_M):
        nodes = node_start + sub + tl.arange(0, TILE_M)
        node_mask = nodes < block_size
        if USE_DOT:
            run_max = tl.full([1, BLOCK_B], float("-inf"), tl.float32)  # one shift per column
        else:
            run_max = tl.full([TILE_M, BLOCK_B], float("-inf"), tl.float32)  # one per node and column
        acc = tl.zeros([TILE_M, BLOCK_B], dtype=tl.float32)
        for k0 in range(0, n_edges, TILE_K):
            ks = k0 + tl.arange(0, TILE_K)
            k_mask = ks < n_edges
            cid = tl.load(CIDS_ptr + edge_row + ks, mask=k_mask, other=0).to(tl.int64)
            pidx = tl.load(PIDS_ptr + edge_row + ks, mask=k_mask, other=0).to(tl.int64)
            em = tl.load(
                EM_ptr + cid[:, None] * n_batch + cols[None, :],
                mask=k_mask[:, None] & col_mask[None, :],
                other=float("-inf"),
            )
            p = tl.load(P_ptr + pidx[None, :] + nodes[:, None], mask=node_mask[:, None] & k_mask[None, :], other=0.0)
            if USE_DOT:
                log_w = tl.log(tl.max(p, axis=0))  # [TILE_K]: the tile's largest weight per edge
                new_max = tl.maximum(run_max, tl.max(em + log_w[:, None], axis=0)[None, :])
                shift = tl.maximum(new_max, NEG_FLT_MAX)
                acc = acc * tl.exp(run_max - shift)
                acc += tl.dot(p, tl.exp(tl.minimum(em - shift, 80.0)), input_precision="ieee")
            else:
                t = tl.log(p)[:, :, None] + em[None, :, :]  # [TILE_M, TILE_K, BLOCK_B]
                new_max = tl.maximum(run_max, tl.max(t, axis=1))
                shift = tl.maximum(new_max, NEG_FLT_MAX)
                acc = acc * tl.exp(run_max - shift)
                acc += tl.sum(tl.exp(t - shift[:, None, :]), axis=1)
            run_max = new_max
        out = tl.log(acc) + tl.maximum(run_max, NEG_FLT_MAX)
        rows = (g * block_size + nodes).to(tl.int64)
        tl.store(OUT_ptr + rows[:, None] * n_batch + cols[None, :], out, mask=node_mask[:, None] & col_mask[None, :])


@triton.jit
def _sum_element_flows_kernel(
    EF_ptr,
    NF_ptr,
    EM_ptr,
    P_ptr,
    OUT_ptr,
    CIDS_ptr,
    PIDS_ptr,
    n_batch,
    n_edges,
    block_size,
    TILE_M: tl.constexpr,
    TILE_K: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """eflows[cids[g, k], b] += sum_i F * exp(log p + em - out) for TILE_K edges x BLOCK_B columns."""
    pid_k = tl.program_id(0)
    pid_b = tl.program_id(1)
    k_tiles = tl.cdiv(n_edges, TILE_K)
    g = pid_k // k_tiles
    ks = (pid_k % k_tiles) * TILE_K + tl.arange(0, TILE_K)
    k_mask = ks < n_edges
    cols = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    col_mask = cols < n_batch
    cid = tl.load(CIDS_ptr + g * n_edges + ks, mask=k_mask, other=0).to(tl.int64)
    pidx = tl.load(PIDS_ptr + g * n_edges + ks, mask=k_mask, other=0).to(tl.int64)
    kb_mask = k_mask[:, None] & col_mask[None, :]
    em = tl.load(EM_ptr + cid[:, None] * n_batch + cols[None, :], mask=kb_mask, other=float("-inf"))

    acc = tl.zeros([TILE_K, BLOCK_B], dtype=tl.float32)
    for m0 in range(0, block_size, TILE_M):
        nodes = m0 + tl.arange(0, TILE_M)
        node_mask = nodes < block_size
        rows = (g * block_size + nodes).to(tl.int64)
        mb_mask = node_mask[:, None] & col_mask[None, :]
        flows = tl.load(NF_ptr + rows[:, None] * n_batch + cols[None, :], mask=mb_mask, other=0.0)
        out = tl.load(OUT_ptr + rows[:, None] * n_batch + cols[None, :], mask=mb_mask, other=float("inf"))
        out = tl.where(out == float("-inf"), float("inf"), out)  # dead nodes pass no flow
        p = tl.load(P_ptr + pidx[None, :] + nodes[:, None], mask=node_mask[:, None] & k_mask[None, :], other=0.0)
        log_p = tl.log(p)  # [TILE_M, TILE_K]; padding -> -inf -> contributes 0
        c = flows[:, None, :] * tl.exp(log_p[:, :, None] + em[None, :, :] - out[:, None, :])
        acc += tl.sum(c, axis=0)
    tl.atomic_add(EF_ptr + cid[:, None] * n_batch + cols[None, :], acc, mask=kb_mask)


@triton.jit
def _sum_param_flows_kernel(
    PF_ptr,
    NF_ptr,
    EM_ptr,
    P_ptr,
    OUT_ptr,
    CIDS_ptr,
    PIDS_ptr,
    n_batch,
    n_edges,
    block_size,
    TILE_M: tl.constexpr,
    TILE_K: tl.constexpr,
    BLOCK_B: tl.constexpr,
    MUL_PARAMS: tl.constexpr,
):
    """pflows[pids[g, k] + i] += sum_b F * exp((log p) + em - out) for TILE_M nodes x TILE_K edges."""
    pid = tl.program_id(0)
    m_tiles = tl.cdiv(block_size, TILE_M)
    k_tiles = tl.cdiv(n_edges, TILE_K)
    g = pid // (m_tiles * k_tiles)
    rest = pid % (m_tiles * k_tiles)
    nodes = (rest // k_tiles) * TILE_M + tl.arange(0, TILE_M)
    ks = (rest % k_tiles) * TILE_K + tl.arange(0, TILE_K)
    node_mask = nodes < block_size
    k_mask = ks < n_edges
    cid = tl.load(CIDS_ptr + g * n_edges + ks, mask=k_mask, other=0).to(tl.int64)
    pidx = tl.load(PIDS_ptr + g * n_edges + ks, mask=k_mask, other=0).to(tl.int64)
    mk_mask = node_mask[:, None] & k_mask[None, :]
    p_offs = pidx[None, :] + nodes[:, None]
    if MUL_PARAMS:
        log_p = tl.log(tl.load(P_ptr + p_offs, mask=mk_mask, other=0.0))
    else:
        log_p = tl.zeros([TILE_M, TILE_K], dtype=tl.float32)
    rows = (g * block_size + nodes).to(tl.int64)

    acc = tl.zeros([TILE_M, TILE_K], dtype=tl.float32)
    for b0 in range(0, n_batch, BLOCK_B):
        cols = b0 + tl.arange(0, BLOCK_B)
        col_mask = cols < n_batch
        mb_mask = node_mask[:, None] & col_mask[None, :]
        flows = tl.load(NF_ptr + rows[:, None] * n_batch + cols[None, :], mask=mb_mask, other=0.0)
        out = tl.load(OUT_ptr + rows[:, None] * n_batch + cols[None, :], mask=mb_mask, other=float("inf"))
        out = tl.where(out == float("-inf"), float("inf"), out)
        em = tl.load(
            EM_ptr + cid[:, None] * n_batch + cols[None, :],
            mask=k_mask[:, None] & col_mask[None, :],
            other=float("-inf"),
        )
        c = flows[:, None, :] * tl.exp(log_p[:, :, None] + em[None, :, :] - out[:, None, :])
        acc += tl.sum(c, axis=2)
    tl.atomic_add(PF_ptr + p_offs, acc, mask=mk_mask)


@triton.jit
def _product_forward_kernel(
    OUT_ptr,
    NM_ptr,
    CIDS_ptr,
    n_batch,
    n_edges,
    block_size,
    BLOCK_M: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """prod[g*bs + i, b] = sum_k node_mars[cids[g, k] + i, b] for BLOCK_M nodes x BLOCK_B columns."""
    pid_m = tl.program_id(0)
    pid_b = tl.program_id(1)
    m_tiles = tl.cdiv(block_size, BLOCK_M)
    g = pid_m // m_tiles
    nodes = (pid_m % m_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    mask = (nodes < block_size)[:, None] & (cols < n_batch)[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_B], dtype=tl.float32)
    for k in range(0, n_edges):
        start = tl.load(CIDS_ptr + g * n_edges + k).to(tl.int64)
        acc += tl.load(NM_ptr + (start + nodes)[:, None] * n_batch + cols[None, :], mask=mask, other=0.0)
    rows = (g * block_size + nodes).to(tl.int64)
    tl.store(OUT_ptr + rows[:, None] * n_batch + cols[None, :], acc, mask=mask)


@triton.jit
def _product_backward_kernel(
    GRAD_IN_ptr,
    GRAD_OUT_ptr,
    CIDS_ptr,
    n_batch,
    n_edges,
    block_size,
    BLOCK_M: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """grad_in[cids[g, k] + i, b] += grad_out[g*bs + i, b] (flows pass through a product)."""
    pid_m = tl.program_id(0)
    pid_b = tl.program_id(1)
    m_tiles = tl.cdiv(block_size, BLOCK_M)
    g = pid_m // m_tiles
    nodes = (pid_m % m_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    mask = (nodes < block_size)[:, None] & (cols < n_batch)[None, :]
    rows = (g * block_size + nodes).to(tl.int64)
    grad = tl.load(GRAD_OUT_ptr + rows[:, None] * n_batch + cols[None, :], mask=mask, other=0.0)
    for k in range(0, n_edges):
        start = tl.load(CIDS_ptr + g * n_edges + k).to(tl.int64)
        tl.atomic_add(GRAD_IN_ptr + (start + nodes)[:, None] * n_batch + cols[None, :], grad, mask=mask)


# --- tiles ---------------------------------------------------------------------------------
def _pow2(v: int) -> int:
    return triton.next_power_of_2(max(1, int(v)))


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

    def grid(self, n_blocks: int, block_size: int, batch: int) -> tuple[int, int]:
        return (n_blocks * triton.cdiv(block_size, self.PROGRAM_M), triton.cdiv(batch, self.BLOCK_B))


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
    tile_m = min(_pow2(block_size), GPU_SMALL_TILE_M)
    tile_k = min(_pow2(n_edges), 256, max(1, 4096 // (tile_m * block_b)))
    return dict(TILE_M=tile_m, TILE_K=tile_k, BLOCK_B=block_b, PROGRAM_M=tile_m)


@functools.lru_cache(maxsize=4096)  # pure in its (hashable) arguments; asked on every call
def resolve_forward_tiles(
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
) -> SumForwardTiles:
    """The forward tiling: a heuristic's choice with explicit tiles overriding it."""
    check_heuristic(heuristic)
    if heuristic == "auto":
        large = _large_forward(block_size, n_edges, batch)
        programs = n_blocks * triton.cdiv(block_size, large["PROGRAM_M"]) * triton.cdiv(batch, large["BLOCK_B"])
        heuristic = "large" if programs >= num_cores else "small"
    chosen = (_large_forward if heuristic == "large" else _small_forward)(block_size, n_edges, batch)
    overrides = {"TILE_M": TILE_M, "TILE_K": TILE_K, "BLOCK_B": BLOCK_B, "PROGRAM_M": PROGRAM_M}
    custom = False
    for name, value in overrides.items():
        if value != "auto":
            chosen[name] = check_tile(name, value)
            custom = True
    if PROGRAM_M == "auto" and chosen["PROGRAM_M"] < chosen["TILE_M"]:
        chosen["PROGRAM_M"] = chosen["TILE_M"]
    if PROGRAM_M == "auto" and heuristic == "small":
        chosen["PROGRAM_M"] = chosen["TILE_M"]
    if chosen["PROGRAM_M"] < chosen["TILE_M"]:
        raise ValueError(
            f"PROGRAM_M={chosen['PROGRAM_M']} must be >= TILE_M={chosen['TILE_M']} (a program walks PROGRAM_M "
            f"nodes in sub-tiles of TILE_M)"
        )
    tm, tk, tb = chosen["TILE_M"], chosen["TILE_K"], chosen["BLOCK_B"]
    use_dot = min(tm, tk, tb) >= 16
    if not use_dot and tm * tk * tb > MAX_3D_TILE:
        raise ValueError(
            f"TILE_M={tm} x TILE_K={tk} x BLOCK_B={tb} = {tm * tk * tb} elements exceeds the {MAX_3D_TILE}-element "
            f"broadcast tile (used when a tile is below 16, so tl.dot cannot); lower TILE_K or BLOCK_B"
        )
    if num_warps == "auto":
        # Broadcast tiles of at most 16 node-columns ran best with 8 warps (batch 1-4 sweep).
        num_warps = 8 if (use_dot and tm * tb >= 1024) or (not use_dot and tm * tb <= 16) else 4
    check_num_warps(num_warps)
    if num_stages == "auto":
        num_stages = 2 if use_dot and heuristic == "small" else 0  # 2 beat Triton's 3 at batch 16
    elif num_stages not in NUM_STAGES:
        raise ValueError(f"num_stages={num_stages!r} is not allowed; use one of {', '.join(map(str, NUM_STAGES))}")
    return SumForwardTiles(
        "custom" if custom else heuristic, tm, tk, tb, chosen["PROGRAM_M"], use_dot, num_warps, num_stages
    )


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
) -> SumBackwardTiles:
    """Backward tiles. Explicit TILE_M / TILE_K / BLOCK_B apply to both flow kernels.

    ``small`` favours many programs (narrow edge tiles for the element flows, so 1024 edges make
    128 programs at batch 1); ``large`` uses wider edge and batch tiles (fewer, fatter programs,
    fine when the batch supplies the parallelism). Both keep the broadcast tile near 4096.
    """
    check_heuristic(heuristic)
    bs2, k2, b2 = _pow2(block_size), _pow2(n_edges), _pow2(batch)
    if heuristic == "auto":
        wide_programs = n_blocks * triton.cdiv(n_edges, 32) * triton.cdiv(batch, 32)
        heuristic = "large" if wide_programs >= num_cores else "small"
    if heuristic == "large":
        eb, ek = min(b2, 32), min(k2, 32)
        pb, pm, pk = min(b2, 16), min(bs2, 16), min(k2, 16)
    else:
        eb, ek = min(b2, 16), min(k2, 8)
        pb, pm, pk = min(b2, 16), min(bs2, 16), min(k2, 16)
    em_ = min(bs2, max(1, 4096 // (ek * eb)))
    pk = min(k2, max(pk, 4096 // (pm * pb)), 64)
    custom = False
    if TILE_M != "auto":
        em_ = pm = check_tile("TILE_M", TILE_M)
        custom = True
    if TILE_K != "auto":
        ek = pk = check_tile("TILE_K", TILE_K)
        custom = True
    if BLOCK_B != "auto":
        eb = pb = check_tile("BLOCK_B", BLOCK_B)
        custom = True
    for tm, tk, tb in ((em_, ek, eb), (pm, pk, pb)):
        if tm * tk * tb > MAX_3D_TILE:
            raise ValueError(
                f"TILE_M={tm} x TILE_K={tk} x BLOCK_B={tb} = {tm * tk * tb} elements exceeds the backward's "
                f"{MAX_3D_TILE}-element broadcast tile; lower one of them"
            )
    if num_warps == "auto":
        num_warps = 4
    check_num_warps(num_warps)
    return SumBackwardTiles("custom" if custom else heuristic, em_, ek, eb, pm, pk, pb, num_warps)


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
        programs = n_blocks * triton.cdiv(block_size, large_m) * triton.cdiv(batch, block_b)
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


def sum_forward(element_mars, params, cids, pids, block_size: int, tiles: SumForwardTiles, out=None):
    """``out [G*block_size, B]`` (written into ``out`` when given). Inputs already validated."""
    n_blocks, n_edges = cids.shape
    batch = element_mars.shape[1]
    if out is None:
        out = torch.empty((n_blocks * block_size, batch), dtype=torch.float32, device=element_mars.device)
    launch(
        _sum_forward_kernel,
        element_mars,
        tiles.grid(n_blocks, block_size, batch),
        out,
        element_mars,
        params,
        cids,
        pids,
        batch,
        n_edges,
        block_size,
        TILE_M=tiles.TILE_M,
        TILE_K=tiles.TILE_K,
        BLOCK_B=tiles.BLOCK_B,
        PROGRAM_M=tiles.PROGRAM_M,
        USE_DOT=tiles.USE_DOT,
        num_warps=tiles.num_warps,
        **({"num_stages": tiles.num_stages} if tiles.num_stages else {}),
    )
    return out


def sum_backward(
    node_flows,
    element_mars,
    params,
    out,
    cids,
    pids,
    block_size: int,
    tiles: SumBackwardTiles,
    element_flows=True,
    param_flows=True,
    mul_params: bool = True,
):
    """``(eflows [M, B] | None, pflows [P] | None)``.

    ``element_flows`` / ``param_flows``: True to allocate a zeroed buffer, a tensor to add into
    (accumulating across layers, as a chain of tied layers does), False/None to skip.
    ``mul_params=False`` returns ``d loss / d params`` instead of the parameter flows.
    """
    n_blocks, n_edges = cids.shape
    batch = element_mars.shape[1]
    eflows = pflows = None
    if element_flows is not None and element_flows is not False:
        eflows = torch.zeros_like(element_mars) if element_flows is True else element_flows
        grid = (n_blocks * triton.cdiv(n_edges, tiles.E_TILE_K), triton.cdiv(batch, tiles.E_BLOCK_B))
        launch(
            _sum_element_flows_kernel,
            element_mars,
            grid,
            eflows,
            node_flows,
            element_mars,
            params,
            out,
            cids,
            pids,
            batch,
            n_edges,
            block_size,
            TILE_M=tiles.E_TILE_M,
            TILE_K=tiles.E_TILE_K,
            BLOCK_B=tiles.E_BLOCK_B,
            num_warps=tiles.num_warps,
        )
    if param_flows is not None and param_flows is not False:
        pflows = torch.zeros_like(params) if param_flows is True else param_flows
        grid = (n_blocks * triton.cdiv(block_size, tiles.P_TILE_M) * triton.cdiv(n_edges, tiles.P_TILE_K),)
        launch(
            _sum_param_flows_kernel,
            element_mars,
            grid,
            pflows,
            node_flows,
            element_mars,
            params,
            out,
            cids,
            pids,
            batch,
            n_edges,
            block_size,
            TILE_M=tiles.P_TILE_M,
            TILE_K=tiles.P_TILE_K,
            BLOCK_B=tiles.P_BLOCK_B,
            MUL_PARAMS=mul_params,
            num_warps=tiles.num_warps,
        )
    return eflows, pflows


def product_forward(node_mars, cids, block_size: int, tiles: ProductTiles, out=None):
    n_blocks, n_edges = cids.shape
    batch = node_mars.shape[1]
    if out is None:
        out = torch.empty((n_blocks * block_size, batch), dtype=torch.float32, device=node_mars.device)
    grid = (n_blocks * triton.cdiv(block_size, tiles.BLOCK_M), triton.cdiv(batch, tiles.BLOCK_B))
    launch(
        _product_forward_kernel,
        node_mars,
        grid,
        out,
        node_mars,
        cids,
        batch,
        n_edges,
        block_size,
        BLOCK_M=tiles.BLOCK_M,
        BLOCK_B=tiles.BLOCK_B,
        num_warps=tiles.num_warps,
    )
    return out


def product_backward(grad_out, cids, block_size: int, n_rows: int, tiles: ProductTiles, grad_in=None):
    """``grad_in [n_rows, B]``: each child row receives the gradient (flow) of its parents."""
    n_blocks, n_edges = cids.shape
    batch = grad_out.shape[1]
    if grad_in is None:
        grad_in = torch.zeros((n_rows, batch), dtype=torch.float32, device=grad_out.device)
    grid = (n_blocks * triton.cdiv(block_size, tiles.BLOCK_M), triton.cdiv(batch, tiles.BLOCK_B))
    launch(
        _product_backward_kernel,
        grad_out,
        grid,
        grad_in,
        grad_out,
        cids,
        batch,
        n_edges,
        block_size,
        BLOCK_M=tiles.BLOCK_M,
        BLOCK_B=tiles.BLOCK_B,
        num_warps=tiles.num_warps,
    )
    return grad_in
