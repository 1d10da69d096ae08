"""RMSNorm family: the functional API, its autograd wiring, and the KernelSpec.

    y = rms_norm(x, weight, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False,
                 impl="auto", **tiles)

``impl="gpu"`` runs :mod:`.gpu` (whole-row tiles), ``impl="npu"`` runs :mod:`.npu` (grid = cores,
untiled or chunked), ``impl="auto"`` picks the NPU kernels on an NPU and the GPU kernels
elsewhere (the CPU runs either in the Triton interpreter). Tile overrides are keyword
arguments: ``BLOCK_SIZE``, ``BLOCK_SIZE_M``, ``num_warps``, ``GRID``, ``BWD_CHUNK``, ``DW_REDUCE``,
``BWD_WIDE`` for the GPU kernels;
``strategy``, ``CHUNK_THRESHOLD``, ``BLOCK_SIZE_M``, ``BLOCK_SIZE_N``, ``GRID``, ``USE_WHERE``
for the NPU kernels. ``in_place=True`` lets the backward write dx over the incoming gradient.
"""

from __future__ import annotations

import torch

from kernels.peers import compiled, missing
from kernels.rms_norm import gpu, npu
from kernels.rms_norm.reference import CASTING_MODES, rms_norm_reference
from kernels.spec import DEFAULT_TOLERANCES, KernelSpec, Knob, Param, Variant, elem_bytes

IMPLS = ("gpu", "npu", "auto")
_GPU_TILES = ("BLOCK_SIZE", "BLOCK_SIZE_M", "num_warps", "GRID", "BWD_CHUNK", "DW_REDUCE", "BWD_WIDE")
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
        if weight.device != x.device:
            raise ValueError(f"weight is on {weight.device} but x is on {x.device}; put both on one device")
        if weight.dtype != x.dtype:
            raise ValueError(f"weight has dtype {weight.dtype} but x has {x.dtype}; cast weight to x.dtype")
    if casting_mode not in CASTING_MODES:
        raise ValueError(f"casting_mode={casting_mode!r} is not allowed; use one of {', '.join(CASTING_MODES)}")
    if not (eps >= 0):
        raise ValueError(f"eps={eps!r} must be >= 0")


def resolve_norm_tiles(impl: str, x: torch.Tensor, tiles: dict, impls: dict):
    """(impl module, its resolved tiles) for ``impl`` in ``impls`` ({"gpu": (module, tile names),
    "npu": ...}); ``auto`` is the NPU kernels on an NPU and the GPU kernels elsewhere."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not allowed; use one of {', '.join(IMPLS)}")
    if impl == "auto":
        impl = "npu" if x.device.type == "npu" else "gpu"
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
    @staticmethod
    def forward(ctx, x, weight, config):
        y, x2d, rstd = _forward(x, weight, config)
        ctx.save_for_backward(x2d, weight, rstd)
        ctx.config = config
        ctx.shape = x.shape
        return y

    @staticmethod
    def backward(ctx, dy):
        x2d, weight, rstd = ctx.saved_tensors
        _, offset, casting_mode, in_place, impl_module, resolved = ctx.config
        shape = ctx.shape
        flat = len(shape) == 2
        dx, dw = impl_module.rms_norm_backward(
            dy if flat else dy.reshape(-1, shape[-1]), x2d, weight, rstd, offset, casting_mode, resolved, in_place
        )
        return (dx if flat else dx.view(shape)), dw, None


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
    check_norm_inputs(x, weight, eps, casting_mode)
    impl_module, resolved = resolve_norm_tiles(impl, x, tiles, _IMPLS)
    if x.numel() == 0:
        return x.clone()
    eps, offset = float(eps), float(offset)
    config = (eps, offset, casting_mode, in_place, impl_module, resolved)
    if torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)):
        return _RMSNormFunction.apply(x, weight, config)
    return _forward(x, weight, config)[0]  # no autograd node: apply alone costs ~17 us of host time


# --- the spec: what the harness and the Explorer see ---------------------------------------
POW2 = tuple(2**k for k in range(4, 17))  # 16 … 65536


def _make_inputs(problem, dtype, device, seed):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rows, hidden = problem["rows"], problem["hidden"]
    x = torch.randn(rows, hidden, generator=gen, dtype=torch.float32).to(device, dtype).requires_grad_()
    inputs = {"x": x}
    if problem["weight"]:
        w = 1.0 + 0.1 * torch.randn(hidden, generator=gen, dtype=torch.float32)
        if problem["casting_mode"] == "gemma":
            w = w - 1.0  # gemma stores w around 0 and uses offset 1
        inputs["weight"] = w.to(device, dtype).requires_grad_()
    return inputs


def _reference(inputs, problem):
    return rms_norm_reference(
        inputs["x"], inputs.get("weight"), problem["eps"], problem["offset"], problem["casting_mode"]
    )


def _min_bytes(problem, mode, dtype):
    """Forward reads x and w and writes y; backward reads dy, x, w and writes dx, dw."""
    rh, h, e = problem["rows"] * problem["hidden"], problem["hidden"], elem_bytes(dtype)
    w = 1 if problem["weight"] else 0
    forward = (2 * rh + w * h) * e
    backward = (3 * rh + 2 * w * h) * e
    return {"forward": forward, "backward": backward, "full": forward + backward}[mode]


def chosen_tiles(fixed, params) -> dict:
    """The tile keyword arguments a variant passes: its fixed tiles plus every non-auto Param."""
    return {**fixed, **{k: v for k, v in params.items() if v != "auto"}}


def tile_check(impl, fixed, gpu_module, npu_module):
    """A Variant.check for a norm family: resolve its tiles for the problem without launching."""

    def check(problem, params, dtype, device):
        tiles = chosen_tiles(fixed, params)
        if impl == "gpu":
            gpu_module.resolve_tiles(problem["rows"], problem["hidden"], device.num_cores, **tiles)
        else:
            npu_module.resolve_tiles(
                problem["rows"],
                problem["hidden"],
                device.num_cores,
                elem_bytes(dtype),
                on_npu=device.kind == "npu",
                **tiles,
            )

    return check


def _ours(impl, fixed=None):
    fixed = dict(fixed or {})

    def run(inputs, problem, **params):
        return rms_norm(
            inputs["x"],
            inputs.get("weight"),
            eps=problem["eps"],
            offset=problem["offset"],
            casting_mode=problem["casting_mode"],
            impl=impl,
            **chosen_tiles(fixed, params),
        )

    return run, tile_check(impl, fixed, gpu, npu)


def _eager(inputs, problem):
    return _reference(inputs, problem)


def _functional(inputs, problem):
    w = inputs.get("weight")
    if w is not None and problem["offset"]:
        w = w + problem["offset"]
    return torch.nn.functional.rms_norm(inputs["x"], (problem["hidden"],), w, problem["eps"])


def _compiled():
    return compiled(rms_norm_reference)


def _torch_compile(inputs, problem):
    return _compiled()(inputs["x"], inputs.get("weight"), problem["eps"], problem["offset"], problem["casting_mode"])


def _liger_available():
    return missing("liger_kernel", "liger-kernel")


def _liger(inputs, problem):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    if inputs.get("weight") is None:
        raise ValueError("Liger's RMSNorm needs a weight; set weight=True")
    return LigerRMSNormFunction.apply(
        inputs["x"], inputs["weight"], problem["eps"], problem["offset"], problem["casting_mode"], False
    )


_gpu_row_run, _gpu_row_check = _ours("gpu", {"BLOCK_SIZE_M": 1})
_gpu_multi_run, _gpu_multi_check = _ours("gpu")
_npu_run, _npu_check = _ours("npu")
_GRID_VALUES = ("auto",) + tuple(2**k for k in range(0, 12))

# Knobs and tile parameters shared by the norm families (fused_add_rms_norm uses them too).
NORM_KNOBS = (
    Knob("rows", 4096, low=1, high=1 << 22, doc="rows (batch x sequence)", sweep=(1, 256, 4096, 16384)),
    Knob(
        "hidden",
        4096,
        low=1,
        high=1 << 17,
        doc="hidden size (the normalised axis)",
        sweep=(512, 1024, 2048, 4096, 8192, 16384, 32768),
    ),
    Knob("casting_mode", "llama", values=CASTING_MODES, doc="where the arithmetic happens"),
    Knob("offset", 0.0, doc="y = v * rstd * (offset + w) for the normalised input v; gemma uses 1.0"),
    Knob("weight", True, values=(True, False), doc="with a weight (False: y = v * rstd)"),
    Knob("eps", 1e-6),
)
_BLOCK_SIZE_M_VALUES = ("auto", 1, 2, 4, 8, 16, 32, 64)
GPU_ROW_PARAMS = (
    Param("BLOCK_SIZE", ("auto",) + POW2, "auto", "row tile; >= hidden (next power of two)"),
    Param("num_warps", ("auto",) + gpu.NUM_WARPS, "auto", "warps per program"),
    Param("GRID", _GRID_VALUES, "auto", "backward programs (auto: one per SM)"),
)
GPU_MULTIROW_PARAMS = (
    GPU_ROW_PARAMS[:1] + (Param("BLOCK_SIZE_M", _BLOCK_SIZE_M_VALUES, "auto", "rows per program"),) + GPU_ROW_PARAMS[1:]
)
# The backward's own switches (RMSNorm only; the fused kernel keeps whole rows).
GPU_BACKWARD_PARAMS = (
    Param("BWD_CHUNK", ("auto",) + POW2, "auto", "backward column chunk (>= hidden: whole rows in registers)"),
    Param("DW_REDUCE", gpu.DW_REDUCTIONS, "atomic", "dw: fp32 atomics, one launch; partials: deterministic"),
    Param("BWD_WIDE", gpu.WIDE_BACKWARDS, "columns", "chunked rows: two kernels by columns, or one re-reading L2"),
)
NPU_PARAMS = (
    Param("strategy", npu.STRATEGIES, "auto", "untiled rows, or two-pass column chunks"),
    Param("CHUNK_THRESHOLD", (512, 1024, 2048, 4096, 8192, 16384), 2048, "auto: chunk when hidden is above this"),
    Param("BLOCK_SIZE_M", _BLOCK_SIZE_M_VALUES, "auto", "rows per tile"),
    Param("BLOCK_SIZE_N", ("auto",) + POW2, "auto", "columns per tile (the chunk width when chunked)"),
    Param("GRID", _GRID_VALUES, "auto", "programs (auto: vector cores / SMs)"),
    Param("USE_WHERE", (False, True), False, "zero the padding with tl.where (slow on NPU)"),
)


spec = KernelSpec(
    name="rms_norm",
    title="RMSNorm",
    doc="y = x * rstd * (offset + w), rstd = 1/sqrt(mean(x^2) + eps), over the last axis.",
    knobs=NORM_KNOBS,
    quick={"rows": 37, "hidden": 300},
    make_inputs=_make_inputs,
    reference=_reference,
    output_names=("y",),
    axis="hidden",
    min_bytes=_min_bytes,
    tolerances=dict(DEFAULT_TOLERANCES),
    ub_estimate=npu.ub_estimate,  # NPU tiles -> Unified Buffer bytes (calibrated; > npu.UB_BYTES overflows)
    variants=(
        Variant(
            "gpu_row",
            "gpu",
            _gpu_row_run,
            params=GPU_ROW_PARAMS + GPU_BACKWARD_PARAMS,
            devices=("cuda", "cpu"),
            check=_gpu_row_check,
            doc="one row per program, whole row in registers",
        ),
        Variant(
            "gpu_multirow",
            "gpu",
            _gpu_multi_run,
            params=GPU_MULTIROW_PARAMS + GPU_BACKWARD_PARAMS,
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
            doc="triton-ascend style: grid = cores, grid-stride, untiled or chunked",
        ),
        Variant("torch_eager", "torch", _eager, doc="Llama module math in eager PyTorch"),
        Variant(
            "torch_functional",
            "torch",
            _functional,
            available=lambda: None if hasattr(torch.nn.functional, "rms_norm") else "needs torch >= 2.4",
            doc="torch.nn.functional.rms_norm",
        ),
        Variant(
            "torch_compile", "torch", _torch_compile, devices=("cuda", "npu"), doc="torch.compile of the eager math"
        ),
        Variant("liger", "peer", _liger, devices=("cuda",), available=_liger_available, doc="Liger-Kernel RMSNorm"),
    ),
)

__all__ = ["rms_norm", "rms_norm_reference", "spec"]
