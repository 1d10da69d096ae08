"""The fused add + RMSNorm KernelSpec: the norm families' knobs and tiles (:mod:`kernels.rms_norm.spec`),
its variants, bytes and tolerances."""

from __future__ import annotations

import functools
import importlib.util

from kernels.fused_add_rms_norm import fused_add_rms_norm, gpu, npu
from kernels.fused_add_rms_norm.reference import fused_add_rms_norm_reference
from kernels.peers import compiled, liger_variant, torch_compile_variant
from kernels.rms_norm.spec import (
    GPU_BACKWARD_LOOP_PARAMS,
    NORM_KNOBS,
    norm_backward_tuning,
    norm_compile_s,
    norm_inputs,
    norm_min_bytes,
    norm_tuning,
    our_variants,
)
from kernels.spec import DEFAULT_TOLERANCES, KernelSpec, Variant


def _make_inputs(problem, dtype, device, seed):
    return norm_inputs(problem, dtype, device, seed, names=("x", "residual"))


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
    return norm_min_bytes(problem, mode, dtype, forward_rows=4, backward_rows=4)


def _eager(inputs, problem):
    """The unfused module math: ``s = x + r`` then the Llama RMSNorm, in eager PyTorch."""
    return _reference(inputs, problem)


def _torch_compile_bind(inputs, problem):
    return functools.partial(
        compiled(fused_add_rms_norm_reference),
        inputs["x"], inputs["residual"], inputs.get("weight"), problem["eps"], problem["offset"],
        problem["casting_mode"],
    )  # fmt: skip


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


def _liger_bind(inputs, problem):
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    if inputs.get("weight") is None:
        raise ValueError("Liger's fused add + RMSNorm needs a weight; set weight=True")
    # (X, R, W, eps, offset, casting_mode, in_place): in_place=False keeps dy intact.
    return functools.partial(
        LigerFusedAddRMSNormFunction.apply,
        inputs["x"], inputs["residual"], inputs["weight"], problem["eps"], problem["offset"],
        problem["casting_mode"], False,
    )  # fmt: skip


def _ub_estimate(problem, params, dtype):
    """UB bytes for the npu variant's tiles (None for a configuration that cannot resolve)."""
    try:
        return npu.ub_estimate(problem, params, dtype)
    except ValueError:
        return None


spec = KernelSpec(
    name="fused_add_rms_norm",
    memory_bound=True,
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
    strided=True,  # rows inside a wider buffer (a slice of a fused projection) are taken as they are
    ub_estimate=_ub_estimate,
    tuning=norm_tuning((512, 1024, 2048, 4096, 8192, 16384)),
    backward_tuning=norm_backward_tuning((512, 1024, 2048, 4096, 8192, 16384)),
    compile_s=norm_compile_s,
    variants=our_variants(
        fused_add_rms_norm,
        ("x", "residual"),
        gpu,
        npu,
        GPU_BACKWARD_LOOP_PARAMS,  # the fused backward keeps whole rows: no chunks
        (
            "one row per program: add, store s, normalise, whole row in registers",
            "BLOCK_SIZE_M rows per program, for small hidden sizes",
            "triton-ascend style: grid = cores, grid-stride over row blocks, untiled or chunked",
        ),
    )
    + (
        Variant("torch_eager", "torch", _eager, doc="unfused: s = x + r, then the Llama RMSNorm module math"),
        torch_compile_variant(_torch_compile_bind, "torch.compile of the unfused eager math"),
        Variant(
            "rms_norm_after_add",
            "gpu",  # its norm is our Triton kernel (interpreted on the CPU, and timed as such)
            _rms_norm_after_add,
            doc="unfused: torch add, then our rms_norm kernel (impl auto)",
        ),
        liger_variant(
            _liger_bind,
            "Liger-Kernel's LigerFusedAddRMSNormFunction",
            module="liger_kernel.ops.fused_add_rms_norm",
            available=_liger_available,
        ),
    ),
)
