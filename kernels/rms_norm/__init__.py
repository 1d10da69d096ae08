"""RMSNorm family: the functional API and its autograd wiring (the KernelSpec is :mod:`.spec`).

    y = rms_norm(x, weight, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False,
                 impl="auto", **tiles)

``impl="gpu"`` runs :mod:`.gpu` (whole-row tiles), ``impl="npu"`` runs :mod:`.npu` (grid = cores,
untiled or chunked), ``impl="auto"`` picks the NPU kernels on an NPU and the GPU kernels
elsewhere (the CPU runs either in the Triton interpreter). Tile overrides are keyword
arguments: ``BLOCK_SIZE``, ``BLOCK_SIZE_M``, ``num_warps``, ``GRID``, ``BWD_CHUNK``, ``DW_REDUCE``,
``BWD_WIDE``, ``BWD_ROWS``, ``BWD_WARPS``, ``BWD_PREFETCH``, ``BWD_RELOAD_W``, ``BWD_STAGES``, ``FWD_CHUNK``,
``FWD_WALKS`` for
the GPU kernels; ``strategy``, ``CHUNK_THRESHOLD``, ``BLOCK_SIZE_M``, ``BLOCK_SIZE_N``, ``GRID``,
``USE_WHERE`` for the NPU kernels. ``in_place=True`` lets the backward write dx over the incoming
gradient (eager only). Under torch.compile the call is the registered op of :mod:`.ops`.

On CUDA a call keeps a plan per layout (``_EAGER``, ``_BACKWARD`` below): after the first call
of a layout, the forward's launch (and in a training step the whole-row backward's) is a replay
from the tensors' addresses (:func:`kernels.fast_launch.replay_of`), skipping the checks and
Triton's launch.
"""

from __future__ import annotations

import functools

import torch

from kernels.plans import cached_plan, eager_plans, remember_plan, remember_replay, tile_items, unread_rows
from kernels.rms_norm import gpu, npu
from kernels.rms_norm.reference import CASTING_MODES, rms_norm_reference
from kernels.runtime import auto_impl
from kernels.torch_ops import encode_tiles

IMPLS = ("gpu", "npu", "auto")
_GPU_TILES = (
    "BLOCK_SIZE", "BLOCK_SIZE_M", "num_warps", "GRID", "BWD_CHUNK", "DW_REDUCE", "BWD_WIDE", "BWD_ROWS", "BWD_WARPS",
    "BWD_PREFETCH", "BWD_RELOAD_W", "BWD_STAGES", "FWD_CHUNK", "FWD_WALKS",
)  # fmt: skip
_NPU_TILES = ("strategy", "CHUNK_THRESHOLD", "BLOCK_SIZE_M", "BLOCK_SIZE_N", "GRID", "USE_WHERE")
_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# Shared by the norm families (fused_add_rms_norm too): argument checks and tile resolution.
def check_norm_inputs(x, weight, eps, casting_mode, op: str = "rms_norm") -> None:
    """x, weight and the options of a norm over x's last axis; ValueError says what to change."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _SUPPORTED_DTYPES:
        raise ValueError(f"x has dtype {x.dtype}; {op} supports float32, float16 and bfloat16")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last (hidden) axis, got shape {tuple(x.shape)}")
    if weight is not None:
        if not isinstance(weight, torch.Tensor):
            raise ValueError(f"weight must be a tensor or None, got {type(weight).__name__}")
        if weight.shape != (x.shape[-1],):
            raise ValueError(
                f"weight has shape {tuple(weight.shape)}; it must be ({x.shape[-1]},), the hidden size of x"
            )
        check_beside_x("weight", weight, x)
    if casting_mode not in CASTING_MODES:
        raise ValueError(f"casting_mode={casting_mode!r} is not allowed; use one of {', '.join(CASTING_MODES)}")
    if not (eps >= 0):
        raise ValueError(f"eps={eps!r} must be >= 0")


def check_beside_x(name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    """A tensor the kernels read beside x (weight, residual): on x's device, in x's dtype."""
    if t.device != x.device:
        raise ValueError(f"{name} is on {t.device} but x is on {x.device}; put both on one device")
    if t.dtype != x.dtype:
        raise ValueError(f"{name} has dtype {t.dtype} but x has {x.dtype}; cast {name} to x.dtype")


def resolve_norm_tiles(impl: str, x: torch.Tensor, tiles: dict, impls: dict):
    """(impl module, its resolved tiles) for ``impl`` in ``impls`` ({"gpu": (module, tile names),
    "npu": ...}); ``auto`` is the NPU kernels on an NPU and the GPU kernels elsewhere."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not allowed; use one of {', '.join(IMPLS)}")
    if impl == "auto":
        impl = auto_impl(x)
    module, names = impls[impl]
    unknown = [name for name in tiles if name not in names]
    if unknown:
        raise ValueError(f"unknown tile parameter {', '.join(unknown)} for this impl; allowed: {', '.join(names)}")
    return module, module.tiles_for(x, **tiles)


_IMPLS = {"gpu": (gpu, _GPU_TILES), "npu": (npu, _NPU_TILES)}


def _forward(x, weight, config):
    """(y shaped like x, x as contiguous rows, rstd). 2-D inputs (the common case) skip the
    reshape / view round trip: each costs host time."""
    eps, offset, casting_mode, _, impl_module, resolved = config
    shape = x.shape
    x2d = x.contiguous() if len(shape) == 2 else x.reshape(-1, shape[-1]).contiguous()
    y, rstd = impl_module.rms_norm_forward(x2d, weight, eps, offset, casting_mode, resolved)
    return (y if len(shape) == 2 else y.view(shape)), x2d, rstd


class _RMSNormFunction(torch.autograd.Function):
    # The non-tensor settings travel as one tuple: every argument of apply costs host time.
    # ``planned``: (eager key, eager plan or None) of a call on CUDA, else None: the forward
    # replays the layout's launch (or plans it), and the backward keeps a plan of its own.
    @staticmethod
    def forward(ctx, x, weight, config, planned):
        replayed = _replayed_forward(x, weight, *planned, False) if planned is not None and planned[1] else None
        if replayed is not None:
            y, rstd = replayed
            x2d = x if x.dim() == 2 else x.view(-1, x.shape[-1])
        else:
            y, x2d, rstd = _forward(x, weight, config)
            if planned is not None and planned[1] is None:
                _plan_forward(x, x2d, weight, y, rstd, config, planned[0])
        ctx.save_for_backward(x2d, weight, rstd)
        ctx.config = config
        ctx.shape = x.shape
        ctx.planned = planned is not None and config[4] is gpu
        return y

    @staticmethod
    def backward(ctx, dy):
        x2d, weight, rstd = ctx.saved_tensors
        config = ctx.config
        _, offset, casting_mode, in_place, impl_module, resolved = config
        shape = ctx.shape
        flat = len(shape) == 2
        dy2d = dy if flat else dy.reshape(-1, shape[-1])
        key = plan = None
        if ctx.planned:
            key = (config, x2d.shape, x2d.dtype, x2d.get_device(), weight is None, dy2d.dtype, dy2d.is_contiguous())
            plan = _BACKWARD.get(key)
            if plan:
                grads = gpu.rms_norm_backward_replayed(plan, dy2d, x2d, weight, rstd, in_place)
                if grads is not None:
                    dx, dw = grads
                    return (dx if flat else dx.view(shape)), dw, None, None
                del _BACKWARD[key]  # retired, paused or another layout of dy: plan again
                plan = None
        dx, dw = impl_module.rms_norm_backward(dy2d, x2d, weight, rstd, offset, casting_mode, resolved, in_place)
        if key is not None and plan is None and impl_module is gpu:
            make = functools.partial(
                gpu.rms_norm_backward_replay, dy2d, x2d, weight, rstd, dx, dw, offset, casting_mode, resolved
            )
            remember_plan(_BACKWARD, key, make)
        return (dx if flat else dx.view(shape)), dw, None, None


def _replayed_forward(x, weight, key, plan, x_address, discard):
    """``(y, rstd)`` through the layout's replay, or None when it refuses (the plan is dropped:
    the next call plans again). ``discard``: no backward follows, so the kernel's rstd goes to the
    plan's discard buffer (kernels.plans.discard_rows), where it has one, and rstd is None."""
    replay, rows, device, discard_address = plan
    y = torch.empty_like(x)
    rstd, rstd_address = unread_rows(rows, device, discard_address if discard else None)
    if replay(y.data_ptr(), x_address, x_address if weight is None else weight.data_ptr(), rstd_address):
        return y, rstd
    _EAGER.pop(key, None)
    return None


def _plan_forward(x, x2d, weight, y, rstd, config, key):
    """The layout's eager plan from a forward just run (False where it has no replay)."""
    eps, offset, casting_mode, _, impl_module, resolved = config
    if impl_module is not gpu or not x.is_contiguous():
        _EAGER[key] = False
        return
    replay = functools.partial(gpu.rms_norm_forward_replay, x2d, weight, y, rstd, eps, offset, casting_mode, resolved)
    remember_replay(_EAGER, key, replay, rstd)


_PLANS: dict = {}

# Eager plans (kernels.plans.eager_plans): per layout of a call on CUDA (x's shape, strides,
# dtype and device, the weight's, the settings, the alignment class of x's address), the replay
# of the forward's launch (kernels/launch.py's replay_of), or False where there is none (a layout
# the replay does not cover). Checked in a dict lookup; a replay that refuses (a launch being
# recorded) drops its plan and the call goes the long way. A call with gradients replays the
# same forward inside its autograd node.
_EAGER = eager_plans()
# Backward plans, per (settings, rows shape, dtype, device, weight or not, dy's dtype and
# contiguity): the replay of the whole-row backward's launch (gpu.rms_norm_backward_replay), or
# False (chunked rows, partial dw sums, a strided dy).
_BACKWARD = eager_plans()


def _plan(x, weight, eps, offset, casting_mode, in_place, impl, tiles):
    """The checks and tile resolution of a call: the autograd wrapper's settings tuple."""
    check_norm_inputs(x, weight, eps, casting_mode)
    impl_module, resolved = resolve_norm_tiles(impl, x, tiles, _IMPLS)
    return (float(eps), float(offset), casting_mode, in_place, impl_module, resolved)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
    impl: str = "auto",
    **tiles,
) -> torch.Tensor:
    """RMSNorm over the last axis; differentiable in x and weight (see the module docstring)."""
    if torch.compiler.is_compiling():  # one registered op for Dynamo and Inductor (.ops)
        check_norm_inputs(x, weight, eps, casting_mode)
        if x.numel() == 0:
            return x.clone()
        return _registered_ops().rms_norm_forward(
            x, weight, float(eps), float(offset), casting_mode, impl, encode_tiles(tiles)
        )[0]
    grads, eager_key, plan = False, None, None
    try:
        grads = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad))
        if type(x) is torch.Tensor and x.is_cuda:
            # The layout's plan: one lookup, then a launch from the tensors' addresses alone.
            x_address = x.data_ptr()
            w_layout = None if weight is None else (weight.shape, weight.stride(), weight.dtype, weight.get_device())
            eager_key = (x.shape, x.stride(), x.dtype, x.get_device(), x_address & 15, w_layout, eps, offset,
                         casting_mode, impl, tile_items(tiles))  # fmt: skip
            plan = _EAGER.get(eager_key)
    except (AttributeError, TypeError):  # not tensors, an unhashable setting: the checks below say so
        eager_key = None
    if eager_key is not None and not grads:
        if plan:
            replayed = _replayed_forward(x, weight, eager_key, plan, x_address, True)
            if replayed is not None:
                return replayed[0]
            eager_key = None  # retired or paused: planned again on the next call
        elif plan is False:
            eager_key = None
    settings = (type(eps), eps, type(offset), offset, casting_mode, in_place, impl, tile_items(tiles))
    config = cached_plan(
        _PLANS, lambda: _plan(x, weight, eps, offset, casting_mode, in_place, impl, tiles), (x, weight), settings
    )
    if x.numel() == 0:
        return x.clone()
    if grads:
        return _RMSNormFunction.apply(x, weight, config, None if eager_key is None else (eager_key, plan, x_address))
    if eager_key is not None:
        return _eager_forward(x, weight, config, eager_key)
    return _forward(x, weight, config)[0]  # no autograd node: apply alone costs ~17 us of host time


def _eager_forward(x, weight, config, key):
    """The first call of a layout without gradients on CUDA: the forward, and the plan that
    replays its launch on the layout's later calls (False where none can)."""
    y, x2d, rstd = _forward(x, weight, config)
    _plan_forward(x, x2d, weight, y, rstd, config, key)
    return y


def _registered_ops():
    """:mod:`.ops`, imported on first use: registering a triton_op imports torch._inductor
    (about 1.5 s), which a model that only runs eagerly should not pay for."""
    from kernels.rms_norm import ops

    return ops


__all__ = ["check_beside_x", "check_norm_inputs", "resolve_norm_tiles", "rms_norm", "rms_norm_reference"]
