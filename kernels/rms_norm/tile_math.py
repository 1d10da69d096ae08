"""The per-tile arithmetic of RMSNorm, shared by the GPU and NPU kernels of both norm families.

A tile is ``BLOCK_SIZE_M`` rows by some columns of ``v`` (``x`` for RMSNorm, ``s = x + r`` for
the fused family), loaded in its own dtype; ``rstd`` holds one fp32 value per row.

Forward (:func:`normalized`, :func:`weighted`)::

    y = v * rstd * (offset + w)

computed in fp32; the casting modes differ only in where results are rounded to v's dtype:
``llama`` rounds ``v * rstd`` before the weight, ``gemma`` never rounds, ``none`` also rounds
``rstd`` first, as if everything ran in v's dtype.

Backward (:func:`backward_tile`), with ``vhat = v * rstd`` and ``m = dy * (offset + w)``::

    dx = rstd * (m - vhat * mean(m * vhat))        per row
    dw = sum over rows of dy * vhat                (llama: vhat rounded to v's dtype first)

How rstd and the row mean are formed stays in each kernel: the GPU kernels use ``tl.rsqrt``,
while the NPU kernels write ``1 / tl.sqrt`` (no libdevice on Ascend), and the chunked kernels
accumulate the row mean over column chunks in their own order.
"""

from __future__ import annotations

import triton
import triton.language as tl


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
        y = y * (offset + tl.load(W_ptr + cols, mask=col_mask, other=0.0).to(tl.float32))[None, :]
    return y


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
