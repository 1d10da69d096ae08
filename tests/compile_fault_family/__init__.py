"""A test-only kernel family whose one variant, ours, launches a real Triton kernel, and whose tile
``FAULT`` makes its call fail the ways a compile process can: raise, end the process
(``os._exit``) or hang. Compile processes find it by this module (tests/ is on their path).

Registered only by tests (``register()``), never by the package.
"""

from __future__ import annotations

import os
import time

import torch
import triton
import triton.language as tl

from kernels.launch import launch
from kernels.spec import KernelSpec, Knob, Param, Variant
from kernels.spec import register as register_family

NAME = "compile_faults"
FAULTS = ("none", "raise", "exit", "hang")


@triton.jit
def _double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """``y = 2 x``, one block."""
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask, other=0.0) * 2, mask=mask)


def _inputs(problem, dtype, device, seed):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return {"x": torch.randn(problem["n"], generator=gen, dtype=torch.float32).to(device, dtype)}


def _reference(inputs, problem):
    return inputs["x"] * 2


def _run(inputs, problem, FAULT="none", BLOCK=64):
    if FAULT == "raise":
        raise RuntimeError("injected fault: raise")
    if FAULT == "exit":
        os._exit(3)
    if FAULT == "hang":
        time.sleep(3600)
    x = inputs["x"]
    y = torch.empty_like(x)
    launch(_double_kernel, x, (1,), x, y, x.numel(), BLOCK=BLOCK)
    return y


spec = KernelSpec(
    name=NAME,
    title="Injected compile faults (tests only)",
    knobs=(Knob("n", 40, low=1, high=128),),
    make_inputs=_inputs,
    reference=_reference,
    output_names=("y",),
    variants=(
        Variant(
            "ours",
            "gpu",
            _run,
            params=(Param("FAULT", FAULTS, "none"), Param("BLOCK", (64, 128), 64)),
            devices=("cpu", "cuda"),
        ),
    ),
    min_bytes=lambda problem, mode, dtype: 8 * problem["n"],
    axis="n",
    modes=("forward",),
    dtypes=("fp32",),
)


def register() -> None:
    register_family(__name__, name=NAME)
