"""Scalar-operand family: four ways to run ``div`` / ``sub`` / ``pow`` of a tensor and a number.

    z = scalar_op(op, x, value, strategy="cached", impl="auto", cache=None, **tiles)

``op`` is ``"div"`` (x / value), ``"sub"`` (x - value) or ``"pow"`` (x ** value); ``value`` is a
Python number; z has x's shape and dtype. Strategies:

- ``"materialized"``: a full-shape host tensor of the scalar, filled and copied to the device on
  every call (the slow path a framework may take; kept so its cost is visible, and counted).
- ``"cached"``: a persistent 0-d device tensor per (device, dtype, value) from an LRU-bounded
  cache; graph-capture safe (:mod:`.strategies`).
- ``"python"``: torch's own operator with the Python number.
- ``"triton"``: one Triton kernel with the scalar as an argument; ``impl="gpu"`` (:mod:`.gpu`,
  a block per program), ``impl="npu"`` (:mod:`.npu`, grid = cores, grid-stride) or ``"auto"``
  (the NPU kernel on an NPU, the GPU kernel elsewhere; the CPU runs either in the interpreter).
  Tile overrides: ``BLOCK_SIZE``, ``num_warps`` (gpu); ``BLOCK_SIZE``, ``GRID`` (npu). The Triton
  strategy has no autograd: it refuses inputs that require grad while grad is enabled. Under
  torch.compile it is the registered op of :mod:`.ops`.

Measurement helpers for the notebook and the benchmark script are in :mod:`.workload`; the
KernelSpec is :mod:`.spec`.
"""

from __future__ import annotations

import math
import numbers

import torch

from kernels.plans import cached_plan, tile_items
from kernels.runtime import auto_impl, device_info
from kernels.scalar_ops import gpu, npu
from kernels.scalar_ops.reference import OPS, scalar_op_reference
from kernels.scalar_ops.strategies import (
    SCALAR_CACHE,
    ScalarCache,
    cached,
    counting,
    is_capturing,
    materialized,
    python,
)
from kernels.torch_ops import encode_tiles

STRATEGIES = ("materialized", "cached", "python", "triton")
IMPLS = ("gpu", "npu", "auto")
_GPU_TILES = ("BLOCK_SIZE", "num_warps")
_NPU_TILES = ("BLOCK_SIZE", "GRID")
_TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # computed in fp32; no fp64 on the NPU
_TORCH_DTYPES = _TRITON_DTYPES + (torch.float64,)


def _check_value(value) -> float:
    if isinstance(value, torch.Tensor):
        raise ValueError(
            f"value must be a Python number (int or float), got a torch.Tensor of shape {tuple(value.shape)}; "
            "pass value.item() for a one-element tensor, or use the tensor-tensor operator"
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"value must be a Python number (int or float), got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except (OverflowError, TypeError, ValueError):
        raise ValueError(f"value={value!r} is not representable as a float") from None


def _validate(op, x, strategy):
    if op not in OPS:
        raise ValueError(f"op={op!r} is not allowed; use one of {', '.join(OPS)}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is not allowed; use one of {', '.join(STRATEGIES)}")
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")
    allowed = _TRITON_DTYPES if strategy == "triton" else _TORCH_DTYPES
    if x.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise ValueError(f"x has dtype {x.dtype}; strategy={strategy!r} supports {names}")


def scalar_op(op: str, x: torch.Tensor, value, strategy: str = "cached", *, impl="auto", cache=None, **tiles):
    """z = x (op) value by one of four strategies; see the module docstring."""
    if strategy == "triton" and cache is None and type(value) in (float, int) and not torch.compiler.is_compiling():
        # The hot path: checks, tiles and kernel constants remembered per call signature. A zero's
        # sign is in the key (0.0 == -0.0, but x / -0.0 is not x / 0.0).
        settings = (op, type(value), value, value == 0 and math.copysign(1.0, value), impl, tile_items(tiles))
        launch_op, operands = cached_plan(_PLANS, lambda: _triton_plan(op, x, value, impl, tiles), (x,), settings)
        if x.requires_grad and torch.is_grad_enabled():
            raise ValueError(_NO_AUTOGRAD)
        return launch_op(x, *operands)
    _validate(op, x, strategy)
    value = _check_value(value)
    if strategy != "triton":
        if tiles or impl != "auto":
            names = ", ".join(sorted(tiles)) or f"impl={impl!r}"
            raise ValueError(f"{names}: tile parameters and impl apply only to strategy='triton', not {strategy!r}")
        if strategy == "cached":
            return cached(op, x, value, cache)
        if cache is not None:
            raise ValueError(f"cache= applies only to strategy='cached', not {strategy!r}")
        return materialized(op, x, value) if strategy == "materialized" else python(op, x, value)
    if cache is not None:
        raise ValueError("cache= applies only to strategy='cached', not 'triton'")
    return _triton(op, x, value, impl, tiles)


_NO_AUTOGRAD = (
    "strategy='triton' has no autograd; x requires grad. Use strategy 'cached' or 'python', "
    "or call it under torch.no_grad()"
)
_PLANS: dict = {}


def _triton_plan(op, x, value, impl, tiles):
    """(launch function, its arguments after x) for the Triton strategy, all checks done."""
    _validate(op, x, "triton")
    value = _check_value(value)
    impl, resolved = _resolve_triton(impl, x, tiles)
    if impl == "gpu":
        return gpu.launch_scalar_op, (gpu.kernel_operands(op, value), resolved)
    return npu.launch_scalar_op_npu, (gpu.kernel_operands(op, value), resolved, device_info(x.device).num_cores)


def _triton(op, x, value, impl, tiles):
    if x.requires_grad and torch.is_grad_enabled():
        raise ValueError(_NO_AUTOGRAD)
    if torch.compiler.is_compiling():  # one registered op for Dynamo and Inductor (.ops)
        return _registered_ops().scalar_op(x, op, value, impl, encode_tiles(tiles))
    return run_triton(op, x, value, impl, tiles)


def run_triton(op, x, value, impl, tiles):
    """The Triton strategy on checked op, x and value: tiles resolved, one kernel launched."""
    impl, resolved = _resolve_triton(impl, x, tiles)
    if impl == "gpu":
        return gpu.scalar_op_gpu(op, x, value, resolved)
    return npu.scalar_op_npu(op, x, value, resolved, device_info(x.device).num_cores)


def _resolve_triton(impl, x, tiles):
    """(the impl "auto" picks, its checked tiles)."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not allowed; use one of {', '.join(IMPLS)}")
    if impl == "auto":
        impl = auto_impl(x)
    names = _GPU_TILES if impl == "gpu" else _NPU_TILES
    unknown = sorted(set(tiles) - set(names))
    if unknown:
        raise ValueError(f"unknown tile parameter {', '.join(unknown)} for impl={impl!r}; allowed: {', '.join(names)}")
    if impl == "gpu":
        return impl, gpu.tiles_for(x, **tiles)
    dev = device_info(x.device)  # a dict lookup after the first call
    return impl, npu.resolve_tiles(**tiles, elem_bytes=x.element_size(), on_npu=dev.kind == "npu")


# --- inputs (the spec and the workloads use them) ------------------------------------------
def random_input(shape, op: str, value: float, seed: int = 0) -> torch.Tensor:
    """Random fp32 x for an operation (never zeros).

    div / sub: x ~ N(0, 1). pow: |x| uniform in [0.5, 1.5), so x ** value stays finite in fp16
    for exponents from -15 to 27 (beyond that the result overflows fp16 and the harness reports
    a NaN/Inf mismatch); random signs, except for non-integer exponents, which have no real
    result for negative bases: there x > 0.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    if op != "pow":
        return torch.randn(shape, generator=gen, dtype=torch.float32)
    magnitude = 0.5 + torch.rand(shape, generator=gen, dtype=torch.float32)
    if value != math.floor(value):
        return magnitude
    sign = torch.randint(0, 2, shape, generator=gen).to(torch.float32) * 2 - 1
    return magnitude * sign


def _registered_ops():
    """:mod:`.ops`, imported on first use: registering a triton_op imports torch._inductor
    (about 1.5 s), which a model that only runs eagerly should not pay for."""
    from kernels.scalar_ops import ops

    return ops


__all__ = [
    "IMPLS",
    "OPS",
    "SCALAR_CACHE",
    "STRATEGIES",
    "ScalarCache",
    "counting",
    "is_capturing",
    "random_input",
    "scalar_op",
    "scalar_op_reference",
]
