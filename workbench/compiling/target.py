"""What a compile process compiles for: the measuring device's facts, and the Triton target they give.

A kernel compiled ahead must be the one the measuring process's first call looks up in Triton's
disk cache, so it is compiled for exactly that process's Triton target (backend, arch, warp
size), with the host functions planning tiles for that device (its name, SMs, L2, shared memory).

- :func:`device_facts`: those facts as the measuring process reads them for its own device.
- :func:`visible_device_facts`: the same read from torch's device properties without a context,
  for a process that launches measuring workers but measures nothing itself (a Ray driver).
- :func:`driver_target`: the facts a driver knows before any measuring worker is up
  (``WORKBENCH_COMPILE_TARGET``, else :func:`visible_device_facts`).
- :func:`compile_target`: facts -> (Triton ``GPUTarget``, :class:`kernels.runtime.DeviceInfo`).
- :func:`build_host_utilities` and :func:`prepare_compiler`: what a compile process does when it
  starts (Triton's host utilities built into the cache, the compiler's imports), rather than in
  its first compile.
"""

from __future__ import annotations

import json
import os
import time


def device_facts(device: str) -> dict | None:
    """The facts of this process's current ``device`` a compile-ahead compiles for, as plain
    data; None where nothing is compiled (the CPU interpreter) or no GPU is visible."""
    if device != "cuda":
        return None
    import torch
    from triton.runtime import driver

    from kernels.runtime import device_info

    if not torch.cuda.is_available():
        return None
    target = driver.active.get_current_target()  # exactly what this process's launches compile for
    return _facts(target.backend, target.arch, target.warp_size, device_info("cuda"))


def _facts(backend: str, arch, warp_size: int, info) -> dict:
    return {
        "kind": "cuda",
        "backend": backend,
        "arch": arch,
        "warp_size": warp_size,
        "name": info.name,
        "num_cores": info.num_cores,
        "l2_bytes": info.l2_bytes,
        "shared_bytes_per_program": info.shared_bytes_per_program,
    }


def visible_device_facts(device: str) -> dict | None:
    """:func:`device_facts` as a measuring worker on any of this process's GPUs would read them,
    read here from torch's device properties (Triton's NVIDIA driver targets ``("cuda", major *
    10 + minor, 32)``); None unless ``device`` is cuda on NVIDIA GPUs that all give the same facts.

    It initialises CUDA in this process (no context is made, no memory taken): safe in a Ray
    driver, whose workers are processes of their own and are given some of these GPUs. A worker
    measures on one of them, so facts all GPUs share are that worker's."""
    if device != "cuda":
        return None
    try:
        import torch

        from kernels.runtime import DeviceInfo

        if torch.version.hip or not torch.cuda.is_available():
            return None
        seen = []
        for index in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(index)
            seen.append(_facts("cuda", major * 10 + minor, 32, DeviceInfo("cuda", index)))
    except Exception:  # noqa: BLE001 - the driver cannot tell: the first measuring worker will
        return None
    if not seen or any(facts != seen[0] for facts in seen):
        return None  # no GPU, or GPUs of several kinds: which one a worker gets is Ray's choice
    return seen[0]


TARGET_ENV = "WORKBENCH_COMPILE_TARGET"
TARGET_KEYS = ("kind", "backend", "arch", "warp_size", "name", "num_cores")


def driver_target(device: str, probe: bool = True) -> tuple[dict | None, str]:
    """``(facts, where they came from)`` that a sweep's driver knows before any measuring worker
    is up: ``WORKBENCH_COMPILE_TARGET`` holding the facts as JSON (``"environment"``); else, with
    ``probe``, :func:`visible_device_facts` (``"driver"``); else ``(None, "actor")``: the first
    measuring worker's, as that variable set to ``actor`` asks. ValueError for a variable that
    is neither."""
    text = os.environ.get(TARGET_ENV, "").strip()
    if text == "actor":
        return None, "actor"
    if text:
        try:
            facts = json.loads(text)
        except ValueError:
            facts = None
        if not isinstance(facts, dict) or any(key not in facts for key in TARGET_KEYS):
            raise ValueError(
                f"{TARGET_ENV}={text!r}: give 'actor' or the device facts as a JSON object with "
                f"{', '.join(TARGET_KEYS)} (and l2_bytes)"
            )
        return facts, "environment"
    facts = visible_device_facts(device) if probe else None
    return (facts, "driver") if facts is not None else (None, "actor")


def compile_target(facts: dict):
    """``(Triton GPUTarget, kernels.runtime.DeviceInfo)`` for the device ``facts`` describe: what
    :func:`kernels.launch.compile_only` compiles for, and what host functions plan tiles for."""
    from triton.backends.compiler import GPUTarget

    from kernels.runtime import described_device

    target = GPUTarget(facts["backend"], facts["arch"], facts["warp_size"])
    device = described_device(
        facts["kind"],
        0,
        name=facts["name"],
        num_cores=facts["num_cores"],
        l2_bytes=facts.get("l2_bytes"),
        # None where the facts do not say (an older driver's, the environment's): no check here
        shared_bytes_per_program=facts.get("shared_bytes_per_program"),
    )
    return target, device


def build_host_utilities(backend: str = "cuda") -> float | None:
    """Build Triton's host utilities module for ``backend`` (NVIDIA's ``cuda_utils``: a C module
    the system C compiler builds into the Triton cache when a process first starts Triton's
    driver) without touching a device; its milliseconds, or None for a backend without one.

    A compile process does this when it starts, importing only Triton first, so the measuring
    processes of the same host, still importing torch, find it built when they start their
    driver. Loading it needs the CUDA driver library on the host, not a visible GPU. Raises
    where the build fails (the measuring process then builds it, as without this)."""
    if backend != "cuda":
        return None
    from triton.backends.nvidia import driver as nvidia

    started = time.perf_counter()
    nvidia.CudaUtils()
    return (time.perf_counter() - started) * 1e3


def prepare_compiler() -> None:
    """Import what :func:`workbench.compiling.jobs.compile_job` needs (torch, Triton's compiler,
    the launch path), so a compile process's first compile does not pay for it."""
    import torch  # noqa: F401
    from triton.backends.compiler import GPUTarget  # noqa: F401

    import kernels.launch  # noqa: F401
    import kernels.spec  # noqa: F401
