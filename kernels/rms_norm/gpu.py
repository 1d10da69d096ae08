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
each program accumulates its own fp32 partial ``dw``. With one program per SM nothing but the
loop itself can hide the load latency between tiles, and three switches shape it (in the
whole-row and the ``columns`` forms below):

- ``BWD_STAGES``: Triton's software pipeline copies the next ``BWD_STAGES - 1`` tiles of x and
  dy into shared memory (``cp.async``) while this tile is computed and stored; the default for
  rows of up to 8192 elements (3 stages, 4 up to 512);
- ``BWD_PREFETCH``: the next tile's x and dy are loaded into registers before this tile's
  arithmetic (twice the registers; the one or the other);
- ``BWD_RELOAD_W``: ``w`` is loaded per tile from L1/L2 instead of held in registers, which
  keeps wide rows from spilling.

Their defaults, with the backward's rows per program and warps, come per row width from the H100
sweep (``BACKWARD_DEFAULTS``). The partials are reduced at the end, in one of two ways
(``DW_REDUCE``):

- ``atomic`` (default): every program adds its partial into an fp32 ``dw`` with atomics and
  bumps a counter; the program that finds itself last casts ``dw`` to the weight's dtype. One
  launch and no host-side reduction: a short backward is mostly host time, and ``sum`` + ``to``
  on the host cost two more launches. The order of the fp32 additions varies from run to run.
- ``partials``: each program writes its partial to row ``p`` of a ``[GRID, hidden]`` buffer that
  the host sums: deterministic, bit for bit.

Rows wider than ``BWD_CHUNK`` take a *chunked* backward: the whole row no longer fits in
registers (at hidden 32768 the row kernel spills and runs 2x slower than the chunked ones), and
``dx`` needs the whole row's ``mean(m * xhat)`` first. Two ways (``BWD_WIDE``):

- ``columns`` (default): one kernel stores ``mean(m * xhat)`` per row, a second runs a 2-D grid
  of row programs x column chunks, each keeping its chunk's ``dw`` partial in registers. It reads
  x and dy twice from HBM (five row-sized transfers instead of three).
- ``reread``: one kernel walks each row twice in chunks, the second walk reading the row again
  from L2, with the program's partial ``dw`` in its own row of a ``[GRID, hidden]`` buffer. The
  H100 sweep measured it at 736 us for 4096 x 32768 bf16: the partial row's read-modify-write
  per row and the re-reads load L2 more than HBM.
- ``onchip``: the same two walks with the partial ``dw`` in shared memory, a Gluon kernel
  (:mod:`.onchip`, NVIDIA GPUs only: the interpreter cannot run it). Measured slower than
  ``columns`` at 32768 and than whole rows at 16384 on the H200 (its docstring has the figures),
  so it is a choice, not a default.

The forward holds whole rows unless ``FWD_CHUNK`` is below the row width: then
``_rms_norm_forward_chunked_kernel`` walks each row twice in chunks, the second walk from L2.
``FWD_WALKS=2`` takes that kernel for a whole row too (one chunk as wide as the row): the row is
loaded, summed and dropped, then loaded again from L2 for y, so no thread holds it across the
reduction. That is the form torch.compile's Inductor kept for RMSNorm on the H200 (a looped
reduction whose one step is the whole row, 32 warps at hidden 32768: 128.0 us against the
library's 149.2, ``benchmarks/diagnostics/norm_forward_forms.py``); ``FWD_WALKS=1`` keeps the row
in registers.

Why one long module: the forward, the three backward forms and their tile resolution are one
op's GPU kernels, read top to bottom as one explanation (Liger's one-file-per-op, Triton's
tutorials); the shared tile arithmetic is :mod:`.tile_math`.

Measured limits (H100, 4096 rows bf16, ``benchmarks/norm_backward_sweep.py``): from hidden 8192
the whole-row backward moves its bytes at 86-87% of the copy bandwidth, an elementwise pass over
the same bytes at 96-100%; at hidden 1024 it takes 15.2 us (staged) where that pass takes 11.0,
the launch, the tile loop's latency and the dw reduction being most of it. Behind the forward, as
a training step runs it, the backward finds x in the L2 and staging gains less: the sweep's
``--after-forward`` found the defaults within 0.2-0.7 us of the best tiles at every size swept
(RMSNorm 1024: 20.6 against 19.9 us for the pair). At 32768 the ``columns``
form moves five row-sized transfers instead of three (58% of the copy bandwidth for the
backward's three). A form where groups of programs share a row and exchange its mean through global
atomics (one transfer each way) was measured at 424-500 us against columns' 451-459 there, and
slower than whole rows from 8192 to 16384: the exchange's round trips and the second tile's
registers cost more than the re-read saves, so it is not kept.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from kernels import tuned_tables
from kernels.launch import launch, replay_of
from kernels.rms_norm.tile_math import (
    accumulate,
    backward_rows,
    backward_tile,
    load_v_dy,
    normalized,
    row_rstd,
    rstd_from,
    store_dx,
    sum_of_squares,
    weight_row,
    weighted,
)
from kernels.runtime import current_stream_handle, device_of
from kernels.tiling import cdiv, is_power_of_two, next_power_of_2

CASTING_CODES = {"llama": 0, "gemma": 1, "none": 2}
# The largest tile (elements) one program holds in registers; larger rows need impl="npu"'s
# chunked two-pass kernel, which runs on GPUs too.
MAX_TILE_ELEMENTS = 65536
NUM_WARPS = (1, 2, 4, 8, 16, 32)
DW_REDUCTIONS = ("atomic", "partials")
BWD_STAGE_COUNTS = (1, 2, 3, 4)  # the backward's software pipeline depth (BWD_STAGES)
WIDE_BACKWARDS = ("columns", "reread", "onchip")
# The backward keeps a whole row in registers up to this width and walks wider rows in chunks
# of BWD_CHUNK_DEFAULT (set from the H100 tile sweep in benchmarks/profile_calls.py).
BWD_WHOLE_ROW_MAX = 16384
BWD_CHUNK_DEFAULT = 4096
# RMSNorm's forward walks rows of FWD_WHOLE_ROW_LIMIT elements or more in chunks of
# FWD_CHUNK_DEFAULT, one row per program on 16 warps (the fused family's forward keeps whole
# rows). From the H200 sweep (benchmarks/norm_backward_sweep.py --forms forward, 4096 rows bf16,
# kernel time with the L2 flushed, two calls): at hidden 32768 chunks of 8192 took 149.3 us
# against the whole row's 161.9 (the tuned whole-row tiles, 156.6 in their table); at 16384 and
# 8192 the chunks came within 1 us of the whole row (70.8 against 71.5; 35.7 against 36.9).
FWD_WHOLE_ROW_LIMIT = 32768
FWD_CHUNK_DEFAULT = 8192
FWD_WALK_COUNTS = (1, 2)  # FWD_WALKS: the forward's reads of each row (2: again from L2)


@dataclass(frozen=True)
class BackwardDefaults:
    """The whole-row backward's automatic tiles for rows up to ``max_block`` elements wide."""

    max_block: int
    rows: int  # rows per program
    warps: int
    per_core: int  # persistent programs per SM
    prefetch: bool
    reload_w: bool
    reload_w_with_residual: bool  # the fused family's backward (it also loads ds)
    stages: int = 1  # tiles staged ahead in shared memory (BWD_STAGES; 1: the plain loop)


# From the H100 sweeps of benchmarks/norm_backward_sweep.py (4096 rows, bf16, profiler kernel time
# with the L2 flushed). Rows of 1024-8192 stage their tiles three deep in shared memory
# (BWD_STAGES=3), the fastest loop at each of them (RMSNorm / fused, against the plain or
# prefetching loop before): 1024: 15.1 / 18.5 us against 16.9 / 19.9; 2048: 24.3 / 30.5 against
# 26.2 / 31.9; 4096: 41.9 / 54.2 against 44.9 / 56.7; 8192: 77.2 / 99.7 against 78.6 / 100.7.
# Rows of 512 stage four deep on 2 warps: fused 11.9 us against 12.8 for 16 rows on 4 warps, two
# programs per SM and no staging (the rule before; three stages, 12.3); four stages elsewhere
# came within 0.3 us of three. Staging did not help from 16384 up, where a whole row spills
# anyway. Before staging (against the earlier rule of 8/8/4/2/1 rows, 4/4/8/8/16/16 warps, one
# program per SM): 16384: 164.3 against 180.2 with w loaded per tile, where the fused family loses
# with it (241.4 against 213.1: its ds load spills more).
BACKWARD_DEFAULTS = (
    BackwardDefaults(512, 4, 2, 1, False, False, False, stages=4),
    BackwardDefaults(1024, 8, 4, 1, False, False, False, stages=3),
    BackwardDefaults(2048, 4, 8, 1, False, False, False, stages=3),
    BackwardDefaults(4096, 2, 16, 1, False, False, False, stages=3),
    BackwardDefaults(8192, 1, 32, 1, False, False, False, stages=3),
    BackwardDefaults(MAX_TILE_ELEMENTS, 1, 16, 1, False, True, False),
)


def default_backward_tiles(block_size: int) -> BackwardDefaults:
    """The whole-row backward's defaults for rows ``block_size`` elements wide (padded)."""
    return next(d for d in BACKWARD_DEFAULTS if block_size <= d.max_block)


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
    # Arithmetic in fp32; tile_math says where each casting mode rounds.
    rstd = row_rstd(x, n_cols, eps, True)
    y = weighted(normalized(x, rstd, CASTING_MODE), W_ptr, cols, col_mask, offset, HAS_WEIGHT)
    tl.store(RSTD_ptr + rows, rstd, mask=row_mask)
    tl.store(Y_ptr + offsets, y.to(Y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_forward_chunked_kernel(
    Y_ptr, X_ptr, W_ptr, RSTD_ptr, row_stride, n_rows, n_cols, eps, offset, CASTING_MODE: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_SIZE_M: tl.constexpr,
):  # fmt: skip
    """The forward of BLOCK_SIZE_M rows walked twice in column chunks of BLOCK_SIZE (``FWD_CHUNK``,
    below the row width): the sums of squares, then y. Walk 1 loads x with ``evict_last`` so the
    rows stay in L2 for walk 2, which reads them from there (``evict_first``: done with). HBM sees
    x once, as in the whole-row kernel, while a program holds one chunk instead of a row: more
    programs per SM keep loads in flight. The NPU's two walks (:func:`.tile_math.chunked_forward`)
    are not reused: they recompute int32 offsets per chunk and take no cache hints (the NPU's
    rules), where this one computes its int64 row offsets once and hints L2; the H200 sweep
    measured this form."""
    rows = tl.program_id(0) * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    row_mask = rows < n_rows
    row_offsets = rows.to(tl.int64)[:, None] * row_stride
    chunk = tl.arange(0, BLOCK_SIZE)
    sum_sq = tl.zeros([BLOCK_SIZE_M], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + chunk
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        x = tl.load(X_ptr + row_offsets + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_last")
        sum_sq += sum_of_squares(x)
    rstd = rstd_from(sum_sq, n_cols, eps, True)
    tl.store(RSTD_ptr + rows, rstd, mask=row_mask)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + chunk
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(X_ptr + row_offsets + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        y = weighted(normalized(x, rstd, CASTING_MODE), W_ptr, cols, col_mask, offset, HAS_WEIGHT)
        tl.store(Y_ptr + row_offsets + cols[None, :], y.to(Y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_backward_kernel(
    DX_ptr,
    DY_ptr,
    DS_ptr,
    X_ptr,
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
    HAS_DS: tl.constexpr,  # fused add + RMSNorm: the residual stream's gradient ds is added to dx
    PREFETCH: tl.constexpr,
    RELOAD_W: tl.constexpr,
    STAGES: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
):
    """dx per row; this program's partial dw over the row tiles it visits (grid-stride).

    The fused family's backward is this kernel with ``X_ptr`` = the saved ``s = x + r`` and
    ``HAS_DS``: the add passes ``dx + ds`` to both x and r."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_SIZE)
    col_mask = cols < n_cols
    dw_acc = backward_rows(
        DX_ptr, DY_ptr, DS_ptr, X_ptr, W_ptr, RSTD_ptr, RSTD_ptr, pid, n_programs, cols, col_mask, row_stride, n_rows,
        n_cols, offset, CASTING_MODE, HAS_WEIGHT, HAS_DS, True, BLOCK_SIZE, BLOCK_SIZE_M, PREFETCH,
        RELOAD_W, STAGES,
    )  # fmt: skip
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


@triton.jit
def _store_dw(
    dw_acc,
    cols,
    col_mask,
    row,
    n_programs,
    DW_partial_ptr,
    DW32_ptr,
    DW_ptr,
    COUNTER_ptr,
    n_cols,
    DW_ATOMIC: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    """A program's partial dw over ``cols``: into row ``row`` of the partials (the host sums), or
    added atomically into the fp32 dw, the last program casting it (``DW_REDUCE``)."""
    if DW_ATOMIC:
        tl.atomic_add(DW32_ptr + cols, dw_acc, mask=col_mask)
        _finish_dw(DW32_ptr, DW_ptr, COUNTER_ptr, n_cols, n_programs, BLOCK_SIZE)
    else:
        tl.store(DW_partial_ptr + row * n_cols + cols, dw_acc, mask=col_mask)


@triton.jit
def _finish_dw(DW32_ptr, DW_ptr, COUNTER_ptr, n_cols, n_programs, BLOCK_SIZE: tl.constexpr):
    """Called by every program after adding its partial dw: the last one casts dw to w's dtype
    and leaves the fp32 dw and the counter zero again, ready for the next backward on the stream
    (the host keeps one such accumulator per stream instead of zero-filling one per call).

    Ordering. A CTA barrier before the count: every warp of this program has issued its dw
    additions before one thread's acquire-release atomic counts the program done, so the last
    program sees every program's additions; it reads them through L2 (``.cg``), where the
    atomics landed. A second barrier between reading and clearing: a thread may clear elements
    another thread of the program has not read yet (the loads and stores need not share a
    layout). No other program touches the accumulator after counting itself done."""
    tl.debug_barrier()
    done = tl.atomic_add(COUNTER_ptr, 1.0)  # fp32 counter: exact far beyond any grid size
    if done == n_programs - 1:
        for start in range(0, n_cols, BLOCK_SIZE):
            cols = start + tl.arange(0, BLOCK_SIZE)
            mask = cols < n_cols
            dw = tl.load(DW32_ptr + cols, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(DW_ptr + cols, dw.to(DW_ptr.dtype.element_ty), mask=mask)
        tl.debug_barrier()
        for start in range(0, n_cols, BLOCK_SIZE):
            cols = start + tl.arange(0, BLOCK_SIZE)
            tl.store(DW32_ptr + cols, tl.zeros([BLOCK_SIZE], dtype=tl.float32), mask=cols < n_cols)
        tl.store(COUNTER_ptr, 0.0)


@triton.jit
def _rms_norm_backward_chunked_kernel(
    DX_ptr,
    DY_ptr,
    X_ptr,
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
    BLOCK_SIZE: tl.constexpr,  # the chunk width, below the row width
    BLOCK_SIZE_M: tl.constexpr,
):
    """The backward for rows too wide for registers: two walks over each row's chunks."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    chunk = tl.arange(0, BLOCK_SIZE)
    partial_row = DW_partial_ptr + pid.to(tl.int64) * n_cols
    if HAS_WEIGHT:
        for start in range(0, n_cols, BLOCK_SIZE):
            tl.store(partial_row + start + chunk, tl.zeros([BLOCK_SIZE], dtype=tl.float32), mask=start + chunk < n_cols)

    n_tiles = tl.cdiv(n_rows, BLOCK_SIZE_M)
    for tile in range(pid, n_tiles, n_programs):
        rows = tile * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        row_mask = rows < n_rows
        row_offsets = rows.to(tl.int64)[:, None] * row_stride
        rstd = tl.load(RSTD_ptr + rows, mask=row_mask, other=0.0)

        # Walk 1: mean(m * xhat) per row.
        dot = _row_dot(
            DY_ptr, X_ptr, W_ptr, row_offsets, row_mask, rstd, n_cols, offset, HAS_WEIGHT, BLOCK_SIZE, BLOCK_SIZE_M
        )

        # Walk 2: dx, and dw into this program's partial row (the row is read again from L2).
        for start in range(0, n_cols, BLOCK_SIZE):
            cols = start + chunk
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            offsets = row_offsets + cols[None, :]
            x, dy = load_v_dy(X_ptr, DY_ptr, offsets, mask)
            w = weight_row(W_ptr, cols, col_mask, offset, HAS_WEIGHT)
            dx, dw = backward_tile(x, dy, w, rstd, dot, n_cols, CASTING_MODE, HAS_WEIGHT, False)
            store_dx(DX_ptr, DX_ptr, offsets, mask, dx, False)
            if HAS_WEIGHT:
                accumulate(partial_row + cols, dw, col_mask)

    if HAS_WEIGHT:
        if DW_ATOMIC:
            for start in range(0, n_cols, BLOCK_SIZE):
                cols = start + chunk
                col_mask = cols < n_cols
                tl.atomic_add(DW32_ptr + cols, tl.load(partial_row + cols, mask=col_mask, other=0.0), mask=col_mask)
            _finish_dw(DW32_ptr, DW_ptr, COUNTER_ptr, n_cols, n_programs, BLOCK_SIZE)


@triton.jit
def _rms_norm_backward_rowdot_kernel(
    DOT_ptr,
    DY_ptr,
    X_ptr,
    W_ptr,
    RSTD_ptr,
    row_stride,
    n_rows,
    n_cols,
    offset,
    HAS_WEIGHT: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
):
    """Wide rows, pass 1 of ``columns``: dot = mean(m * xhat) per row, walking column chunks."""
    rows = tl.program_id(0) * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    row_mask = rows < n_rows
    row_offsets = rows.to(tl.int64)[:, None] * row_stride
    rstd = tl.load(RSTD_ptr + rows, mask=row_mask, other=0.0)
    dot = _row_dot(
        DY_ptr, X_ptr, W_ptr, row_offsets, row_mask, rstd, n_cols, offset, HAS_WEIGHT, BLOCK_SIZE, BLOCK_SIZE_M
    )
    tl.store(DOT_ptr + rows, dot, mask=row_mask)


@triton.jit
def _row_dot(
    DY_ptr,
    X_ptr,
    W_ptr,
    row_offsets,
    row_mask,
    rstd,
    n_cols,
    offset,
    HAS_WEIGHT: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
):
    """mean(m * xhat) over whole rows walked in column chunks: the term every dx of a row needs."""
    acc = tl.zeros([BLOCK_SIZE_M], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(X_ptr + row_offsets + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        m = tl.load(DY_ptr + row_offsets + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        acc += tl.sum(weighted(m, W_ptr, cols, col_mask, offset, HAS_WEIGHT) * x, axis=1)
    return acc * rstd / n_cols


@triton.jit
def _rms_norm_backward_columns_kernel(
    DX_ptr,
    DY_ptr,
    X_ptr,
    W_ptr,
    RSTD_ptr,
    DOT_ptr,
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
    PREFETCH: tl.constexpr,
    RELOAD_W: tl.constexpr,
    STAGES: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
):
    """Wide rows, pass 2 of ``columns``: program (r, c) owns column chunk c of the row tiles
    r, r + R, ...: dx there, and that chunk's dw partial in registers."""
    pid_r = tl.program_id(0)
    n_row_programs = tl.num_programs(0)
    cols = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    col_mask = cols < n_cols
    dw_acc = backward_rows(
        DX_ptr, DY_ptr, DX_ptr, X_ptr, W_ptr, RSTD_ptr, DOT_ptr, pid_r, n_row_programs, cols, col_mask, row_stride,
        n_rows, n_cols, offset, CASTING_MODE, HAS_WEIGHT, False, False, BLOCK_SIZE, BLOCK_SIZE_M, PREFETCH,
        RELOAD_W, STAGES,
    )  # fmt: skip
    if HAS_WEIGHT:
        n_programs = n_row_programs * tl.num_programs(1)
        _store_dw(
            dw_acc,
            cols,
            col_mask,
            pid_r,
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
@dataclass(frozen=True)
class GpuTiles:
    """Resolved tiles: the forward's, then the backward's own (rows, warps, chunking, dw)."""

    BLOCK_SIZE: int
    BLOCK_SIZE_M: int
    num_warps: int
    GRID: int
    BWD_CHUNK: int  # 0: the backward holds whole rows; else its chunk width
    bwd_num_warps: int
    DW_REDUCE: str
    bwd_block_size_m: int
    BWD_WIDE: str  # chunked rows: "columns" (two kernels) or "reread" (one, via L2)
    bwd_prefetch: bool = False  # the whole-row and columns backwards load a tile ahead
    bwd_reload_w: bool = False  # ... and load w per tile instead of holding it in registers
    bwd_stages: int = 1  # ... or stage tiles ahead in shared memory (Triton's pipeline; 1: none)
    fwd_chunk: int = 0  # 0: the forward reads whole rows once; else it walks them twice in chunks this wide
    source: str = "heuristic"  # where the forward's tiles came from (records' tiles_source)
    bwd_source: str = ""  # ... and the backward's rows, warps and loop ("": no backward table here)

    def __hash__(self) -> int:
        # Computed once: a training step's backward plan key holds the tiles and is hashed on
        # every call (14 fields: about 0.5 us each time otherwise).
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(dataclasses.astuple(self))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:  # a string's hash differs between processes: not pickled
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}


def default_num_warps(tile_elements: int) -> int:
    """Enough warps that each thread holds a few vectors of the tile (Triton tutorial rule)."""
    if tile_elements >= 32768:
        return 32
    if tile_elements >= 8192:
        return 16
    if tile_elements > 2048:
        return 8
    return 4


def default_forward_warps(tile_elements: int) -> int:
    """The forward's warps: as :func:`default_num_warps`, but 2 for tiles of 2048 elements or
    fewer. Measured on the H100 (4096 rows, bf16, kernel time with the L2 flushed): hidden 1024
    took 7.1 us with 2 warps against 8.2 with 4 (fused add+RMSNorm: 12.5 against 13.4)."""
    return 2 if tile_elements <= 2048 else default_num_warps(tile_elements)


def default_block_size_m(n_cols: int) -> int:
    """Rows per program for the multi-row variant: about 2048 elements of work per program."""
    return max(1, min(16, 2048 // next_power_of_2(n_cols)))


@functools.lru_cache(maxsize=4096, typed=True)  # typed: 2.0 or True must not pass as 2 or 1
def resolve_tiles(
    n_rows: int,
    n_cols: int,
    num_cores: int,
    BLOCK_SIZE="auto",
    BLOCK_SIZE_M="auto",
    num_warps="auto",
    GRID="auto",
    BWD_CHUNK="auto",
    DW_REDUCE="atomic",
    BWD_WIDE="columns",
    BWD_ROWS="auto",
    BWD_WARPS="auto",
    BWD_PREFETCH="auto",
    BWD_RELOAD_W="auto",
    BWD_STAGES="auto",
    FWD_CHUNK="auto",
    FWD_WALKS="auto",
    *,
    residual: bool = False,
) -> GpuTiles:
    """Check tile choices and fill in the automatic ones; ValueError says what to change.

    ``residual``: the tiles serve the fused family, whose backward also loads ds (it changes one
    default, :data:`BACKWARD_DEFAULTS`). Cached: the launch path asks on every call with the same
    few shapes."""
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
    auto_rows = BLOCK_SIZE_M == "auto"
    if auto_rows:
        BLOCK_SIZE_M = default_block_size_m(n_cols)
    elif not is_power_of_two(BLOCK_SIZE_M):
        raise ValueError(f"BLOCK_SIZE_M={BLOCK_SIZE_M!r} must be a power of two (1, 2, 4, …)")
    if FWD_WALKS not in ("auto",) + FWD_WALK_COUNTS or isinstance(FWD_WALKS, bool):
        raise ValueError(f"FWD_WALKS={FWD_WALKS!r} is not allowed; use 'auto', 1 or 2")
    if FWD_CHUNK == "auto":
        wide = BLOCK_SIZE >= FWD_WHOLE_ROW_LIMIT and not residual and FWD_WALKS != 1
        FWD_CHUNK = FWD_CHUNK_DEFAULT if wide else BLOCK_SIZE
    elif not (is_power_of_two(FWD_CHUNK) and 16 <= FWD_CHUNK <= MAX_TILE_ELEMENTS):
        raise ValueError(
            f"FWD_CHUNK={FWD_CHUNK!r} must be a power of two from 16 to {MAX_TILE_ELEMENTS} (the forward's "
            f"column chunk; {BLOCK_SIZE} or more keeps whole rows) or 'auto'"
        )
    fwd_chunk = 0 if FWD_CHUNK >= BLOCK_SIZE else FWD_CHUNK
    if FWD_WALKS == 1 and fwd_chunk:
        raise ValueError(
            f"FWD_WALKS=1 reads each row once, but FWD_CHUNK={fwd_chunk} walks it in chunks, twice; "
            f"use FWD_WALKS=2 or 'auto', or FWD_CHUNK >= {BLOCK_SIZE}"
        )
    if FWD_WALKS == 2 and not fwd_chunk:
        fwd_chunk = BLOCK_SIZE  # one chunk as wide as the row, read twice (the second from L2)
    width = fwd_chunk or BLOCK_SIZE  # the forward tile's columns
    if width * BLOCK_SIZE_M > MAX_TILE_ELEMENTS:
        name = "FWD_CHUNK" if fwd_chunk else "BLOCK_SIZE"
        raise ValueError(
            f"BLOCK_SIZE_M={BLOCK_SIZE_M} x {name}={width} = {width * BLOCK_SIZE_M} elements "
            f"exceeds the {MAX_TILE_ELEMENTS}-element tile a program can hold; lower BLOCK_SIZE_M to "
            f"{max(1, MAX_TILE_ELEMENTS // width)} or less"
        )
    explicit_warps = num_warps != "auto"
    if not explicit_warps:
        num_warps = default_forward_warps((fwd_chunk or BLOCK_SIZE) * BLOCK_SIZE_M)
    elif num_warps not in NUM_WARPS:
        raise ValueError(f"num_warps={num_warps!r} is not allowed; use one of {', '.join(map(str, NUM_WARPS))}")
    if BWD_CHUNK == "auto":
        BWD_CHUNK = BWD_CHUNK_DEFAULT if BLOCK_SIZE > BWD_WHOLE_ROW_MAX else BLOCK_SIZE
    elif not (is_power_of_two(BWD_CHUNK) and 16 <= BWD_CHUNK <= MAX_TILE_ELEMENTS):
        raise ValueError(
            f"BWD_CHUNK={BWD_CHUNK!r} must be a power of two from 16 to {MAX_TILE_ELEMENTS} (the backward's "
            f"column chunk; {BLOCK_SIZE} or more keeps whole rows) or 'auto'"
        )
    chunk = 0 if BWD_CHUNK >= BLOCK_SIZE else BWD_CHUNK  # below BLOCK_SIZE: within the tile limit too
    # The backward's rows per program and warps: the forward's when given, else their own defaults
    # (chunked: 2 rows of 16 warps, the best of the hidden-32768 sweep).
    per_core, prefetch, reload_w, stages = 1, False, False, 1
    if chunk:
        bwd_rows, bwd_warps = 2, 16
    else:
        d = default_backward_tiles(BLOCK_SIZE)
        bwd_rows, bwd_warps, per_core, prefetch, stages = d.rows, d.warps, d.per_core, d.prefetch, d.stages
        reload_w = d.reload_w_with_residual if residual else d.reload_w
    if not auto_rows or explicit_warps:
        # The forward's tiles given: the backward takes them, one program per SM, the plain loop.
        per_core, prefetch, reload_w, stages = 1, False, False, 1
    if not auto_rows:  # within the backward's own tile (a chunked forward's rows may be more)
        bwd_rows = min(BLOCK_SIZE_M, max(1, MAX_TILE_ELEMENTS // (chunk or BLOCK_SIZE)))
    if explicit_warps:
        bwd_warps = num_warps
    if BWD_ROWS != "auto":
        if not is_power_of_two(BWD_ROWS) or BWD_ROWS * (chunk or BLOCK_SIZE) > MAX_TILE_ELEMENTS:
            raise ValueError(
                f"BWD_ROWS={BWD_ROWS!r} must be a power of two with BWD_ROWS x {chunk or BLOCK_SIZE} (the backward's "
                f"tile width) <= {MAX_TILE_ELEMENTS} elements, or 'auto'"
            )
        bwd_rows = BWD_ROWS
    if BWD_WARPS != "auto":
        if BWD_WARPS not in NUM_WARPS:
            raise ValueError(f"BWD_WARPS={BWD_WARPS!r} is not allowed; use one of {', '.join(map(str, NUM_WARPS))}")
        bwd_warps = BWD_WARPS
    if BWD_PREFETCH == "auto":  # staged tiles asked for: no registers' prefetch besides
        BWD_PREFETCH = prefetch and BWD_STAGES in ("auto", 1)
    elif BWD_PREFETCH not in (False, True):
        raise ValueError(f"BWD_PREFETCH={BWD_PREFETCH!r} must be True, False or 'auto'")
    if BWD_RELOAD_W == "auto":
        BWD_RELOAD_W = reload_w
    elif BWD_RELOAD_W not in (False, True):
        raise ValueError(f"BWD_RELOAD_W={BWD_RELOAD_W!r} must be True, False or 'auto'")
    if BWD_STAGES == "auto":
        BWD_STAGES = 1 if BWD_PREFETCH else stages
    elif isinstance(BWD_STAGES, bool) or BWD_STAGES not in BWD_STAGE_COUNTS:
        raise ValueError(
            f"BWD_STAGES={BWD_STAGES!r} is not allowed; use one of {', '.join(map(str, BWD_STAGE_COUNTS))} "
            "(row tiles in flight through shared memory; 1: none) or 'auto'"
        )
    if BWD_STAGES > 1 and BWD_PREFETCH:
        raise ValueError(
            f"BWD_PREFETCH=True and BWD_STAGES={BWD_STAGES} both load ahead (the next tile in registers, "
            "or tiles in shared memory); set BWD_PREFETCH=False or BWD_STAGES=1"
        )
    n_tiles = cdiv(max(n_rows, 1), bwd_rows)
    auto_grid = GRID == "auto"
    if GRID == "auto":
        GRID = min(per_core * num_cores, n_tiles)
    elif isinstance(GRID, bool) or not (isinstance(GRID, int) and GRID >= 1):
        raise ValueError(f"GRID={GRID!r} must be a positive integer or 'auto'")
    if DW_REDUCE not in DW_REDUCTIONS:
        raise ValueError(f"DW_REDUCE={DW_REDUCE!r} is not allowed; use one of {', '.join(DW_REDUCTIONS)}")
    if BWD_WIDE not in WIDE_BACKWARDS:
        raise ValueError(f"BWD_WIDE={BWD_WIDE!r} is not allowed; use one of {', '.join(WIDE_BACKWARDS)}")
    if chunk and BWD_WIDE == "columns":
        # Row programs x column chunks: about two programs per core in all.
        GRID = min(GRID, max(1, 2 * num_cores // cdiv(n_cols, chunk)))
    if chunk and BWD_WIDE == "onchip" and auto_grid:
        GRID = min(num_cores, n_rows)  # one row at a time per program, one program per SM
    return GpuTiles(
        BLOCK_SIZE, BLOCK_SIZE_M, num_warps, min(GRID, n_tiles), chunk, bwd_warps, DW_REDUCE, bwd_rows, BWD_WIDE,
        BWD_PREFETCH, BWD_RELOAD_W, BWD_STAGES, fwd_chunk=fwd_chunk,
    )  # fmt: skip


def rms_norm_forward(x2d, weight, eps, offset, casting_mode, tiles: GpuTiles):
    """Returns (y, rstd) for a contiguous 2-D x."""
    y = torch.empty_like(x2d)
    rstd = torch.empty(x2d.shape[0], dtype=torch.float32, device=x2d.device)
    kernel, grid, args, kwargs = _forward_launch(y, x2d, weight, rstd, eps, offset, casting_mode, tiles)
    launch(kernel, x2d, grid, *args, **kwargs)
    return y, rstd


def rms_norm_forward_replay(x2d, weight, y, rstd, eps, offset, casting_mode, tiles: GpuTiles):
    """After ``rms_norm_forward(x2d, ...)`` returned ``y, rstd``: the launch again as a replay of
    ``(y, x, w, rstd)`` addresses (``w`` is x's without a weight), for an eager call's plan, or
    None (:func:`kernels.launch.replay_of`)."""
    kernel, grid, args, kwargs = _forward_launch(y, x2d, weight, rstd, eps, offset, casting_mode, tiles)
    return replay_of(kernel, x2d, grid, *args, **kwargs)


def _forward_launch(y, x2d, weight, rstd, eps, offset, casting_mode, tiles: GpuTiles):
    """(kernel, grid, arguments, keywords) of the forward's launch: whole rows, or column chunks
    (``fwd_chunk``); x stands in for a missing weight (the kernel does not read it then)."""
    n_rows, n_cols = x2d.shape
    args = (y, x2d, weight if weight is not None else x2d, rstd, x2d.stride(0), n_rows, n_cols, eps, offset)
    options = forward_options(casting_mode, weight, tiles)
    kernel = _rms_norm_forward_kernel
    if tiles.fwd_chunk:
        kernel, options = _rms_norm_forward_chunked_kernel, {**options, "BLOCK_SIZE": tiles.fwd_chunk}
    return kernel, (cdiv(n_rows, tiles.BLOCK_SIZE_M),), args, options


def forward_options(casting_mode, weight, tiles: GpuTiles) -> dict:
    """The compile-time keywords of a norm forward's launch (this family's and the fused one's)."""
    return {
        "CASTING_MODE": CASTING_CODES[casting_mode],
        "HAS_WEIGHT": weight is not None,
        "BLOCK_SIZE": tiles.BLOCK_SIZE,
        "BLOCK_SIZE_M": tiles.BLOCK_SIZE_M,
        "num_warps": tiles.num_warps,
    }


# Zero-filled fp32 dw accumulators (dw, then the programs' counter) kept between backwards, one
# per device and stream: the kernel's last program clears what it used (_finish_dw), so the
# buffer is zero whenever the next backward on that stream starts. A fresh torch.zeros per call
# costs a fill launch (9-12 us of host time on the H100 host, a quarter of the backward's own).
_ACCUMULATORS: dict[tuple, torch.Tensor] = {}
_MAX_ACCUMULATORS = 64  # streams come and go; past this many, start over


def dw_accumulator(weight: torch.Tensor, n_cols: int) -> torch.Tensor:
    """fp32 zeros, at least ``n_cols + 1`` long, for the atomic dw reduction: the kernel adds
    into ``[:n_cols]``, counts finished programs in ``[n_cols]`` and leaves both zero.

    Fresh zeros instead of the kept buffer while a CUDA graph is captured (memory taken during a
    capture belongs to the graph's pool) and for the stand-in tensors torch.compile traces with."""
    device = weight.device
    cuda = device.type == "cuda"
    if type(weight) is not torch.Tensor or (cuda and torch.cuda.is_current_stream_capturing()):
        return torch.zeros(n_cols + 1, dtype=torch.float32, device=device)
    key = (device.index, current_stream_handle(device.index)) if cuda else (device.type, device.index)
    buffer = _ACCUMULATORS.get(key)
    if buffer is None or buffer.numel() <= n_cols:
        if len(_ACCUMULATORS) >= _MAX_ACCUMULATORS:
            _ACCUMULATORS.clear()
        buffer = _ACCUMULATORS[key] = torch.zeros(n_cols + 1, dtype=torch.float32, device=device)
    return buffer


class DwOutputs:
    """Where a backward's dw goes (``DW_REDUCE``) and the four pointers its kernel takes for it:
    the ``[GRID, hidden]`` fp32 partials (``partials``, and the ``reread`` kernel's scratch rows),
    the fp32 dw, the dw in w's dtype, and the programs' counter (``atomic``; the fp32 dw and the
    counter are one kept accumulator, :func:`dw_accumulator`)."""

    __slots__ = ("partial", "dw32", "dw", "pointers")

    def __init__(self, weight, n_cols: int, grid: int, atomic: bool, scratch_rows: bool, placeholder):
        self.partial = self.dw32 = self.dw = None
        if weight is not None:
            device = weight.device
            if scratch_rows or not atomic:
                self.partial = torch.empty((grid, n_cols), dtype=torch.float32, device=device)
            if atomic:
                self.dw32 = dw_accumulator(weight, n_cols)
                self.dw = torch.empty_like(weight)
        self.pointers = (
            placeholder if self.partial is None else self.partial,
            placeholder if self.dw32 is None else self.dw32,
            placeholder if self.dw is None else self.dw,
            placeholder if self.dw32 is None else self.dw32[n_cols:],  # the counter
        )

    def result(self, weight):
        """dw in w's dtype (None without a weight), after the kernel ran."""
        if weight is None or self.dw is not None:
            return self.dw
        return self.partial.sum(0).to(weight.dtype)


def rms_norm_backward(dy2d, x2d, weight, rstd, offset, casting_mode, tiles: GpuTiles, in_place=False, ds2d=None):
    """Returns (dx, dw); with ``in_place`` dx overwrites dy's buffer (saves one allocation).

    ``ds2d``: the fused family's residual-stream gradient, added to dx (whole-row tiles only:
    the fused family's tiles never chunk the backward)."""
    n_rows, n_cols = x2d.shape
    dy2d = dy2d.contiguous()
    if tiles.bwd_stages > 1:
        check_staged_tiles(tiles, x2d, dy2d, ds2d, weight)
    dx = dy2d if in_place else torch.empty_like(x2d)
    grid = tiles.GRID
    chunked = tiles.BWD_CHUNK > 0
    onchip = chunked and tiles.BWD_WIDE == "onchip"
    if ds2d is not None and chunked and not onchip:
        raise ValueError(
            "a residual gradient (ds) needs the whole-row backward or BWD_WIDE='onchip'; use BWD_CHUNK >= hidden"
        )
    if onchip:
        check_onchip_tiles(tiles, weight is not None, device_of(x2d))
    atomic = tiles.DW_REDUCE == "atomic"
    columns = chunked and tiles.BWD_WIDE == "columns"
    dw_out = DwOutputs(weight, n_cols, grid, atomic, chunked and tiles.BWD_WIDE == "reread", rstd)
    rows = tiles.bwd_block_size_m
    warps = tiles.bwd_num_warps
    w = weight if weight is not None else x2d
    meta = dict(CASTING_MODE=CASTING_CODES[casting_mode], HAS_WEIGHT=weight is not None, DW_ATOMIC=atomic)
    inputs = (dy2d, x2d, w, rstd)  # in every backward kernel's order, as are the sizes after them
    sizes = (x2d.stride(0), n_rows, n_cols, offset)
    tile = dict(BLOCK_SIZE=tiles.BWD_CHUNK, BLOCK_SIZE_M=rows, num_warps=warps)
    try:
        if columns:
            # dx needs each row's mean(m * xhat) before any chunk of it: a first pass stores it.
            dot = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
            launch(
                _rms_norm_backward_rowdot_kernel,
                x2d,
                (cdiv(n_rows, rows),),
                dot,
                *inputs,
                *sizes,
                HAS_WEIGHT=weight is not None,
                **tile,
            )
            launch(
                _rms_norm_backward_columns_kernel,
                x2d,
                (grid, cdiv(n_cols, tiles.BWD_CHUNK)),
                dx,
                *inputs,
                dot,
                *dw_out.pointers,
                *sizes,
                **meta,
                PREFETCH=tiles.bwd_prefetch,
                RELOAD_W=tiles.bwd_reload_w,
                STAGES=tiles.bwd_stages,
                **tile,
            )
        elif onchip:
            from kernels.rms_norm.onchip import rms_norm_backward_onchip  # Gluon: imported where it runs

            rms_norm_backward_onchip(dx, dy2d, ds2d, x2d, w, rstd, dw_out.pointers, sizes, tiles, meta)
        elif chunked:
            launch(
                _rms_norm_backward_chunked_kernel,
                x2d,
                (grid,),
                dx,
                *inputs,
                *dw_out.pointers,
                *sizes,
                **meta,
                **tile,
            )
        else:
            if ds2d is not None:
                ds2d = ds2d.contiguous()
            grid, args, kwargs = _whole_row_backward_launch(
                dx, dy2d, ds2d, x2d, weight, rstd, dw_out.pointers, offset, casting_mode, tiles
            )
            launch(_rms_norm_backward_kernel, x2d, grid, *args, **kwargs)
    except OutOfResources as exc:  # past the staged tiles, what Triton's compile found (row sums' scratch)
        raise ValueError(
            f"the backward's tiles ({tiles.bwd_block_size_m} rows of {tiles.BWD_CHUNK or tiles.BLOCK_SIZE} on "
            f"{tiles.bwd_num_warps} warps, BWD_STAGES={tiles.bwd_stages}) need {exc.required} bytes of {exc.name}, "
            f"over the {exc.limit} one program may use; lower BWD_STAGES, BWD_ROWS or BWD_WARPS"
        ) from exc
    return dx, dw_out.result(weight)


def staged_bytes(tiles: GpuTiles, x2d, dy2d, ds2d=None, weight=None) -> int:
    """Shared memory a staged backward (``BWD_STAGES`` > 1) holds while its loop runs:
    ``stages - 1`` copies of every tile the loop loads ahead (x and dy, ds for the fused family,
    w when loaded per tile), and the scratch of dw's sum over a tile's rows where warps split
    them. What Triton's pipeliner allocated, read from the compiled kernels' ``shared`` (H100,
    Triton 3.6: 65,728 bytes for 8 rows of 1024 bf16 at 3 stages; 245,792 for the fused
    family's 4 rows of 4096 on 32 warps at 3 stages with w, 32,768 of them the rows' sum
    across 2 warps); tests/test_compile_ahead.py compares the two for the Triton installed."""
    width = tiles.BWD_CHUNK or tiles.BLOCK_SIZE
    rows, warps = tiles.bwd_block_size_m, tiles.bwd_num_warps
    row_bytes = x2d.element_size() + dy2d.element_size() + (ds2d.element_size() if ds2d is not None else 0)
    w_bytes = weight.element_size() * width if weight is not None and tiles.bwd_reload_w else 0
    staged = (tiles.bwd_stages - 1) * (rows * width * row_bytes + w_bytes)
    # Warps lie along the row first, 16 bytes of x a thread at a time; those left over split the
    # rows, and summing dw over rows then meets in shared memory (fp32, one row per such warp).
    per_thread = max(1, rows * width // (32 * warps))
    vector = min(16 // x2d.element_size(), per_thread)
    along_row = min(warps, max(1, width // (32 * vector)))
    across_rows = min(rows, warps // along_row)
    return staged + (across_rows * width * 4 if weight is not None and across_rows > 1 else 0)


def check_staged_tiles(tiles: GpuTiles, x2d, dy2d, ds2d=None, weight=None, device=None) -> None:
    """ValueError when the staged tiles (:func:`staged_bytes`) exceed the shared memory one program
    may use on ``device`` (default: x's; unknown sizes, as on the CPU interpreter, pass). Whatever
    else the compile finds is reported by :func:`rms_norm_backward` in the same terms. The tensors
    are read for their element sizes only: meta tensors check tiles before any input exists."""
    device = device if device is not None else device_of(x2d)
    limit = getattr(device, "shared_bytes_per_program", None)
    need = staged_bytes(tiles, x2d, dy2d, ds2d, weight)
    if limit and need > limit:
        width = tiles.BWD_CHUNK or tiles.BLOCK_SIZE
        raise ValueError(
            f"BWD_STAGES={tiles.bwd_stages} keeps {tiles.bwd_stages - 1} copies of the backward's "
            f"{tiles.bwd_block_size_m} x {width} row tiles in shared memory ({need} bytes), over the {limit} bytes "
            f"one program may use on {device.name}; lower BWD_STAGES or BWD_ROWS"
        )


# The most elements of a tile one thread may hold. The automatic tiles hold at most 32 (the
# forward) and 64 (the backward); the tune times none over 128 (MAX_TUNE_ELEMENTS_PER_THREAD in
# spec.py). Past it a tile spills registers: on an H100 such forwards ran 1.3-70x slower, and on an
# H200 host one warp over a row of 8192 (256 a thread, the backward too) took 15-25 s to compile.
MAX_ELEMENTS_PER_THREAD = 128


def check_register_tiles(tiles: GpuTiles) -> None:
    """ValueError where the forward's or the backward's tile leaves more than
    :data:`MAX_ELEMENTS_PER_THREAD` elements to a thread (explicit warps too few for the tile; the
    automatic tiles never do), naming the warps that would fit."""
    parts = (
        ("num_warps", "forward", tiles.fwd_chunk or tiles.BLOCK_SIZE, tiles.BLOCK_SIZE_M, tiles.num_warps),
        ("BWD_WARPS", "backward", tiles.BWD_CHUNK or tiles.BLOCK_SIZE, tiles.bwd_block_size_m, tiles.bwd_num_warps),
    )
    for name, kernel, width, rows, warps in parts:
        per_thread = width * rows // (32 * warps)
        if per_thread > MAX_ELEMENTS_PER_THREAD:
            fits = next_power_of_2(cdiv(width * rows, 32 * MAX_ELEMENTS_PER_THREAD))
            raise ValueError(
                f"{name}={warps} leaves {per_thread} elements of the {kernel}'s {rows} x {width} tile to each thread, "
                f"over {MAX_ELEMENTS_PER_THREAD}: the kernel would spill registers (many times slower, and tens of "
                f"seconds to compile); use {name} >= {fits}" + (" or fewer rows per program" if rows > 1 else "")
            )


def check_onchip_tiles(tiles: GpuTiles, has_weight: bool, device) -> None:
    """ValueError where ``BWD_WIDE="onchip"`` cannot run: on a device whose Triton kernels run in
    the interpreter (the kernel is Gluon, which compiles for NVIDIA GPUs only), or where its
    partial dw (fp32, as wide as the row tile) exceeds the shared memory one program may use."""
    if device.interpreted:
        raise ValueError(
            f"BWD_WIDE='onchip' is a Gluon kernel for NVIDIA GPUs; the {device.kind} runs Triton's interpreter, "
            "which cannot run it: use BWD_WIDE='reread' (the same two walks, dw in global memory) or 'columns'"
        )
    limit = getattr(device, "shared_bytes_per_program", None)
    need = 4 * tiles.BLOCK_SIZE if has_weight else 0
    if limit and need > limit:
        raise ValueError(
            f"BWD_WIDE='onchip' keeps the partial dw of a {tiles.BLOCK_SIZE}-wide row tile in shared memory "
            f"({need} bytes fp32), over the {limit} bytes one program may use on {device.name}; "
            "use BWD_WIDE='columns' for rows this wide"
        )


def _whole_row_backward_launch(dx, dy2d, ds2d, x2d, weight, rstd, dw_pointers, offset, casting_mode, tiles: GpuTiles):
    """(grid, arguments, keywords) of the whole-row backward kernel's launch; ``dw_pointers``:
    :class:`DwOutputs`' four."""
    n_rows, n_cols = x2d.shape
    args = (
        dx, dy2d, ds2d if ds2d is not None else dy2d, x2d, weight if weight is not None else x2d, rstd,
        *dw_pointers, x2d.stride(0), n_rows, n_cols, offset,
    )  # fmt: skip
    kwargs = {
        "CASTING_MODE": CASTING_CODES[casting_mode],
        "HAS_WEIGHT": weight is not None,
        "DW_ATOMIC": tiles.DW_REDUCE == "atomic",
        "HAS_DS": ds2d is not None,
        "PREFETCH": tiles.bwd_prefetch,
        "RELOAD_W": tiles.bwd_reload_w,
        "STAGES": tiles.bwd_stages,
        "BLOCK_SIZE": tiles.BLOCK_SIZE,
        "BLOCK_SIZE_M": tiles.bwd_block_size_m,
        "num_warps": tiles.bwd_num_warps,
    }
    return (tiles.GRID,), args, kwargs


def rms_norm_backward_replay(dy2d, x2d, weight, rstd, dx, dw, offset, casting_mode, tiles: GpuTiles, ds2d=None):
    """After ``rms_norm_backward(dy2d, x2d, weight, rstd, ...)`` returned ``dx, dw`` through the
    whole-row kernel with the atomic dw reduction: its launch again as a replay, for a training
    step's plan (:func:`rms_norm_backward_replayed` calls it); None where the backward took
    another form, or has no replay (:func:`kernels.launch.replay_of`)."""
    if tiles.BWD_CHUNK or tiles.DW_REDUCE != "atomic" or not dy2d.is_contiguous():
        return None
    n_cols = x2d.shape[1]
    if weight is None:
        dw_pointers = (rstd,) * 4
    else:
        dw32 = dw_accumulator(weight, n_cols)
        dw_pointers = (rstd, dw32, dw, dw32[n_cols:])
    grid, args, kwargs = _whole_row_backward_launch(
        dx, dy2d, ds2d, x2d, weight, rstd, dw_pointers, offset, casting_mode, tiles
    )
    return replay_of(_rms_norm_backward_kernel, x2d, grid, *args, **kwargs)


def rms_norm_backward_replayed(replay, dy2d, x2d, weight, rstd, in_place=False):
    """``(dx, dw)`` by a replay from :func:`rms_norm_backward_replay` of the same layout (a
    contiguous dy), allocating what :func:`rms_norm_backward` allocates; None when the replay
    refuses. Its addresses, in the kernel's order: dx, dy, dy again for ds, x, w (x's without a
    weight), rstd, rstd for the unused partial sums, then the kept fp32 dw, dw and the counter
    after the fp32 dw's ``hidden`` words (rstd for all three without a weight)."""
    dx = dy2d if in_place else torch.empty_like(x2d)
    dy, r = dy2d.data_ptr(), rstd.data_ptr()
    if weight is None:
        dw, w, dw32, dw_address, counter = None, x2d.data_ptr(), r, r, r
    else:
        n_cols = x2d.shape[1]
        dw = torch.empty_like(weight)
        w, dw_address = weight.data_ptr(), dw.data_ptr()
        dw32 = dw_accumulator(weight, n_cols).data_ptr()
        counter = dw32 + 4 * n_cols
    if replay(dx.data_ptr(), dy, dy, x2d.data_ptr(), w, r, r, dw32, dw_address, counter):
        return dx, dw
    return None


def tiles_for(x: torch.Tensor, **tiles) -> GpuTiles:
    """Tiles for x viewed as rows of its last axis (the device's tuned forward where it has one)."""
    n_cols = int(x.shape[-1])  # a traced (symbolic) size specialises here
    return tiles_for_rows(int(x.numel()) // max(n_cols, 1), n_cols, device_of(x), **tiles)


def tiles_for_rows(n_rows: int, n_cols: int, dev, **tiles) -> GpuTiles:
    """:func:`tiles_for` from the shape and device alone (``source``, ``bwd_source``: records'
    tiles_source)."""
    return with_tuned_tiles("rms_norm", dev, n_rows, n_cols, tiles)


# The forward's tiles a tuned table sets; a call that sets either gets none of the table's.
TUNED_TILES = ("BLOCK_SIZE_M", "num_warps")
# The backward's tiles its own table sets (``workbench tune --part backward``) ...
BACKWARD_TUNED_TILES = ("BWD_ROWS", "BWD_WARPS", "BWD_STAGES", "BWD_RELOAD_W")
# ... measured with every other backward tile "auto": a call that sets any of these gets none of
# them (the forward's rows and warps given, the backward takes those: resolve_tiles).
BACKWARD_TABLE_OFF = (*BACKWARD_TUNED_TILES, "BWD_PREFETCH", "BWD_CHUNK", "BLOCK_SIZE_M", "num_warps")


def with_tuned_tiles(family: str, dev, n_rows: int, n_cols: int, tiles: dict, **fixed) -> GpuTiles:
    """:func:`resolve_tiles`, with the tiles ``family``'s tuned tables for ``dev`` hold at the
    nearest hidden size (:mod:`kernels.tuned_tables`):

    - the forward's ``BLOCK_SIZE_M`` and ``num_warps`` when the call leaves both "auto";
    - the whole-row backward's ``BWD_ROWS``, ``BWD_WARPS``, ``BWD_STAGES`` and ``BWD_RELOAD_W``
      from the backward table (``tuned/backward/``) when the call leaves every backward tile and
      the forward's rows and warps "auto".

    A table entry that does not fit this row falls back to the rule, and ``source`` /
    ``bwd_source`` say why (``bwd_source`` stays ``""`` where the device has no backward table).
    Called once per shape (the families cache their plans)."""
    base = resolve_tiles(n_rows, n_cols, dev.num_cores, **fixed, **tiles)
    key = tuned_tables.device_key(dev)
    found = tuned_tables.choose(family, key, n_cols, tiles, TUNED_TILES)
    result = dataclasses.replace(base, source=found.source)
    if found.tiles and base.fwd_chunk:  # the forward's table holds tiles of whole rows read once
        walk = "in chunks" if base.fwd_chunk < base.BLOCK_SIZE else "reading rows twice"
        result = dataclasses.replace(result, source=f"heuristic (forward {walk}: the tuned table's rows are whole)")
    elif found.tiles:  # else no entry, or an empty one: the tune kept the rule at this size
        tuned, why = _with_entry(n_rows, n_cols, dev, fixed, tiles, found.tiles)
        if tuned is None:
            result = dataclasses.replace(result, source=f"heuristic (tuned tiles {found.tiles} do not fit: {why})")
        else:
            result = dataclasses.replace(result, BLOCK_SIZE_M=tuned.BLOCK_SIZE_M, num_warps=tuned.num_warps)
    if not tuned_tables.has_table(family, key, "backward"):
        return result
    back = tuned_tables.choose(family, key, n_cols, tiles, BACKWARD_TABLE_OFF, part="backward")
    if not back.tiles or base.BWD_CHUNK:  # the table times whole rows only
        return dataclasses.replace(result, bwd_source=back.source)
    tuned, why = _with_entry(n_rows, n_cols, dev, fixed, tiles, back.tiles)
    if tuned is None:
        return dataclasses.replace(
            result, bwd_source=f"heuristic (tuned backward tiles {back.tiles} do not fit: {why})"
        )
    return dataclasses.replace(
        result, bwd_source=back.source, **{name: getattr(tuned, name) for name in _BACKWARD_FIELDS}
    )


# What a backward table's entry sets in the resolved tiles (GRID: the programs its rows make).
_BACKWARD_FIELDS = ("GRID", "bwd_block_size_m", "bwd_num_warps", "bwd_prefetch", "bwd_reload_w", "bwd_stages")


def _with_entry(n_rows: int, n_cols: int, dev, fixed: dict, tiles: dict, entry: dict):
    """:func:`resolve_tiles` with a table's ``entry`` over the call's ``tiles``: ``(tiles, "")``,
    or ``(None, why)`` where the entry does not fit this row, among others where it would leave a
    thread more than :data:`MAX_ELEMENTS_PER_THREAD` elements (:func:`check_register_tiles`): an
    entry tuned at the nearest size, 4096, holds one warp for a row tile of 4096; at hidden 4097
    the tile is 8192 wide, and one warp would spill."""
    try:
        resolved = resolve_tiles(n_rows, n_cols, dev.num_cores, **fixed, **{**tiles, **entry})
        check_register_tiles(resolved)
        return resolved, ""
    except (TypeError, ValueError) as exc:
        return None, str(exc)
