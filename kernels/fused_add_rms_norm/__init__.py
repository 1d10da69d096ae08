"""Fused add + RMSNorm family: the functional API, its autograd wiring, and the KernelSpec.

    y, s = fused_add_rms_norm(x, residual, weight, eps=1e-6, offset=0.0, casting_mode="llama",
                              impl="auto", **tiles)

``s = x + residual`` is the new residual stream and ``y = RMSNorm(s)``; both are returned and
both are differentiable (a gradient arriving through ``s`` from the rest of the residual stream
is added inside the backward kernel). Gradients flow to x, residual and weight; ``weight=None``
means ``y = s * rstd``.

``impl="gpu"`` runs :mod:`.gpu` (whole-row tiles), ``impl="npu"`` runs :mod:`.npu` (grid = cores,
untiled or chunked), ``impl="auto"`` picks the NPU kernels on an NPU and the GPU kernels
elsewhere (the CPU runs either in the Triton interpreter). Tile overrides are keyword
arguments: ``BLOCK_SIZE``, ``BLOCK_SIZE_M``, ``num_warps``, ``GRID`` for the GPU kernels;
``strategy``, ``CHUNK_THRESHOLD``, ``BLOCK_SIZE_M``, ``BLOCK_SIZE_N``, ``GRID``, ``USE_WHERE``
for the NPU kernels.
"""

from __future__ import annotations

import importlib.util

import torch

from kernels.fused_add_rms_norm import gpu, npu
from kernels.fused_add_rms_norm.reference import fused_add_rms_norm_reference
from kernels.peers import compiled
from kernels.rms_norm import (
    GPU_BACKWARD_PARAMS,
    GPU_MULTIROW_PARAMS,
    GPU_ROW_PARAMS,
    NORM_KNOBS,
    NPU_PARAMS,
    check_norm_inputs,
    chosen_tiles,
    resolve_norm_tiles,
    tile_check,
)
from kernels.spec import DEFAULT_TOLERANCES, KernelSpec, Variant, elem_bytes

_GPU_TILES = ("BLOCK_SIZE", "BLOCK_SIZE_M", "num_warps", "GRID", "DW_REDUCE")
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
    if residual.device != x.device:
        raise ValueError(f"residual is on {residual.device} but x is on {x.device}; put both on one device")
    if residual.dtype != x.dtype:
        raise ValueError(f"residual has dtype {residual.dtype} but x has {x.dtype}; cast residual to x.dtype")


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
    _validate(x, residual, weight, eps, casting_mode)
    impl_module, resolved = resolve_norm_tiles(impl, x, tiles, _IMPLS)
    if x.numel() == 0:
        s = x + residual
        return s.clone(), s
    eps, offset = float(eps), float(offset)
    config = (eps, offset, casting_mode, impl_module, resolved)
    if torch.is_grad_enabled() and (
        x.requires_grad or residual.requires_grad or (weight is not None and weight.requires_grad)
    ):
        return _FusedAddRMSNormFunction.apply(x, residual, weight, config)
    return _forward(x, residual, weight, config)[0]  # no autograd node: apply alone costs ~17 us of host time


# --- the spec: what the harness and the Explorer see ---------------------------------------


def _make_inputs(problem, dtype, device, seed):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rows, hidden = problem["rows"], problem["hidden"]
    x = torch.randn(rows, hidden, generator=gen, dtype=torch.float32)
    r = torch.randn(rows, hidden, generator=gen, dtype=torch.float32)
    inputs = {"x": x.to(device, dtype).requires_grad_(), "residual": r.to(device, dtype).requires_grad_()}
    if problem["weight"]:
        w = 1.0 + 0.1 * torch.randn(hidden, generator=gen, dtype=torch.float32)
        if problem["casting_mode"] == "gemma":
            w = w - 1.0  # gemma stores w around 0 and uses offset 1
        inputs["weight"] = w.to(device, dtype).requires_grad_()
    return inputs


def _reference(inputs, problem):
    return fused_add_rms_norm_reference(
        inputs["x"],
        inputs["residual"],
        inputs.get("weight"),
        problem["eps"],
        problem["offset"],
        problem["casting_mode"],
    )


def _min_bytes(problem, mode, dtype):
    """The fewest bytes each mode must move (N = rows x hidden elements, H = hidden).

    - forward reads x, r and w and writes y and s: ``4 N + H`` elements. The per-row fp32 rstd
      (4 bytes a row) is working state, not counted — as in RMSNorm.
    - backward reads dy, the incoming ds (the harness always sends a gradient through s), the
      saved s and w, and writes dx and dw: ``4 N + 2 H`` elements. dr is the same tensor as dx
      (the add's gradient is the identity), so it costs no write; the unfused chain moves more
      (the norm writes its ds, then the add accumulates it with the incoming one: ``6 N``).
    - full is their sum, ``8 N + 3 H``.
    """
    n, h, e = problem["rows"] * problem["hidden"], problem["hidden"], elem_bytes(dtype)
    w = 1 if problem["weight"] else 0
    forward = (4 * n + w * h) * e
    backward = (4 * n + 2 * w * h) * e
    return {"forward": forward, "backward": backward, "full": forward + backward}[mode]


def _ours(impl, fixed=None):
    fixed = dict(fixed or {})

    def run(inputs, problem, **params):
        return fused_add_rms_norm(
            inputs["x"],
            inputs["residual"],
            inputs.get("weight"),
            eps=problem["eps"],
            offset=problem["offset"],
            casting_mode=problem["casting_mode"],
            impl=impl,
            **chosen_tiles(fixed, params),
        )

    return run, tile_check(impl, fixed, gpu, npu)


def _eager(inputs, problem):
    """The unfused module math: ``s = x + r`` then the Llama RMSNorm, in eager PyTorch."""
    return _reference(inputs, problem)


def _compiled():
    return compiled(fused_add_rms_norm_reference)


def _torch_compile(inputs, problem):
    return _compiled()(
        inputs["x"],
        inputs["residual"],
        inputs.get("weight"),
        problem["eps"],
        problem["offset"],
        problem["casting_mode"],
    )


def _rms_norm_after_add(inputs, problem):
    """Unfused with our own norm: torch's add, then :func:`kernels.rms_norm.rms_norm`."""
    from kernels.rms_norm import rms_norm

    s = inputs["x"] + inputs["residual"]
    y = rms_norm(
        s,
        inputs.get("weight"),
        eps=problem["eps"],
        offset=problem["offset"],
        casting_mode=problem["casting_mode"],
    )
    return y, s


def _liger_available():
    try:
        found = importlib.util.find_spec("liger_kernel") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return "Liger-Kernel is not installed (pip install liger-kernel)"
    try:
        if importlib.util.find_spec("liger_kernel.ops.fused_add_rms_norm") is None:
            return "this Liger-Kernel has no liger_kernel.ops.fused_add_rms_norm (needs liger-kernel >= 0.6)"
    except Exception as exc:  # a broken install: say why instead of failing the whole sweep
        return f"Liger-Kernel cannot be imported: {exc}"
    return None


def _liger(inputs, problem):
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    if inputs.get("weight") is None:
        raise ValueError("Liger's fused add + RMSNorm needs a weight; set weight=True")
    # (X, R, W, eps, offset, casting_mode, in_place): in_place=False keeps dy intact.
    return LigerFusedAddRMSNormFunction.apply(
        inputs["x"],
        inputs["residual"],
        inputs["weight"],
        problem["eps"],
        problem["offset"],
        problem["casting_mode"],
        False,
    )


_gpu_row_run, _gpu_row_check = _ours("gpu", {"BLOCK_SIZE_M": 1})
_gpu_multi_run, _gpu_multi_check = _ours("gpu")
_npu_run, _npu_check = _ours("npu")


def _ub_estimate(problem, params, dtype):
    """UB bytes for the npu variant's tiles (None for a configuration that cannot resolve)."""
    try:
        return npu.ub_estimate(problem, params, dtype)
    except ValueError:
        return None


spec = KernelSpec(
    name="fused_add_rms_norm",
    title="Fused add + RMSNorm",
    doc="s = x + r; y = s * rstd * (offset + w), rstd = 1/sqrt(mean(s^2) + eps): returns (y, s).",
    knobs=NORM_KNOBS,
    quick={"rows": 19, "hidden": 300},
    make_inputs=_make_inputs,
    reference=_reference,
    output_names=("y", "s"),
    axis="hidden",
    min_bytes=_min_bytes,
    tolerances=dict(DEFAULT_TOLERANCES),
    ub_estimate=_ub_estimate,
    variants=(
        Variant(
            "gpu_row",
            "gpu",
            _gpu_row_run,
            params=GPU_ROW_PARAMS + GPU_BACKWARD_PARAMS[1:2],
            devices=("cuda", "cpu"),
            check=_gpu_row_check,
            doc="one row per program: add, store s, normalise, whole row in registers",
        ),
        Variant(
            "gpu_multirow",
            "gpu",
            _gpu_multi_run,
            params=GPU_MULTIROW_PARAMS + GPU_BACKWARD_PARAMS[1:2],
            devices=("cuda", "cpu"),
            check=_gpu_multi_check,
            doc="BLOCK_SIZE_M rows per program, for small hidden sizes",
        ),
        Variant(
            "npu",
            "npu",
            _npu_run,
            params=NPU_PARAMS,
            devices=("npu", "cuda", "cpu"),
            check=_npu_check,
            doc="triton-ascend style: grid = cores, grid-stride over row blocks, untiled or chunked",
        ),
        Variant("torch_eager", "torch", _eager, doc="unfused: s = x + r, then the Llama RMSNorm module math"),
        Variant(
            "torch_compile",
            "torch",
            _torch_compile,
            devices=("cuda", "npu"),
            doc="torch.compile of the unfused eager math",
        ),
        Variant(
            "rms_norm_after_add",
            "gpu",  # its norm is our Triton kernel (interpreted on the CPU, and timed as such)
            _rms_norm_after_add,
            doc="unfused: torch add, then our rms_norm kernel (impl auto)",
        ),
        Variant(
            "liger",
            "peer",
            _liger,
            devices=("cuda",),
            available=_liger_available,
            doc="Liger-Kernel's LigerFusedAddRMSNormFunction",
        ),
    ),
)

__all__ = ["fused_add_rms_norm", "fused_add_rms_norm_reference", "spec"]
