"""Fused add + RMSNorm family: the functional API and its autograd wiring (the KernelSpec is
:mod:`.spec`).

    y, s = fused_add_rms_norm(x, residual, weight, eps=1e-6, offset=0.0, casting_mode="llama",
                              impl="auto", **tiles)

``s = x + residual`` is the new residual stream and ``y = RMSNorm(s)``; both are returned and
both are differentiable (a gradient arriving through ``s`` from the rest of the residual stream
is added inside the backward kernel). Gradients flow to x, residual and weight; ``weight=None``
means ``y = s * rstd``.

``impl="gpu"`` runs :mod:`.gpu` (whole-row tiles), ``impl="npu"`` runs :mod:`.npu` (grid = cores,
untiled or chunked), ``impl="auto"`` picks the NPU kernels on an NPU and the GPU kernels
elsewhere (the CPU runs either in the Triton interpreter). Tile overrides are keyword
arguments: ``BLOCK_SIZE``, ``BLOCK_SIZE_M``, ``num_warps``, ``GRID``, ``DW_REDUCE``, ``BWD_ROWS``,
``BWD_WARPS``, ``BWD_PREFETCH``, ``BWD_RELOAD_W``, ``BWD_STAGES`` for the GPU kernels;
``strategy``, ``CHUNK_THRESHOLD``, ``BLOCK_SIZE_M``, ``BLOCK_SIZE_N``, ``GRID``, ``USE_WHERE``
for the NPU kernels. Under torch.compile the call is the registered op of :mod:`.ops`.
"""

from __future__ import annotations

import functools

import torch

from kernels.fused_add_rms_norm import gpu, npu
from kernels.fused_add_rms_norm.reference import fused_add_rms_norm_reference
from kernels.plans import cached_plan, eager_plans, remember_replay, tile_items, unread_rows
from kernels.rms_norm import check_beside_x, check_norm_inputs, resolve_norm_tiles
from kernels.torch_ops import encode_tiles

_GPU_TILES = (
    "BLOCK_SIZE", "BLOCK_SIZE_M", "num_warps", "GRID", "DW_REDUCE", "BWD_ROWS", "BWD_WARPS", "BWD_PREFETCH",
    "BWD_RELOAD_W", "BWD_STAGES",
)  # fmt: skip
_NPU_TILES = ("strategy", "CHUNK_THRESHOLD", "BLOCK_SIZE_M", "BLOCK_SIZE_N", "GRID", "USE_WHERE")


def _validate(x, residual, weight, eps, casting_mode):
    for name, t in (("x", x), ("residual", residual)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    check_norm_inputs(x, weight, eps, casting_mode, "fused_add_rms_norm")
    if residual.shape != x.shape:
        raise ValueError(
            f"residual has shape {tuple(residual.shape)}; it must equal x's shape {tuple(x.shape)} (no broadcasting)"
        )
    check_beside_x("residual", residual, x)


_IMPLS = {"gpu": (gpu, _GPU_TILES), "npu": (npu, _NPU_TILES)}


def _forward(x, residual, weight, config):
    """(y, s) shaped like x, and (s as rows, rstd) for the backward. 2-D inputs (the common case)
    skip the reshape / view round trip: each costs host time."""
    eps, offset, casting_mode, impl_module, resolved = config
    shape = x.shape
    if len(shape) == 2:
        x2d, r2d = x.contiguous(), residual.contiguous()
    else:
        x2d = x.reshape(-1, shape[-1]).contiguous()
        r2d = residual.reshape(-1, shape[-1]).contiguous()
    y, s, rstd = impl_module.fused_add_rms_norm_forward(x2d, r2d, weight, eps, offset, casting_mode, resolved)
    outputs = (y, s) if len(shape) == 2 else (y.view(shape), s.view(shape))
    return outputs, s, rstd


class _FusedAddRMSNormFunction(torch.autograd.Function):
    # The non-tensor settings travel as one tuple: every argument of apply costs host time.
    @staticmethod
    def forward(ctx, x, residual, weight, config):
        outputs, s2d, rstd = _forward(x, residual, weight, config)
        ctx.save_for_backward(s2d, weight, rstd)
        ctx.config = config
        ctx.shape = x.shape
        # Gradients that do not arrive (y or s unused) stay None instead of zero tensors, so the
        # kernel skips reading them.
        ctx.set_materialize_grads(False)
        return outputs

    @staticmethod
    def backward(ctx, dy, ds):
        s2d, weight, rstd = ctx.saved_tensors
        _, offset, casting_mode, impl_module, resolved = ctx.config
        shape = ctx.shape
        n_cols = shape[-1]
        ds2d = ds.reshape(-1, n_cols) if ds is not None else None
        if dy is None:
            # y did not reach the loss: only the residual stream's gradient passes through the add.
            dx = ds2d.contiguous() if ds2d is not None else torch.zeros_like(s2d)
            dw = None
        else:
            dx, dw = impl_module.fused_add_rms_norm_backward(
                dy.reshape(-1, n_cols), ds2d, s2d, weight, rstd, offset, casting_mode, resolved
            )
        dx = dx.view(shape)
        # The add passes one gradient to both operands: dr is dx (one tensor, no copy).
        return dx, dx, dw, None


_PLANS: dict = {}

# Eager plans, as kernels/rms_norm/__init__.py's (kernels.plans.eager_plans).
_EAGER = eager_plans()


def _plan(x, residual, weight, eps, offset, casting_mode, impl, tiles):
    """The checks and tile resolution of a call: the autograd wrapper's settings tuple."""
    _validate(x, residual, weight, eps, casting_mode)
    impl_module, resolved = resolve_norm_tiles(impl, x, tiles, _IMPLS)
    return (float(eps), float(offset), casting_mode, impl_module, resolved)


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    impl: str = "auto",
    **tiles,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, s)`` with ``s = x + residual`` and ``y = RMSNorm(s)`` (see the module docstring)."""
    if torch.compiler.is_compiling():  # one registered op for Dynamo and Inductor (.ops)
        _validate(x, residual, weight, eps, casting_mode)
        if x.numel() == 0:
            s = x + residual
            return s.clone(), s
        y, s, _ = _registered_ops().fused_add_rms_norm_forward(
            x, residual, weight, float(eps), float(offset), casting_mode, impl, encode_tiles(tiles)
        )
        return y, s
    grads, eager_key, plan = False, None, None
    try:
        grads = torch.is_grad_enabled() and (
            x.requires_grad or residual.requires_grad or (weight is not None and weight.requires_grad)
        )
        if not grads and type(x) is torch.Tensor and x.is_cuda:
            # The layout's plan: one lookup, then a launch from the tensors' addresses alone.
            x_address, r_address = x.data_ptr(), residual.data_ptr()
            w_layout = None if weight is None else (weight.shape, weight.stride(), weight.dtype, weight.get_device())
            eager_key = (x.shape, x.stride(), x.dtype, x.get_device(), x_address & 15, residual.shape,
                         residual.stride(), residual.dtype, residual.get_device(), r_address & 15, w_layout, eps,
                         offset, casting_mode, impl, tile_items(tiles))  # fmt: skip
            plan = _EAGER.get(eager_key)
    except (AttributeError, TypeError):  # not tensors, an unhashable setting: the checks below say so
        eager_key = None
    if eager_key is not None:
        if plan:
            replay, rows, device, discard_address = plan
            y, s = torch.empty_like(x), torch.empty_like(x)
            rstd, rstd_address = unread_rows(rows, device, discard_address)  # the kernel stores it, unread here
            w_address = x_address if weight is None else weight.data_ptr()
            if replay(y.data_ptr(), s.data_ptr(), x_address, r_address, w_address, rstd_address):
                return y, s
            del _EAGER[eager_key]  # retired or paused: plan again on the next call
            eager_key = None
        elif plan is False:
            eager_key = None
    settings = (type(eps), eps, type(offset), offset, casting_mode, impl, tile_items(tiles))
    config = cached_plan(
        _PLANS,
        lambda: _plan(x, residual, weight, eps, offset, casting_mode, impl, tiles),
        (x, residual, weight),
        settings,
    )
    if x.numel() == 0:
        s = x + residual
        return s.clone(), s
    if grads:
        return _FusedAddRMSNormFunction.apply(x, residual, weight, config)
    if eager_key is not None:
        return _eager_forward(x, residual, weight, config, eager_key)
    return _forward(x, residual, weight, config)[0]  # no autograd node: apply alone costs ~17 us of host time


def _eager_forward(x, residual, weight, config, key):
    """The first call of a layout without gradients on CUDA: the forward, and the plan that
    replays its launch on the layout's later calls (False where none can)."""
    eps, offset, casting_mode, impl_module, resolved = config
    if impl_module is not gpu or not (x.is_contiguous() and residual.is_contiguous()):
        _EAGER[key] = False
        return _forward(x, residual, weight, config)[0]
    x2d, r2d = x.view(-1, x.shape[-1]), residual.view(-1, x.shape[-1])
    y, s, rstd = gpu.fused_add_rms_norm_forward(x2d, r2d, weight, eps, offset, casting_mode, resolved)
    replay = functools.partial(
        gpu.fused_add_rms_norm_forward_replay, x2d, r2d, weight, y, s, rstd, eps, offset, casting_mode, resolved
    )
    remember_replay(_EAGER, key, replay, rstd)
    return y.view(x.shape), s.view(x.shape)


def _registered_ops():
    """:mod:`.ops`, imported on first use: registering a triton_op imports torch._inductor
    (about 1.5 s), which a model that only runs eagerly should not pay for."""
    from kernels.fused_add_rms_norm import ops

    return ops


__all__ = ["fused_add_rms_norm", "fused_add_rms_norm_reference"]
