"""A sweep task compiled ahead: the task as a :class:`~workbench.compiling.jobs.CompileJob`, and
what a measuring worker checks of the result.

- :func:`submit_tasks` / :func:`settle_task`: tasks submitted to this process's compile service
  (:mod:`workbench.compiling.service`) by the sweep engine, and one settled before another
  process measures it (the isolate executor).
- :func:`compile_task`: one task compiled for a device's facts
  (:func:`workbench.compiling.jobs.compile_job`; a plain dict, never raises). The Ray executor's
  compile workers run it (:class:`workbench.sweep.actors.CompileWorker`).
- :func:`found_in_cache`: whether every kernel a result names is in this process's Triton cache.

What a measured record notes of its compile-ahead is :mod:`workbench.compiling.note`; the
driver's side of a Ray run's compile-ahead (which worker compiles what, which task a measuring
actor takes) is :mod:`workbench.sweep.compile_ahead_driver`.
"""

from __future__ import annotations

import os

from workbench.compiling.cache import cache_folder, triton_cache_dir
from workbench.compiling.jobs import CompileJob, compile_job, kind_of
from workbench.sweep.tasks import SweepTask


def job_of_task(task: SweepTask, kind: str = "triton") -> CompileJob:
    """The compile job of a sweep task (its problem and tiles as the task resolved them);
    ``kind`` "graphs" for a torch.compile peer's (:func:`job_kind`)."""
    return CompileJob(
        task.family,
        task.family_module,
        task.variant,
        task.dtype,
        task.mode,
        dict(task.problem),
        dict(task.params),
        task.seed,
        task.tables,
        kind,
    )


def job_kind(task: SweepTask, specs: dict | None = None) -> str | None:
    """What of ``task`` this process's compile service can compile ahead: "triton" (ours, a
    Triton peer's), "graphs" (a torch.compile peer's), or None (nothing, or a family no process
    here knows; ``specs``: the KernelSpecs an executor holds by name)."""
    from kernels.spec import get

    try:
        var = ((specs or {}).get(task.family) or get(task.family)).variant(task.variant)
    except (KeyError, ValueError):
        return None
    return kind_of(var)


def submit_tasks(tasks, specs: dict | None = None) -> int:
    """Submit the tasks that measure on a GPU to this process's compile service
    (:func:`workbench.compiling.service.for_kind`), in their order; how many were new. Skipped:
    variants with nothing to compile ahead, families no other process can import (``specs``: the
    KernelSpecs the executor holds by name, for families that are not registered)."""
    from workbench.compiling import service as compile_service

    submitted = 0
    for kind in dict.fromkeys(task.device for task in tasks):
        service = compile_service.for_kind(kind)
        if service is None:
            continue
        jobs = []
        for task in tasks:
            if task.device != kind or not task.family_module:
                continue
            what = job_kind(task, specs)
            if what is not None:
                jobs.append(job_of_task(task, what))
        submitted += service.submit(jobs)
    return submitted


def settle_task(task: SweepTask) -> dict | None:
    """:meth:`workbench.compiling.service.CompileService.settle` for a task another process will
    measure (the isolate executor's child): waits for its compile in flight, so the child finds
    it in the cache; None where there is nothing to wait for."""
    from workbench.compiling import service as compile_service

    service = compile_service.active()
    what = job_kind(task)
    return None if service is None or what is None else service.settle(job_of_task(task, what))


def compile_task(task: SweepTask, facts: dict) -> dict:
    """Compile ``task``'s kernels for the device ``facts`` describe, running nothing
    (:func:`workbench.compiling.jobs.compile_job`).

    ``{"ok", "inputs": "meta" | "cpu" | None, "kernels": [{"name", "hash"}], "ms", "error",
    "worker"}``; a configuration that cannot be compiled ahead gives ``ok`` False and why."""
    return compile_job(job_of_task(task), facts)


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
