"""Case providers for checking npu-check itself (``--cases workbench.npu_check.samples:NAME``)."""

from __future__ import annotations


def oversize_default() -> list:
    """One RMSNorm forward tile far beyond the Unified Buffer, marked as a default configuration:
    npu-check must classify it as UB overflow and exit non-zero."""
    from kernels.rms_norm import npu

    tiles = npu.NpuTiles(chunked=False, BLOCK_SIZE_M=64, BLOCK_SIZE_N=2048, GRID=1, USE_WHERE=False)
    return [npu._compile_case("forward", "fp32", tiles, "oversize", default=True)]
