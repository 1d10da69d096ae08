"""Fused add + RMSNorm's forward and backward as ``torch.library.triton_op``s
(``torch.ops.kwb.fused_add_rms_norm_*``), with autograd registered: what
:func:`kernels.fused_add_rms_norm.fused_add_rms_norm` calls under torch.compile.

    y, s, rstd = torch.ops.kwb.fused_add_rms_norm_forward(x, residual, weight, eps, offset,
                                                          casting_mode, impl, tiles)
    dx, dw = torch.ops.kwb.fused_add_rms_norm_backward(dy, ds, s, weight, rstd, offset,
                                                       casting_mode, impl, tiles)

``ds`` (the residual stream's gradient) may be None; ``dx`` is also the residual's gradient.
Without a weight ``dw`` is an empty tensor (an op returns tensors, not None).
"""

from __future__ import annotations

import torch
from torch.library import triton_op

from kernels.fused_add_rms_norm import _IMPLS
from kernels.rms_norm import resolve_norm_tiles
from kernels.torch_ops import NAMESPACE, decode_tiles


def _plan(impl: str, x: torch.Tensor, tiles: str):
    return resolve_norm_tiles(impl, x, dict(decode_tiles(tiles)), _IMPLS)


@triton_op(f"{NAMESPACE}::fused_add_rms_norm_forward", mutates_args=())
def fused_add_rms_norm_forward(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    impl: str,
    tiles: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    module, resolved = _plan(impl, x, tiles)
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols).contiguous()
    r2d = residual.reshape(-1, n_cols).contiguous()
    y, s, rstd = module.fused_add_rms_norm_forward(x2d, r2d, weight, eps, offset, casting_mode, resolved)
    return y.view(x.shape), s.view(x.shape), rstd


@triton_op(f"{NAMESPACE}::fused_add_rms_norm_backward", mutates_args=())
def fused_add_rms_norm_backward(
    dy: torch.Tensor,
    ds: torch.Tensor | None,
    s: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    casting_mode: str,
    impl: str,
    tiles: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    module, resolved = _plan(impl, s, tiles)
    n_cols = s.shape[-1]
    s2d = s.reshape(-1, n_cols).contiguous()
    ds2d = ds.reshape(-1, n_cols) if ds is not None else None
    dx, dw = module.fused_add_rms_norm_backward(
        dy.reshape(-1, n_cols), ds2d, s2d, weight, rstd, offset, casting_mode, resolved
    )
    return dx.view(s.shape), (dw if dw is not None else s.new_empty(0))


def _setup_context(ctx, inputs, output):
    _x, _residual, weight, _eps, offset, casting_mode, impl, tiles = inputs
    _y, s, rstd = output
    ctx.save_for_backward(s, weight, rstd)
    ctx.settings = (offset, casting_mode, impl, tiles)


def _backward(ctx, dy, ds, _drstd):
    s, weight, rstd = ctx.saved_tensors
    if dy is None:  # y did not reach the loss: only the residual stream's gradient passes the add
        dx = ds if ds is not None else torch.zeros_like(s)
        return dx, dx, None, None, None, None, None, None
    dx, dw = fused_add_rms_norm_backward(dy, ds, s, weight, rstd, *ctx.settings)
    # The add passes one gradient to both operands (one tensor, no copy).
    return dx, dx, (dw if weight is not None else None), None, None, None, None, None


fused_add_rms_norm_forward.register_autograd(_backward, setup_context=_setup_context)
