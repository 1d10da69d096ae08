"""Fused add + RMSNorm on GPUs with Triton: a row-block forward and a persistent backward.

Forward. Program ``p`` owns ``BLOCK_SIZE_M`` consecutive rows, loaded as one
``BLOCK_SIZE_M x BLOCK_SIZE`` tile with ``BLOCK_SIZE >= hidden`` (untiled along the row: every
element of x and r is read once, y and s written once)::

    s    = x + r                 (rounded to x's dtype and stored: the next residual stream)
    rstd = 1 / sqrt(mean(s^2) + eps)          (fp32, stored per row for the backward)
    y    = s * rstd * (offset + w)

Unfused, ``s = x + r`` writes s and the norm reads it back: fusing saves one full read of the
activations (forward moves 4 row-sized tensors instead of 5). ``BLOCK_SIZE_M = 1`` is the classic
row-per-program kernel; larger values give small hidden sizes more work per program.

Backward, with ``shat = s * rstd``, ``m = dy * (offset + w)`` and the residual stream's own
incoming gradient ``ds`` (optional: absent when s was not used)::

    dx = dr = rstd * (m - shat * mean(m * shat)) + ds       (per row)
    dw      = sum over rows of dy * shat

dx and dr are one tensor (the add's gradient is the identity for both operands). A persistent
grid of ``GRID`` programs (default: one per SM) walks the row tiles grid-stride; each keeps an
fp32 partial dw in registers; the partials are reduced as RMSNorm's are (``DW_REDUCE``: fp32
atomics and a cast by the last program, one launch; or a ``[GRID, hidden]`` buffer the host sums,
deterministic).

Casting modes (``CASTING_MODE`` constexpr: 0 llama, 1 gemma, 2 none) only decide where values
are rounded to x's dtype; the arithmetic itself is fp32 (which also keeps the CPU interpreter,
whose bf16 arithmetic is unreliable, exact). Tile checks and defaults are RMSNorm's
(:func:`kernels.rms_norm.gpu.resolve_tiles`): the two kernels hold the same row tiles.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.launch import launch
from kernels.rms_norm.gpu import (
    CASTING_CODES,
    MAX_TILE_ELEMENTS,
    NUM_WARPS,
    DwOutputs,
    GpuTiles,
    _store_dw,
    resolve_tiles,
)
from kernels.runtime import device_of

__all__ = [
    "CASTING_CODES",
    "NUM_WARPS",
    "GpuTiles",
    "fused_add_rms_norm_backward",
    "fused_add_rms_norm_forward",
    "resolve_tiles",
    "tiles_for",
]


@triton.jit
def _fused_add_rms_norm_forward_kernel(
    Y_ptr,
    S_ptr,
    X_ptr,
    R_ptr,
    W_ptr,
    RSTD_ptr,
    row_stride,
    n_rows,
    n_cols,
    eps,
    offset,
    CASTING_MODE: tl.constexpr,  # 0 llama, 1 gemma, 2 none
    HAS_WEIGHT: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
):
    """s = x + r stored; y = s * rstd * (offset + w) for BLOCK_SIZE_M whole rows; rstd stored."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    cols = tl.arange(0, BLOCK_SIZE)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    offsets = rows.to(tl.int64)[:, None] * row_stride + cols[None, :]

    x = tl.load(X_ptr + offsets, mask=mask, other=0.0)
    r = tl.load(R_ptr + offsets, mask=mask, other=0.0)
    # The sum is rounded to x's dtype once: the stored residual stream and the normalised value
    # are the same numbers, as in the unfused `s = x + r; y = norm(s)`.
    s = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
    tl.store(S_ptr + offsets, s, mask=mask)

    sf = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(sf * sf, axis=1) / n_cols + eps)
    if CASTING_MODE == 2:
        # "none": rstd and s * rstd rounded as if computed in x's dtype.
        y = sf * rstd.to(x.dtype).to(tl.float32)[:, None]
    else:
        y = sf * rstd[:, None]
    if CASTING_MODE != 1:
        # "llama" / "none": the normalised s is cast back before the weight; "gemma" stays fp32.
        y = y.to(x.dtype).to(tl.float32)
    if HAS_WEIGHT:
        w = tl.load(W_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        y = y * (offset + w)[None, :]
    tl.store(RSTD_ptr + rows, rstd, mask=row_mask)
    tl.store(Y_ptr + offsets, y.to(Y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _fused_add_rms_norm_backward_kernel(
    DX_ptr,
    DY_ptr,
    DS_ptr,
    S_ptr,
    W_ptr,
    RSTD_ptr,
    DW_partial_ptr,
    DW32_ptr,
    DW_ptr,
    COUNTER_ptr,
    row_stride,
    n_rows,
    n_cols,
    offset,
    CASTING_MODE: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    DW_ATOMIC: tl.constexpr,
    HAS_DS: tl.constexpr,  # an incoming gradient of s (the residual stream) is added to dx
    BLOCK_SIZE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
):
    """dx (= dr) per row; this program's partial dw over the row tiles it visits (grid-stride)."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_SIZE)
    col_mask = cols < n_cols
    if HAS_WEIGHT:
        w = offset + tl.load(W_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)

    n_tiles = tl.cdiv(n_rows, BLOCK_SIZE_M)
    for tile in range(pid, n_tiles, n_programs):
        rows = tile * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        offsets = rows.to(tl.int64)[:, None] * row_stride + cols[None, :]
        s = tl.load(S_ptr + offsets, mask=mask, other=0.0)
        dy = tl.load(DY_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD_ptr + rows, mask=row_mask, other=0.0)

        shat = s.to(tl.float32) * rstd[:, None]
        if HAS_WEIGHT:
            m = dy * w[None, :]
        else:
            m = dy
        dot = tl.sum(m * shat, axis=1) / n_cols
        dx = rstd[:, None] * (m - shat * dot[:, None])
        if HAS_DS:
            dx += tl.load(DS_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX_ptr + offsets, dx.to(DX_ptr.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            if CASTING_MODE == 0:
                # llama multiplied the weight by s * rstd already cast to s's dtype.
                shat = shat.to(s.dtype).to(tl.float32)
            dw_acc += tl.sum(dy * shat, axis=0)

    if HAS_WEIGHT:
        _store_dw(
            dw_acc,
            cols,
            col_mask,
            pid,
            n_programs,
            DW_partial_ptr,
            DW32_ptr,
            DW_ptr,
            COUNTER_ptr,
            n_cols,
            DW_ATOMIC,
            BLOCK_SIZE,
        )


# --- host side ---------------------------------------------------------------------------
def tiles_for(x: torch.Tensor, **tiles) -> GpuTiles:
    """Checked tiles for x viewed as rows of its last axis (ValueError names the tile and what is
    allowed). The fused backward always holds whole rows (its hidden sizes stay within the
    register tile)."""
    n_cols = x.shape[-1]
    rows = x.numel() // max(n_cols, 1)
    return resolve_tiles(rows, n_cols, device_of(x).num_cores, BWD_CHUNK=MAX_TILE_ELEMENTS, **tiles)


def fused_add_rms_norm_forward(x2d, r2d, weight, eps, offset, casting_mode, tiles: GpuTiles):
    """Returns (y, s, rstd) for contiguous 2-D x and r of one shape."""
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    s = torch.empty_like(x2d)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    launch(
        _fused_add_rms_norm_forward_kernel,
        x2d,
        (triton.cdiv(n_rows, tiles.BLOCK_SIZE_M),),
        y,
        s,
        x2d,
        r2d,
        weight if weight is not None else x2d,
        rstd,
        x2d.stride(0),
        n_rows,
        n_cols,
        eps,
        offset,
        CASTING_MODE=CASTING_CODES[casting_mode],
        HAS_WEIGHT=weight is not None,
        BLOCK_SIZE=tiles.BLOCK_SIZE,
        BLOCK_SIZE_M=tiles.BLOCK_SIZE_M,
        num_warps=tiles.num_warps,
    )
    return y, s, rstd


def fused_add_rms_norm_backward(dy2d, ds2d, s2d, weight, rstd, offset, casting_mode, tiles: GpuTiles):
    """Returns (dx, dw); dx is also dr. ``ds2d`` (the residual stream's gradient) may be None."""
    n_rows, n_cols = s2d.shape
    dy2d = dy2d.contiguous()
    ds2d = ds2d.contiguous() if ds2d is not None else None
    dx = torch.empty_like(s2d)
    grid = tiles.GRID
    atomic = tiles.DW_REDUCE == "atomic"
    dw_out = DwOutputs(weight, n_cols, grid, atomic, False, rstd)
    launch(
        _fused_add_rms_norm_backward_kernel,
        s2d,
        (grid,),
        dx,
        dy2d,
        ds2d if ds2d is not None else dy2d,
        s2d,
        weight if weight is not None else s2d,
        rstd,
        *dw_out.pointers,
        s2d.stride(0),
        n_rows,
        n_cols,
        offset,
        CASTING_MODE=CASTING_CODES[casting_mode],
        HAS_WEIGHT=weight is not None,
        DW_ATOMIC=atomic,
        HAS_DS=ds2d is not None,
        BLOCK_SIZE=tiles.BLOCK_SIZE,
        BLOCK_SIZE_M=tiles.bwd_block_size_m,
        num_warps=tiles.bwd_num_warps,
    )
    return dx, dw_out.result(weight)
