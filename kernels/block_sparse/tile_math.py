"""Tile math shared by the GPU (:mod:`.gpu`) and NPU (:mod:`.npu`) block-sparse kernels.

Each helper is a ``@triton.jit`` function that the kernels of both files call (Triton inlines
them; the interpreter runs them as they are), so the math exists once. What stays apart in
``gpu.py`` / ``npu.py`` is only what the NPU rules (docs/npu-check.md) make different:

- how work is handed out: program ids per tile on the GPU, grid = cores with a grid-stride
  loop over work items on the NPU;
- offsets: int64 on the GPU, int32 on the NPU (the ``WIDE`` flag of the helpers below);
- dead nodes in the backward (``out = -inf``): a ``tl.where`` in the GPU kernel
  (``DEAD_SELECT``), a host-side ``masked_fill`` to +inf before an NPU launch (no selects there);
- the ``tl.dot`` forms (the forward's and the factored flows'), GPU only (the NPU kernels use
  vector cores only, and take the same factored math with broadcast products).

The math (gpu.py's docstring explains it): the online log-sum-exp keeps, per node and batch
column, a running max ``m`` and a scaled sum ``acc = sum_k p * exp(em - shift)`` with
``shift = max(m, -FLT_MAX)``, finite even when every child so far is -inf, so that all -inf
children give ``acc = 0`` and ``log(0) + shift = -inf`` without a select.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.tiling import cdiv

NEG_FLT_MAX = tl.constexpr(-3.4028234663852886e38)  # the most negative finite fp32
# A broadcast tile's log-sum-exp shift (node_tile_lse's FORM "node" or "column"): per node and
# column (exact for any weights) or per column (fewer exponentials, no logarithm per weight).
SHIFTS = ("node", "column")


def check_shift(value, use_dot: bool = False) -> str:
    """A broadcast tile's SHIFT ("auto" is resolved by the caller); ValueError says what to change."""
    if value not in SHIFTS:
        raise ValueError(
            f"SHIFT={value!r} is not allowed; use one of {', '.join(SHIFTS)} (or 'auto'): a broadcast tile's "
            f"log-sum-exp shift, per node and column (exact) or per column (fewer exponentials)"
        )
    if use_dot and value != "column":
        raise ValueError(
            f"SHIFT={value!r} needs a broadcast tile (TILE_M, TILE_K or BLOCK_B below 16); a tile of 16 or more "
            f"on every side takes the tl.dot form, which shifts per column: leave SHIFT 'auto' or 'column'"
        )
    return value


# --- loads ------------------------------------------------------------------------------------
@triton.jit
def block_edges(g, n_edges, child0, child_step, param0, param_step, WIDE: tl.constexpr):
    """Where block ``g``'s edges start: its row of cids/pids (``g * n_edges``) and, for an affine
    layout (edges.py), its first child row and parameter offset."""
    if WIDE:
        g = g.to(tl.int64)
    return g * n_edges, child0 + g * child_step, param0 + g * param_step


@triton.jit
def load_edges(
    CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, ks, k_mask, block_size, AFFINE: tl.constexpr,
    WIDE: tl.constexpr,
):  # fmt: skip
    """Child rows and parameter offsets of edges ``ks`` of one block (:func:`block_edges`):
    loaded from cids/pids, or with ``AFFINE`` computed as ``child_base + k`` and ``param_base +
    k * block_size``, so the tile's loads need not wait for an index load."""
    if AFFINE:
        if WIDE:
            ks = ks.to(tl.int64)
        cid = child_base + ks
        pidx = param_base + ks * block_size
    else:
        cid = tl.load(CIDS_ptr + edge_row + ks, mask=k_mask, other=0)
        pidx = tl.load(PIDS_ptr + edge_row + ks, mask=k_mask, other=0)
        if WIDE:
            cid = cid.to(tl.int64)
            pidx = pidx.to(tl.int64)
    return cid, pidx


@triton.jit
def load_children(EM_ptr, cid, cols, kb_mask, n_batch):
    """``em [TILE_K, BLOCK_B]``; padding loads as -inf (``exp`` gives 0)."""
    return tl.load(EM_ptr + cid[:, None] * n_batch + cols[None, :], mask=kb_mask, other=float("-inf"))


@triton.jit
def load_weights(P_ptr, pidx, nodes, mk_mask):
    """``p [TILE_M, TILE_K]`` (node i of edge k at ``pidx[k] + i``); padding loads as 0."""
    return tl.load(P_ptr + pidx[None, :] + nodes[:, None], mask=mk_mask, other=0.0)


@triton.jit
def tile_coords(tile, b_tile, block_size, n_batch, TILE_M: tl.constexpr, BLOCK_B: tl.constexpr):
    """Block ``g``, its nodes, the batch columns and their mask for node tile ``tile`` (counted
    over all blocks, TILE_M nodes each) and batch tile ``b_tile``."""
    m_tiles = tl.cdiv(block_size, TILE_M)
    g = tile // m_tiles
    nodes = (tile % m_tiles) * TILE_M + tl.arange(0, TILE_M)
    cols = b_tile * BLOCK_B + tl.arange(0, BLOCK_B)
    return g, nodes, cols, (nodes < block_size)[:, None] & (cols < n_batch)[None, :]


@triton.jit
def node_rows(g, block_size, nodes, WIDE: tl.constexpr):
    rows = g * block_size + nodes
    if WIDE:
        rows = rows.to(tl.int64)
    return rows


@triton.jit
def load_node_state(NF_ptr, OUT_ptr, rows, cols, mb_mask, n_batch, DEAD_SELECT: tl.constexpr):
    """Node flows (padding 0) and node values (padding +inf, so ``exp(em - out) = 0``).

    ``DEAD_SELECT``: map ``out = -inf`` (dead nodes, which pass no flow) to +inf here — the GPU
    kernels; the NPU kernels get that done by the host (no ``tl.where`` on the NPU)."""
    flows = tl.load(NF_ptr + rows[:, None] * n_batch + cols[None, :], mask=mb_mask, other=0.0)
    out = tl.load(OUT_ptr + rows[:, None] * n_batch + cols[None, :], mask=mb_mask, other=float("inf"))
    if DEAD_SELECT:
        out = tl.where(out == float("-inf"), float("inf"), out)
    return flows, out


@triton.jit
def load_chunk(
    EM_ptr, P_ptr, CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, block_size, k0, k_hi, nodes, node_mask,
    cols, col_mask, n_batch, TILE_K: tl.constexpr, AFFINE: tl.constexpr, WIDE: tl.constexpr,
):  # fmt: skip
    """One forward chunk: ``em [TILE_K, BLOCK_B]`` and ``p [TILE_M, TILE_K]`` of edges ``k0 + [0, TILE_K)`` below ``k_hi``."""
    ks = k0 + tl.arange(0, TILE_K)
    k_mask = ks < k_hi
    cid, pidx = load_edges(CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, ks, k_mask, block_size, AFFINE, WIDE)
    em = load_children(EM_ptr, cid, cols, k_mask[:, None] & col_mask[None, :], n_batch)
    p = load_weights(P_ptr, pidx, nodes, node_mask[:, None] & k_mask[None, :])
    return em, p


# --- forward: online log-sum-exp ------------------------------------------------------------------
@triton.jit
def lse_step(run_max, acc, log_p, em):
    """One chunk of the broadcast form over ``t = log p + em [TILE_M, TILE_K, BLOCK_B]``: per node
    and column, exact for zero weights (``t = -inf`` never sets the shift)."""
    t = log_p[:, :, None] + em[None, :, :]
    new_max = tl.maximum(run_max, tl.max(t, axis=1))
    shift = tl.maximum(new_max, NEG_FLT_MAX)
    acc = acc * tl.exp(run_max - shift)
    acc += tl.sum(tl.exp(t - shift[:, None, :]), axis=1)
    return new_max, acc


@triton.jit
def lse_finish(run_max, acc):
    """``log(acc) + shift``: -inf for a node whose children were all -inf (``acc = 0``)."""
    return tl.log(acc) + tl.maximum(run_max, NEG_FLT_MAX)


@triton.jit
def column_shift(run_max, p, em):
    """The running max and shift of a per-column form: ``m[b] = max_k (em + log w_k)`` with
    ``w_k`` the tile's largest weight of edge k, so an edge no node of the tile uses (``w_k = 0``)
    never sets it."""
    log_w = tl.log(tl.max(p, axis=0))  # [TILE_K]
    new_max = tl.maximum(run_max, tl.max(em + log_w[:, None], axis=0)[None, :])
    return new_max, tl.maximum(new_max, NEG_FLT_MAX)


@triton.jit
def column_step(run_max, acc, p, em):
    """One chunk of the per-column form with broadcast products, any tile size:
    ``acc[i, b] += sum_k p[i, k] * exp(em[k, b] - m[b])``. Exponentials per chunk: TILE_K x
    BLOCK_B, against TILE_M x TILE_K x BLOCK_B (and as many logarithms) in :func:`lse_step`.
    The terms are bounded as in :func:`dot_step` (``p * exp(em - m) <= p / w_k <= 1``, the clamp
    at 80 keeps zero-weight edges finite), with the same caveat: a node whose children all sit
    ~87 nats below another node's of the tile underflows to -inf."""
    new_max, shift = column_shift(run_max, p, em)
    acc = acc * tl.exp(run_max - shift)
    scaled = tl.exp(tl.minimum(em - shift, 80.0))  # [TILE_K, BLOCK_B]
    acc += tl.sum(p[:, :, None] * scaled[None, :, :], axis=1)
    return new_max, acc


@triton.jit
def dot_operand(x, PRECISION: tl.constexpr):
    """``x`` as a ``tl.dot`` at ``PRECISION`` should take it: at "tf32" rounded to the nearest TF32
    value (10-bit mantissa, ties away from zero). The tensor cores drop the low 13 bits, a
    truncation that biases every product low by about 2^-11 relative; the bias adds up over
    layers (a 32-step HMM chain at batch 64, TF32, H100: log-likelihoods 0.021 nats low, one
    layer 0.001), where rounded operands give errors of either sign. Other precisions: ``x``."""
    if PRECISION == "tf32":
        bits = x.to(tl.int32, bitcast=True)
        x = ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
    return x


@triton.jit
def dot_step(run_max, acc, p, em, PRECISION: tl.constexpr):
    """One chunk of the ``tl.dot`` form (GPU only: the NPU kernels use vector cores and pass
    ``DOT=False``). One shift per column, ``m[b] = max_k (em + log w_k)`` with ``w_k`` the tile's
    largest weight of edge k; the clamp at 80 keeps zero-weight edges finite (gpu.py's docstring).
    ``PRECISION`` is the dot's input precision: "ieee" (fp32 FMAs), "tf32" (tensor cores, inputs
    rounded to 10-bit mantissas) or "tf32x3" (three TF32 products, close to fp32)."""
    new_max, shift = column_shift(run_max, p, em)
    acc = acc * tl.exp(run_max - shift)
    scaled = tl.exp(tl.minimum(em - shift, 80.0))
    acc += tl.dot(dot_operand(p, PRECISION), dot_operand(scaled, PRECISION), input_precision=PRECISION)
    return new_max, acc


@triton.jit
def node_tile_lse(
    EM_ptr, P_ptr, CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, block_size, k_lo, k_hi, nodes, node_mask,
    cols, col_mask, n_batch, TILE_M: tl.constexpr, TILE_K: tl.constexpr, BLOCK_B: tl.constexpr, AFFINE: tl.constexpr,
    WIDE: tl.constexpr, FORM: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """(running max, scaled sum) of one node tile over edges ``[k_lo, k_hi)`` in chunks of
    ``TILE_K`` — the whole edge range, or one split-K slice. ``FORM``: "node" (the broadcast form,
    :func:`lse_step`; the running max per node and column ``[TILE_M, BLOCK_B]``), "column"
    (:func:`column_step`) or "dot" (:func:`dot_step`), both with one running max per column
    ``[1, BLOCK_B]``. The edges come from :func:`load_edges` (``AFFINE``: computed from
    ``child_base`` / ``param_base``, else loaded at ``edge_row``)."""
    if FORM == "node":
        run_max = tl.full([TILE_M, BLOCK_B], float("-inf"), tl.float32)
    else:
        run_max = tl.full([1, BLOCK_B], float("-inf"), tl.float32)
    acc = tl.zeros([TILE_M, BLOCK_B], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, TILE_K):
        em, p = load_chunk(
            EM_ptr, P_ptr, CIDS_ptr, PIDS_ptr, edge_row, child_base, param_base, block_size, k0, k_hi, nodes,
            node_mask, cols, col_mask, n_batch, TILE_K, AFFINE, WIDE,
        )  # fmt: skip
        if FORM == "dot":
            run_max, acc = dot_step(run_max, acc, p, em, PRECISION)
        elif FORM == "column":
            run_max, acc = column_step(run_max, acc, p, em)
        else:
            run_max, acc = lse_step(run_max, acc, tl.log(p), em)
    return run_max, acc


@triton.jit
def store_result(
    OUT_ptr, WS_MAX_ptr, WS_SUM_ptr, run_max, acc, rows, cols, mask, split, n_rows, n_batch, SPLIT: tl.constexpr
):
    """The node values ``log(acc) + shift``, or with ``SPLIT`` this split's partial (shift, scaled
    sum) at workspace rows ``split * n_rows + row`` for the combine."""
    if SPLIT:
        offs = (split * n_rows + rows)[:, None] * n_batch + cols[None, :]
        tl.store(WS_MAX_ptr + offs, tl.broadcast_to(tl.maximum(run_max, NEG_FLT_MAX), acc.shape), mask=mask)
        tl.store(WS_SUM_ptr + offs, acc, mask=mask)
    else:
        tl.store(OUT_ptr + rows[:, None] * n_batch + cols[None, :], lse_finish(run_max, acc), mask=mask)


@triton.jit
def combine_partials(WS_MAX_ptr, WS_SUM_ptr, offs, mask, n_splits, split_stride):
    """Split-K combine: ``log sum_s acc_s * exp(m_s - M) + M`` over the ``n_splits`` partial
    (shift, scaled sum) pairs stored ``split_stride`` apart, merged online (one pass).

    Stored shifts are finite (``>= -FLT_MAX``), so ``M`` is too; a split whose children were all
    -inf has ``acc_s = 0`` and adds 0, and all of them give ``log(0) = -inf``."""
    best = tl.full(offs.shape, NEG_FLT_MAX, tl.float32)
    total = tl.zeros(offs.shape, dtype=tl.float32)
    for s in range(0, n_splits):
        m_s = tl.load(WS_MAX_ptr + s * split_stride + offs, mask=mask, other=NEG_FLT_MAX)
        a_s = tl.load(WS_SUM_ptr + s * split_stride + offs, mask=mask, other=0.0)
        new_best = tl.maximum(best, m_s)
        total = total * tl.exp(best - new_best) + a_s * tl.exp(m_s - new_best)
        best = new_best
    return tl.log(total) + best


# --- backward -----------------------------------------------------------------------------------
@triton.jit
def edge_flows(flows, log_p, em, out):
    """``C [TILE_M, TILE_K, BLOCK_B] = F * exp(log p + em - out)`` (log form: a zero weight on a
    child far above its node gives 0, not 0 * inf)."""
    return flows[:, None, :] * tl.exp(log_p[:, :, None] + em[None, :, :] - out[:, None, :])


@triton.jit
def node_tile_operands(
    NF_ptr, OUT_ptr, P_ptr, g, m0, m_hi, pidx, k_mask, cols, col_mask, n_batch, block_size,
    TILE_M: tl.constexpr, WIDE: tl.constexpr, DEAD_SELECT: tl.constexpr,
):  # fmt: skip
    """The element flows' operands for nodes ``m0 + [0, TILE_M)`` below ``m_hi``: node flows and
    values ``[TILE_M, BLOCK_B]`` (:func:`load_node_state`) and weights ``p [TILE_M, TILE_K]``."""
    nodes = m0 + tl.arange(0, TILE_M)
    node_mask = nodes < m_hi
    rows = node_rows(g, block_size, nodes, WIDE)
    flows, out = load_node_state(
        NF_ptr, OUT_ptr, rows, cols, node_mask[:, None] & col_mask[None, :], n_batch, DEAD_SELECT
    )
    p = load_weights(P_ptr, pidx, nodes, node_mask[:, None] & k_mask[None, :])
    return flows, out, p


@triton.jit
def element_flow_tile(
    NF_ptr,
    OUT_ptr,
    P_ptr,
    g,
    m_lo,
    m_hi,
    pidx,
    k_mask,
    em,
    cols,
    col_mask,
    n_batch,
    block_size,
    TILE_M: tl.constexpr,
    TILE_K: tl.constexpr,
    BLOCK_B: tl.constexpr,
    WIDE: tl.constexpr,
    DEAD_SELECT: tl.constexpr,
):
    """``sum_i C [TILE_K, BLOCK_B]`` over the block's nodes ``[m_lo, m_hi)`` in sub-tiles of TILE_M."""
    acc = tl.zeros([TILE_K, BLOCK_B], dtype=tl.float32)
    for m0 in range(m_lo, m_hi, TILE_M):
        flows, out, p = node_tile_operands(
            NF_ptr, OUT_ptr, P_ptr, g, m0, m_hi, pidx, k_mask, cols, col_mask, n_batch, block_size,
            TILE_M, WIDE, DEAD_SELECT,
        )  # fmt: skip
        acc += tl.sum(edge_flows(flows, tl.log(p), em, out), axis=0)
    return acc


@triton.jit
def param_log_weights(
    P_ptr, pidx, nodes, mk_mask, MUL_PARAMS: tl.constexpr, TILE_M: tl.constexpr, TILE_K: tl.constexpr
):
    """``log p [TILE_M, TILE_K]``, or zeros without ``MUL_PARAMS`` (autograd's d loss / d params)."""
    if MUL_PARAMS:
        log_p = tl.log(load_weights(P_ptr, pidx, nodes, mk_mask))
    else:
        log_p = tl.zeros([TILE_M, TILE_K], dtype=tl.float32)
    return log_p


@triton.jit
def batch_chunk_operands(
    NF_ptr, OUT_ptr, EM_ptr, rows, node_mask, cid, k_mask, b0, n_batch, BLOCK_B: tl.constexpr,
    DEAD_SELECT: tl.constexpr,
):  # fmt: skip
    """The parameter flows' operands for batch columns ``b0 + [0, BLOCK_B)``: node flows and
    values ``[TILE_M, BLOCK_B]`` (:func:`load_node_state`) and children ``em [TILE_K, BLOCK_B]``."""
    cols = b0 + tl.arange(0, BLOCK_B)
    col_mask = cols < n_batch
    flows, out = load_node_state(
        NF_ptr, OUT_ptr, rows, cols, node_mask[:, None] & col_mask[None, :], n_batch, DEAD_SELECT
    )
    em = load_children(EM_ptr, cid, cols, k_mask[:, None] & col_mask[None, :], n_batch)
    return flows, out, em


@triton.jit
def param_flow_tile(
    NF_ptr,
    OUT_ptr,
    EM_ptr,
    rows,
    node_mask,
    cid,
    k_mask,
    log_p,
    n_batch,
    TILE_M: tl.constexpr,
    TILE_K: tl.constexpr,
    BLOCK_B: tl.constexpr,
    DEAD_SELECT: tl.constexpr,
):
    """``sum_b C [TILE_M, TILE_K]`` over the whole batch in chunks of BLOCK_B (every column, masked)."""
    acc = tl.zeros([TILE_M, TILE_K], dtype=tl.float32)
    for b0 in range(0, n_batch, BLOCK_B):
        flows, out, em = batch_chunk_operands(
            NF_ptr, OUT_ptr, EM_ptr, rows, node_mask, cid, k_mask, b0, n_batch, BLOCK_B, DEAD_SELECT
        )
        acc += tl.sum(edge_flows(flows, log_p, em, out), axis=2)
    return acc


# --- backward, one shift per column (the factored form) ----------------------------------------------
# With ``a[i, b] = log|F[i, b]| - out[i, b]`` and a shift ``c[b] >= max_i a[i, b]`` over the tile's
# nodes, ``C = F * p * exp(em - out) = p * G * exp(em + c)`` where ``G = sign(F) * exp(a - c)``
# lies in [-1, 1]. The node and edge factors separate, so the flows become products of
# ``[TILE_M, BLOCK_B]`` and ``[TILE_K, BLOCK_B]`` tiles (``tl.dot`` on a GPU, broadcast products
# on the NPU) with ``(TILE_M + TILE_K) x BLOCK_B`` exponentials instead of
# ``TILE_M x TILE_K x BLOCK_B``. The shift follows the forward's per-column form; its bound is
# the same: ``em[k] + c <= max_i (log|F_i| - log p[i, k])`` since ``out_i >= log p[i, k] + em[k]``,
# so the factors stay finite unless the column's dominant node reaches edge k through a weight
# below about ``e^-64`` (gpu.py's docstring).
@triton.jit
def flow_signs(flows):
    """``sign(F)`` without a select (no ``tl.where`` on the NPU): ``F / max(|F|, FLT_MIN)`` is
    +-1, 0 at ``F = 0`` (a denormal flow keeps its ratio, which only shrinks a negligible term)."""
    return flows / tl.maximum(tl.abs(flows), 1.1754943508222875e-38)


@triton.jit
def scaled_flows(flows, out, run_max):
    """``(G [TILE_M, BLOCK_B], new running max [1, BLOCK_B], shift [1, BLOCK_B])`` for one node
    tile: ``a = log|F| - out`` (-inf for zero flows, padding and dead nodes, whose ``out`` is
    +inf), the running max of ``a`` over nodes per column, the finite shift
    ``max(running max, -FLT_MAX)`` and ``G = sign(F) * exp(a - shift)``."""
    a = tl.log(tl.abs(flows)) - out
    new_max = tl.maximum(run_max, tl.max(a, axis=0)[None, :])
    shift = tl.maximum(new_max, NEG_FLT_MAX)
    return flow_signs(flows) * tl.exp(a - shift), new_max, shift


@triton.jit
def element_flow_column_tile(
    NF_ptr, OUT_ptr, P_ptr, g, m_lo, m_hi, pidx, k_mask, em, cols, col_mask, n_batch, block_size,
    TILE_M: tl.constexpr, TILE_K: tl.constexpr, BLOCK_B: tl.constexpr, WIDE: tl.constexpr,
    DEAD_SELECT: tl.constexpr, DOT: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """``sum_i C [TILE_K, BLOCK_B]`` over nodes ``[m_lo, m_hi)`` in the factored form:
    ``acc[k, b] = sum_i p[i, k] * G[i, b]`` online over node sub-tiles (a rising shift rescales
    ``acc`` by ``exp(c_old - c_new)``), then ``acc * exp(em + c)``, taken as ``(acc * h) * h``
    with ``h = exp(min((em + c) / 2, 80))`` so the factor cannot overflow where the product is
    finite, and an edge no node uses (``acc = 0``) gives 0, never ``0 * inf``. ``DOT``:
    ``tl.dot(p^T, G)`` at ``PRECISION`` (GPU, every side >= 16), else broadcast products (fp32)."""
    run_max = tl.full([1, BLOCK_B], float("-inf"), tl.float32)
    acc = tl.zeros([TILE_K, BLOCK_B], dtype=tl.float32)
    for m0 in range(m_lo, m_hi, TILE_M):
        flows, out, p = node_tile_operands(
            NF_ptr, OUT_ptr, P_ptr, g, m0, m_hi, pidx, k_mask, cols, col_mask, n_batch, block_size,
            TILE_M, WIDE, DEAD_SELECT,
        )  # fmt: skip
        g_tile, new_max, shift = scaled_flows(flows, out, run_max)
        acc = acc * tl.exp(run_max - shift)
        if DOT:
            p_t = dot_operand(tl.trans(p), PRECISION)
            acc += tl.dot(p_t, dot_operand(g_tile, PRECISION), input_precision=PRECISION)
        else:
            acc += tl.sum(p[:, :, None] * g_tile[:, None, :], axis=0)
        run_max = new_max
    half = tl.exp(tl.minimum((em + tl.maximum(run_max, NEG_FLT_MAX)) * 0.5, 80.0))
    return (acc * half) * half


@triton.jit
def param_flow_column_tile(
    NF_ptr, OUT_ptr, EM_ptr, rows, node_mask, cid, k_mask, n_batch, TILE_M: tl.constexpr,
    TILE_K: tl.constexpr, BLOCK_B: tl.constexpr, DEAD_SELECT: tl.constexpr, DOT: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    """``sum_b F * exp(em - out) [TILE_M, TILE_K]`` in the factored form, over the whole batch
    in chunks of BLOCK_B: per chunk the shift ``c[b]`` comes from this tile's nodes, and
    ``acc += G @ E^T`` with ``E = exp(min(em + c, 64))`` (no running max: each column is seen
    once; the clamp bites only where the dominant node reaches edge k through a weight below about
    ``e^-64``). The caller multiplies by ``p`` for the parameter flows. ``DOT`` as in
    :func:`element_flow_column_tile`."""
    acc = tl.zeros([TILE_M, TILE_K], dtype=tl.float32)
    no_max = tl.full([1, BLOCK_B], float("-inf"), tl.float32)
    for b0 in range(0, n_batch, BLOCK_B):
        flows, out, em = batch_chunk_operands(
            NF_ptr, OUT_ptr, EM_ptr, rows, node_mask, cid, k_mask, b0, n_batch, BLOCK_B, DEAD_SELECT
        )
        g_tile, _, shift = scaled_flows(flows, out, no_max)
        # clamp at 64, not the forward's 80: every column adds up to e^64 here, so a zero-weight edge
        # far above its nodes stays finite (and times p = 0 gives 0) up to ~5e10 columns
        e_tile = tl.exp(tl.minimum(em + shift, 64.0))  # [TILE_K, BLOCK_B]
        if DOT:
            e_t = dot_operand(tl.trans(e_tile), PRECISION)
            acc += tl.dot(dot_operand(g_tile, PRECISION), e_t, input_precision=PRECISION)
        else:
            acc += tl.sum(g_tile[:, None, :] * e_tile[None, :, :], axis=2)
    return acc


# --- backward: either form, as the kernels ask for it -----------------------------------------------
@triton.jit
def element_flows_of(
    NF_ptr, OUT_ptr, P_ptr, g, m_lo, m_hi, pidx, k_mask, em, cols, col_mask, n_batch, block_size,
    TILE_M: tl.constexpr, TILE_K: tl.constexpr, BLOCK_B: tl.constexpr, WIDE: tl.constexpr,
    DEAD_SELECT: tl.constexpr, FORM: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """The element flows ``[TILE_K, BLOCK_B]`` in ``FORM``: "node" (:func:`element_flow_tile`),
    "column" or "dot" (:func:`element_flow_column_tile`, broadcast products or ``tl.dot``)."""
    if FORM == "node":
        acc = element_flow_tile(
            NF_ptr, OUT_ptr, P_ptr, g, m_lo, m_hi, pidx, k_mask, em, cols, col_mask, n_batch, block_size,
            TILE_M, TILE_K, BLOCK_B, WIDE, DEAD_SELECT,
        )  # fmt: skip
    else:
        acc = element_flow_column_tile(
            NF_ptr, OUT_ptr, P_ptr, g, m_lo, m_hi, pidx, k_mask, em, cols, col_mask, n_batch, block_size,
            TILE_M, TILE_K, BLOCK_B, WIDE, DEAD_SELECT, FORM == "dot", PRECISION,
        )  # fmt: skip
    return acc


@triton.jit
def param_flows_of(
    NF_ptr, OUT_ptr, EM_ptr, P_ptr, rows, nodes, node_mask, cid, pidx, k_mask, mk_mask, n_batch,
    MUL_PARAMS: tl.constexpr, TILE_M: tl.constexpr, TILE_K: tl.constexpr, BLOCK_B: tl.constexpr,
    DEAD_SELECT: tl.constexpr, FORM: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """The parameter flows ``[TILE_M, TILE_K]`` in ``FORM`` (as :func:`element_flows_of`), times
    ``p`` with ``MUL_PARAMS`` (without: ``d loss / d params``)."""
    if FORM == "node":
        log_p = param_log_weights(P_ptr, pidx, nodes, mk_mask, MUL_PARAMS, TILE_M, TILE_K)
        acc = param_flow_tile(
            NF_ptr, OUT_ptr, EM_ptr, rows, node_mask, cid, k_mask, log_p, n_batch, TILE_M, TILE_K, BLOCK_B,
            DEAD_SELECT,
        )  # fmt: skip
    else:
        acc = param_flow_column_tile(
            NF_ptr, OUT_ptr, EM_ptr, rows, node_mask, cid, k_mask, n_batch, TILE_M, TILE_K, BLOCK_B, DEAD_SELECT,
            FORM == "dot", PRECISION,
        )  # fmt: skip
        if MUL_PARAMS:
            acc = acc * load_weights(P_ptr, pidx, nodes, mk_mask)
    return acc


@triton.jit
def scatter_add(ptr, offs, values, mask, ATOMIC: tl.constexpr):
    """``ptr[offs] += values``: atomics where several programs (or edges) may hit one address,
    a plain load-add-store where the host has established that none can."""
    if ATOMIC:
        tl.atomic_add(ptr + offs, values, mask=mask)
    else:
        tl.store(ptr + offs, tl.load(ptr + offs, mask=mask, other=0.0) + values, mask=mask)


# --- product layer --------------------------------------------------------------------------------
@triton.jit
def product_tile(
    NM_ptr,
    CIDS_ptr,
    g,
    nodes,
    cols,
    mask,
    n_edges,
    n_batch,
    BLOCK_M: tl.constexpr,
    BLOCK_B: tl.constexpr,
    WIDE: tl.constexpr,
):
    """``sum_k node_mars[cids[g, k] + i, b]`` for one ``[BLOCK_M, BLOCK_B]`` tile."""
    acc = tl.zeros([BLOCK_M, BLOCK_B], dtype=tl.float32)
    for k in range(0, n_edges):
        start = tl.load(CIDS_ptr + g * n_edges + k)
        if WIDE:
            start = start.to(tl.int64)
        acc += tl.load(NM_ptr + (start + nodes)[:, None] * n_batch + cols[None, :], mask=mask, other=0.0)
    return acc


@triton.jit
def product_scatter(GRAD_IN_ptr, CIDS_ptr, grad, g, nodes, cols, mask, n_edges, n_batch, WIDE: tl.constexpr):
    """``grad_in[cids[g, k] + i, b] += grad`` for every edge k (flows pass through a product)."""
    for k in range(0, n_edges):
        start = tl.load(CIDS_ptr + g * n_edges + k)
        if WIDE:
            start = start.to(tl.int64)
        tl.atomic_add(GRAD_IN_ptr + (start + nodes)[:, None] * n_batch + cols[None, :], grad, mask=mask)


# --- host side: split-K sizes and buffers (shared by gpu.py and npu.py) ----------------------------
def k_per_split(n_edges: int, splits: int, tile_k: int) -> int:
    """Edges per split-K slice: ``K / SPLITS`` rounded up to a multiple of TILE_K."""
    return cdiv(cdiv(n_edges, max(1, splits)), tile_k) * tile_k


def used_splits(n_edges: int, splits: int, tile_k: int) -> int:
    """Slices that get edges (fewer than SPLITS when K is short); 1 means no split."""
    return cdiv(n_edges, k_per_split(n_edges, splits, tile_k)) if splits > 1 else 1


def forward_buffers(element_mars, n_rows: int, n_edges: int, splits: int, tile_k: int, out=None):
    """``(out, ws_max, ws_sum, k_per, splits)`` for a sum-layer forward: the split-K workspace
    ``2 x [splits, n_rows, B]`` when ``splits > 1`` (else the output stands in, unused)."""
    batch = element_mars.shape[1]
    if out is None:
        out = torch.empty((n_rows, batch), dtype=torch.float32, device=element_mars.device)
    splits = used_splits(n_edges, splits, tile_k)
    if splits == 1:
        return out, out, out, n_edges, 1
    ws = torch.empty((2, splits, n_rows, batch), dtype=torch.float32, device=element_mars.device)
    return out, ws[0], ws[1], k_per_split(n_edges, splits, tile_k), splits
