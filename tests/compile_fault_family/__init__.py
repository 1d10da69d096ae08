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
from fake_families import doubling_family

from kernels.launch import launch
from kernels.spec import Param
from kernels.spec import register as register_family

NAME = "compile_faults"
FAULTS = ("none", "raise", "exit", "hang")


@triton.jit
def _double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """``y = 2 x``, one block."""
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask, other=0.0) * 2, mask=mask)


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


spec = doubling_family(
    NAME,
    "Injected compile faults (tests only)",
    n=40,
    n_high=128,
    variant="ours",
    backend="gpu",
    run=_run,
    params=(Param("FAULT", FAULTS, "none"), Param("BLOCK", (64, 128), 64)),
)


def register() -> None:
    register_family(__name__, name=NAME)
