"""Compile-ahead: a sweep task's kernels compiled in a CPU-side process before a GPU measures it.

A measuring worker's first call of a configuration compiles its Triton kernels while its GPU
waits. A compile-ahead process makes the same call under :func:`kernels.launch.compile_only`
instead: the kernels are compiled for the measuring device's Triton target and written to the
Triton disk cache that worker reads, and nothing runs; the worker's first call then loads them.

- :func:`device_facts`: what a compile-ahead must know of the measuring device (Triton target,
  name, SMs, L2), read once by a measuring worker.
- :func:`driver_target`: the same facts as the driver can know them before any measuring worker
  is up (``WORKBENCH_COMPILE_TARGET``, else :func:`visible_device_facts` of the driver's own GPUs),
  so the compile-ahead starts at once; None where it cannot tell (then the first measuring worker's).
- :func:`build_host_utilities` and :func:`prepare_compiler`: what a compile process does when
  it starts: Triton's host utilities module built into the cache (before the measuring processes
  of the host need it), then its imports, rather than in its first compile.
- :func:`compile_task`: one task compiled for those facts; a plain dict (never raises). The
  inputs are the family's own, on the meta device (the host functions do no work at all); a host
  function that needs values fails there, and the call is made again on CPU tensors holding the
  same values (still nothing runs: inside ``compile_only`` CPU launches compile too). Each
  kernel's host launcher is built too where Triton builds one per signature (3.6).

What a measured record notes of its compile-ahead is :mod:`workbench.sweep.compile_note`; the
driver's side of a run's compile-ahead (which worker compiles what, which task a measuring actor
takes) is :mod:`workbench.sweep.compile_ahead_driver`.
"""

from __future__ import annotations

import json
import os
import time

from workbench.sweep.tasks import SweepTask, register_family, tables_state, triton_cache_dir, worker_info


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
    """Import what :func:`compile_task` needs (torch, Triton's compiler, the launch path), so a
    compile process's first compile does not pay for it."""
    import torch  # noqa: F401
    from triton.backends.compiler import GPUTarget  # noqa: F401

    import kernels.launch  # noqa: F401
    import kernels.spec  # noqa: F401


def compile_task(task: SweepTask, facts: dict) -> dict:
    """Compile ``task``'s kernels for the device ``facts`` describe, running nothing.

    ``{"ok", "inputs": "meta" | "cpu" | None, "kernels": [{"name", "hash"}], "ms", "error",
    "worker"}``; a configuration that cannot be compiled ahead gives ``ok`` False and why."""
    started = time.perf_counter()
    result = {"ok": False, "inputs": None, "kernels": [], "ms": 0.0, "error": None, "worker": worker_info()}
    try:
        result.update(_compile(task, facts))
        result["ok"] = True
    except Exception as exc:  # noqa: BLE001 - best effort: the measuring worker compiles it itself
        result["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
    result["ms"] = (time.perf_counter() - started) * 1e3
    return result


def cache_folder(kernel_hash: str) -> str:
    """The Triton cache folder name of a compiled kernel's hash (its cache manager's: base32 of
    the hash's bytes, unpadded)."""
    import base64

    return base64.b32encode(bytes.fromhex(kernel_hash)).decode().rstrip("=")


def found_in_cache(result: dict) -> bool | None:
    """Whether every kernel a compile-ahead ``result`` names is in this process's Triton cache
    (``TRITON_CACHE_DIR``, else Triton's default): asked by a measuring worker before its first
    call, it says whether the compile-ahead reached this node's disk. None when the result names
    no kernel hash (it failed, or compiled nothing)."""
    hashes = [k.get("hash") for k in result.get("kernels") or [] if k.get("hash")]
    if not result.get("ok") or not hashes:
        return None
    root = triton_cache_dir()
    return all(os.path.isdir(os.path.join(root, cache_folder(h))) for h in hashes)


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


def _compile(task: SweepTask, facts: dict) -> dict:
    import torch

    from kernels.spec import DTYPES, dtype_name, get

    register_family(task)
    spec = get(task.family)
    var = spec.variant(task.variant)
    if var.is_peer:
        raise ValueError(f"{var.name} is not one of our kernels: nothing to compile ahead")
    target, device = compile_target(facts)
    dtype = dtype_name(task.dtype)
    problem = spec.resolve_problem(task.problem, quick=task.quick)
    params = var.resolve_params(task.params)
    with tables_state(task.tables):
        if var.check is not None:
            var.check(problem, params, dtype, device)
        inputs = spec.make_inputs(problem, DTYPES[dtype], torch.device("cpu"), task.seed)
        failed = []
        for where in ("meta", "cpu"):
            stand_ins = {name: _stand_in(value, where) for name, value in inputs.items()}
            try:
                kernels = compile_call(var, problem, params, task.mode, stand_ins, target, device)
                return {"inputs": where, "kernels": kernels}
            except Exception as exc:  # noqa: BLE001 - meta tensors cannot answer every host function
                failed.append(f"on {where}: {type(exc).__name__}: {exc}")
        raise RuntimeError("; ".join(failed))


def compile_call(var, problem: dict, params: dict, mode: str, inputs: dict, target, device) -> list[dict]:
    """The variant's call (and its backward where ``mode`` has one) on ``inputs`` under
    :func:`kernels.launch.compile_only` (host launchers built too); ``[{"name", "hash",
    "launcher_ms"}]`` of the kernels it compiled (``launcher_ms`` None: no launcher to build)."""
    import torch

    from kernels.launch import compile_only
    from kernels.spec import as_tuple

    backward = mode in ("backward", "full")
    with torch.set_grad_enabled(backward), compile_only(target, device, launchers=True) as compiled:
        outputs = as_tuple(var.run(inputs, problem, **params))
        if backward:
            outs = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
            wrt = [v for v in inputs.values() if isinstance(v, torch.Tensor) and v.requires_grad]
            if outs and wrt:
                torch.autograd.grad(outs, wrt, [torch.ones_like(o) for o in outs], allow_unused=True)
    return [{"name": c.name, "hash": c.hash, "launcher_ms": c.launcher_ms} for c in compiled]


def _stand_in(value, where: str):
    """A tensor's copy on ``where`` (meta: shape, dtype and strides only), its grad flag kept."""
    import torch

    if not isinstance(value, torch.Tensor):
        return value
    copy = value.detach().to("meta") if where == "meta" else value.detach().clone()
    return copy.requires_grad_(value.requires_grad)
