"""What the test-only kernel families installed for fault tests (tests/compile_fault_family,
tests/sweep_fault_family) share. A module of its own, not testkit: the families' worker and compile
processes import it, and testkit imports Triton when it loads."""

from __future__ import annotations

import torch

from kernels.spec import KernelSpec, Knob, Variant


def doubling_family(name: str, title: str, *, n: int, n_high: int, variant: str, backend: str, run, params: tuple):
    """The KernelSpec of a test-only family of one variant, ``run`` with tile ``params``, whose
    reference is ``y = 2 x`` on ``x`` of ``n`` fp32 elements (knob ``n`` up to ``n_high``), forward
    only, on the CPU or CUDA: the fault families differ only in the variant that injects faults."""
    return KernelSpec(
        name=name,
        title=title,
        knobs=(Knob("n", n, low=1, high=n_high),),
        make_inputs=_doubling_inputs,
        reference=_doubled,
        output_names=("y",),
        variants=(Variant(variant, backend, run, params=params, devices=("cpu", "cuda")),),
        min_bytes=lambda problem, mode, dtype: 8 * problem["n"],
        axis="n",
        modes=("forward",),
        dtypes=("fp32",),
    )


def _doubling_inputs(problem, dtype, device, seed):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return {"x": torch.randn(problem["n"], generator=gen, dtype=torch.float32).to(device, dtype)}


def _doubled(inputs, problem):
    return inputs["x"] * 2
