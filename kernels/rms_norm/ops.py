"""RMSNorm's forward and backward as ``torch.library.triton_op``s (``torch.ops.kwb.rms_norm_*``),
with autograd registered: what :func:`kernels.rms_norm.rms_norm` calls under torch.compile.

    y, rstd = torch.ops.kwb.rms_norm_forward(x, weight, eps, offset, casting_mode, impl, tiles)
    dx, dw = torch.ops.kwb.rms_norm_backward(dy, x, weight, rstd, offset, casting_mode, impl, tiles)

``tiles`` is :func:`kernels.torch_ops.encode_tiles` of the tile overrides. Without a weight the
backward's ``dw`` is an empty tensor (an op returns tensors, not None). ``in_place`` has no op
form: an op may not write into its incoming gradient.
"""

from __future__ import annotations

import torch
from torch.library import triton_op

from kernels.rms_norm import _IMPLS, resolve_norm_tiles
from kernels.torch_ops import NAMESPACE, decode_tiles


def _plan(impl: str, x: torch.Tensor, tiles: str):
    return resolve_norm_tiles(impl, x, dict(decode_tiles(tiles)), _IMPLS)


@triton_op(f"{NAMESPACE}::rms_norm_forward", mutates_args=())
def rms_norm_forward(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    impl: str,
    tiles: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    module, resolved = _plan(impl, x, tiles)
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    y, rstd = module.rms_norm_forward(x2d, weight, eps, offset, casting_mode, resolved)
    return y.view(x.shape), rstd


@triton_op(f"{NAMESPACE}::rms_norm_backward", mutates_args=())
def rms_norm_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    casting_mode: str,
    impl: str,
    tiles: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    module, resolved = _plan(impl, x, tiles)
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols).contiguous()
    dx, dw = module.rms_norm_backward(dy.reshape(-1, n_cols), x2d, weight, rstd, offset, casting_mode, resolved)
    return dx.view(x.shape), (dw if dw is not None else x.new_empty(0))


def _setup_context(ctx, inputs, output):
    x, weight, _eps, offset, casting_mode, impl, tiles = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.settings = (offset, casting_mode, impl, tiles)


def _backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = rms_norm_backward(dy, x, weight, rstd, *ctx.settings)
    return dx, (dw if weight is not None else None), None, None, None, None, None


rms_norm_forward.register_autograd(_backward, setup_context=_setup_context)
