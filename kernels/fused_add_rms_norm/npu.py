"""Fused add + RMSNorm for Ascend NPUs, written to triton-ascend's rules (docs/npu-check.md).

The same kernels run as ordinary Triton on CUDA and in the CPU interpreter, where their results
are tested; ``workbench npu-check`` compiles :func:`npu_compile_cases` for Ascend910B.

Math (as in :mod:`.gpu`)::

    s    = x + r                              (rounded to x's dtype, stored)
    rstd = 1 / sqrt(mean(s^2) + eps)
    y    = s * rstd * (offset + w)
    dx   = dr = rstd * (m - shat * mean(m * shat)) + ds,   shat = s * rstd,  m = dy * (offset + w)
    dw   = sum over rows of dy * shat         (per-program partials, summed on the host)

Why two strategies. The first NPU kernel held a whole row as its tile: fine for small hidden
sizes, but at benchmark sizes the row overflowed the 192 KB Unified Buffer (UB).

- *Untiled* (``hidden <= CHUNK_THRESHOLD``, 2048 by default): a block of ``BLOCK_SIZE_M`` whole
  rows is one ``BLOCK_SIZE_M x BLOCK_SIZE_N`` tile of about 2048 elements. Every element of x and
  r is read once; several rows per tile mean fewer grid-stride iterations per program.
- *Chunked* (larger hidden): column chunks of ``BLOCK_SIZE_N`` in two passes. Forward pass 1
  adds, stores s and accumulates the sum of squares; pass 2 reads the s chunks back and
  normalises. It fits any hidden size at the price of one more read of s (forward moves 5 row
  tensors instead of 4); the backward reads s and dy twice.

The grid is the number of vector cores: program ``p`` visits row blocks ``p, p + GRID, …``, a
grid-stride loop whose stride in rows is ``GRID x BLOCK_SIZE_M``.

What is shared with RMSNorm's NPU kernels: the per-tile arithmetic and the chunked form's two
passes (:mod:`kernels.rms_norm.tile_math`, with ``ADD_RESIDUAL``), and the whole backward
(RMSNorm's backward kernel on the saved s, with its ``HAS_DS`` switch). The forward stays its own
kernel: it adds and stores s (in the chunked form, pass 2 reads s back), and its untiled form
loads the weight row once per program, so its Unified Buffer plan differs from RMSNorm's and is
calibrated separately (``ub_calibration.json``).

triton-ascend rules kept here: padding zeroed by ``tl.load(..., other=0)`` (the vector unit
cannot compare integers, so ``tl.where`` over a tile mask becomes scalar code; ``USE_WHERE=True``
keeps that slow form as an explorable switch in the forward), no ``eviction_policy`` /
``cache_modifier``, ``1 / tl.sqrt`` instead of libdevice, no fp64, int32 offsets (the host
refuses tensors of 2**31 elements or more). Arithmetic is fp32; the casting modes
(``CASTING_MODE``: 0 llama, 1 gemma, 2 none) only decide where values are rounded to x's dtype.

Why one long module: the forward kernel, its Unified Buffer model and the configurations
``workbench npu-check`` compiles change together.

Why one long module: both NPU strategies, their Unified Buffer model and their launch share
the tile resolution; the NPU rules keep them apart from the GPU file.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.launch import launch
from kernels.rms_norm import npu as rms_norm_npu
from kernels.rms_norm.gpu import CASTING_CODES
from kernels.rms_norm.tile_math import (
    block_rows,
    chunked_forward,
    load_input,
    normalized,
    row_rstd,
    tile_offsets,
    weight_row,
)
from kernels.runtime import device_of
from kernels.spec import NpuCompileCase

UB_BYTES = rms_norm_npu.UB_BYTES  # Unified Buffer per core on Ascend 910B (192 KB)
TILE_ELEMENTS = rms_norm_npu.TILE_ELEMENTS  # the untiled target tile, BLOCK_SIZE_M x BLOCK_SIZE_N
STRATEGIES = rms_norm_npu.STRATEGIES  # ("auto", "untiled", "chunked")
CHUNK_THRESHOLD = 2048  # auto: chunk when hidden is larger than this
# Largest tile a program may hold off the NPU (on CUDA it lives in registers).
MAX_TILE_ELEMENTS = 65536
INT32_LIMIT = 2**31


@triton.jit
def _fused_add_rms_norm_forward_npu_kernel(
    Y_ptr,
    S_ptr,
    X_ptr,
    R_ptr,
    W_ptr,
    RSTD_ptr,
    n_rows,
    n_cols,
    eps,
    offset,
    CASTING_MODE: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    CHUNKED: tl.constexpr,
    USE_WHERE: tl.constexpr,
):
    """s = x + r stored, y = s * rstd * (offset + w), rstd stored; grid-stride over row blocks."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    n_blocks = tl.cdiv(n_rows, BLOCK_SIZE_M)
    cols = tl.arange(0, BLOCK_SIZE_N)
    if not CHUNKED:
        # One weight row serves every row block this program visits.
        col_mask = cols < n_cols
        w = weight_row(W_ptr, cols, col_mask, offset, HAS_WEIGHT)
    for block in range(pid, n_blocks, n_programs):
        rows, row_mask = block_rows(block, n_rows, BLOCK_SIZE_M)
        if CHUNKED:
            # Pass 1 adds and stores s = x + r chunk by chunk and sums the squares of the stored
            # s; pass 2 reads back the s chunks this program just stored (same addresses, same
            # tile shape) and normalises them.
            rstd = chunked_forward(
                Y_ptr, X_ptr, R_ptr, S_ptr, W_ptr, rows, row_mask, cols, n_cols, eps, offset, CASTING_MODE, HAS_WEIGHT,
                True, USE_WHERE, BLOCK_SIZE_M, BLOCK_SIZE_N,
            )  # fmt: skip
        else:
            mask, offs = tile_offsets(rows, row_mask, cols, col_mask, n_cols, False)
            s = load_input(X_ptr, R_ptr, S_ptr, offs, mask, True, USE_WHERE)
            rstd = row_rstd(s, n_cols, eps, False)
            y = normalized(s, rstd, CASTING_MODE)
            if HAS_WEIGHT:  # the weight row loaded once per program (above)
                y = y * w[None, :]
            tl.store(Y_ptr + offs, y.to(Y_ptr.dtype.element_ty), mask=mask)
        tl.store(RSTD_ptr + rows, rstd, mask=row_mask)


# --- host side: tiles, the UB model, launches ---------------------------------------------
@dataclass(frozen=True)
class NpuTiles:
    chunked: bool
    BLOCK_SIZE_M: int
    BLOCK_SIZE_N: int
    GRID: int
    USE_WHERE: bool


# The Unified Buffer the Ascend compiler's memory plan needs, single-buffered (BiShengIR drops
# multi-buffering before it reports an overflow), fitted to the compiler's verdicts recorded in
# ub_calibration.json (`workbench npu-check --calibrate fused_add_rms_norm`): bytes per tile
# element, and per column for the row-long buffers the untiled kernels keep for a whole program
# (weight row, dw accumulator). The fp32 forward needs no dtype conversions, hence its smaller
# plan; the 16-bit kernels keep fp32 working copies of every tile.
_UB_PER_ELEMENT = {("forward", 2): 22, ("forward", 4): 10, ("backward", 2): 22, ("backward", 4): 22}
_UB_PER_COLUMN_UNTILED = {("forward", 2): 0, ("forward", 4): 6, ("backward", 2): 3, ("backward", 4): 3}


def ub_bytes(block_m: int, block_n: int, elem_bytes: int, backward: bool = False, chunked: bool = False) -> int:
    """UB bytes one program's tile needs on Ascend910B (the smallest plan the compiler can make).

    A tile fits when this is at most :data:`UB_BYTES`; at about half of it the compiler can also
    double-buffer. Agrees with every verdict in ``ub_calibration.json`` (tested): untiled tiles
    of up to 8192 elements (forward) / 4096 (backward, or 8192 with rows of at most 4096)
    compile, 16384 overflow; chunked tiles of up to 8192 elements compile (16384 only for the
    fp32 forward).
    """
    key = ("backward" if backward else "forward", 4 if elem_bytes >= 4 else 2)
    need = _UB_PER_ELEMENT[key] * block_m * block_n
    if not chunked:
        need += _UB_PER_COLUMN_UNTILED[key] * block_n
    return need


def _ub_need(tiles, elem_bytes: int) -> int:
    """The larger of the forward's and the backward's UB need for these tiles."""
    return max(
        ub_bytes(tiles.BLOCK_SIZE_M, tiles.BLOCK_SIZE_N, elem_bytes, backward=b, chunked=tiles.chunked)
        for b in (False, True)
    )


def ub_estimate(problem, params, dtype) -> int:
    """UB bytes the chosen NPU tiles need (the larger of forward and backward), before launch."""
    elem = 4 if str(dtype) in ("fp32", "torch.float32") else 2
    tiles = resolve_tiles(
        problem["rows"],
        problem["hidden"],
        1,
        elem,
        on_npu=False,
        **{k: v for k, v in dict(params or {}).items() if v != "auto"},
    )
    return _ub_need(tiles, elem)


def resolve_tiles(
    n_rows: int,
    n_cols: int,
    num_cores: int,
    elem_bytes: int = 2,
    on_npu: bool = False,
    strategy="auto",
    CHUNK_THRESHOLD=CHUNK_THRESHOLD,
    BLOCK_SIZE_M="auto",
    BLOCK_SIZE_N="auto",
    GRID="auto",
    USE_WHERE=False,
) -> NpuTiles:
    """Pick the strategy and tiles; ValueError names the parameter, its value and what is allowed.

    The strategy and tile rules are RMSNorm's (:func:`kernels.rms_norm.npu.resolve_tiles`); this
    family adds its own UB model (more live buffers: x, r, s, y), a tile-size limit off the NPU and
    the int32-offset limit.
    """
    base = rms_norm_npu.resolve_tiles(
        n_rows,
        n_cols,
        num_cores,
        elem_bytes,
        on_npu=False,
        strategy=strategy,
        CHUNK_THRESHOLD=CHUNK_THRESHOLD,
        BLOCK_SIZE_M=BLOCK_SIZE_M,
        BLOCK_SIZE_N=BLOCK_SIZE_N,
        GRID=GRID,
        USE_WHERE=USE_WHERE,
    )
    tile = base.BLOCK_SIZE_M * base.BLOCK_SIZE_N
    if on_npu:
        need = _ub_need(base, elem_bytes)
        if need > UB_BYTES:
            raise ValueError(
                f"tile BLOCK_SIZE_M={base.BLOCK_SIZE_M} x BLOCK_SIZE_N={base.BLOCK_SIZE_N} needs about "
                f"{need // 1024} KB of the {UB_BYTES // 1024} KB Unified Buffer (ub overflow predicted); "
                f"lower BLOCK_SIZE_M or BLOCK_SIZE_N, or use strategy='chunked'"
            )
    elif tile > MAX_TILE_ELEMENTS:
        raise ValueError(
            f"tile BLOCK_SIZE_M={base.BLOCK_SIZE_M} x BLOCK_SIZE_N={base.BLOCK_SIZE_N} = {tile} elements exceeds "
            f"the {MAX_TILE_ELEMENTS}-element tile a program can hold; lower BLOCK_SIZE_M or BLOCK_SIZE_N "
            f"(strategy='chunked' fits any hidden size)"
        )
    if n_rows * n_cols >= INT32_LIMIT:
        raise ValueError(
            f"rows x hidden = {n_rows} x {n_cols} has 2**31 elements or more; the NPU kernels use int32 "
            f"offsets (triton-ascend); split the rows into batches below {INT32_LIMIT // max(n_cols, 1)} rows"
        )
    return NpuTiles(base.chunked, base.BLOCK_SIZE_M, base.BLOCK_SIZE_N, base.GRID, base.USE_WHERE)


def tiles_for(x: torch.Tensor, **tiles) -> NpuTiles:
    """Tiles for x viewed as rows of its last axis."""
    dev = device_of(x)
    n_cols = int(x.shape[-1])  # a traced (symbolic) size specialises here
    rows = int(x.numel()) // max(n_cols, 1)
    return resolve_tiles(rows, n_cols, dev.num_cores, x.element_size(), on_npu=dev.kind == "npu", **tiles)


def fused_add_rms_norm_forward(x2d, r2d, weight, eps, offset, casting_mode, tiles: NpuTiles):
    """Returns (y, s, rstd) for contiguous 2-D x and r of one shape."""
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    s = torch.empty_like(x2d)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    launch(
        _fused_add_rms_norm_forward_npu_kernel,
        x2d,
        (tiles.GRID,),
        y,
        s,
        x2d,
        r2d,
        weight if weight is not None else x2d,
        rstd,
        n_rows,
        n_cols,
        eps,
        offset,
        CASTING_MODE=CASTING_CODES[casting_mode],
        HAS_WEIGHT=weight is not None,
        BLOCK_SIZE_M=tiles.BLOCK_SIZE_M,
        BLOCK_SIZE_N=tiles.BLOCK_SIZE_N,
        CHUNKED=tiles.chunked,
        USE_WHERE=tiles.USE_WHERE,
        **rms_norm_npu.cuda_launch_options(x2d, tiles),
    )
    return y, s, rstd


def fused_add_rms_norm_backward(dy2d, ds2d, s2d, weight, rstd, offset, casting_mode, tiles: NpuTiles):
    """Returns (dx, dw); dx is also dr. ``ds2d`` (the residual stream's gradient) may be None."""
    n_rows, n_cols = s2d.shape
    dy2d = dy2d.contiguous()
    ds2d = ds2d.contiguous() if ds2d is not None else None
    dx = torch.empty_like(s2d)
    dw_partial = (
        torch.zeros((tiles.GRID, n_cols), dtype=torch.float32, device=s2d.device) if weight is not None else rstd
    )
    launch(
        rms_norm_npu._rms_norm_backward_npu_kernel,
        s2d,
        (tiles.GRID,),
        dx,
        dy2d,
        ds2d if ds2d is not None else dy2d,
        s2d,
        weight if weight is not None else s2d,
        rstd,
        dw_partial,
        n_rows,
        n_cols,
        offset,
        CASTING_MODE=CASTING_CODES[casting_mode],
        HAS_WEIGHT=weight is not None,
        HAS_DS=ds2d is not None,
        BLOCK_SIZE_M=tiles.BLOCK_SIZE_M,
        BLOCK_SIZE_N=tiles.BLOCK_SIZE_N,
        CHUNKED=tiles.chunked,
        **rms_norm_npu.cuda_launch_options(s2d, tiles),
    )
    dw = dw_partial.sum(0).to(weight.dtype) if weight is not None else None
    return dx, dw


# --- what `workbench npu-check` compiles ---------------------------------------------------
NPU_CHECK_HIDDEN = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
NPU_CHECK_BLOCK_SIZE_M = (1, 2, 4, 8)
_TRITON_TYPES = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}
_ELEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def _compile_case(kind, hidden, dtype, tiles: NpuTiles, default) -> NpuCompileCase:
    t = _TRITON_TYPES[dtype]
    strategy = "chunked" if tiles.chunked else "untiled"
    where = "" if hidden is None else f" hidden={hidden}"
    name = f"{kind} {strategy}{where} {dtype} M={tiles.BLOCK_SIZE_M} N={tiles.BLOCK_SIZE_N}"
    if kind == "forward":
        kernel = _fused_add_rms_norm_forward_npu_kernel
        signature = {
            "Y_ptr": f"*{t}",
            "S_ptr": f"*{t}",
            "X_ptr": f"*{t}",
            "R_ptr": f"*{t}",
            "W_ptr": f"*{t}",
            "RSTD_ptr": "*fp32",
            "n_rows": "i32",
            "n_cols": "i32",
            "eps": "fp32",
            "offset": "fp32",
        }
        constants = {"USE_WHERE": tiles.USE_WHERE}
    else:
        kernel = rms_norm_npu._rms_norm_backward_npu_kernel  # on the saved s, with HAS_DS
        signature = {
            "DX_ptr": f"*{t}",
            "DY_ptr": f"*{t}",
            "DS_ptr": f"*{t}",
            "X_ptr": f"*{t}",
            "W_ptr": f"*{t}",
            "RSTD_ptr": "*fp32",
            "DW_partial_ptr": "*fp32",
            "n_rows": "i32",
            "n_cols": "i32",
            "offset": "fp32",
        }
        constants = {"HAS_DS": True}
    constants.update(
        CASTING_MODE=CASTING_CODES["llama"],
        HAS_WEIGHT=True,
        BLOCK_SIZE_M=tiles.BLOCK_SIZE_M,
        BLOCK_SIZE_N=tiles.BLOCK_SIZE_N,
        CHUNKED=tiles.chunked,
    )
    return NpuCompileCase(
        family="fused_add_rms_norm",
        name=name,
        kernel=kernel,
        signature=signature,
        constants=constants,
        default=default,
        ub_bytes=ub_bytes(
            tiles.BLOCK_SIZE_M,
            tiles.BLOCK_SIZE_N,
            _ELEM_BYTES[dtype],
            backward=kind == "backward",
            chunked=tiles.chunked,
        ),
    )


def npu_compile_cases(defaults_only: bool = False) -> list[NpuCompileCase]:
    """Forward and backward kernels for ``workbench npu-check``.

    - default=True: the tiles ``strategy="auto"`` picks, for hidden 128 … 32768 and fp32 / fp16 /
      bf16 (these must compile);
    - default=False (left out with ``defaults_only``): the BLOCK_SIZE_M choices 1/2/4/8 of each
      strategy at its default BLOCK_SIZE_N (bf16), and the untiled strategy past the threshold
      (hidden 4096 compiles, 8192 overflows in the backward; bf16 and fp32). Some of these
      overflow on purpose: the UB model must predict exactly which (the full boundary sweep is
      :func:`ub_calibration_cases`).
    """
    cases: list[NpuCompileCase] = []
    seen = set()

    def add(kind, hidden, dtype, tiles, default):
        key = (kind, hidden, dtype, tiles)
        if key not in seen:
            seen.add(key)
            cases.append(_compile_case(kind, hidden, dtype, tiles, default))

    def tiles(hidden, dtype, **kw):
        return resolve_tiles(4096, hidden, 48, _ELEM_BYTES[dtype], on_npu=False, **kw)

    for kind in ("forward", "backward"):
        for dtype in ("fp32", "fp16", "bf16"):
            for hidden in NPU_CHECK_HIDDEN:
                add(kind, hidden, dtype, tiles(hidden, dtype), True)
        if defaults_only:
            continue
        for hidden in NPU_CHECK_HIDDEN:
            for m in NPU_CHECK_BLOCK_SIZE_M:
                add(kind, hidden, "bf16", tiles(hidden, "bf16", BLOCK_SIZE_M=m), False)
        for dtype in ("bf16", "fp32"):
            for hidden in (4096, 8192):
                add(kind, hidden, dtype, tiles(hidden, dtype, strategy="untiled"), False)
    return cases


def ub_calibration_cases() -> list[NpuCompileCase]:
    """The BLOCK_SIZE_M x BLOCK_SIZE_N sweep that locates the UB overflow boundary (fp32 and bf16,
    forward and backward, untiled and chunked); ``workbench npu-check --calibrate
    fused_add_rms_norm`` compiles it into ``ub_calibration.json`` beside this file, which the UB
    model (:func:`ub_bytes`) is tested against."""
    cases = []
    for dtype in ("fp32", "bf16"):
        for chunked in (False, True):
            for m in NPU_CHECK_BLOCK_SIZE_M:
                for n in (2**k for k in range(7, 15)):
                    if not 1024 <= m * n <= 32768:
                        continue
                    tiles = NpuTiles(chunked, m, n, 1, False)
                    for kind in ("forward", "backward"):
                        cases.append(_compile_case(kind, None, dtype, tiles, False))
    return cases
