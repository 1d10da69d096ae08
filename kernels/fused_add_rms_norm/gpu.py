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

dx and dr are one tensor (the add's gradient is the identity for both operands). That is
RMSNorm's whole-row backward on the saved s with ds added in the same kernel, so this family
launches :func:`kernels.rms_norm.gpu.rms_norm_backward` (its ``HAS_DS`` switch): one persistent
grid, the same ``DW_REDUCE`` choices.

Casting modes (``CASTING_MODE`` constexpr: 0 llama, 1 gemma, 2 none) only decide where values
are rounded to x's dtype; the arithmetic itself is fp32 (which also keeps the CPU interpreter,
whose bf16 arithmetic is unreliable, exact). Tile checks and defaults are RMSNorm's
(:func:`kernels.rms_norm.gpu.resolve_tiles`): the two kernels hold the same row tiles.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.launch import launch, replay_of
from kernels.rms_norm.gpu import (
    CASTING_CODES,
    MAX_TILE_ELEMENTS,
    NUM_WARPS,
    GpuTiles,
    forward_options,
    resolve_tiles,
    rms_norm_backward,
    with_tuned_tiles,
)
from kernels.rms_norm.tile_math import load_input, normalized, row_rstd, weighted
from kernels.runtime import device_of
from kernels.tiling import cdiv

__all__ = [
    "CASTING_CODES",
    "NUM_WARPS",
    "GpuTiles",
    "fused_add_rms_norm_backward",
    "fused_add_rms_norm_forward",
    "resolve_tiles",
    "tiles_for",
    "tiles_for_rows",
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

    # s rounded to its dtype (x's) once and stored: the residual stream and the normalised value
    # are the same numbers.
    s = load_input(X_ptr, R_ptr, S_ptr, offsets, mask, True, False)
    rstd = row_rstd(s, n_cols, eps, True)
    y = weighted(normalized(s, rstd, CASTING_MODE), W_ptr, cols, col_mask, offset, HAS_WEIGHT)
    tl.store(RSTD_ptr + rows, rstd, mask=row_mask)
    tl.store(Y_ptr + offsets, y.to(Y_ptr.dtype.element_ty), mask=mask)


# --- host side ---------------------------------------------------------------------------
def tiles_for(x: torch.Tensor, **tiles) -> GpuTiles:
    """Checked tiles for x viewed as rows of its last axis (ValueError names the tile and what is
    allowed), from this family's tuned tables where the device has them. The fused
    backward always holds whole rows (its hidden sizes stay within the register tile)."""
    n_cols = int(x.shape[-1])  # a traced (symbolic) size specialises here
    return tiles_for_rows(int(x.numel()) // max(n_cols, 1), n_cols, device_of(x), **tiles)


def tiles_for_rows(n_rows: int, n_cols: int, dev, **tiles) -> GpuTiles:
    """:func:`tiles_for` from the shape and device alone (``source``: records' tiles_source)."""
    return with_tuned_tiles(
        "fused_add_rms_norm", dev, n_rows, n_cols, tiles, BWD_CHUNK=MAX_TILE_ELEMENTS, residual=True
    )


def fused_add_rms_norm_forward(x2d, r2d, weight, eps, offset, casting_mode, tiles: GpuTiles):
    """Returns (y, s, rstd) for contiguous 2-D x and r of one shape."""
    y = torch.empty_like(x2d)
    s = torch.empty_like(x2d)
    rstd = torch.empty(x2d.shape[0], dtype=torch.float32, device=x2d.device)
    grid, args, kwargs = _forward_launch(y, s, x2d, r2d, weight, rstd, eps, offset, casting_mode, tiles)
    launch(_fused_add_rms_norm_forward_kernel, x2d, grid, *args, **kwargs)
    return y, s, rstd


def fused_add_rms_norm_forward_replay(x2d, r2d, weight, y, s, rstd, eps, offset, casting_mode, tiles: GpuTiles):
    """After ``fused_add_rms_norm_forward(...)`` returned ``y, s, rstd``: the launch again as a
    replay of ``(y, s, x, r, w, rstd)`` addresses (``w`` is x's without a weight), for an eager
    call's plan, or None (:func:`kernels.launch.replay_of`)."""
    grid, args, kwargs = _forward_launch(y, s, x2d, r2d, weight, rstd, eps, offset, casting_mode, tiles)
    return replay_of(_fused_add_rms_norm_forward_kernel, x2d, grid, *args, **kwargs)


def _forward_launch(y, s, x2d, r2d, weight, rstd, eps, offset, casting_mode, tiles: GpuTiles):
    """(grid, arguments, keywords) of the forward kernel's launch; x stands in for a missing
    weight (the kernel does not read it then)."""
    n_rows, n_cols = x2d.shape
    w = weight if weight is not None else x2d
    args = (y, s, x2d, r2d, w, rstd, x2d.stride(0), n_rows, n_cols, eps, offset)
    return (cdiv(n_rows, tiles.BLOCK_SIZE_M),), args, forward_options(casting_mode, weight, tiles)


def fused_add_rms_norm_backward(dy2d, ds2d, s2d, weight, rstd, offset, casting_mode, tiles: GpuTiles):
    """Returns (dx, dw); dx is also dr. ``ds2d`` (the residual stream's gradient) may be None.

    The backward of ``y = RMSNorm(s)`` is RMSNorm's whole-row backward on the saved s, with ds
    added to dx in the same kernel (the add passes one gradient to both x and r)."""
    return rms_norm_backward(dy2d, s2d, weight, rstd, offset, casting_mode, tiles, ds2d=ds2d)
