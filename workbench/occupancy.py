"""Theoretical occupancy of one compiled kernel: how many of its programs fit on an SM, and why
no more.

Pure arithmetic over a kernel's compile facts (registers per thread, shared memory per program,
warps per program, the grid) and a device's :class:`~workbench.device_limits.GpuLimits`; no
device is touched, so the CPU tests check it against Nsight Compute's own numbers.

Each resource gives the programs (CUDA blocks) one SM can hold; the smallest wins:

- *registers*: allocated per warp, rounded up to ``reg_alloc_unit`` (256); the register file is
  split between the SM's ``sub_partitions`` (4) schedulers and a warp lives in one of them, so a
  partition holds ``(regs_per_sm / 4) // per_warp`` warps;
- *shared memory*: the kernel's bytes plus the driver's reserved 1 KB, rounded up to
  ``shared_alloc_unit``, against the SM's largest carveout (Nsight Compute reports it against the
  carveout the driver picked for the launch, which can be smaller);
- *warps*: the SM's thread slots over the program's threads;
- *blocks*: the architecture's cap on resident programs (32 on sm_80 / sm_90).

Then the grid: with fewer programs than ``SMs x resident programs`` the machine is not filled,
whatever the tile; the binding limit is then ``grid`` and ``waves`` (programs over resident
slots) says by how much.
"""

from __future__ import annotations

import re

from workbench.device_limits import GpuLimits

# The order ties are named in (Nsight Compute lists the limits in this order too).
RESOURCES = ("registers", "shared memory", "warps", "blocks")


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(regs: int, shared_bytes: int, num_warps: int, programs: int | None, limits: GpuLimits) -> dict:
    """Resident programs and warps per SM for a kernel, and the limit that binds.

    Returns a JSON-able dict: ``blocks_per_sm``, ``warps_per_sm``, ``occupancy_pct`` (resident
    warps over the SM's warp slots), ``limit`` (one of :data:`RESOURCES`, or ``"grid"`` when the
    grid does not fill the device), ``resource_limit`` (the resource that binds the tile, grid or
    not), ``limits`` (programs per SM each resource allows), ``waves`` (programs over the
    device's resident slots; None without a grid) and, for a kernel that cannot launch at all,
    ``error`` naming the resource over its limit (``blocks_per_sm`` is then 0)."""
    threads = num_warps * limits.warp_size
    per_warp = _round_up(regs * limits.warp_size, limits.reg_alloc_unit)
    shared = _round_up(shared_bytes + limits.shared_reserved_per_block, limits.shared_alloc_unit)
    out: dict = {"blocks_per_sm": 0, "warps_per_sm": 0, "occupancy_pct": 0.0, "limits": {}, "waves": None}
    over = _over_limit(regs, shared_bytes, threads, num_warps * per_warp, limits)
    if over is not None:
        return dict(out, limit=over[0], resource_limit=over[0], error=over[1])
    if per_warp:
        warps_by_regs = (limits.regs_per_sm // limits.sub_partitions // per_warp) * limits.sub_partitions
        by_regs = warps_by_regs // num_warps
    else:
        by_regs = limits.max_blocks_per_sm
    by_resource = {
        "registers": by_regs,
        "shared memory": limits.shared_per_sm // shared,
        "warps": limits.max_warps_per_sm // num_warps,
        "blocks": limits.max_blocks_per_sm,
    }
    blocks = min(by_resource.values())
    resource = next(name for name in RESOURCES if by_resource[name] == blocks)
    limit, waves = resource, None
    if programs is not None and blocks:
        slots = blocks * limits.sm_count
        waves = programs / slots
        if programs < slots:
            limit = "grid"
    warps = blocks * num_warps
    return dict(
        out,
        blocks_per_sm=blocks,
        warps_per_sm=warps,
        occupancy_pct=100.0 * warps / limits.max_warps_per_sm,
        limit=limit,
        resource_limit=resource,
        limits=by_resource,
        waves=waves,
    )


def _over_limit(regs, shared_bytes, threads, regs_per_block, limits: GpuLimits) -> tuple[str, str] | None:
    """(resource, reason) when the kernel cannot launch on this device at all."""
    if threads > limits.max_threads_per_block:
        return "warps", f"{threads} threads per program, the device allows {limits.max_threads_per_block}"
    if shared_bytes > limits.shared_per_block_optin:
        return "shared memory", (
            f"{shared_bytes / 1024:.1f} KB shared memory per program, the device allows "
            f"{limits.shared_per_block_optin / 1024:.1f} KB"
        )
    if regs > limits.max_regs_per_thread or regs_per_block > limits.regs_per_sm:
        return "registers", f"{regs} registers x {threads} threads do not fit one SM's {limits.regs_per_sm}"
    return None


# Triton's and CUDA's words for a configuration that does not fit, and the resource each names.
_ERROR_PATTERNS = (
    (
        re.compile(r"out of resource: shared memory, Required: (\d+), Hardware limit: (\d+)"),
        lambda m: (
            "shared memory",
            f"shared memory over the device limit ({int(m[1]) / 1024:.1f} KB needed, {int(m[2]) / 1024:.1f} KB allowed)",
        ),
    ),
    (
        re.compile(r"out of resource: threads, Required: (\d+), Hardware limit: (\d+)"),
        lambda m: ("warps", f"threads over the device limit ({m[1]} per program, {m[2]} allowed)"),
    ),
    (
        re.compile(r"out of resource: (\w[\w ]*), Required: (\d+), Hardware limit: (\d+)"),
        lambda m: (m[1], f"{m[1]} over the device limit ({m[2]} needed, {m[3]} allowed)"),
    ),
    (
        re.compile(r"too many resources requested for launch", re.I),
        lambda m: ("registers", "registers over the device limit (too many resources requested for launch)"),
    ),
    (
        re.compile(r"ub overflow", re.I),
        lambda m: ("unified buffer", "Unified Buffer over the core's capacity (ub overflow)"),
    ),
)


def limit_of_error(error: str | None) -> tuple[str, str] | None:
    """(resource, one line) when an error says a configuration exceeded a device limit, else None:
    e.g. Triton's ``out of resource: shared memory, Required: 262144, Hardware limit: 232448``
    gives ``("shared memory", "shared memory over the device limit (256.0 KB needed, 227.0 KB
    allowed)")``."""
    if not error:
        return None
    for pattern, describe in _ERROR_PATTERNS:
        match = pattern.search(error)
        if match:
            return describe(match)
    return None
