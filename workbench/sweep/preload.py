"""What every Ray worker process of a sweep does the moment it starts, before an actor is put in it.

Imported by Ray itself in each worker process (Ray's ``preload_python_modules``, which
:class:`workbench.sweep.ray_executor.RayExecutor` sets for an embedded Ray; on a cluster its nodes are started with
``RAY_preload_python_modules=workbench.sweep.preload``): it imports the measuring stack (torch,
Triton, the families, :mod:`workbench.measure`) and hashes Triton's own library
(``triton_key``, the first part of every compile's cache key, about 0.5 s), touching no device.

Why at the process's start: a raylet starts its worker processes as soon as it is up, seconds
before the driver asks for the first actor (1.7-2.6 s on the 4xH100 at b775391), and the first
measuring actors and compile workers are placed in those processes. Their imports (4-5 s on an
H100 host, torch alone 3-4 s) then run while Ray is still starting, not after the actor was
asked for. A worker setup hook (``runtime_env={"worker_process_setup_hook": ...}``) does not do
that: the job's runtime environment then differs from the one Ray started its workers with, so
the actors get new processes, started when they are asked for (checked with Ray 2.60 on the CPU:
the hook ran only in two new processes, after the actors were requested, while the two workers
Ray had started stayed idle).

Nothing here touches CUDA: Ray gives a worker its GPU (``CUDA_VISIBLE_DEVICES``) only when it
places an actor in it, and CUDA reads that variable when it starts. Where
``WORKBENCH_WORKER_LOG_DIR`` is set (the driver's embedded Ray passes its run's log folder), the
process's standard output and error go to a file there first (:func:`workbench.sweep.worker_log.redirect_output`), so
nothing a worker or its compiler prints reaches the driver's console. Never raises: a failed
step is paid again, as without this, where the actor needs it. :data:`STAMPS` keeps when it
began and ended, for the sweep's timeline.
"""

from __future__ import annotations

import os
import sys
import time

LOG_DIR_ENV = "WORKBENCH_WORKER_LOG_DIR"

STAMPS: dict[str, float] = {}


def _preload() -> None:
    STAMPS["preload_begun"] = time.time()
    folder = os.environ.get(LOG_DIR_ENV)
    if folder:
        from workbench.sweep.worker_log import redirect_output

        redirect_output(os.path.join(folder, f"worker-{os.getpid()}.log"))
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
        from triton.runtime.cache import triton_key

        import kernels  # noqa: F401  the built-in families
        import workbench.measure  # noqa: F401
        import workbench.sweep.tasks  # noqa: F401  what the actors need when Ray unpickles them
        from workbench.compiling.target import prepare_compiler

        prepare_compiler()
        triton_key()
    except Exception as exc:  # noqa: BLE001 - paid again where needed; said in the worker's log
        print(f"workbench preload: {type(exc).__name__}: {exc}", flush=True)
    STAMPS["preloaded"] = time.time()


def _in_ray_worker() -> bool:
    """Ray's worker processes run its ``default_worker.py``; anything else importing this module
    (a driver, a test) gets nothing done to it."""
    return os.path.basename(sys.argv[0] if sys.argv else "") == "default_worker.py"


if _in_ray_worker() and os.environ.get("WORKBENCH_NO_PRELOAD") != "1":
    _preload()
