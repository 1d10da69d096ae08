"""Tensor-with-scalar operations on GPUs with Triton: the scalar is a kernel argument.

The point of this strategy: the scalar never becomes a tensor. It travels to the GPU inside the
kernel's launch parameters (as an fp32 argument), so there is no host allocation, no fill and no
host-to-device copy, and no cache to look after. Launching a Triton kernel from Python costs
more host time than a torch operator, which the workbench shows on small tensors.

One program handles ``BLOCK_SIZE`` consecutive elements of the flattened tensor (offsets in
int64, so tensors beyond 2**31 elements work). Every element is loaded, converted to fp32,
combined with the scalar and rounded once to x's dtype when stored::

    div:  z = x / value
    sub:  z = x - value
    pow:  z = x ** value      (see POW_MODES below)

``pow`` with a scalar exponent is ``exp(v * log|x|)`` in fp32 at heart, which alone would lose
the sign of negative bases. The host classifies the exponent (a constexpr switch, so each class
compiles once while the value itself stays a runtime argument) and each class keeps the sign
without comparing anything, which also suits the NPU (no ``tl.where``, no integer compares):

===========  ====================  ==========================================================
POW_MODE     exponent v            z
===========  ====================  ==========================================================
ONE          0                     1 everywhere (also for x = nan or inf, as torch)
IDENTITY     1                     x (exact)
SQUARE       2                     x * x
RECIPROCAL   -1                    1 / x
SQRT         0.5                   sqrt(x); nan for x < 0
RSQRT        -0.5                  1 / sqrt(x); nan for x < 0, inf at 0
EVEN_INT     other even integers   exp(v log|x|): x**v does not depend on the sign of x
ODD_INT      odd integers >= 3     x * exp((v - 1) log|x|): the factor x carries the sign
NEG_ODD_INT  odd integers <= -3    1 / (x * exp((-v - 1) log|x|)): likewise, and 0 gives +-inf
REAL         anything else         exp(v log x): nan for x < 0 (no real result), as torch
===========  ====================  ==========================================================

Zeros, infinities and nan give what torch's Python-number ``pow`` gives, signs of zeros included,
with one exception: for a non-integer exponent other than +-0.5, ``x = -inf`` gives nan (torch:
+inf or +0). Not supported, honestly: a non-finite exponent (inf, nan) is refused on the host
(use strategy ``"python"``); the exponent is the fp32 rounding of the Python value and its class
is decided on that rounding (every float32 at or above 2**24 is an even integer). Results are
within a few fp32 ulps before the one rounding to x's dtype.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from kernels import tuned_tables
from kernels.launch import launch
from kernels.runtime import device_of
from kernels.tiling import cdiv

OP_CODES = {"div": 0, "sub": 1, "pow": 2}
OP_MUL = 3  # div by a signed zero, sent as a multiply by its reciprocal (see kernel_operands)
POW_MODES = {
    "ONE": 0,
    "IDENTITY": 1,
    "SQUARE": 2,
    "RECIPROCAL": 3,
    "SQRT": 4,
    "RSQRT": 5,
    "EVEN_INT": 6,
    "ODD_INT": 7,
    "NEG_ODD_INT": 8,
    "REAL": 9,
}
BLOCK_SIZES = tuple(2**k for k in range(6, 15))  # 64 … 16384
NUM_WARPS = (1, 2, 4, 8, 16, 32)
DEFAULT_BLOCK_SIZE = 1024
DEFAULT_NUM_WARPS = 4


@triton.jit
def apply_op(x, value, OP: tl.constexpr, POW_MODE: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """x (op) value in fp32 for one block (shared with the NPU kernel: no libdevice, only
    ``tl.exp`` / ``tl.log`` / ``tl.sqrt``). Padding lanes hold 1.0, so ``log`` stays finite."""
    if OP == 0:
        z = x / value
    elif OP == 3:
        z = x * value
    elif OP == 1:
        z = x - value
    else:
        if POW_MODE == 0:
            z = tl.full([BLOCK_SIZE], 1.0, tl.float32)
        elif POW_MODE == 1:
            z = x
        elif POW_MODE == 2:
            z = x * x
        elif POW_MODE == 3:
            z = 1.0 / x
        elif POW_MODE == 4:
            z = tl.sqrt(x)
        elif POW_MODE == 5:
            z = 1.0 / tl.sqrt(x)
        elif POW_MODE == 6:
            z = tl.exp(value * tl.log(tl.abs(x)))
        elif POW_MODE == 7:
            z = x * tl.exp((value - 1.0) * tl.log(tl.abs(x)))
        elif POW_MODE == 8:
            z = 1.0 / (x * tl.exp((-value - 1.0) * tl.log(tl.abs(x))))
        else:
            z = tl.exp(value * tl.log(x))
    return z


@triton.jit
def _scalar_op_kernel(
    Z_ptr,
    X_ptr,
    value,
    n_elements,
    OP: tl.constexpr,  # 0 div, 1 sub, 2 pow, 3 mul (div by ±0 as x * ±inf)
    POW_MODE: tl.constexpr,  # the exponent's class, see the module docstring
    BLOCK_SIZE: tl.constexpr,
):
    """z = x (op) value for one block of BLOCK_SIZE elements, in fp32, rounded once at the store."""
    pid = tl.program_id(0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    # Padding lanes load 1.0 so that log() sees a harmless value; they are never stored.
    x = tl.load(X_ptr + offsets, mask=mask, other=1.0).to(tl.float32)
    z = apply_op(x, value, OP, POW_MODE, BLOCK_SIZE)
    tl.store(Z_ptr + offsets, z.to(Z_ptr.dtype.element_ty), mask=mask)


# --- host side ---------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuTiles:
    BLOCK_SIZE: int
    num_warps: int
    source: str = "heuristic"  # where the tiles came from (records' tiles_source; kernels.tuned_tables)


def resolve_tiles(BLOCK_SIZE="auto", num_warps="auto") -> GpuTiles:
    """Check tile choices and fill in the automatic ones; ValueError names what is allowed."""
    if BLOCK_SIZE == "auto":
        BLOCK_SIZE = DEFAULT_BLOCK_SIZE
    elif BLOCK_SIZE not in BLOCK_SIZES:
        raise ValueError(
            f"BLOCK_SIZE={BLOCK_SIZE!r} is not allowed; use a power of two from {BLOCK_SIZES[0]} to "
            f"{BLOCK_SIZES[-1]} (default {DEFAULT_BLOCK_SIZE})"
        )
    if num_warps == "auto":
        num_warps = DEFAULT_NUM_WARPS
    elif num_warps not in NUM_WARPS:
        raise ValueError(f"num_warps={num_warps!r} is not allowed; use one of {', '.join(map(str, NUM_WARPS))}")
    return GpuTiles(BLOCK_SIZE, num_warps)


# The tiles a tuned table sets; a call that sets either gets none of the table's.
TUNED_TILES = ("BLOCK_SIZE", "num_warps")
_TILES_FOR: dict[tuple, GpuTiles] = {}  # (device, numel, tile arguments) -> tiles


def tiles_for(x: torch.Tensor, BLOCK_SIZE="auto", num_warps="auto") -> GpuTiles:
    """:func:`resolve_tiles` for x, the device's tuned table's tiles for the nearest numel where
    the call leaves both "auto" (:mod:`kernels.tuned_tables`). Cached per (device, numel,
    arguments): a repeated call pays one dict lookup."""
    dev = device_of(x)
    numel = int(x.numel())  # a traced (symbolic) size specialises here: a SymInt is no key
    key = (dev, numel, type(BLOCK_SIZE), BLOCK_SIZE, type(num_warps), num_warps)
    hit = _TILES_FOR.get(key)
    if hit is not None:
        return hit
    given = {"BLOCK_SIZE": BLOCK_SIZE, "num_warps": num_warps}
    found = tuned_tables.choose("scalar_ops", tuned_tables.device_key(dev), max(numel, 1), given, TUNED_TILES)
    tiles = dataclasses.replace(resolve_tiles(BLOCK_SIZE, num_warps), source=found.source)
    if found.tiles:  # an empty entry: the tune kept the rule at this size
        try:
            tiles = dataclasses.replace(resolve_tiles(**found.tiles), source=found.source)
        except (TypeError, ValueError) as exc:
            tiles = dataclasses.replace(tiles, source=f"heuristic (tuned tiles {found.tiles} do not fit: {exc})")
    if len(_TILES_FOR) >= 4096:  # many sizes: start over rather than grow without bound
        _TILES_FOR.clear()
    _TILES_FOR[key] = tiles
    return tiles


tuned_tables.on_reload(_TILES_FOR.clear)


def pow_mode(value: float) -> int:
    """The POW_MODE of an exponent, decided on its fp32 rounding (what the kernel receives)."""
    if not math.isfinite(value):
        raise ValueError(
            f"value={value!r}: strategy='triton' needs a finite pow exponent; use strategy='python' for inf or nan"
        )
    v = float(np.float32(value))
    if not math.isfinite(v):
        raise ValueError(f"value={value!r} overflows float32, the precision the triton kernels compute in")
    special = {0.0: "ONE", 1.0: "IDENTITY", 2.0: "SQUARE", -1.0: "RECIPROCAL", 0.5: "SQRT", -0.5: "RSQRT"}
    if v in special:
        return POW_MODES[special[v]]
    if v != math.floor(v):
        return POW_MODES["REAL"]
    if int(v) % 2 == 0:
        return POW_MODES["EVEN_INT"]
    return POW_MODES["ODD_INT"] if v > 0 else POW_MODES["NEG_ODD_INT"]


def kernel_constants(op: str, value: float) -> tuple[int, int]:
    """(OP, POW_MODE) for an operation; POW_MODE is 0 (unused) for div and sub."""
    return OP_CODES[op], (pow_mode(value) if op == "pow" else 0)


def kernel_operands(op: str, value: float) -> tuple[int, int, float]:
    """(OP, POW_MODE, scalar) as launched. Division by a signed zero goes in as a multiply by
    +-inf (exact: x / +-0 == x * +-inf for every x, nan included), because Triton 3.6's
    interpreter drops the sign of a -0.0 scalar argument."""
    code, mode = kernel_constants(op, value)
    if op == "div" and value == 0.0:
        return OP_MUL, mode, math.copysign(math.inf, value)
    return code, mode, float(value)


def scalar_op_gpu(op: str, x: torch.Tensor, value: float, tiles: GpuTiles) -> torch.Tensor:
    """z = x (op) value with one Triton launch; z has x's shape and dtype (contiguous)."""
    return launch_scalar_op(x, kernel_operands(op, value), tiles)


def launch_scalar_op(x: torch.Tensor, operands: tuple[int, int, float], tiles: GpuTiles) -> torch.Tensor:
    """:func:`scalar_op_gpu` given its :func:`kernel_operands` (a call plan remembers them)."""
    code, mode, scalar = operands
    x_flat = x.contiguous().view(-1)
    z = torch.empty_like(x_flat)
    n = x_flat.numel()
    if n:
        launch(
            _scalar_op_kernel,
            x_flat,
            (cdiv(n, tiles.BLOCK_SIZE),),
            z,
            x_flat,
            scalar,
            n,
            OP=code,
            POW_MODE=mode,
            BLOCK_SIZE=tiles.BLOCK_SIZE,
            num_warps=tiles.num_warps,
        )
    return z.view(x.shape)
