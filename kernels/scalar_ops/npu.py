"""Tensor-with-scalar operations for Ascend NPUs, written to triton-ascend's rules.

The same kernel runs as ordinary Triton on CUDA and in the CPU interpreter, which is where its
results are tested; ``workbench npu-check`` compiles :func:`npu_compile_cases` for Ascend910B.

The arithmetic is the GPU kernel's (see :mod:`kernels.scalar_ops.gpu` for the ``pow`` exponent
classes and what is supported); only the shape of the work differs:

- Grid = number of vector cores. Program ``p`` visits blocks ``p, p + GRID, p + 2 GRID, …`` of
  ``BLOCK_SIZE`` elements: a grid-stride loop, so a few dozen programs cover any tensor.
- Offsets are int32 (``tl.arange`` in int64 is not supported). The host therefore hands the
  kernel at most :data:`MAX_CHUNK` elements at a time and launches again for the rest.
- Padding lanes are filled by ``tl.load(..., other=1.0)``; there is no ``tl.where`` and no
  comparison in the arithmetic: odd powers take their sign from a factor of x itself.
- No libdevice: ``rsqrt`` is ``1 / tl.sqrt``; ``pow`` is ``tl.exp(v * tl.log|x|)``. No fp64: the
  scalar arrives as fp32 and every element is computed in fp32, rounded once at the store.
- ``BLOCK_SIZE`` elements of x, their fp32 copy, the result and a few fp32 temporaries for
  ``pow`` must fit the 192 KB Unified Buffer with double buffering: :func:`ub_bytes` estimates it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.launch import launch
from kernels.scalar_ops.gpu import POW_MODES, apply_op, kernel_constants, kernel_operands
from kernels.spec import NpuCompileCase
from kernels.tiling import cdiv

UB_BYTES = 192 * 1024  # Unified Buffer per core on Ascend 910B
DEFAULT_BLOCK_SIZE = 2048
BLOCK_SIZES = tuple(2**k for k in range(6, 15))  # 64 … 16384
MAX_CHUNK = 1 << 30  # elements per launch, so that int32 offsets never overflow


@triton.jit
def _scalar_op_npu_kernel(
    Z_ptr,
    X_ptr,
    value,
    n_elements,
    OP: tl.constexpr,  # 0 div, 1 sub, 2 pow
    POW_MODE: tl.constexpr,  # the exponent's class (gpu.POW_MODES)
    BLOCK_SIZE: tl.constexpr,
):
    """z = x (op) value, grid-stride over blocks of BLOCK_SIZE elements, fp32 arithmetic."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    n_blocks = tl.cdiv(n_elements, BLOCK_SIZE)
    for block in range(pid, n_blocks, n_programs):
        offsets = block * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        x = tl.load(X_ptr + offsets, mask=mask, other=1.0).to(tl.float32)
        z = apply_op(x, value, OP, POW_MODE, BLOCK_SIZE)
        tl.store(Z_ptr + offsets, z.to(Z_ptr.dtype.element_ty), mask=mask)


# --- host side ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NpuTiles:
    BLOCK_SIZE: int
    GRID: int | str  # programs, or "auto" (vector cores / SMs, capped by the number of blocks)


def ub_bytes(block_size: int, elem_bytes: int, op: str = "pow") -> int:
    """Unified Buffer estimate for one block, doubled for multi-buffering.

    Live buffers: x in its dtype, its fp32 copy and the fp32 result, plus the rounded result for
    the store; ``pow`` adds |x|, its log and the exponential as fp32 temporaries.
    """
    temporaries = 3 if op == "pow" else 0
    per_element = 2 * elem_bytes + (2 + temporaries) * 4
    return 2 * block_size * per_element


def resolve_tiles(BLOCK_SIZE="auto", GRID="auto", elem_bytes: int = 2, on_npu: bool = False) -> NpuTiles:
    """Check tile choices; ValueError names the parameter and what is allowed."""
    if BLOCK_SIZE == "auto":
        BLOCK_SIZE = DEFAULT_BLOCK_SIZE
    elif BLOCK_SIZE not in BLOCK_SIZES:
        raise ValueError(
            f"BLOCK_SIZE={BLOCK_SIZE!r} is not allowed; use a power of two from {BLOCK_SIZES[0]} to "
            f"{BLOCK_SIZES[-1]} (default {DEFAULT_BLOCK_SIZE})"
        )
    if on_npu and ub_bytes(BLOCK_SIZE, elem_bytes) > UB_BYTES:
        raise ValueError(
            f"BLOCK_SIZE={BLOCK_SIZE} needs about {ub_bytes(BLOCK_SIZE, elem_bytes) // 1024} KB of the "
            f"{UB_BYTES // 1024} KB Unified Buffer (ub overflow predicted); use BLOCK_SIZE <= {DEFAULT_BLOCK_SIZE}"
        )
    if GRID != "auto" and not (isinstance(GRID, int) and not isinstance(GRID, bool) and GRID >= 1):
        raise ValueError(f"GRID={GRID!r} must be a positive integer or 'auto'")
    return NpuTiles(BLOCK_SIZE, GRID)


def scalar_op_npu(op: str, x: torch.Tensor, value: float, tiles: NpuTiles, num_cores: int) -> torch.Tensor:
    """z = x (op) value with a grid of ``num_cores`` (or ``tiles.GRID``) grid-stride programs."""
    return launch_scalar_op_npu(x, kernel_operands(op, value), tiles, num_cores)


def launch_scalar_op_npu(x: torch.Tensor, operands: tuple, tiles: NpuTiles, num_cores: int) -> torch.Tensor:
    """:func:`scalar_op_npu` given its :func:`kernel_operands` (a call plan remembers them)."""
    code, mode, scalar = operands
    x_flat = x.contiguous().view(-1)
    z = torch.empty_like(x_flat)
    grid_cap = num_cores if tiles.GRID == "auto" else tiles.GRID
    for start in range(0, x_flat.numel(), MAX_CHUNK):
        x_part, z_part = x_flat[start : start + MAX_CHUNK], z[start : start + MAX_CHUNK]
        n = x_part.numel()
        grid = min(grid_cap, cdiv(n, tiles.BLOCK_SIZE))
        launch(
            _scalar_op_npu_kernel,
            x_part,
            (grid,),
            z_part,
            x_part,
            scalar,
            n,
            OP=code,
            POW_MODE=mode,
            BLOCK_SIZE=tiles.BLOCK_SIZE,
        )
    return z.view(x.shape)


# --- for `workbench npu-check` -------------------------------------------------------------
_TRITON_TYPES = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}
_EXAMPLE_EXPONENT = {
    "ONE": 0.0,
    "IDENTITY": 1.0,
    "SQUARE": 2.0,
    "RECIPROCAL": -1.0,
    "SQRT": 0.5,
    "RSQRT": -0.5,
    "EVEN_INT": 4.0,
    "ODD_INT": 3.0,
    "NEG_ODD_INT": -3.0,
    "REAL": 1.5,
}


def npu_compile_cases() -> list[NpuCompileCase]:
    """Every compiled form of the NPU kernel at the default tile (default=True), for each dtype:
    div, sub and each pow exponent class. Plus, per dtype, BLOCK_SIZE=4096 for the busiest form
    (odd-integer pow), which sits at or beyond the UB estimate: it calibrates :func:`ub_bytes`."""
    cases = []
    for dtype, ttype in _TRITON_TYPES.items():
        elem = 4 if dtype == "fp32" else 2
        signature = {"Z_ptr": f"*{ttype}", "X_ptr": f"*{ttype}", "value": "fp32", "n_elements": "i32"}
        forms = [("div", 0), ("div0", 0), ("sub", 0)] + [("pow", POW_MODES[name]) for name in _EXAMPLE_EXPONENT]
        for op, mode in forms:
            label = op if op != "pow" else f"pow[{_mode_name(mode)}]"
            # "div0": division by a signed zero, launched as a multiply (kernel_operands)
            code = kernel_operands("div", 0.0)[0] if op == "div0" else kernel_constants(op, 1.0)[0]
            for block, default in ((DEFAULT_BLOCK_SIZE, True), (4096, False)):
                if not default and (op != "pow" or mode != POW_MODES["ODD_INT"]):
                    continue  # one non-default case per dtype: the largest block, the busiest form
                cases.append(
                    NpuCompileCase(
                        family="scalar_ops",
                        name=f"{label} {dtype} BLOCK_SIZE={block}",
                        kernel=_scalar_op_npu_kernel,
                        signature=dict(signature),
                        constants={"OP": code, "POW_MODE": mode, "BLOCK_SIZE": block},
                        default=default,
                        ub_bytes=ub_bytes(block, elem, "div" if op == "div0" else op),
                    )
                )
    return cases


def _mode_name(mode: int) -> str:
    return next(name for name, code in POW_MODES.items() if code == mode)
