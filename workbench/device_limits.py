"""Per-device limits and peaks as plain data: what occupancy and the roofline are computed against.

A GPU's resident-program limits come from its architecture (compute capability); its SM count
from the device itself (an H100 SXM has 132, an H100 PCIe 114). :func:`gpu_limits` builds one
:class:`GpuLimits` from the architecture's row of :data:`GPU_ARCH` and the device's properties
(a plain mapping, e.g. the fields of ``torch.cuda.get_device_properties``), properties winning
where both say something. Nothing here calls a device, so CPU tests can compute occupancy for an
H100 from :func:`h100`.

NPU: the Unified Buffer per core of an Ascend 910B (docs/npu-check.md, "The rules the NPU kernels follow").

Peaks: the datasheet's DRAM bandwidth and dense FLOP/s per device name, for the roofline's
ceiling beside the measured copy bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from kernels.rms_norm.npu import UB_BYTES  # the Ascend 910B Unified Buffer per core


@dataclass(frozen=True)
class GpuLimits:
    """What bounds the programs resident on one SM (CUDA's terms: blocks = Triton programs)."""

    arch: str  # "sm_90"
    sm_count: int
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    max_blocks_per_sm: int = 32
    shared_per_sm: int = 233472  # the largest carveout, bytes (the driver may pick a smaller one)
    shared_per_block_optin: int = 232448  # the most one program may ask for
    shared_reserved_per_block: int = 1024  # the driver's own shared memory in every block
    shared_alloc_unit: int = 128  # shared memory is allocated to a block in units of this many bytes
    reg_alloc_unit: int = 256  # registers are allocated per warp in units of this many
    sub_partitions: int = 4  # an SM's register file is split between its warp schedulers
    warp_size: int = 32

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


# Architecture rows (CUDA programming guide, "compute capabilities" table). The SM count is 0
# here: it belongs to the device, not the architecture.
GPU_ARCH: dict[tuple[int, int], GpuLimits] = {
    (8, 0): GpuLimits("sm_80", 0, shared_per_sm=167936, shared_per_block_optin=166912),
    (8, 6): GpuLimits(
        "sm_86", 0, max_threads_per_sm=1536, max_blocks_per_sm=16, shared_per_sm=102400, shared_per_block_optin=101376
    ),
    (8, 9): GpuLimits(
        "sm_89", 0, max_threads_per_sm=1536, max_blocks_per_sm=24, shared_per_sm=102400, shared_per_block_optin=101376
    ),
    (9, 0): GpuLimits("sm_90", 0),
}

# torch.cuda.get_device_properties field -> GpuLimits field, where torch reports it.
PROPERTY_FIELDS = {
    "multi_processor_count": "sm_count",
    "regs_per_multiprocessor": "regs_per_sm",
    "max_threads_per_multi_processor": "max_threads_per_sm",
    "shared_memory_per_multiprocessor": "shared_per_sm",
    "shared_memory_per_block_optin": "shared_per_block_optin",
    "warp_size": "warp_size",
}


def gpu_limits(major: int, minor: int, properties: Mapping[str, int]) -> GpuLimits:
    """The limits of a device of compute capability ``major.minor`` with these properties.

    An architecture not in :data:`GPU_ARCH` takes the nearest older row of the same major (its
    per-block caps rarely move within a major) and the device's own properties; with no row of
    that major it is a ValueError naming the rows there are."""
    base = GPU_ARCH.get((major, minor))
    if base is None:
        older = [cc for cc in GPU_ARCH if cc[0] == major and cc[1] <= minor]
        if not older:
            known = ", ".join(f"{a}.{b}" for a, b in GPU_ARCH)
            raise ValueError(
                f"no occupancy limits for compute capability {major}.{minor}; known: {known} "
                "(add its row to workbench.device_limits.GPU_ARCH)"
            )
        base = replace(GPU_ARCH[max(older)], arch=f"sm_{major}{minor}")
    found = {ours: int(properties[theirs]) for theirs, ours in PROPERTY_FIELDS.items() if properties.get(theirs)}
    return replace(base, **found)


def h100() -> GpuLimits:
    """The lent H100 SXM (80 GB HBM3) as torch reported it there: 132 SMs, 65536 registers and
    2048 threads per SM, 228 KB shared memory per SM, 227 KB per block with opt-in."""
    return gpu_limits(
        9,
        0,
        {
            "multi_processor_count": 132,
            "regs_per_multiprocessor": 65536,
            "max_threads_per_multi_processor": 2048,
            "shared_memory_per_multiprocessor": 233472,
            "shared_memory_per_block_optin": 232448,
            "warp_size": 32,
        },
    )


@dataclass(frozen=True)
class NpuLimits:
    """An Ascend NPU's per-core buffer: a tile above it does not compile ("ub overflow")."""

    name: str
    ub_bytes_per_core: int


NPU = {"Ascend910B": NpuLimits("Ascend910B", UB_BYTES)}


@dataclass(frozen=True)
class Peak:
    """A device's datasheet peaks (dense arithmetic)."""

    dram_gbps: float
    fp32_tflops: float
    tf32_tflops: float | None = None


# Keyed by the device name as the driver reports it (a substring match, longest key first).
PEAKS: dict[str, Peak] = {
    "H100 80GB HBM3": Peak(dram_gbps=3352.0, fp32_tflops=66.9, tf32_tflops=494.7),  # H100 SXM5
    "H100 PCIe": Peak(dram_gbps=2039.0, fp32_tflops=51.2, tf32_tflops=378.0),
    "H200": Peak(dram_gbps=4800.0, fp32_tflops=66.9, tf32_tflops=494.7),  # H200 SXM: HBM3e, H100 SXM5's compute
    "A100-SXM4-80GB": Peak(dram_gbps=2039.0, fp32_tflops=19.5, tf32_tflops=156.0),
    "A100-SXM4-40GB": Peak(dram_gbps=1555.0, fp32_tflops=19.5, tf32_tflops=156.0),
}


def peak_of(device_name: str | None) -> Peak | None:
    """The datasheet peaks of a device by its name, or None when it is not in :data:`PEAKS`."""
    if not device_name:
        return None
    for key in sorted(PEAKS, key=len, reverse=True):
        if key in device_name:
            return PEAKS[key]
    return None
