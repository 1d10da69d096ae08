"""Compile facts of one configuration's kernels: why a tile is fast or slow, read once after its
first call.

:func:`collect` turns the launches :func:`kernels.launch.recording` saw during a configuration's
first (compiling) call into one JSON-able dict that goes into the record (``compile_facts``):

- on CUDA, per kernel: registers per thread, spilled registers, shared memory per program,
  ``num_warps``, ``num_stages``, ``num_ctas`` and the grid, read from Triton's ``CompiledKernel``,
  and the theoretical occupancy with its binding limit (:mod:`workbench.occupancy`) against the
  device's limits (:mod:`workbench.device_limits`);
- on an NPU (and for NPU kernels wherever they run): the grid against the core count and the
  Unified Buffer bytes the family's calibrated model gives for the tiles, against the capacity;
- in the Triton interpreter the same per-kernel fields, each None, and ``available`` False with
  the reason: nothing was compiled, so nothing is guessed.

Reading the facts costs attribute reads and a little arithmetic per kernel; nothing is launched
and nothing runs inside a timed loop.
"""

from __future__ import annotations

import functools
from typing import Iterable

from workbench.device_limits import NPU, PROPERTY_FIELDS, GpuLimits, gpu_limits
from workbench.occupancy import occupancy

ENV_SWITCH = "WORKBENCH_COMPILE_FACTS"  # "0": records say the facts were not read
INTERPRETER_REASON = (
    "Triton interpreter: nothing is compiled, so registers, spills, shared memory and occupancy are not known"
)
NO_KERNEL_REASON = "no kernel of ours launched (a torch or peer variant): nothing to read"
KERNEL_FIELDS = ("regs", "spills", "shared_bytes", "num_warps", "num_stages", "num_ctas", "occupancy")


def collect(launches: Iterable, device, *, ub_bytes: int | None = None) -> dict:
    """The compile facts of these launches (``kernels.launch.Launch``) on ``device`` (a
    ``kernels.runtime.DeviceInfo``); ``ub_bytes``: the family's Unified Buffer estimate for an NPU
    variant's tiles (None for others)."""
    kernels = []
    seen = set()
    for launch in launches:
        if launch.device_kind == "traced":  # torch.compile tracing our op: nothing ran yet
            continue
        key = (launch.name, launch.grid, id(launch.compiled))
        if key in seen:
            continue
        seen.add(key)
        kernels.append(_kernel_facts(launch, device))
    facts: dict = {"source": device.kind, "kernels": kernels}
    if not kernels:
        facts.update(available=False, reason=NO_KERNEL_REASON)
    elif device.kind == "cpu":
        facts.update(available=False, reason=INTERPRETER_REASON)
    else:
        missing = [k["name"] for k in kernels if k.get("reason")]
        facts.update(available=not missing, reason=kernels[0]["reason"] if missing else None)
    if device.kind == "cuda":
        limits = cuda_limits(device.index)
        facts["device"] = {"arch": limits.arch, "sm_count": limits.sm_count}
    if ub_bytes is not None:
        npu = NPU["Ascend910B"]
        facts.update(ub_bytes=int(ub_bytes), ub_capacity_bytes=npu.ub_bytes_per_core, ub_device=npu.name)
    return facts


def _kernel_facts(launch, device) -> dict:
    grid = list(launch.grid) or None
    programs = grid[0] * grid[1] * grid[2] if grid else None
    out = {"name": launch.name, "grid": grid, "programs": programs, **dict.fromkeys(KERNEL_FIELDS), "reason": None}
    if device.kind == "cpu":
        out["reason"] = INTERPRETER_REASON
        return out
    if device.kind == "npu":
        out["cores"] = device.num_cores
        return out
    compiled = launch.compiled
    metadata = getattr(compiled, "metadata", None)
    if metadata is None:
        out["reason"] = "Triton returned no compiled kernel for this launch (an asynchronous compile?)"
        return out
    if getattr(compiled, "n_regs", None) is None:
        compiled._init_handles()  # launched already, so this only reads what the load set
    out.update(
        regs=int(compiled.n_regs),
        spills=int(compiled.n_spills),
        shared_bytes=int(metadata.shared),
        num_warps=int(metadata.num_warps),
        num_stages=int(metadata.num_stages),
        num_ctas=int(getattr(metadata, "num_ctas", 1)),
    )
    out["hash"] = getattr(compiled, "hash", None)  # its Triton cache folder: what a compile-ahead wrote
    out["occupancy"] = occupancy(
        out["regs"], out["shared_bytes"], out["num_warps"], programs, cuda_limits(device.index)
    )
    return out


@functools.lru_cache(maxsize=None)
def cuda_limits(index: int) -> GpuLimits:
    """The limits of CUDA device ``index`` (its properties read once)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    return gpu_limits(props.major, props.minor, {f: getattr(props, f, None) for f in PROPERTY_FIELDS})


# --- reading facts back (tables, the Explorer, reports) ----------------------------------------
def short_name(kernel_name: str) -> str:
    """``_sum_forward_kernel`` -> ``sum_forward``: names short enough for a table cell."""
    name = kernel_name.strip("_")
    return name[: -len("_kernel")] if name.endswith("_kernel") else name


def kernel_brief(kernel: dict) -> str:
    """``64/0/50%`` (registers / spills / theoretical occupancy), the limit when it is not warps."""
    if kernel.get("regs") is None:
        return "n/a"
    occ = kernel.get("occupancy") or {}
    text = f"{kernel['regs']}/{kernel['spills']}/{occ.get('occupancy_pct', 0):.0f}%"
    limit = occ.get("limit")
    return text + (f" {limit}" if limit and limit != "warps" else "")


def ub_use(facts: dict) -> str:
    """``UB 12.5 / 192 KB``: the modelled Unified Buffer use of an NPU configuration against the
    per-core capacity (facts with ``ub_bytes`` and ``ub_capacity_bytes``)."""
    return f"UB {facts['ub_bytes'] / 1024:.1f} / {facts['ub_capacity_bytes'] / 1024:.0f} KB"


def brief(facts: dict | None) -> str:
    """One compact cell, ``regs/spills/occ`` per kernel: ``sum_forward 128/0/25% grid ·
    sum_combine 40/0/75% grid``; ``n/a (interpreter)`` where nothing was compiled."""
    if not facts:
        return ""
    kernels = facts.get("kernels") or []
    if not any(k.get("regs") is not None for k in kernels):
        if facts.get("ub_bytes") is not None:
            return ub_use(facts)
        return "n/a (interpreter)" if facts.get("source") == "cpu" else "n/a"
    by_name = {}
    for k in kernels:
        by_name.setdefault(k["name"], k)
    if len(by_name) == 1:
        return kernel_brief(kernels[0])
    return " · ".join(f"{short_name(n)} {kernel_brief(k)}" for n, k in by_name.items())


def columns(facts: dict | None) -> dict:
    """Flat, sortable columns for CSV and tables from the kernel that explains most: the one that
    spills most, else the one with the lowest theoretical occupancy."""
    empty = {"regs": None, "spills": None, "shared_bytes": None, "occupancy_pct": None, "occupancy_limit": None}
    known = [k for k in (facts or {}).get("kernels") or [] if k.get("regs") is not None]
    if not known:
        return empty
    worst = max(known, key=lambda k: (k["spills"], -(k.get("occupancy") or {}).get("occupancy_pct", 0.0)))
    occ = worst.get("occupancy") or {}
    return {
        "regs": worst["regs"],
        "spills": worst["spills"],
        "shared_bytes": worst["shared_bytes"],
        "occupancy_pct": occ.get("occupancy_pct"),
        "occupancy_limit": occ.get("limit"),
    }


def _count(n, noun: str) -> str:
    """``1 program``, ``3 programs``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def warnings(facts: dict | None) -> list[str]:
    """What a reader should look at: spills, occupancy below 100% and what limits it, a grid that
    does not fill the device, a tile that cannot launch, a Unified Buffer over its capacity."""
    out = []
    for k in (facts or {}).get("kernels") or []:
        name, occ = short_name(k["name"]), k.get("occupancy") or {}
        if k.get("spills"):
            out.append(f"{name}: {k['spills']} registers spilled to local memory ({k['regs']} per thread)")
        if occ.get("error"):
            out.append(f"{name}: cannot launch: {occ['error']}")
            continue
        pct, resource = occ.get("occupancy_pct"), occ.get("resource_limit")
        if pct is not None and pct < 100 and resource:
            out.append(
                f"{name}: occupancy {pct:.0f}% ({_count(occ['blocks_per_sm'], 'program')} x "
                f"{_count(k['num_warps'], 'warp')} per SM), "
                f"limited by {resource}" + (f" ({k['regs']} per thread)" if resource == "registers" else "")
            )
        if occ.get("limit") == "grid":
            slots = occ["blocks_per_sm"] * (facts.get("device") or {}).get("sm_count", 0)
            out.append(
                f"{name}: grid of {_count(k['programs'], 'program')} fills {occ['waves']:.0%} of the device's {slots} "
                "resident slots (the grid, not the tile, limits occupancy)"
            )
        cores = k.get("cores")
        if cores and k.get("programs") is not None and k["programs"] < cores:
            idle = cores - k["programs"]
            out.append(f"{name}: grid of {_count(k['programs'], 'program')} leaves {idle} of {cores} cores idle")
    ub, cap = (facts or {}).get("ub_bytes"), (facts or {}).get("ub_capacity_bytes")
    if ub is not None and cap and ub > cap:
        out.append(f"{ub_use(facts)} per core: over the Unified Buffer (ub overflow)")
    return out
