"""RMSNorm's backward for long rows with the weight gradient kept on chip (Gluon, NVIDIA GPUs).

The backward, with ``vhat = v * rstd`` and ``m = dy * (offset + w)`` (``v``: x, or the fused
family's ``s = x + r``)::

    dx = rstd * (m - vhat * mean(m * vhat))      (per row; + ds for the fused family)
    dw = sum over rows of dy * vhat              (llama: vhat rounded to v's dtype first)

``dx`` needs the whole row's ``mean(m * vhat)`` before any of its elements, so a row too wide for
one program's registers is walked twice, in ``N_CHUNKS`` column chunks of ``CHUNK``:

1. the row dot, loading v and dy with ``evict_last`` so that the row stays in L2;
2. dx from the same chunks, read again from L2 (``evict_first``: they are done with), and
   ``dy * vhat`` added into this program's partial ``dw``.

Each program walks rows ``pid, pid + GRID, …`` and owns a partial dw as wide as the row. That
partial is what the Triton kernels of :mod:`.gpu` cannot keep anywhere good: in registers it
spills (the whole-row kernel at hidden 32768), in global memory its read-modify-write per row
loads L2 more than HBM (``BWD_WIDE="reread"``), and splitting the columns across programs
(``"columns"``) reads x and dy from HBM twice. Gluon (``triton.experimental.gluon``) allocates
shared memory explicitly: the partial lives there, ``CHUNK`` at a time read, added to and
written back by the threads that own those columns, so no barrier is needed until the end. The
HBM traffic is then the minimum: v and dy read once, dx written once, plus the partial dw once
per program at the end (added atomically into an fp32 dw, the last program casting it, or
written to a row of ``[GRID, hidden]`` partials the host sums: ``DW_REDUCE``).

Shared memory holds ``4 * N_CHUNKS * CHUNK`` bytes (128 KB at hidden 32768), so one program runs
per SM at that width. ``gpu.check_onchip_tiles`` refuses widths whose partial does not fit.

Measured (H200, 4096 rows bf16, kernel time with the L2 flushed, ``benchmarks/norm_backward_sweep.py
--forms onchip``, two calls): slower than the defaults at every width tried, so it is not one.
Hidden 32768: 358.0 us at best (chunks of 8192 on 32 warps, ``BWD_PREFETCH``) against the
``columns`` form's 327.1; 16384: 163.8 (chunks of 2048, 16 warps, two programs per SM) against
the whole-row kernel's 138.9, which spills; the fused family at 16384: 206.6 against 193.6. Each
form of it reached 51-62% of the copy bandwidth: with one row's loads at a time in flight per
program, and one or two programs per SM (the partial fills the shared memory), the loads' latency
is not hidden; loading the next chunk ahead in registers (``BWD_PREFETCH``) changed 1-3%.
Staging x and dy through shared memory with asynchronous copies, beside the partial, is the
next thing to try.

Gluon compiles for NVIDIA GPUs only: the CPU's Triton interpreter cannot run this kernel, so on
the CPU ``BWD_WIDE="onchip"`` is refused with what to use instead (:mod:`.gpu`'s ``reread``
walks the rows the same way with the partial in global memory). The GPU tests compare it with
the PyTorch reference, forward and every gradient (``tests/test_rms_norm.py``, ``-m gpu``).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from kernels.launch import launch


@gluon.jit
def _rms_norm_backward_onchip_kernel(
    DX_ptr, DY_ptr, DS_ptr, X_ptr, W_ptr, RSTD_ptr, DW_partial_ptr, DW32_ptr, DW_ptr, COUNTER_ptr, row_stride, n_rows,
    n_cols, offset, CASTING_MODE: gl.constexpr, HAS_WEIGHT: gl.constexpr, DW_ATOMIC: gl.constexpr,
    HAS_DS: gl.constexpr, CHUNK: gl.constexpr, N_CHUNKS: gl.constexpr, VECTOR: gl.constexpr, WARPS: gl.constexpr,
    PREFETCH: gl.constexpr,
):  # fmt: skip
    """dx for rows ``pid, pid + GRID, …`` and their dw, the partial dw in shared memory
    (``CASTING_MODE``: 0 llama, 1 gemma, 2 none)."""
    layout: gl.constexpr = gl.BlockedLayout([VECTOR], [32], [WARPS], [0])
    pid = gl.program_id(0)
    n_programs = gl.num_programs(0)
    cols = gl.arange(0, CHUNK, layout=layout)
    if HAS_WEIGHT:
        partial = gl.allocate_shared_memory(gl.float32, [N_CHUNKS, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        for k in range(N_CHUNKS):
            partial.index(k).store(gl.zeros([CHUNK], gl.float32, layout))

    for row in range(pid, n_rows, n_programs):
        base = row.to(gl.int64) * row_stride
        rstd = gl.load(RSTD_ptr + row)

        # Walk 1: sum(m * v) over the row; the row stays in L2 for walk 2. PREFETCH: chunk k + 1's
        # loads are issued before chunk k's arithmetic (masked off past the row's end).
        acc = gl.zeros([CHUNK], gl.float32, layout)
        if PREFETCH:
            v_next = gl.load(X_ptr + base + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
            m_next = gl.load(DY_ptr + base + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for k in range(N_CHUNKS):
            c = k * CHUNK + cols
            mask = c < n_cols
            if PREFETCH:
                v = v_next.to(gl.float32)
                m = m_next.to(gl.float32)
                ahead = c + CHUNK
                v_next = gl.load(X_ptr + base + ahead, mask=ahead < n_cols, other=0.0, eviction_policy="evict_last")
                m_next = gl.load(DY_ptr + base + ahead, mask=ahead < n_cols, other=0.0, eviction_policy="evict_last")
            else:
                v = gl.load(X_ptr + base + c, mask=mask, other=0.0, eviction_policy="evict_last").to(gl.float32)
                m = gl.load(DY_ptr + base + c, mask=mask, other=0.0, eviction_policy="evict_last").to(gl.float32)
            if HAS_WEIGHT:
                m = m * (gl.load(W_ptr + c, mask=mask, other=0.0).to(gl.float32) + offset)
            acc += m * v
        dot = gl.sum(acc, axis=0) * rstd / n_cols

        # Walk 2: dx, and dy * vhat into the partial dw.
        for k in range(N_CHUNKS):
            c = k * CHUNK + cols
            mask = c < n_cols
            v_raw = gl.load(X_ptr + base + c, mask=mask, other=0.0, eviction_policy="evict_first")
            dy = gl.load(DY_ptr + base + c, mask=mask, other=0.0, eviction_policy="evict_first").to(gl.float32)
            vhat = v_raw.to(gl.float32) * rstd
            m = dy
            if HAS_WEIGHT:
                m = dy * (gl.load(W_ptr + c, mask=mask, other=0.0).to(gl.float32) + offset)
            dx = rstd * (m - vhat * dot)
            if HAS_DS:
                dx += gl.load(DS_ptr + base + c, mask=mask, other=0.0, eviction_policy="evict_first").to(gl.float32)
            gl.store(DX_ptr + base + c, dx.to(DX_ptr.dtype.element_ty), mask=mask)
            if HAS_WEIGHT:
                if CASTING_MODE == 0:
                    # llama multiplied the weight by v * rstd already rounded to v's dtype.
                    vhat = vhat.to(v_raw.dtype).to(gl.float32)
                chunk = partial.index(k)
                chunk.store(chunk.load(layout) + dy * vhat)

    if HAS_WEIGHT:
        for k in range(N_CHUNKS):
            c = k * CHUNK + cols
            mask = c < n_cols
            dw = partial.index(k).load(layout)
            if DW_ATOMIC:
                gl.atomic_add(DW32_ptr + c, dw, mask=mask)
            else:
                gl.store(DW_partial_ptr + pid.to(gl.int64) * n_cols + c, dw, mask=mask)
        if DW_ATOMIC:
            _finish_dw(DW32_ptr, DW_ptr, COUNTER_ptr, n_cols, n_programs, cols, CHUNK, N_CHUNKS)


@gluon.jit
def _finish_dw(DW32_ptr, DW_ptr, COUNTER_ptr, n_cols, n_programs, cols, CHUNK: gl.constexpr, N_CHUNKS: gl.constexpr):
    """The last program to count itself done casts the fp32 dw to w's dtype and leaves the fp32
    dw and the counter zero for the next backward on the stream (as ``gpu._finish_dw``: a CTA
    barrier orders this program's additions before its count; the last one reads through L2)."""
    gl.thread_barrier()
    done = gl.atomic_add(COUNTER_ptr, 1.0)  # fp32 counter: exact far beyond any grid size
    if done == n_programs - 1:
        for k in range(N_CHUNKS):
            c = k * CHUNK + cols
            mask = c < n_cols
            dw = gl.load(DW32_ptr + c, mask=mask, other=0.0, cache_modifier=".cg")
            gl.store(DW_ptr + c, dw.to(DW_ptr.dtype.element_ty), mask=mask)
        gl.thread_barrier()
        for k in range(N_CHUNKS):
            c = k * CHUNK + cols
            gl.store(DW32_ptr + c, gl.zeros_like(cols.to(gl.float32)), mask=c < n_cols)
        gl.store(COUNTER_ptr, 0.0)


def rms_norm_backward_onchip(dx, dy2d, ds2d, x2d, w, rstd, dw_pointers, sizes, tiles, meta: dict) -> None:
    """Launch the kernel over ``tiles.GRID`` programs: dx into ``dx``, dw through ``dw_pointers``
    (the four of ``gpu.DwOutputs``); ``sizes``: x's row stride, rows, columns and the weight's
    offset; ``meta``: the backward's ``CASTING_MODE``, ``HAS_WEIGHT`` and ``DW_ATOMIC``;
    ``tiles``: ``gpu.GpuTiles`` (the chunk, the row tile, warps and prefetch). ``ds2d``: the fused
    family's residual gradient, or None. A chunk narrower than the warps (32 threads each) runs
    on fewer warps, so that no thread holds a copy of another's columns."""
    chunk = tiles.BWD_CHUNK
    warps = max(1, min(tiles.bwd_num_warps, chunk // 32))
    options = {
        **meta,
        "HAS_DS": ds2d is not None,
        "CHUNK": chunk,
        "N_CHUNKS": tiles.BLOCK_SIZE // chunk,
        # 16 bytes of bf16 per thread per access where the chunk is wide enough: coalesced,
        # vectorised loads and shared-memory accesses.
        "VECTOR": max(1, min(8, chunk // (32 * warps))),
        "WARPS": warps,
        "PREFETCH": tiles.bwd_prefetch,
        "num_warps": warps,
    }
    ds = ds2d.contiguous() if ds2d is not None else dy2d  # unread without HAS_DS
    args = (dx, dy2d, ds, x2d, w, rstd, *dw_pointers, *sizes)
    launch(_rms_norm_backward_onchip_kernel, x2d, (tiles.GRID,), *args, **options)
