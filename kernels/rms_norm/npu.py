"""RMSNorm for Ascend NPUs, written to triton-ascend's rules (docs/npu-check.md).

The same kernels run as ordinary Triton on CUDA and in the CPU interpreter, which is where
their results are tested; ``workbench npu-check`` compiles them for Ascend910B.

- Grid = number of vector cores. Program ``p`` visits row blocks ``p, p + GRID, …``: a
  grid-stride loop whose stride in rows is ``GRID x BLOCK_SIZE_M``.
- *Untiled* (hidden up to ``CHUNK_THRESHOLD``, 2048 by default): a block of ``BLOCK_SIZE_M`` whole
  rows is one ``BLOCK_SIZE_M x BLOCK_SIZE_N`` tile of about 2048 elements, every element read once.
- *Chunked* (larger hidden): column chunks of ``BLOCK_SIZE_N`` in two passes — sum of squares,
  then normalise — so any hidden size fits the 192 KB Unified Buffer, at the price of reading
  each row twice.
- Padding is zeroed by ``tl.load(..., other=0)``: the vector unit cannot compare integers, so
  ``tl.where`` over a tile mask turns into scalar code. ``USE_WHERE=True`` keeps that slow form
  as a switch so the workbench can show its cost.
- No ``eviction_policy``, no libdevice (``1 / tl.sqrt``), no fp64, int32 offsets.
- ``num_warps`` means nothing to triton-ascend; on CUDA the launch sizes it to the tile
  (:func:`cuda_launch_options`), so a tile of 64 x 2048 holds 128 elements a thread, not 1024.
- Arithmetic in fp32; casting modes only decide where values are rounded to x's dtype.

Backward, with ``xhat = x * rstd`` and ``m = dy * (offset + w)``::

    dx = rstd * (m - xhat * mean(m * xhat))
    dw = sum over rows of dy * xhat           (per-program partials, summed on the host)

Why one long module: the NPU kernels, the Unified Buffer model calibrated against them and the
configurations ``workbench npu-check`` compiles change together.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.launch import launch
from kernels.rms_norm.gpu import CASTING_CODES, default_num_warps
from kernels.rms_norm.tile_math import (
    accumulate,
    backward_tile,
    block_rows,
    chunked_forward,
    load_v_dy,
    load_zeroed,
    normalized,
    row_rstd,
    store_dx,
    tile_offsets,
    weight_row,
    weighted,
)
from kernels.runtime import device_of
from kernels.tiling import cdiv, is_power_of_two, next_power_of_2

UB_BYTES = 192 * 1024  # Unified Buffer per core on Ascend 910B
TILE_ELEMENTS = 2048  # the untiled kernel's target tile: BLOCK_SIZE_M x BLOCK_SIZE_N
STRATEGIES = ("auto", "untiled", "chunked")


@triton.jit
def _rms_norm_forward_npu_kernel(
    Y_ptr,
    X_ptr,
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
    """y = x * rstd * (offset + w); grid-stride over blocks of BLOCK_SIZE_M rows."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    n_blocks = tl.cdiv(n_rows, BLOCK_SIZE_M)
    cols = tl.arange(0, BLOCK_SIZE_N)
    for block in range(pid, n_blocks, n_programs):
        rows, row_mask = block_rows(block, n_rows, BLOCK_SIZE_M)
        if CHUNKED:
            # Two passes over column chunks: the sum of squares, then normalise (x read twice).
            rstd = chunked_forward(
                Y_ptr, X_ptr, X_ptr, X_ptr, W_ptr, rows, row_mask, cols, n_cols, eps, offset, CASTING_MODE, HAS_WEIGHT,
                False, USE_WHERE, BLOCK_SIZE_M, BLOCK_SIZE_N,
            )  # fmt: skip
        else:
            col_mask = cols < n_cols
            mask, offs = tile_offsets(rows, row_mask, cols, col_mask, n_cols, False)
            x = load_zeroed(X_ptr, offs, mask, USE_WHERE)
            rstd = row_rstd(x, n_cols, eps, False)
            y = weighted(normalized(x, rstd, CASTING_MODE), W_ptr, cols, col_mask, offset, HAS_WEIGHT)
            tl.store(Y_ptr + offs, y.to(Y_ptr.dtype.element_ty), mask=mask)
        tl.store(RSTD_ptr + rows, rstd, mask=row_mask)


@triton.jit
def _rms_norm_backward_npu_kernel(
    DX_ptr,
    DY_ptr,
    DS_ptr,
    X_ptr,
    W_ptr,
    RSTD_ptr,
    DW_partial_ptr,
    n_rows,
    n_cols,
    offset,
    CASTING_MODE: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_DS: tl.constexpr,  # fused add + RMSNorm: the residual stream's gradient ds is added to dx
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    """dx per row; per-program partial dw in row ``pid`` of DW_partial (zeroed by the host).

    The fused family's backward is this kernel on the saved ``s = x + r`` with ``HAS_DS``."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    n_blocks = tl.cdiv(n_rows, BLOCK_SIZE_M)
    cols = tl.arange(0, BLOCK_SIZE_N)
    if CHUNKED:
        for block in range(pid, n_blocks, n_programs):
            rows, row_mask = block_rows(block, n_rows, BLOCK_SIZE_M)
            rstd = tl.load(RSTD_ptr + rows, mask=row_mask, other=0.0)
            # Pass 1: mean(m * xhat) per row, chunk by chunk.
            dot = tl.zeros([BLOCK_SIZE_M], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_SIZE_N):
                c = start + cols
                col_mask = c < n_cols
                mask, offs = tile_offsets(rows, row_mask, c, col_mask, n_cols, False)
                xhat = tl.load(X_ptr + offs, mask=mask, other=0.0).to(tl.float32) * rstd[:, None]
                m = tl.load(DY_ptr + offs, mask=mask, other=0.0).to(tl.float32)
                dot += tl.sum(weighted(m, W_ptr, c, col_mask, offset, HAS_WEIGHT) * xhat, axis=1)
            dot = dot / n_cols
            # Pass 2: dx, and this program's dw partial updated in place (one owner per row).
            for start in range(0, n_cols, BLOCK_SIZE_N):
                c = start + cols
                col_mask = c < n_cols
                mask, offs = tile_offsets(rows, row_mask, c, col_mask, n_cols, False)
                x, dy = load_v_dy(X_ptr, DY_ptr, offs, mask)
                w = weight_row(W_ptr, c, col_mask, offset, HAS_WEIGHT)
                dx, dw = backward_tile(x, dy, w, rstd, dot, n_cols, CASTING_MODE, HAS_WEIGHT, False)
                store_dx(DX_ptr, DS_ptr, offs, mask, dx, HAS_DS)
                if HAS_WEIGHT:
                    accumulate(DW_partial_ptr + pid * n_cols + c, dw, col_mask)
    else:
        col_mask = cols < n_cols
        w = weight_row(W_ptr, cols, col_mask, offset, HAS_WEIGHT)
        dw_acc = tl.zeros([BLOCK_SIZE_N], dtype=tl.float32)
        for block in range(pid, n_blocks, n_programs):
            rows, row_mask = block_rows(block, n_rows, BLOCK_SIZE_M)
            mask, offs = tile_offsets(rows, row_mask, cols, col_mask, n_cols, False)
            rstd = tl.load(RSTD_ptr + rows, mask=row_mask, other=0.0)
            x, dy = load_v_dy(X_ptr, DY_ptr, offs, mask)
            dx, dw = backward_tile(x, dy, w, rstd, rstd, n_cols, CASTING_MODE, HAS_WEIGHT, True)
            store_dx(DX_ptr, DS_ptr, offs, mask, dx, HAS_DS)
            dw_acc += dw
        if HAS_WEIGHT:
            tl.store(DW_partial_ptr + pid * n_cols + cols, dw_acc, mask=col_mask)


# --- host side ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NpuTiles:
    chunked: bool
    BLOCK_SIZE_M: int
    BLOCK_SIZE_N: int
    GRID: int
    USE_WHERE: bool


# Unified Buffer model, calibrated against the Ascend compiler (``workbench npu-check --calibrate
# rms_norm`` -> ub_calibration.json). bishengir-compile first plans with multi-buffering; when that
# overflows it retries single-buffered, and reports "ub overflow" only when even that does not fit.
# So the overflow boundary is the single-buffered requirement, which the compiler reports exactly:
# bytes = a * M * N + b * N + c * M + d for a BLOCK_SIZE_M x BLOCK_SIZE_N tile. It is dominated by
# fp32 temporaries, so the input dtype matters only for the chunked forward. Keyed by
# (backward, chunked, elem_bytes); for fp32 the chunked forward needs 8N at M=1 and 12N at M=2,
# which 6MN + 4N over-estimates slightly (on the safe side).
_UB_COEFFS = {
    (False, False, 4): (10, 0, 4, 32),
    (False, False, 2): (10, 0, 4, 32),
    (True, False, 4): (18, 8, 8, 32),
    (True, False, 2): (18, 8, 8, 32),
    (False, True, 4): (6, 4, 8, 32),
    (False, True, 2): (8, 2, 8, 32),
    (True, True, 4): (16, 0, 44, 64),
    (True, True, 2): (16, 0, 44, 64),
}


def ub_bytes(block_m: int, block_n: int, elem_bytes: int, backward: bool = False, chunked: bool = False) -> int:
    """Unified Buffer bytes one program of the forward (or backward) kernel needs for a
    ``block_m x block_n`` tile: the compiler's single-buffered requirement (see ``_UB_COEFFS``).
    Above :data:`UB_BYTES` the Ascend compiler reports "ub overflow"; at or below it the kernel
    compiles (multi-buffered while about twice this still fits, see :func:`ub_multi_buffered`)."""
    a, b, c, d = _UB_COEFFS[(bool(backward), bool(chunked), 4 if elem_bytes >= 4 else 2)]
    return a * block_m * block_n + b * block_n + c * block_m + d


def ub_multi_buffered(block_m: int, block_n: int, elem_bytes: int, backward: bool = False, chunked: bool = False):
    """True when the compiler is expected to keep multi-buffering (about twice the single-buffered
    requirement fits); False for tiles that compile only single-buffered (slower)."""
    return 2 * ub_bytes(block_m, block_n, elem_bytes, backward, chunked) <= UB_BYTES


def ub_tile_bytes(block_m: int, block_n: int, elem_bytes: int, chunked: bool = False) -> int:
    """The larger of the forward and backward requirements: what one set of tiles needs."""
    return max(ub_bytes(block_m, block_n, elem_bytes, backward, chunked) for backward in (False, True))


@functools.lru_cache(maxsize=4096, typed=True)  # typed: 2.0 or True must not pass as 2 or 1
def resolve_tiles(
    n_rows: int,
    n_cols: int,
    num_cores: int,
    elem_bytes: int = 2,
    on_npu: bool = False,
    strategy="auto",
    CHUNK_THRESHOLD=2048,
    BLOCK_SIZE_M="auto",
    BLOCK_SIZE_N="auto",
    GRID="auto",
    USE_WHERE=False,
) -> NpuTiles:
    """Pick the strategy and tiles; ValueError names the parameter and what is allowed."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is not allowed; use one of {', '.join(STRATEGIES)}")
    if not (isinstance(CHUNK_THRESHOLD, int) and CHUNK_THRESHOLD >= 1):
        raise ValueError(f"CHUNK_THRESHOLD={CHUNK_THRESHOLD!r} must be a positive integer (hidden size)")
    chunked = strategy == "chunked" or (strategy == "auto" and n_cols > CHUNK_THRESHOLD)
    need = next_power_of_2(n_cols)
    if BLOCK_SIZE_N == "auto":
        BLOCK_SIZE_N = min(need, TILE_ELEMENTS) if chunked else need
    elif not is_power_of_two(BLOCK_SIZE_N):
        raise ValueError(f"BLOCK_SIZE_N={BLOCK_SIZE_N!r} must be a power of two (e.g. {min(need, TILE_ELEMENTS)})")
    elif not chunked and BLOCK_SIZE_N < n_cols:
        raise ValueError(
            f"BLOCK_SIZE_N={BLOCK_SIZE_N} is smaller than hidden={n_cols}: the untiled strategy keeps a "
            f"whole row in one tile; use BLOCK_SIZE_N >= {need} or strategy='chunked'"
        )
    if BLOCK_SIZE_M == "auto":
        BLOCK_SIZE_M = 1 if chunked else max(1, TILE_ELEMENTS // BLOCK_SIZE_N)
    elif not is_power_of_two(BLOCK_SIZE_M):
        raise ValueError(f"BLOCK_SIZE_M={BLOCK_SIZE_M!r} must be a power of two (1, 2, 4, …)")
    if on_npu:
        need_ub = ub_tile_bytes(BLOCK_SIZE_M, BLOCK_SIZE_N, elem_bytes, chunked)
        if need_ub > UB_BYTES:
            raise ValueError(
                f"tile BLOCK_SIZE_M={BLOCK_SIZE_M} x BLOCK_SIZE_N={BLOCK_SIZE_N} needs about {need_ub // 1024} KB "
                f"of the {UB_BYTES // 1024} KB Unified Buffer (ub overflow predicted); lower BLOCK_SIZE_M or "
                f"BLOCK_SIZE_N, or use strategy='chunked'"
            )
    n_blocks = cdiv(max(n_rows, 1), BLOCK_SIZE_M)
    if GRID == "auto":
        GRID = num_cores
    elif not (isinstance(GRID, int) and GRID >= 1):
        raise ValueError(f"GRID={GRID!r} must be a positive integer or 'auto'")
    if USE_WHERE not in (True, False):
        raise ValueError(f"USE_WHERE={USE_WHERE!r} must be True or False")
    return NpuTiles(chunked, BLOCK_SIZE_M, BLOCK_SIZE_N, min(GRID, n_blocks), bool(USE_WHERE))


_TILE_NAMES = ("strategy", "CHUNK_THRESHOLD", "BLOCK_SIZE_M", "BLOCK_SIZE_N", "GRID", "USE_WHERE")


def ub_estimate(problem, params, dtype) -> int | None:
    """Unified Buffer bytes the NPU kernels need for these tiles (the larger of forward and
    backward), before anything is launched; above :data:`UB_BYTES` the Ascend compiler reports
    "ub overflow". None when the tiles do not resolve for this problem (a ValueError elsewhere)."""
    from kernels.spec import dtype_name

    elem = DTYPE_BYTES[dtype_name(dtype)]
    tiles = {k: v for k, v in dict(params or {}).items() if k in _TILE_NAMES and v != "auto"}
    try:
        t = resolve_tiles(problem["rows"], problem["hidden"], 1, elem, on_npu=False, **tiles)
    except ValueError:
        return None
    return ub_tile_bytes(t.BLOCK_SIZE_M, t.BLOCK_SIZE_N, elem, t.chunked)


def tiles_for(x: torch.Tensor, **tiles) -> NpuTiles:
    """Tiles for x viewed as rows of its last axis."""
    dev = device_of(x)
    n_cols = int(x.shape[-1])  # a traced (symbolic) size specialises here
    n_rows = int(x.numel()) // max(n_cols, 1)
    return resolve_tiles(n_rows, n_cols, dev.num_cores, x.element_size(), on_npu=dev.kind == "npu", **tiles)


def cuda_launch_options(x2d, tiles: NpuTiles) -> dict:
    """The launch's ``num_warps`` on CUDA, sized to the tile (``default_num_warps``); nothing
    elsewhere (triton-ascend and the interpreter ignore it). Triton's default of 4 warps left a
    64 x 2048 tile at 1024 fp32 values a thread: on an H200 that kernel took 82 s to compile
    (the rms_norm notebook's edge shapes at 4097 x 4097). The device is the one the kernel is
    for (``device_of``), not the tensor's: a compile-ahead process calls with meta tensors
    standing in for CUDA ones, and must compile the kernel the measuring process will launch."""
    if device_of(x2d).kind != "cuda":
        return {}
    return {"num_warps": default_num_warps(tiles.BLOCK_SIZE_M * tiles.BLOCK_SIZE_N)}


def rms_norm_forward(x2d, weight, eps, offset, casting_mode, tiles: NpuTiles):
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    launch(
        _rms_norm_forward_npu_kernel,
        x2d,
        (tiles.GRID,),
        y,
        x2d,
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
        **cuda_launch_options(x2d, tiles),
    )
    return y, rstd


def rms_norm_backward(dy2d, x2d, weight, rstd, offset, casting_mode, tiles: NpuTiles, in_place=False):
    n_rows, n_cols = x2d.shape
    dy2d = dy2d.contiguous()
    dx = dy2d if in_place else torch.empty_like(x2d)
    dw_partial = (
        torch.zeros((tiles.GRID, n_cols), dtype=torch.float32, device=x2d.device) if weight is not None else rstd
    )
    launch(
        _rms_norm_backward_npu_kernel,
        x2d,
        (tiles.GRID,),
        dx,
        dy2d,
        dy2d,  # no residual gradient (HAS_DS=False): a placeholder pointer
        x2d,
        weight if weight is not None else x2d,
        rstd,
        dw_partial,
        n_rows,
        n_cols,
        offset,
        CASTING_MODE=CASTING_CODES[casting_mode],
        HAS_WEIGHT=weight is not None,
        HAS_DS=False,
        BLOCK_SIZE_M=tiles.BLOCK_SIZE_M,
        BLOCK_SIZE_N=tiles.BLOCK_SIZE_N,
        CHUNKED=tiles.chunked,
        **cuda_launch_options(x2d, tiles),
    )
    dw = dw_partial.sum(0).to(weight.dtype) if weight is not None else None
    return dx, dw


# --- npu-check: the configurations compiled for Ascend910B ----------------------------------
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
CHECK_HIDDEN = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
CHECK_BLOCK_M = (1, 2, 4, 8, 16, 32, 64)
CHECK_CHUNK_N = (512, 1024, 2048, 4096, 8192)
_CHECK_ROWS = 4096  # rows do not change the compiled kernel (a runtime argument); any value will do
_CHECK_CORES = 40  # Ascend910B vector cores; the grid is a launch choice, not compiled in


def _signature(kind: str, dtype: str) -> dict:
    p = f"*{dtype}"
    if kind == "forward":
        names = {"Y_ptr": p, "X_ptr": p, "W_ptr": p, "RSTD_ptr": "*fp32"}
        scalars = {"n_rows": "i32", "n_cols": "i32", "eps": "fp32", "offset": "fp32"}
    else:
        names = {"DX_ptr": p, "DY_ptr": p, "DS_ptr": p, "X_ptr": p, "W_ptr": p}
        names.update(RSTD_ptr="*fp32", DW_partial_ptr="*fp32")
        scalars = {"n_rows": "i32", "n_cols": "i32", "offset": "fp32"}
    return {**names, **scalars}


def _compile_case(kind, dtype, tiles: NpuTiles, label, default=False, casting_mode="llama", weight=True):
    from kernels.spec import NpuCompileCase

    backward = kind == "backward"
    constants = {
        "CASTING_MODE": CASTING_CODES[casting_mode],
        "HAS_WEIGHT": weight,
        "BLOCK_SIZE_M": tiles.BLOCK_SIZE_M,
        "BLOCK_SIZE_N": tiles.BLOCK_SIZE_N,
        "CHUNKED": tiles.chunked,
    }
    if backward:
        constants["HAS_DS"] = False
    else:
        constants["USE_WHERE"] = tiles.USE_WHERE
    strategy = "chunked" if tiles.chunked else "untiled"
    extras = "".join(
        [
            "" if casting_mode == "llama" else f" {casting_mode}",
            "" if weight else " no-weight",
            " where" if tiles.USE_WHERE and not backward else "",
        ]
    )
    return NpuCompileCase(
        family="rms_norm",
        name=f"{kind} {strategy} {label} M={tiles.BLOCK_SIZE_M} N={tiles.BLOCK_SIZE_N}{extras}",
        kernel=_rms_norm_backward_npu_kernel if backward else _rms_norm_forward_npu_kernel,
        signature=_signature(kind, dtype),
        constants=constants,
        default=default,
        ub_bytes=ub_bytes(tiles.BLOCK_SIZE_M, tiles.BLOCK_SIZE_N, DTYPE_BYTES[dtype], backward, tiles.chunked),
    )


def _tiles(hidden, dtype, **overrides) -> NpuTiles:
    return resolve_tiles(_CHECK_ROWS, hidden, _CHECK_CORES, DTYPE_BYTES[dtype], **overrides)


def npu_compile_cases() -> list:
    """What ``workbench npu-check`` compiles for RMSNorm.

    Defaults (must compile): forward and backward at the tiles ``resolve_tiles`` picks for every
    hidden size in :data:`CHECK_HIDDEN` and every dtype (hidden is a runtime argument, so the
    chunked sizes share one compiled kernel: one case, named with the range). Beyond them: the
    BLOCK_SIZE_M choices of the untiled kernel, the chunk widths and row counts of the chunked
    kernel, the ``tl.where`` switch, the other casting modes and no weight — some of these overflow
    the UB on purpose, which is what the UB model is checked against.
    """
    found: dict = {}  # compiled-kernel identity -> (hidden sizes, build arguments)

    def add(kind, dtype, tiles, hidden, default=False, **switches):
        key = (kind, dtype, tiles.chunked, tiles.BLOCK_SIZE_M, tiles.BLOCK_SIZE_N, tiles.USE_WHERE, *switches.items())
        if key not in found:
            found[key] = ([], (kind, dtype, tiles, default, switches))
        found[key][0].append(hidden)

    kinds = ("forward", "backward")
    for dtype in DTYPE_BYTES:
        for hidden in CHECK_HIDDEN:
            for kind in kinds:
                add(kind, dtype, _tiles(hidden, dtype), hidden, default=True)
    for dtype in DTYPE_BYTES:
        for hidden in (128, 512, 2048):
            for m in CHECK_BLOCK_M:
                for kind in kinds:
                    add(kind, dtype, _tiles(hidden, dtype, strategy="untiled", BLOCK_SIZE_M=m), hidden)
        for n in CHECK_CHUNK_N:
            for m in (1, 2, 4):
                for kind in kinds:
                    tiles = _tiles(16384, dtype, strategy="chunked", BLOCK_SIZE_M=m, BLOCK_SIZE_N=n)
                    add(kind, dtype, tiles, 16384)
    for dtype in ("bf16", "fp32"):
        for hidden in (1024, 8192):
            add("forward", dtype, _tiles(hidden, dtype, USE_WHERE=True), hidden)
            for kind in kinds:
                for casting_mode in ("gemma", "none"):
                    add(kind, dtype, _tiles(hidden, dtype), hidden, casting_mode=casting_mode)
                add(kind, dtype, _tiles(hidden, dtype), hidden, weight=False)
    cases = []
    for hiddens, (kind, dtype, tiles, default, switches) in found.values():
        hiddens = sorted(set(hiddens))
        span = str(hiddens[0]) if len(hiddens) == 1 else f"{hiddens[0]}-{hiddens[-1]}"
        cases.append(_compile_case(kind, dtype, tiles, f"hidden={span} {dtype}", default=default, **switches))
    return cases


def ub_calibration_cases() -> list:
    """The BLOCK_SIZE_M x BLOCK_SIZE_N sweep that locates the UB overflow boundary (fp32, bf16;
    forward and backward; untiled and chunked). ``workbench npu-check --calibrate rms_norm``
    compiles it and records the verdicts in ``ub_calibration.json`` beside this file."""
    cases = []
    for dtype in ("fp32", "bf16"):
        for chunked in (False, True):
            for m in CHECK_BLOCK_M:
                for n in (2**k for k in range(5, 16)):
                    if not 256 <= m * n <= 65536:
                        continue
                    tiles = NpuTiles(chunked, m, n, 1, False)
                    for kind in ("forward", "backward"):
                        cases.append(_compile_case(kind, dtype, tiles, dtype))
    return cases
