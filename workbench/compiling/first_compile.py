"""A process's first Triton compile, paid before its first configuration.

Triton's first compile in a process costs more than any later one, whatever the kernel: it
hashes Triton's own library into its cache key (``triton_key``: it reads the whole
``libtriton.so``), starts its backend and LLVM and asks ``ptxas`` for its version, all once. On
the lent H100 (``benchmarks/diagnostics/process_start.py``, Triton 3.6, medians of three fresh processes)
``triton_key`` took 0.47 s and the smallest kernel's compile and launch after it 0.21 s; its
second, 0.3 ms. A compile-ahead's stand-ins add torch's first meta-device op, which imports its
symbolic-shapes machinery (sympy): 0.47 s of a 0.72 s first compile on the CPU-only
development machine (Triton 3.9).

On a measuring actor that first compile lands in its first configuration's time, with its GPU
idle; on a compile worker, in the first configuration it compiles ahead. Both pay it here
instead, in their warm-up, on the smallest kernel there is.

- :func:`first_launch`: compile and run it on a device (a measuring actor).
- :func:`first_compile`: compile it for a device's facts, running nothing (a compile worker).
"""

from __future__ import annotations

import time

import triton
import triton.language as tl

BLOCK = 32


@triton.jit
def _add_one_kernel(x_ptr, n, BLOCK: tl.constexpr):
    """``x[i] += 1`` for ``i < n``: no work to speak of; compiling it is the point."""
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


def first_launch(device) -> float:
    """Compile and launch the kernel on ``device`` (a torch device) through the library's launch
    path, and check what it wrote; the milliseconds it all took. Raises if the kernel did not run
    as written."""
    import torch

    from kernels.launch import launch

    started = time.perf_counter()
    x = torch.zeros(BLOCK, device=device)
    launch(_add_one_kernel, x, (1,), x, BLOCK - 1, BLOCK=BLOCK)
    written = x.cpu()  # waits for the kernel
    if written[: BLOCK - 1].ne(1).any() or written[BLOCK - 1] != 0:
        raise RuntimeError(f"the first-compile kernel wrote {written.tolist()} (expected ones, then a zero)")
    return (time.perf_counter() - started) * 1e3


def first_compile(facts: dict) -> float:
    """Compile the kernel for the device ``facts`` describe
    (:func:`workbench.compiling.target.device_facts`), running nothing and touching no device;
    the milliseconds it took."""
    import torch

    from kernels.launch import compile_only, launch
    from workbench.compiling.target import compile_target

    started = time.perf_counter()
    target, device = compile_target(facts)
    with compile_only(target, device, launchers=True):
        # On the meta device, as a compile-ahead's stand-ins: torch's first meta op imports its
        # symbolic-shapes machinery (sympy), half a second once per process.
        x = torch.empty_like(torch.zeros(BLOCK, device="meta"))
        launch(_add_one_kernel, x, (1,), x, BLOCK - 1, BLOCK=BLOCK)
    return (time.perf_counter() - started) * 1e3
