"""The per-tile arithmetic of RMSNorm, shared by the GPU and NPU kernels of both norm families.

Each helper is a ``@triton.jit`` function that the kernels call (Triton inlines them; the
interpreter runs them as they are), so the math exists once. A tile is ``BLOCK_SIZE_M`` rows by
some columns of ``v`` (``x`` for RMSNorm, ``s = x + r`` for the fused family), loaded in its own
dtype; ``rstd`` holds one fp32 value per row.

Forward::

    rstd = 1 / sqrt(mean(v^2) + eps)       per row (:func:`row_rstd`; by chunks :func:`chunked_forward`)
    y    = v * rstd * (offset + w)         (:func:`normalized`, :func:`weighted`)

computed in fp32; the casting modes differ only in where results are rounded to v's dtype:
``llama`` rounds ``v * rstd`` before the weight, ``gemma`` never rounds, ``none`` also rounds
``rstd`` first, as if everything ran in v's dtype.

Backward (:func:`backward_tile`), with ``vhat = v * rstd`` and ``m = dy * (offset + w)``::

    dx = rstd * (m - vhat * mean(m * vhat))        per row
    dw = sum over rows of dy * vhat                (llama: vhat rounded to v's dtype first)

The helpers follow triton-ascend's rules (the NPU modules' docstrings): padding is zeroed by
``tl.load(..., other=0)``, no libdevice, no fp64, no cache hints. What the rules make different
on the two devices is a flag:

- offsets: int64 with the tensor's row stride on the GPU, int32 ``row * hidden`` on the NPU
  (``WIDE``);
- rstd: ``tl.rsqrt`` on the GPU, ``1 / tl.sqrt`` on the NPU (``RSQRT``);
- ``tl.where`` over a tile mask: only behind the NPU forward's ``USE_WHERE`` switch, which keeps
  that slow form to show its cost.

How work is handed out (one row tile per program, grid-stride loops) stays in the kernels, but for
two walks that several kernels share: the NPU forward's two passes over column chunks
(:func:`chunked_forward`) and the GPU backward's grid-stride walk over row tiles
(:func:`backward_rows`). Where the kernels load in different orders, each keeps its own: the
generated code follows the order of the loads.
"""

from __future__ import annotations

import triton
import triton.language as tl


# --- row tiles: rows, offsets, loads ----------------------------------------------------------
@triton.jit
def block_rows(block, n_rows, BLOCK_SIZE_M: tl.constexpr):
    """The rows of row block ``block`` and their mask."""
    rows = block * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    return rows, rows < n_rows


@triton.jit
def tile_offsets(rows, row_mask, cols, col_mask, row_stride, WIDE: tl.constexpr):
    """The tile's mask and element offsets ``row * row_stride + col``; ``WIDE``: in int64 (the
    GPU kernels, any tensor size), else int32 (the NPU's, which refuse 2**31 elements or more)."""
    mask = row_mask[:, None] & col_mask[None, :]
    if WIDE:
        rows = rows.to(tl.int64)
    return mask, rows[:, None] * row_stride + cols[None, :]


@triton.jit
def load_zeroed(ptr, offs, mask, USE_WHERE: tl.constexpr):
    """A tile with its padding 0. ``USE_WHERE``: zeroed by ``tl.where`` instead of the load, the
    form the NPU forward keeps as a switch (the vector unit cannot compare integers, so a select
    over the tile mask becomes scalar code there)."""
    if USE_WHERE:
        v = tl.where(mask, tl.load(ptr + offs, mask=mask), 0.0)
    else:
        v = tl.load(ptr + offs, mask=mask, other=0.0)
    return v


@triton.jit
def load_input(X_ptr, R_ptr, S_ptr, offs, mask, ADD_RESIDUAL: tl.constexpr, USE_WHERE: tl.constexpr):
    """The tile of ``v``: x, or with ``ADD_RESIDUAL`` (the fused family) ``s = x + r`` rounded to
    s's dtype and stored, so the residual stream and the normalised value are the same numbers,
    as in the unfused ``s = x + r; y = norm(s)``."""
    v = load_zeroed(X_ptr, offs, mask, USE_WHERE)
    if ADD_RESIDUAL:
        r = load_zeroed(R_ptr, offs, mask, USE_WHERE)
        v = (v.to(tl.float32) + r.to(tl.float32)).to(S_ptr.dtype.element_ty)
        tl.store(S_ptr + offs, v, mask=mask)
    return v


@triton.jit
def weight_row(W_ptr, cols, col_mask, offset, HAS_WEIGHT: tl.constexpr):
    """``offset + w`` over ``cols`` in fp32 (``offset`` alone without a weight)."""
    w = offset
    if HAS_WEIGHT:
        w = offset + tl.load(W_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    return w


# --- forward ------------------------------------------------------------------------------------
@triton.jit
def sum_of_squares(v):
    """``sum(v^2)`` per row of a tile, in fp32 (also what keeps the CPU interpreter, whose bf16
    arithmetic is unreliable, exact); padding is 0 and adds nothing."""
    vf = v.to(tl.float32)
    return tl.sum(vf * vf, axis=1)


@triton.jit
def rstd_from(sum_sq, n_cols, eps, RSQRT: tl.constexpr):
    """``1 / sqrt(mean(v^2) + eps)`` from a row's sum of squares: ``tl.rsqrt`` with ``RSQRT``
    (GPU), else ``1 / tl.sqrt`` (NPU: no libdevice)."""
    if RSQRT:
        rstd = tl.rsqrt(sum_sq / n_cols + eps)
    else:
        rstd = 1.0 / tl.sqrt(sum_sq / n_cols + eps)
    return rstd


@triton.jit
def row_rstd(v, n_cols, eps, RSQRT: tl.constexpr):
    """rstd of a tile of whole rows (padding to the tile width is 0)."""
    return rstd_from(sum_of_squares(v), n_cols, eps, RSQRT)


@triton.jit
def normalized(v, rstd, CASTING_MODE: tl.constexpr):
    """``v * rstd`` per row in fp32, rounded where the casting mode rounds (0 llama, 1 gemma,
    2 none); the weight comes after (:func:`weighted`)."""
    vf = v.to(tl.float32)
    if CASTING_MODE == 2:
        y = vf * rstd.to(v.dtype).to(tl.float32)[:, None]
    else:
        y = vf * rstd[:, None]
    if CASTING_MODE != 1:
        y = y.to(v.dtype).to(tl.float32)
    return y


@triton.jit
def weighted(y, W_ptr, cols, col_mask, offset, HAS_WEIGHT: tl.constexpr):
    """``y * (offset + w)`` over the tile's columns (``y`` itself without a weight)."""
    if HAS_WEIGHT:
        y = y * weight_row(W_ptr, cols, col_mask, offset, True)[None, :]
    return y


@triton.jit
def chunked_forward(
    Y_ptr, X_ptr, R_ptr, S_ptr, W_ptr, rows, row_mask, cols, n_cols, eps, offset, CASTING_MODE: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, ADD_RESIDUAL: tl.constexpr, USE_WHERE: tl.constexpr, BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
):  # fmt: skip
    """The NPU forward of one row block in column chunks of BLOCK_SIZE_N, for rows of any width
    (the Unified Buffer holds a chunk, not a row); returns rstd. Pass 1 loads the input tiles
    (:func:`load_input`: with ``ADD_RESIDUAL`` it stores s) and sums their squares; pass 2 reads
    ``v`` back (x, or the s chunks this program just stored, at the same addresses) and
    normalises it. Without ``ADD_RESIDUAL``, R_ptr and S_ptr are unused."""
    V_ptr = X_ptr
    if ADD_RESIDUAL:
        V_ptr = S_ptr
    sum_sq = tl.zeros([BLOCK_SIZE_M], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE_N):
        c = start + cols
        mask, offs = tile_offsets(rows, row_mask, c, c < n_cols, n_cols, False)
        sum_sq += sum_of_squares(load_input(X_ptr, R_ptr, S_ptr, offs, mask, ADD_RESIDUAL, USE_WHERE))
    rstd = rstd_from(sum_sq, n_cols, eps, False)
    for start in range(0, n_cols, BLOCK_SIZE_N):
        c = start + cols
        col_mask = c < n_cols
        mask, offs = tile_offsets(rows, row_mask, c, col_mask, n_cols, False)
        v = tl.load(V_ptr + offs, mask=mask, other=0.0)
        y = weighted(normalized(v, rstd, CASTING_MODE), W_ptr, c, col_mask, offset, HAS_WEIGHT)
        tl.store(Y_ptr + offs, y.to(Y_ptr.dtype.element_ty), mask=mask)
    return rstd


# --- backward -----------------------------------------------------------------------------------
@triton.jit
def load_v_dy(V_ptr, DY_ptr, offs, mask):
    """The tile of ``v`` (its own dtype) and of ``dy`` (fp32)."""
    v = tl.load(V_ptr + offs, mask=mask, other=0.0)
    return v, tl.load(DY_ptr + offs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def backward_tile(
    v, dy, w, rstd, dot, n_cols, CASTING_MODE: tl.constexpr, HAS_WEIGHT: tl.constexpr, ROW_DOT: tl.constexpr
):
    """``(dx, dw)`` of one tile: dx in fp32, dw summed over the tile's rows (0.0 without a weight).

    ``dy`` is fp32; ``w`` is ``offset + weight`` over the tile's columns (unused without a
    weight). ``ROW_DOT``: the tile holds whole rows, so ``mean(m * vhat)`` is formed here;
    otherwise ``dot`` carries it from an earlier walk over the row's chunks.
    """
    vhat = v.to(tl.float32) * rstd[:, None]
    if HAS_WEIGHT:
        m = dy * w[None, :]
    else:
        m = dy
    if ROW_DOT:
        dot = tl.sum(m * vhat, axis=1) / n_cols
    dx = rstd[:, None] * (m - vhat * dot[:, None])
    dw = 0.0
    if HAS_WEIGHT:
        if CASTING_MODE == 0:
            # llama multiplied the weight by v * rstd already rounded to v's dtype.
            vhat = vhat.to(v.dtype).to(tl.float32)
        dw = tl.sum(dy * vhat, axis=0)
    return dx, dw


@triton.jit
def store_dx(DX_ptr, DS_ptr, offs, mask, dx, HAS_DS: tl.constexpr):
    """dx in dx's dtype; with ``HAS_DS`` (the fused family) plus the residual stream's own
    gradient ``ds``: the add passes ``dx + ds`` to both x and r."""
    if HAS_DS:
        dx += tl.load(DS_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(DX_ptr + offs, dx.to(DX_ptr.dtype.element_ty), mask=mask)


@triton.jit
def accumulate(ptr, values, mask):
    """``ptr[...] += values`` by one owner (a program's own row of dw partials)."""
    tl.store(ptr, tl.load(ptr, mask=mask, other=0.0) + values, mask=mask)


@triton.jit
def backward_rows(
    DX_ptr, DY_ptr, DS_ptr, X_ptr, W_ptr, RSTD_ptr, DOT_ptr, first, step, cols, col_mask, row_stride, n_rows, n_cols,
    offset, CASTING_MODE: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_DS: tl.constexpr, ROW_DOT: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, PREFETCH: tl.constexpr = False,
    RELOAD_W: tl.constexpr = False, STAGES: tl.constexpr = 1,
):  # fmt: skip
    """The GPU backward over the columns ``cols`` of row tiles ``first, first + step, …``: dx
    stored (:func:`store_dx`), dw summed over the tiles and returned ``[BLOCK_SIZE]``.
    ``ROW_DOT``: the columns are whole rows (:func:`backward_tile`); else ``mean(m * vhat)`` per
    row comes from ``DOT_ptr``. Each tile loads v and dy, then rstd (the NPU kernel loads rstd
    first, and keeps its own loop).

    ``PREFETCH``: the next tile's v and dy are loaded before this tile's arithmetic and stores,
    so a program keeps its loads in flight while it computes (two tiles in registers): with one
    or two programs per SM nothing else would hide the load latency between tiles.

    ``RELOAD_W``: ``offset + w`` is loaded again for every tile (from L1/L2) instead of held in
    registers across the loop, which frees a row's worth of registers per thread.

    ``STAGES`` (without ``PREFETCH``): Triton's software pipeline copies the tiles ``STAGES - 1``
    ahead into shared memory (``cp.async``) while this one is computed, so loads stay in flight
    without holding the next tile in registers; 1 is the plain loop. A loop without a dot is
    pipelined only when its ``num_stages`` is given, as here."""
    w = 0.0
    if not RELOAD_W:
        w = weight_row(W_ptr, cols, col_mask, offset, HAS_WEIGHT)
    dw_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    n_tiles = tl.cdiv(n_rows, BLOCK_SIZE_M)
    # Each tile's three load lines stay inline: 0ae745e, which moved them into a helper returning
    # the loaded tiles, is the first commit at which the fused op's GPU opcheck (AOT dispatch,
    # tests/test_torch_ops.py) failed; it passed before.
    if PREFETCH:
        rows, row_mask = block_rows(first, n_rows, BLOCK_SIZE_M)
        mask, offsets = tile_offsets(rows, row_mask, cols, col_mask, row_stride, True)
        x, dy = load_v_dy(X_ptr, DY_ptr, offsets, mask)
        for tile in range(first, n_tiles, step):
            # The next tile's loads first (masked off past the last tile).
            next_rows, next_row_mask = block_rows(tile + step, n_rows, BLOCK_SIZE_M)
            next_mask, next_offsets = tile_offsets(next_rows, next_row_mask, cols, col_mask, row_stride, True)
            next_x, next_dy = load_v_dy(X_ptr, DY_ptr, next_offsets, next_mask)
            dw_acc += _backward_rows_tile(
                DX_ptr, DS_ptr, RSTD_ptr, DOT_ptr, W_ptr, x, dy, w, cols, col_mask, offset, rows, row_mask, mask,
                offsets, n_cols, CASTING_MODE, HAS_WEIGHT, HAS_DS, ROW_DOT, RELOAD_W,
            )  # fmt: skip
            x, dy = next_x, next_dy
            rows, row_mask, mask, offsets = next_rows, next_row_mask, next_mask, next_offsets
    else:
        for tile in tl.range(first, n_tiles, step, num_stages=STAGES):
            rows, row_mask = block_rows(tile, n_rows, BLOCK_SIZE_M)
            mask, offsets = tile_offsets(rows, row_mask, cols, col_mask, row_stride, True)
            x, dy = load_v_dy(X_ptr, DY_ptr, offsets, mask)
            dw_acc += _backward_rows_tile(
                DX_ptr, DS_ptr, RSTD_ptr, DOT_ptr, W_ptr, x, dy, w, cols, col_mask, offset, rows, row_mask, mask,
                offsets, n_cols, CASTING_MODE, HAS_WEIGHT, HAS_DS, ROW_DOT, RELOAD_W,
            )  # fmt: skip
    return dw_acc


@triton.jit
def _backward_rows_tile(
    DX_ptr, DS_ptr, RSTD_ptr, DOT_ptr, W_ptr, x, dy, w, cols, col_mask, offset, rows, row_mask, mask, offsets, n_cols,
    CASTING_MODE: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_DS: tl.constexpr, ROW_DOT: tl.constexpr,
    RELOAD_W: tl.constexpr,
):  # fmt: skip
    """One tile of :func:`backward_rows` once its v and dy are loaded: dx stored, dw returned."""
    if RELOAD_W:
        w = weight_row(W_ptr, cols, col_mask, offset, HAS_WEIGHT)
    rstd = tl.load(RSTD_ptr + rows, mask=row_mask, other=0.0)
    dot = rstd  # unused with ROW_DOT
    if not ROW_DOT:
        dot = tl.load(DOT_ptr + rows, mask=row_mask, other=0.0)
    dx, dw = backward_tile(x, dy, w, rstd, dot, n_cols, CASTING_MODE, HAS_WEIGHT, ROW_DOT)
    store_dx(DX_ptr, DS_ptr, offsets, mask, dx, HAS_DS)
    return dw
