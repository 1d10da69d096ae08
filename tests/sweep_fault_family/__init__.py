"""A test-only kernel family whose tile parameter ``FAULT`` makes a configuration fail the ways a
real one can: raise, end its process (``os._exit``), be killed by a signal, or hang.

It is registered only by tests (``register()``), never by the package: production code has no
way to reach it. Workers find it because the sweep task carries the module that registers it.
"""

from __future__ import annotations

import os
import signal
import time

import torch

from kernels.spec import KernelSpec, Knob, Param, Variant
from kernels.spec import register as register_family

NAME = "sweep_faults"
FAULTS = ("none", "raise", "exit", "signal", "hang")


def _inputs(problem, dtype, device, seed):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return {"x": torch.randn(problem["n"], generator=gen, dtype=torch.float32).to(device, dtype)}


def _reference(inputs, problem):
    return inputs["x"] * 2


def _run(inputs, problem, FAULT="none", SCALE=1):
    if FAULT == "raise":
        print("injected fault: what a failing compiler prints", flush=True)
        raise RuntimeError("injected fault: raise")
    if FAULT == "exit":
        os._exit(3)
    if FAULT == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    if FAULT == "hang":
        time.sleep(3600)
    return inputs["x"] * 2 * SCALE  # SCALE != 1 gives a wrong result (a failed check)


spec = KernelSpec(
    name=NAME,
    title="Injected faults (tests only)",
    knobs=(Knob("n", 64, low=1, high=1 << 16),),
    make_inputs=_inputs,
    reference=_reference,
    output_names=("y",),
    variants=(
        Variant(
            "faulty",
            "torch",
            _run,
            params=(Param("FAULT", FAULTS, "none"), Param("SCALE", (1, 2), 1)),
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
