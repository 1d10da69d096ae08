"""RMSNorm on GPUs with Triton: a row-per-program forward and a persistent backward.

Forward. Program ``p`` owns ``BLOCK_SIZE_M`` consecutive rows and loads them as one
``BLOCK_SIZE_M x BLOCK_SIZE`` tile, where ``BLOCK_SIZE >= hidden`` holds the whole row (the kernel
is *untiled* along the row: every element is read once). ``BLOCK_SIZE_M = 1`` is the classic
row-per-program kernel; larger values help small hidden sizes, where one row is too little work
for a program. Per row it stores ``rstd`` (fp32) for the backward.

Backward. With ``xhat = x * rstd`` and ``m = dy * (offset + w)``::

    dx = rstd * (m - xhat * mean(m * xhat))      (per row)
    dw = sum over rows of dy * xhat

A persistent grid of ``GRID`` programs (default: one per SM) walks the row tiles grid-stride;
each program accumulates its own fp32 partial ``dw`` in registers and writes it to row ``p`` of a
``[GRID, hidden]`` buffer, which the host sums. No atomics, deterministic.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.device import device_of, launcher
from kernels.tiling import cdiv, is_power_of_two, next_power_of_2

CASTING_CODES = {"llama": 0, "gemma": 1, "none": 2}
# The largest tile (elements) one program holds in registers; larger rows need impl="npu"'s
# chunked two-pass kernel, which runs on GPUs too.
MAX_TILE_ELEMENTS = 65536
NUM_WARPS = (1, 2, 4, 8, 16, 32)


@triton.jit
def _rms_norm_forward_kernel(
    Y_ptr,
    X_ptr,
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
    """y = x * rstd * (offset + w) for BLOCK_SIZE_M whole rows; rstd stored per row."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    cols = tl.arange(0, BLOCK_SIZE)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    offsets = rows.to(tl.int64)[:, None] * row_stride + cols[None, :]

    x = tl.load(X_ptr + offsets, mask=mask, other=0.0)
    # Arithmetic in fp32; the casting modes differ only in where results are rounded to x's
    # dtype (this also keeps the CPU interpreter, whose bf16 arithmetic is unreliable, exact).
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, axis=1) / n_cols + eps)
    if CASTING_MODE == 2:
        # "none": rstd and x * rstd rounded as if computed in x's dtype.
        y = xf * rstd.to(x.dtype).to(tl.float32)[:, None]
    else:
        y = xf * rstd[:, None]
    if CASTING_MODE != 1:
        # "llama" / "none": the normalised x is cast back before the weight; "gemma" stays fp32.
        y = y.to(x.dtype).to(tl.float32)
    if HAS_WEIGHT:
        w = tl.load(W_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        y = y * (offset + w)[None, :]
    tl.store(RSTD_ptr + rows, rstd, mask=row_mask)
    tl.store(Y_ptr + offsets, y.to(Y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_backward_kernel(
    DX_ptr,
    DY_ptr,
    X_ptr,
    W_ptr,
    RSTD_ptr,
    DW_partial_ptr,
    row_stride,
    n_rows,
    n_cols,
    offset,
    CASTING_MODE: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
):
    """dx per row; this program's partial dw over the row tiles it visits (grid-stride)."""
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
        x = tl.load(X_ptr + offsets, mask=mask, other=0.0)
        dy = tl.load(DY_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD_ptr + rows, mask=row_mask, other=0.0)

        xhat = x.to(tl.float32) * rstd[:, None]
        if HAS_WEIGHT:
            m = dy * w[None, :]
        else:
            m = dy
        dot = tl.sum(m * xhat, axis=1) / n_cols
        dx = rstd[:, None] * (m - xhat * dot[:, None])
        tl.store(DX_ptr + offsets, dx.to(DX_ptr.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            if CASTING_MODE == 0:
                # llama multiplied the weight by x * rstd already cast to x's dtype.
                xhat = xhat.to(x.dtype).to(tl.float32)
            dw_acc += tl.sum(dy * xhat, axis=0)

    if HAS_WEIGHT:
        tl.store(DW_partial_ptr + pid * n_cols + cols, dw_acc, mask=col_mask)


# --- host side ---------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuTiles:
    BLOCK_SIZE: int
    BLOCK_SIZE_M: int
    num_warps: int
    GRID: int


def default_num_warps(tile_elements: int) -> int:
    """Enough warps that each thread holds a few vectors of the tile (Triton tutorial rule)."""
    if tile_elements >= 32768:
        return 32
    if tile_elements >= 8192:
        return 16
    if tile_elements >= 2048:
        return 8
    return 4


def default_block_size_m(n_cols: int) -> int:
    """Rows per program for the multi-row variant: about 2048 elements of work per program."""
    return max(1, min(16, 2048 // next_power_of_2(n_cols)))


@functools.lru_cache(maxsize=4096)
def resolve_tiles(
    n_rows: int,
    n_cols: int,
    num_cores: int,
    BLOCK_SIZE="auto",
    BLOCK_SIZE_M=1,
    num_warps="auto",
    GRID="auto",
) -> GpuTiles:
    """Check tile choices and fill in the automatic ones; ValueError says what to change.

    Cached: the launch path asks on every call with the same few shapes."""
    need = next_power_of_2(n_cols)
    if need > MAX_TILE_ELEMENTS:
        raise ValueError(
            f"hidden={n_cols} does not fit the untiled GPU kernel (a row tile holds at most "
            f"{MAX_TILE_ELEMENTS} elements); use impl='npu', whose chunked two-pass kernel runs on GPUs too"
        )
    if BLOCK_SIZE == "auto":
        BLOCK_SIZE = need
    elif not is_power_of_two(BLOCK_SIZE):
        raise ValueError(f"BLOCK_SIZE={BLOCK_SIZE!r} must be a power of two; use {need} for hidden={n_cols}")
    elif BLOCK_SIZE < n_cols:
        raise ValueError(
            f"BLOCK_SIZE={BLOCK_SIZE} is smaller than hidden={n_cols}: the untiled kernel keeps a whole "
            f"row in one tile; use BLOCK_SIZE >= {need} (or impl='npu' for column chunks)"
        )
    if BLOCK_SIZE_M == "auto":
        BLOCK_SIZE_M = default_block_size_m(n_cols)
    elif not is_power_of_two(BLOCK_SIZE_M):
        raise ValueError(f"BLOCK_SIZE_M={BLOCK_SIZE_M!r} must be a power of two (1, 2, 4, …)")
    if BLOCK_SIZE * BLOCK_SIZE_M > MAX_TILE_ELEMENTS:
        raise ValueError(
            f"BLOCK_SIZE_M={BLOCK_SIZE_M} x BLOCK_SIZE={BLOCK_SIZE} = {BLOCK_SIZE * BLOCK_SIZE_M} elements "
            f"exceeds the {MAX_TILE_ELEMENTS}-element tile a program can hold; lower BLOCK_SIZE_M to "
            f"{max(1, MAX_TILE_ELEMENTS // BLOCK_SIZE)} or less"
        )
    if num_warps == "auto":
        num_warps = default_num_warps(BLOCK_SIZE * BLOCK_SIZE_M)
    elif num_warps not in NUM_WARPS:
        raise ValueError(f"num_warps={num_warps!r} is not allowed; use one of {', '.join(map(str, NUM_WARPS))}")
    n_tiles = cdiv(max(n_rows, 1), BLOCK_SIZE_M)
    if GRID == "auto":
        GRID = min(num_cores, n_tiles)
    elif not (isinstance(GRID, int) and GRID >= 1):
        raise ValueError(f"GRID={GRID!r} must be a positive integer or 'auto'")
    return GpuTiles(BLOCK_SIZE, BLOCK_SIZE_M, num_warps, min(GRID, n_tiles))


def rms_norm_forward(x2d, weight, eps, offset, casting_mode, tiles: GpuTiles):
    """Returns (y, rstd) for a contiguous 2-D x."""
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    grid = (cdiv(n_rows, tiles.BLOCK_SIZE_M),)
    launcher(_rms_norm_forward_kernel, x2d)[grid](
        y,
        x2d,
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
    return y, rstd


def rms_norm_backward(dy2d, x2d, weight, rstd, offset, casting_mode, tiles: GpuTiles, in_place=False):
    """Returns (dx, dw); with ``in_place`` dx overwrites dy's buffer (saves one allocation)."""
    n_rows, n_cols = x2d.shape
    dy2d = dy2d.contiguous()
    dx = dy2d if in_place else torch.empty_like(x2d)
    grid = tiles.GRID
    dw_partial = torch.empty((grid, n_cols), dtype=torch.float32, device=x2d.device) if weight is not None else rstd
    launcher(_rms_norm_backward_kernel, x2d)[(grid,)](
        dx,
        dy2d,
        x2d,
        weight if weight is not None else x2d,
        rstd,
        dw_partial,
        x2d.stride(0),
        n_rows,
        n_cols,
        offset,
        CASTING_MODE=CASTING_CODES[casting_mode],
        HAS_WEIGHT=weight is not None,
        BLOCK_SIZE=tiles.BLOCK_SIZE,
        BLOCK_SIZE_M=tiles.BLOCK_SIZE_M,
        num_warps=tiles.num_warps,
    )
    dw = dw_partial.sum(0).to(weight.dtype) if weight is not None else None
    return dx, dw


def tiles_for(x: torch.Tensor, **tiles) -> GpuTiles:
    """Tiles for x viewed as rows of its last axis."""
    n_cols = x.shape[-1]
    return resolve_tiles(x.numel() // max(n_cols, 1), n_cols, device_of(x).num_cores, **tiles)
