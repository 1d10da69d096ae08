"""Block-sparse probabilistic-circuit layers for Ascend NPUs, written to triton-ascend's rules.

Same math as :mod:`kernels.block_sparse.gpu` (read that module's docstring first); this file
only changes how the work is laid out, following the NPU rules (docs/npu-check.md):

- Grid = number of vector cores (``Device.num_cores``; SMs on CUDA, a handful in the
  interpreter). Each kernel enumerates its work items — (block, node tile, batch tile) for the
  forward and the product layer, (block, edge tile, batch tile) for element flows, (block,
  node tile, edge tile) for parameter flows — and program ``p`` takes items ``p, p + GRID, …``.
  The batch tile is the fastest-varying item index, so programs running side by side share a
  node tile's parameters.
- One tile shape for every kernel: ``TILE_M x TILE_K x BLOCK_B``, sized by a Unified Buffer
  model calibrated against the Ascend compiler (:func:`ub_bytes`); vector arithmetic only (no
  ``tl.dot``, so vector cores suffice).
- No ``tl.where`` anywhere. Padding is neutralised by the fill value of masked loads: element
  values load as -inf (``exp`` gives 0), weights and flows as 0, node values as +inf (so
  ``exp(em - out) = 0``). The forward's all -inf case uses the clamp ``max(m, -FLT_MAX)`` (see
  gpu.py); its shift is per node over ``log p + em`` (gpu.py's broadcast form), exact for zero
  weights, or with ``SHIFT="column"`` one per column, for the forward and the flows alike (the
  factored flows of tile_math, their products broadcast; the sign of a flow taken without a
  select). The backward's dead nodes (``out = -inf``, gradient defined as 0) are mapped to +inf
  by the host before launch (one ``masked_fill`` over ``out``) instead of a select in the kernel.
- int32 offsets (the host checks that ``rows x batch`` and the parameter count fit), fp32 only,
  no libdevice, no eviction policies, no ``num_warps``.
- Scatters use ``tl.atomic_add`` into zeroed buffers, as on the GPU (tied parameters and shared
  children sum correctly; see gpu.py for the determinism note).

``npu_compile_cases()`` lists the kernels at their default configurations (and a few others) for
``workbench npu-check``, each with a Unified Buffer estimate from :func:`ub_bytes`.

Why one long module: every NPU kernel here obeys the same Unified Buffer budget and grid rule,
and the budget model beside them must change with them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.block_sparse.edges import GATHER, EdgeLayout
from kernels.block_sparse.gpu import PRODUCT_BLOCK_M_CAP, SMALL_TILE_M, check_splits, check_tile, launch
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
    store_result,
    tile_coords,
    used_splits,
)
from kernels.tiling import cdiv, next_power_of_2

UB_BYTES = 192 * 1024  # Unified Buffer per core on Ascend 910B
TILE_ELEMENTS = 4096  # default TILE_M x TILE_K x w(BLOCK_B): half of what fits the Unified Buffer
INT32_MAX = 2**31 - 1
COMBINE_BLOCK = 1024  # flat elements per item of the split-K combine (8 KB of the UB for two loads)


# --- kernels -------------------------------------------------------------------------------
# The tile math is tile_math.py's, shared with gpu.py. Apart from gpu.py here, because of the
# NPU rules: grid = cores with a grid-stride loop over work items, int32 offsets (WIDE=False),
# no tl.where (DEAD_SELECT=False: the host maps dead nodes to +inf), no tl.dot.
@triton.jit
def _sum_forward_npu_kernel(
    OUT_ptr, WS_MAX_ptr, WS_SUM_ptr, EM_ptr, P_ptr, CIDS_ptr, PIDS_ptr, n_batch, n_edges, block_size, n_blocks,
    n_splits, k_per_split, child0, child_step, param0, param_step, TILE_M: tl.constexpr, TILE_K: tl.constexpr,
    BLOCK_B: tl.constexpr, SPLIT: tl.constexpr, SHIFT: tl.constexpr, AFFINE: tl.constexpr,
):  # fmt: skip
    """out = log sum_k p * exp(em); grid-stride over (block, node tile[, split], batch tile).
    ``SHIFT``: the log-sum-exp's shift, per node and column ("node", exact) or per column
    ("column": tile_math.column_step, fewer exponentials).

    ``SPLIT``: each item takes the edges ``[s * k_per_split, (s + 1) * k_per_split)`` and stores
    its partial (shift, scaled sum) to the workspace rows ``s * G*bs + row``. ``AFFINE``: the
    edges are computed from ``child0 .. param_step`` (edges.py), not loaded."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    m_tiles = tl.cdiv(block_size, TILE_M)
    b_tiles = tl.cdiv(n_batch, BLOCK_B)
    n_items = n_blocks * m_tiles * n_splits * b_tiles
    for item in range(pid, n_items, n_programs):
        b_tile = item % b_tiles
        rest = item // b_tiles
        split = rest % n_splits
        rest = rest // n_splits
        g = rest // m_tiles
        nodes = (rest % m_tiles) * TILE_M + tl.arange(0, TILE_M)
        node_mask = nodes < block_size
        cols = b_tile * BLOCK_B + tl.arange(0, BLOCK_B)
        col_mask = cols < n_batch
        k_lo = split * k_per_split
        k_hi = tl.minimum(k_lo + k_per_split, n_edges)
        edge_row, child_base, param_base = block_edges(g, n_edges, child0, child_step, param0, param_step, False)
        run_max, acc = node_tile_lse(
            EM_ptr, P_ptr, CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, block_size, k_lo, k_hi, nodes,
            node_mask, cols, col_mask, n_batch, TILE_M, TILE_K, BLOCK_B, AFFINE, False, SHIFT,
            "ieee",  # no tl.dot on the NPU: no precision to choose
        )  # fmt: skip
        rows = node_rows(g, block_size, nodes, False)
        mask = node_mask[:, None] & col_mask[None, :]
        store_result(
            OUT_ptr,
            WS_MAX_ptr,
            WS_SUM_ptr,
            run_max,
            acc,
            rows,
            cols,
            mask,
            split,
            n_blocks * block_size,
            n_batch,
            SPLIT,
        )


@triton.jit
def _sum_combine_npu_kernel(OUT_ptr, WS_MAX_ptr, WS_SUM_ptr, n_elements, n_splits, BLOCK: tl.constexpr):
    """out = the split-K partials merged; grid-stride over flat chunks of BLOCK elements."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    for chunk in range(pid, tl.cdiv(n_elements, BLOCK), n_programs):
        offs = chunk * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_elements
        tl.store(OUT_ptr + offs, combine_partials(WS_MAX_ptr, WS_SUM_ptr, offs, mask, n_splits, n_elements), mask=mask)


@triton.jit
def _sum_element_flows_npu_kernel(
    EF_ptr, NF_ptr, EM_ptr, P_ptr, OUT_ptr, CIDS_ptr, PIDS_ptr, n_batch, n_edges, block_size, n_blocks,
    child0, child_step, param0, param_step, TILE_M: tl.constexpr, TILE_K: tl.constexpr, BLOCK_B: tl.constexpr,
    SHIFT: tl.constexpr, AFFINE: tl.constexpr,
):  # fmt: skip
    """eflows[cids[g, k], b] += sum_i F * exp(log p + em - out); grid-stride over (block, edge tile, batch tile).

    ``SHIFT``: "node" (the exact broadcast form) or "column" (the factored form with broadcast
    products, tile_math.element_flow_column_tile). OUT holds +inf for dead nodes (host-side), so
    no select is needed here. ``AFFINE``: the edges are computed from ``child0 .. param_step``
    (edges.py), not loaded."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    k_tiles = tl.cdiv(n_edges, TILE_K)
    b_tiles = tl.cdiv(n_batch, BLOCK_B)
    n_items = n_blocks * k_tiles * b_tiles
    for item in range(pid, n_items, n_programs):
        b_tile = item % b_tiles
        rest = item // b_tiles
        g = rest // k_tiles
        ks = (rest % k_tiles) * TILE_K + tl.arange(0, TILE_K)
        k_mask = ks < n_edges
        cols = b_tile * BLOCK_B + tl.arange(0, BLOCK_B)
        col_mask = cols < n_batch
        edge_row, child_base, param_base = block_edges(g, n_edges, child0, child_step, param0, param_step, False)
        cid, pidx = load_edges(
            CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, ks, k_mask, block_size, AFFINE, False
        )  # fmt: skip
        kb_mask = k_mask[:, None] & col_mask[None, :]
        em = load_children(EM_ptr, cid, cols, kb_mask, n_batch)
        # SHIFT names the form ("node" or "column"): no tl.dot on the vector cores, no precision
        acc = element_flows_of(
            NF_ptr, OUT_ptr, P_ptr, g, 0, block_size, pidx, k_mask, em, cols, col_mask, n_batch, block_size,
            TILE_M, TILE_K, BLOCK_B, False, False, SHIFT, "ieee",
        )  # fmt: skip
        tl.atomic_add(EF_ptr + cid[:, None] * n_batch + cols[None, :], acc, mask=kb_mask)


@triton.jit
def _sum_param_flows_npu_kernel(
    PF_ptr, NF_ptr, EM_ptr, P_ptr, OUT_ptr, CIDS_ptr, PIDS_ptr, n_batch, n_edges, block_size, n_blocks,
    child0, child_step, param0, param_step, TILE_M: tl.constexpr, TILE_K: tl.constexpr, BLOCK_B: tl.constexpr,
    MUL_PARAMS: tl.constexpr, SHIFT: tl.constexpr, AFFINE: tl.constexpr,
):  # fmt: skip
    """pflows[pids[g, k] + i] += sum_b F * exp((log p) + em - out); grid-stride over (block, node tile, edge tile).
    ``SHIFT`` and ``AFFINE`` as in :func:`_sum_element_flows_npu_kernel`."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    m_tiles = tl.cdiv(block_size, TILE_M)
    k_tiles = tl.cdiv(n_edges, TILE_K)
    n_items = n_blocks * m_tiles * k_tiles
    for item in range(pid, n_items, n_programs):
        k_tile = item % k_tiles
        rest = item // k_tiles
        g = rest // m_tiles
        nodes = (rest % m_tiles) * TILE_M + tl.arange(0, TILE_M)
        ks = k_tile * TILE_K + tl.arange(0, TILE_K)
        node_mask = nodes < block_size
        k_mask = ks < n_edges
        edge_row, child_base, param_base = block_edges(g, n_edges, child0, child_step, param0, param_step, False)
        cid, pidx = load_edges(
            CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, ks, k_mask, block_size, AFFINE, False
        )  # fmt: skip
        mk_mask = node_mask[:, None] & k_mask[None, :]
        rows = node_rows(g, block_size, nodes, False)
        acc = param_flows_of(
            NF_ptr, OUT_ptr, EM_ptr, P_ptr, rows, nodes, node_mask, cid, pidx, k_mask, mk_mask, n_batch,
            MUL_PARAMS, TILE_M, TILE_K, BLOCK_B, False, SHIFT, "ieee",
        )  # fmt: skip
        tl.atomic_add(PF_ptr + pidx[None, :] + nodes[:, None], acc, mask=mk_mask)


@triton.jit
def _product_forward_npu_kernel(
    OUT_ptr, NM_ptr, CIDS_ptr, n_batch, n_edges, block_size, n_blocks, BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr,
):  # fmt: skip
    """prod[g*bs + i, b] = sum_k node_mars[cids[g, k] + i, b]; grid-stride over (block, node tile, batch tile)."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    m_tiles = tl.cdiv(block_size, BLOCK_M)
    b_tiles = tl.cdiv(n_batch, BLOCK_B)
    n_items = n_blocks * m_tiles * b_tiles
    for item in range(pid, n_items, n_programs):
        b_tile = item % b_tiles
        rest = item // b_tiles
        g, nodes, cols, mask = tile_coords(rest, b_tile, block_size, n_batch, BLOCK_M, BLOCK_B)
        acc = product_tile(NM_ptr, CIDS_ptr, g, nodes, cols, mask, n_edges, n_batch, BLOCK_M, BLOCK_B, False)
        rows = node_rows(g, block_size, nodes, False)
        tl.store(OUT_ptr + rows[:, None] * n_batch + cols[None, :], acc, mask=mask)


@triton.jit
def _product_backward_npu_kernel(
    GRAD_IN_ptr, GRAD_OUT_ptr, CIDS_ptr, n_batch, n_edges, block_size, n_blocks, BLOCK_M: tl.constexpr,
    BLOCK_B: tl.constexpr,
):  # fmt: skip
    """grad_in[cids[g, k] + i, b] += grad_out[g*bs + i, b]; grid-stride over (block, node tile, batch tile)."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    m_tiles = tl.cdiv(block_size, BLOCK_M)
    b_tiles = tl.cdiv(n_batch, BLOCK_B)
    n_items = n_blocks * m_tiles * b_tiles
    for item in range(pid, n_items, n_programs):
        b_tile = item % b_tiles
        rest = item // b_tiles
        g, nodes, cols, mask = tile_coords(rest, b_tile, block_size, n_batch, BLOCK_M, BLOCK_B)
        rows = node_rows(g, block_size, nodes, False)
        grad = tl.load(GRAD_OUT_ptr + rows[:, None] * n_batch + cols[None, :], mask=mask, other=0.0)
        product_scatter(GRAD_IN_ptr, CIDS_ptr, grad, g, nodes, cols, mask, n_edges, n_batch, False)


# --- tiles ---------------------------------------------------------------------------------
def batch_lane_weight(block_b: int) -> int:
    """How many fp32 lanes one batch column costs in the Unified Buffer, as BiShengIR plans it.

    From the compiler's verdicts (``ub_calibration.json``): a unit batch axis is dropped (1); a
    last axis under 32 bytes is padded to 8 lanes (2, 4 -> 8); ``BLOCK_B = 16`` costs about what
    8 would if it were well behaved (the planner keeps half of it live), so ``BLOCK_B // 2`` from
    16 on; ``BLOCK_B = 8`` (exactly 32 bytes) is planned badly — a ``8 x 64 x 8`` tile overflows
    where ``8 x 64 x 16`` fits — and is weighted 32 so the model stays on the safe side.
    """
    if block_b == 1:
        return 1
    if block_b < 8:
        return 8
    if block_b == 8:
        return 32
    return block_b // 2


def ub_bytes(tile_m: int, tile_k: int, block_b: int) -> int:
    """Unified Buffer bytes of the sum-layer kernels at one tile (forward, element and parameter
    flows share the model), multi-buffering included.

    ``23 x TILE_M x TILE_K x w(BLOCK_B) + 4096``: about six fp32 copies of the broadcast tile
    (log-weights plus element values, the shifted exponentials, their sum) double-buffered, and a
    little fixed space. Calibrated against the Ascend compiler at the default node tile TILE_M = 8
    (``workbench npu-check --calibrate block_sparse``; every recorded point agrees). Away from it
    the compiler's plan is irregular and the model only a guide — at TILE_M = 4, BLOCK_B = 4
    overflows at TILE_K = 256 while BLOCK_B = 2 and 8 fit there; at TILE_M = 16, 16 x 32 x 8
    fits although the model says not — so ``workbench npu-check`` stays the authority.
    """
    return 23 * tile_m * tile_k * batch_lane_weight(block_b) + 4096


def product_ub_bytes(block_m: int, block_b: int) -> int:
    """Accumulator plus one loaded tile, x2 for multi-buffering."""
    return 2 * (2 * 4 * block_m * block_b)


def _pow2(v: int) -> int:
    return next_power_of_2(max(1, int(v)))


@dataclass(frozen=True)
class NpuTiles:
    TILE_M: int
    TILE_K: int
    BLOCK_B: int
    GRID: int  # programs for the sum kernels; product kernels use min(GRID, their items)
    SPLITS: int = 1  # split-K forward: items sharing one tile's edges (1: no split)
    SHIFT: str = "node"  # the log-sum-exp shift (tile_math.SHIFTS) of the forward and of the flows

    def programs(self, n_items: int) -> int:
        return max(1, min(self.GRID, n_items))


def resolve_tiles(
    n_blocks: int,
    block_size: int,
    n_edges: int,
    batch: int,
    num_cores: int,
    on_npu: bool = False,
    TILE_M="auto",
    TILE_K="auto",
    BLOCK_B="auto",
    GRID="auto",
    SPLITS="auto",
    SHIFT="auto",
) -> NpuTiles:
    """Defaults: TILE_M = 8 nodes; BLOCK_B = 1, 2 or 4 for batches up to 4 and 16 beyond (never 8,
    which the Ascend planner handles badly, see :func:`batch_lane_weight`); TILE_K the largest
    power of two keeping ``TILE_M x TILE_K x w(BLOCK_B) <= 4096`` (half the Unified Buffer, so
    multi-buffering has room): 512 at batch 1, 64 from batch 2 on. ``SPLITS`` (split-K forward)
    defaults to 1: no NPU timing exists to choose it; the split items use the same tile, so the
    Unified Buffer check below covers them. ``SHIFT`` defaults to the exact per-node shift. The
    Unified Buffer model is the per-node form's: at the default tiles the compiler planned 10-16%
    more for the per-column forward at batch 1-3 and 7% less at batch 64, all within the buffer
    (``workbench npu-check --family block_sparse``)."""
    tile_m = min(_pow2(block_size), SMALL_TILE_M) if TILE_M == "auto" else check_tile("TILE_M", TILE_M)
    if BLOCK_B == "auto":
        block_b = _pow2(batch) if batch <= 4 else 16
    else:
        block_b = check_tile("BLOCK_B", BLOCK_B)
    if TILE_K == "auto":
        budget = max(1, TILE_ELEMENTS // (tile_m * batch_lane_weight(block_b)))
        tile_k = min(_pow2(n_edges), 1 << (budget.bit_length() - 1))
    else:
        tile_k = check_tile("TILE_K", TILE_K)
    if on_npu and ub_bytes(tile_m, tile_k, block_b) > UB_BYTES:
        raise ValueError(
            f"tile TILE_M={tile_m} x TILE_K={tile_k} x BLOCK_B={block_b} needs about "
            f"{ub_bytes(tile_m, tile_k, block_b) // 1024} KB of the {UB_BYTES // 1024} KB Unified Buffer "
            f"(ub overflow predicted); lower TILE_K or BLOCK_B"
        )
    if GRID == "auto":
        grid = num_cores
    elif isinstance(GRID, int) and not isinstance(GRID, bool) and GRID >= 1:
        grid = GRID
    else:
        raise ValueError(f"GRID={GRID!r} must be a positive integer or 'auto'")
    splits = 1 if SPLITS == "auto" else check_splits(SPLITS)
    return NpuTiles(tile_m, tile_k, block_b, grid, splits, "node" if SHIFT == "auto" else check_shift(SHIFT))


def _check_int32(element_rows: int, batch: int, n_params: int = 0):
    if element_rows * batch > INT32_MAX or n_params > INT32_MAX:
        raise ValueError(
            f"the NPU kernels use int32 offsets: rows x batch = {element_rows * batch} and params = {n_params} "
            f"must stay below 2**31; use impl='gpu' or a smaller batch"
        )


# --- host functions ------------------------------------------------------------------------
def sum_forward(
    element_mars, params, cids, pids, block_size: int, tiles: NpuTiles, out=None, edges: EdgeLayout = GATHER
):
    """The sum layer; ``tiles.SPLITS > 1`` splits each tile's edges (split-K) and merges the
    partials with a second, grid-stride combine kernel (gpu.sum_forward's workspace layout).
    ``edges`` as in :func:`kernels.block_sparse.gpu.sum_forward`."""
    n_blocks, n_edges = cids.shape
    batch = element_mars.shape[1]
    n_rows = n_blocks * block_size
    splits = used_splits(n_edges, tiles.SPLITS, tiles.TILE_K)
    _check_int32(max(element_mars.shape[0], splits * n_rows), batch, params.numel())
    out, ws_max, ws_sum, k_per, splits = forward_buffers(element_mars, n_rows, n_edges, tiles.SPLITS, tiles.TILE_K, out)
    items = n_blocks * cdiv(block_size, tiles.TILE_M) * splits * cdiv(batch, tiles.BLOCK_B)
    args = (out, ws_max, ws_sum, element_mars, params, cids, pids, batch, n_edges, block_size, n_blocks, splits, k_per)
    args += edges.kernel_args()
    tile = dict(TILE_M=tiles.TILE_M, TILE_K=tiles.TILE_K, BLOCK_B=tiles.BLOCK_B)
    launch(
        _sum_forward_npu_kernel,
        element_mars,
        (tiles.programs(items),),
        *args,
        **tile,
        SPLIT=splits > 1,
        SHIFT=tiles.SHIFT,
        AFFINE=edges.affine,
    )
    if splits > 1:
        n = n_rows * batch
        grid = (tiles.programs(cdiv(n, COMBINE_BLOCK)),)
        launch(_sum_combine_npu_kernel, element_mars, grid, out, ws_max, ws_sum, n, splits, BLOCK=COMBINE_BLOCK)
    return out


def sum_backward(
    node_flows, element_mars, params, out, cids, pids, block_size: int, tiles: NpuTiles, element_flows=True,
    param_flows=True, mul_params: bool = True, element_atomic: bool = True, param_atomic: bool = True,
    edges: EdgeLayout = GATHER,
):  # fmt: skip
    """Same contract as :func:`kernels.block_sparse.gpu.sum_backward`; the NPU kernels always
    scatter with atomics (``element_atomic`` / ``param_atomic`` are accepted and ignored)."""
    n_blocks, n_edges = cids.shape
    batch = element_mars.shape[1]
    _check_int32(max(element_mars.shape[0], n_blocks * block_size), batch, params.numel())
    # Dead nodes (out = -inf) pass no flow: +inf makes exp(... - out) = 0 without a select.
    safe_out = out.masked_fill(out == float("-inf"), float("inf"))
    eflows = pflows = None
    args = (node_flows, element_mars, params, safe_out, cids, pids, batch, n_edges, block_size, n_blocks)
    args += edges.kernel_args()
    tile = dict(TILE_M=tiles.TILE_M, TILE_K=tiles.TILE_K, BLOCK_B=tiles.BLOCK_B)
    if element_flows is not None and element_flows is not False:
        eflows = torch.zeros_like(element_mars) if element_flows is True else element_flows
        items = n_blocks * cdiv(n_edges, tiles.TILE_K) * cdiv(batch, tiles.BLOCK_B)
        grid = (tiles.programs(items),)
        launch(
            _sum_element_flows_npu_kernel, element_mars, grid, eflows, *args, **tile, SHIFT=tiles.SHIFT,
            AFFINE=edges.affine,
        )  # fmt: skip
    if param_flows is not None and param_flows is not False:
        pflows = torch.zeros_like(params) if param_flows is True else param_flows
        items = n_blocks * cdiv(block_size, tiles.TILE_M) * cdiv(n_edges, tiles.TILE_K)
        grid = (tiles.programs(items),)
        launch(
            _sum_param_flows_npu_kernel, element_mars, grid, pflows, *args, **tile, MUL_PARAMS=mul_params,
            SHIFT=tiles.SHIFT, AFFINE=edges.affine,
        )  # fmt: skip
    return eflows, pflows


def _product_block_m(tiles: NpuTiles, block_size: int) -> int:
    return min(tiles.TILE_M, PRODUCT_BLOCK_M_CAP, _pow2(block_size))


def product_forward(node_mars, cids, block_size: int, tiles: NpuTiles, out=None):
    """Product layer; ``BLOCK_M = min(TILE_M, 8)`` nodes x ``BLOCK_B`` columns per item."""
    n_blocks, n_edges = cids.shape
    batch = node_mars.shape[1]
    _check_int32(max(node_mars.shape[0], n_blocks * block_size), batch)
    block_m = _product_block_m(tiles, block_size)
    if out is None:
        out = torch.empty((n_blocks * block_size, batch), dtype=torch.float32, device=node_mars.device)
    items = n_blocks * cdiv(block_size, block_m) * cdiv(batch, tiles.BLOCK_B)
    args = (out, node_mars, cids, batch, n_edges, block_size, n_blocks)
    grid = (tiles.programs(items),)
    launch(_product_forward_npu_kernel, node_mars, grid, *args, BLOCK_M=block_m, BLOCK_B=tiles.BLOCK_B)
    return out


def product_backward(grad_out, cids, block_size: int, n_rows: int, tiles: NpuTiles, grad_in=None):
    n_blocks, n_edges = cids.shape
    batch = grad_out.shape[1]
    _check_int32(max(n_rows, n_blocks * block_size), batch)
    block_m = _product_block_m(tiles, block_size)
    if grad_in is None:
        grad_in = torch.zeros((n_rows, batch), dtype=torch.float32, device=grad_out.device)
    items = n_blocks * cdiv(block_size, block_m) * cdiv(batch, tiles.BLOCK_B)
    args = (grad_in, grad_out, cids, batch, n_edges, block_size, n_blocks)
    grid = (tiles.programs(items),)
    launch(_product_backward_npu_kernel, grad_out, grid, *args, BLOCK_M=block_m, BLOCK_B=tiles.BLOCK_B)
    return grad_in


# --- npu-check ------------------------------------------------------------------------------
# An affine layer's edges (edges.py), arguments of every sum kernel.
_EDGE_SIGNATURE = {"child0": "i32", "child_step": "i32", "param0": "i32", "param_step": "i32"}
_SUM_SIGNATURE = {
    "OUT_ptr": "*fp32",
    "WS_MAX_ptr": "*fp32",
    "WS_SUM_ptr": "*fp32",
    "EM_ptr": "*fp32",
    "P_ptr": "*fp32",
    "CIDS_ptr": "*i32",
    "PIDS_ptr": "*i32",
    "n_batch": "i32",
    "n_edges": "i32",
    "block_size": "i32",
    "n_blocks": "i32",
    "n_splits": "i32",
    "k_per_split": "i32",
    **_EDGE_SIGNATURE,
}
_FLOW_SIGNATURE = {
    "XF_ptr": "*fp32",  # renamed per kernel below (EF_ptr / PF_ptr)
    "NF_ptr": "*fp32",
    "EM_ptr": "*fp32",
    "P_ptr": "*fp32",
    "OUT_ptr": "*fp32",
    "CIDS_ptr": "*i32",
    "PIDS_ptr": "*i32",
    "n_batch": "i32",
    "n_edges": "i32",
    "block_size": "i32",
    "n_blocks": "i32",
    **_EDGE_SIGNATURE,
}
_PRODUCT_SIGNATURE = {
    "n_batch": "i32",
    "n_edges": "i32",
    "block_size": "i32",
    "n_blocks": "i32",
}


def _flow_signature(first: str) -> dict:
    sig = {first: "*fp32"}
    sig.update({k: v for k, v in _FLOW_SIGNATURE.items() if k != "XF_ptr"})
    return sig


_SUM_KERNELS = (
    ("sum forward", _sum_forward_npu_kernel, dict(_SUM_SIGNATURE), {"SPLIT": False, "SHIFT": "node"}),
    ("sum element flows", _sum_element_flows_npu_kernel, _flow_signature("EF_ptr"), {"SHIFT": "node"}),
    ("sum param flows", _sum_param_flows_npu_kernel, _flow_signature("PF_ptr"), {"MUL_PARAMS": True, "SHIFT": "node"}),
)


def _sum_cases(tm: int, tk: int, tb: int, default: bool, note: str = "", affine: bool = False) -> list:
    """The three sum kernels at one tile, their edges gathered or (``affine``) computed."""
    from kernels.spec import NpuCompileCase

    tiles = {"TILE_M": tm, "BLOCK_B": tb, "TILE_K": tk}  # TILE_K last: the calibration's boundary axis
    label = " EDGES=affine" if affine else ""
    return [
        NpuCompileCase(
            "block_sparse",
            f"{name}{label} TILE_M={tm} BLOCK_B={tb} TILE_K={tk}{note}",
            kernel,
            dict(signature),
            {**tiles, **extra, "AFFINE": affine},
            default,
            ub_bytes(tm, tk, tb),
        )
        for name, kernel, signature, extra in _SUM_KERNELS
    ]


def combine_ub_bytes(block: int = COMBINE_BLOCK) -> int:
    """Two loaded partials, the running shift and sum and the output, x2 for multi-buffering."""
    return 2 * 5 * 4 * block


def _forward_case(tm: int, tk: int, tb: int, default: bool, note: str, split: bool, shift: str):
    """The sum forward at one tile, split-K (``SPLIT=True``: the partial store) or not, with its
    shift; the Unified Buffer model is the unsplit per-node forward's (the edge loop and its
    tile are the same)."""
    from kernels.spec import NpuCompileCase

    name = "sum split-K forward" if split else "sum forward"
    label = "" if shift == "node" else f" SHIFT={shift}"
    return NpuCompileCase(
        "block_sparse",
        f"{name}{label} TILE_M={tm} BLOCK_B={tb} TILE_K={tk}{note}",
        _sum_forward_npu_kernel,
        dict(_SUM_SIGNATURE),
        {"TILE_M": tm, "BLOCK_B": tb, "TILE_K": tk, "SPLIT": split, "SHIFT": shift, "AFFINE": False},
        default,
        ub_bytes(tm, tk, tb),
    )


def _split_cases(tm: int, tk: int, tb: int, default: bool, note: str = "") -> list:
    """The split-K forward at one tile."""
    return [_forward_case(tm, tk, tb, default, note, True, "node")]


def _column_cases(tm: int, tk: int, tb: int, note: str = "") -> list:
    """The forward, unsplit and split-K, and both factored flow kernels, with one shift per
    column (``SHIFT="column"``) at one tile: not a default, checked by ``workbench npu-check``
    without ``--defaults-only``. The flows' Unified Buffer model is the per-node one: the same
    ``TILE_M x TILE_K x BLOCK_B`` broadcast product, fewer exponentials."""
    from kernels.spec import NpuCompileCase

    cases = [_forward_case(tm, tk, tb, False, note, split, "column") for split in (False, True)]
    tiles = {"TILE_M": tm, "BLOCK_B": tb, "TILE_K": tk}
    for name, kernel, signature, extra in _SUM_KERNELS[1:]:
        cases.append(
            NpuCompileCase(
                "block_sparse",
                f"{name} SHIFT=column TILE_M={tm} BLOCK_B={tb} TILE_K={tk}{note}",
                kernel,
                dict(signature),
                {**tiles, **extra, "SHIFT": "column", "AFFINE": False},
                False,
                ub_bytes(tm, tk, tb),
            )
        )
    return cases


def _combine_case() -> list:
    from kernels.spec import NpuCompileCase

    sig = {"OUT_ptr": "*fp32", "WS_MAX_ptr": "*fp32", "WS_SUM_ptr": "*fp32", "n_elements": "i32", "n_splits": "i32"}
    name = f"sum split-K combine BLOCK={COMBINE_BLOCK}"
    return [
        NpuCompileCase(
            "block_sparse", name, _sum_combine_npu_kernel, sig, {"BLOCK": COMBINE_BLOCK}, True, combine_ub_bytes()
        )
    ]


def npu_compile_cases():
    """The NPU kernels at their default tiles for an HMM layer (L = 1024, one block of 1024) at
    batch 1, 2, 3 and 64 (one case per distinct tile) — the split-K forward and its combine
    among them, and the per-column forward at each of those tiles — plus non-default tiles the
    compiler is known to reject (``BLOCK_B = 8``, a too-wide ``TILE_K``) or accept
    (``TILE_M = 16``), and split-K tiles around the UB limit."""
    from kernels.spec import NpuCompileCase

    cases, seen = [], set()
    for batch in (1, 2, 3, 64):
        t = resolve_tiles(1, 1024, 1024, batch, 48, on_npu=True)
        key = (t.TILE_M, t.TILE_K, t.BLOCK_B)
        if key in seen:
            continue
        seen.add(key)
        cases += _sum_cases(t.TILE_M, t.TILE_K, t.BLOCK_B, True, f" (batch {batch})")
        # Computed edges (edges.py): the NPU runs them only when EDGES="affine" asks, so not a default.
        cases += _sum_cases(t.TILE_M, t.TILE_K, t.BLOCK_B, False, f" (batch {batch})", affine=True)
        cases += _split_cases(t.TILE_M, t.TILE_K, t.BLOCK_B, True, f" (batch {batch})")
        cases += _column_cases(t.TILE_M, t.TILE_K, t.BLOCK_B, f" (batch {batch})")
        bm = min(t.TILE_M, PRODUCT_BLOCK_M_CAP)
        for name, kernel, first, second in (
            ("product forward", _product_forward_npu_kernel, "OUT_ptr", "NM_ptr"),
            ("product backward", _product_backward_npu_kernel, "GRAD_IN_ptr", "GRAD_OUT_ptr"),
        ):
            sig = {first: "*fp32", second: "*fp32", "CIDS_ptr": "*i32", **_PRODUCT_SIGNATURE}
            cases.append(
                NpuCompileCase(
                    "block_sparse",
                    f"{name} BLOCK_M={bm} BLOCK_B={t.BLOCK_B} (batch {batch})",
                    kernel,
                    sig,
                    {"BLOCK_M": bm, "BLOCK_B": t.BLOCK_B},
                    True,
                    product_ub_bytes(bm, t.BLOCK_B),
                )
            )
    for tm, tk, tb in ((8, 64, 8), (8, 256, 16), (16, 32, 16)):
        cases += _sum_cases(tm, tk, tb, False)
    # Split-K at the GPU split rule's node tiles (32 at batch <= 2, 16 beyond), where they fit
    # the model or just beyond it, so the report shows which overflow.
    for tm, tk, tb in ((32, 32, 1), (32, 64, 2), (16, 64, 4), (16, 32, 16), (8, 128, 16)):
        cases += _split_cases(tm, tk, tb, False)
    return cases + _combine_case()


def ub_calibration_cases():
    """The sweep behind :func:`ub_bytes`: the three sum kernels at the default node tile
    TILE_M = 8, BLOCK_B 1, 2, 4, 8, 16, and TILE_K doubling up to twice the modelled limit.
    ``workbench npu-check --calibrate block_sparse`` records the verdicts in ``ub_calibration.json``."""
    cases = []
    for tb in (1, 2, 4, 8, 16):
        for tk in (2**k for k in range(4, 12)):
            if SMALL_TILE_M * tk * batch_lane_weight(tb) <= 4 * TILE_ELEMENTS:
                cases += _sum_cases(SMALL_TILE_M, tk, tb, False)
    return cases


def ub_estimate(problem, params, dtype) -> int | None:
    """The spec's UB estimate for the Explorer: the NPU tiles these params resolve to for the
    sum layer (the product layer's tiles are far smaller); None when they do not resolve."""
    tiles = {k: v for k, v in dict(params or {}).items() if k in ("TILE_M", "TILE_K", "BLOCK_B") and v != "auto"}
    try:
        from kernels.block_sparse import _shape

        s = _shape(problem)
        t = resolve_tiles(s["G"], s["bs"], s["K"], s["B"], 1, **tiles)
    except (ValueError, KeyError):
        return None
    return ub_bytes(t.TILE_M, t.TILE_K, t.BLOCK_B)
