"""The Ray actors of a sweep, as plain classes (the executor wraps them with ``ray.remote``).

- :class:`DeviceWorker`, the measuring actor: one process that keeps the device Ray gave it when
  it started. Its warm-up call (:meth:`DeviceWorker.ready`: imports, CUDA start, the device's
  facts, the once-per-process parts of a first measurement, and Triton's first compile,
  :mod:`workbench.compiling.first_compile`) comes before its first configuration; then it measures
  one configuration per call (:meth:`DeviceWorker.run`), first saying it started (an item
  keyed :data:`STARTED_KEY`: the driver's timeout counts from there).
- :class:`CompileWorker`, a compile-ahead actor: a CPU-side process that asks for no GPU and
  touches none, runs at a lower priority, and compiles one configuration per call
  (:func:`workbench.sweep.compile_ahead.compile_task`). Its first act, before it imports torch,
  is to build Triton's host utilities module into the host's cache; once the target is known it
  pays Triton's first compile (:meth:`CompileWorker.warm_up`).
- :func:`kill_actor`: how the driver ends either kind.

Both kinds on one host share one Triton cache folder (:func:`workbench.sweep.tasks.use_host_triton_cache`)
and, where placed (:class:`workbench.sweep.cpus.Placement`), run on CPUs of their own. With a
cluster cache (``store``: :mod:`workbench.sweep.cluster_cache`) both also read and write the
kernels of every other node, and a measuring actor copies the kernels a compile worker compiled
for its configuration into its node's folder before the first call. Both send their standard
output and error to a log file (``log_dir``; :func:`workbench.sweep.preload.redirect_output`):
what a compiler prints (a failing ``ptxas`` prints its whole PTX) never reaches the console; a
configuration that fails brings its part of the measuring actor's log back with its record
(``failure_log``), which the executor keeps in the run's folder.
:class:`workbench.sweep.ray_executor.RayExecutor` starts, feeds and replaces them.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

from workbench.sweep.tasks import run_task, use_host_triton_cache, worker_info
from workbench.sweep.timeline import process_start_time
from workbench.sweep.worker_log import log_since, log_size, log_to

# The key of the item a measuring call yields before its record: "this configuration started".
STARTED_KEY = "__workbench_task_started__"
COMPILE_NICENESS = 10  # compile-ahead yields the CPUs to the measuring actors' host work


def kill_actor(ray, actor) -> None:
    """Kill a Ray actor for good; one already dead is left as it is."""
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already dead
        pass


class DeviceWorker:
    """The Ray actor: one process that keeps the device Ray gave it when it started, and
    measures one configuration per call."""

    def __init__(self):
        self.born = time.time()

    def ready(
        self, cache_root: str | None, device: str, placement=None, store: str | None = None, log_dir: str | None = None
    ) -> dict:
        """Warm up before the first configuration: the measuring stack imported, the device
        started, and what a first measurement does once per process (the device's copy bandwidth,
        the profiler's first session, its L2 flush buffer, NVML, versions, Triton's first
        compile) done.
        ``{"worker", "device", "stamps", "cpus"}``: where it runs, the facts of its device a
        compile-ahead compiles for (None: none to compile for), and the two below. Only a failed
        import raises; a device that fails here fails its measurements, which say why.
        ``"stamps"``: when (``time.time()``) the process started, this actor was made, and each
        step of the warm-up ended (imports, the device's start, the rest: ``warmed``, and its own
        steps ``warm_*``), for the run's timeline. ``placement``
        (:class:`workbench.sweep.cpus.Placement`): first, the process moves to its slot's CPUs
        (``"cpus"``: those, or None where it stayed where it was). ``store``: the cluster cache's
        name (:func:`workbench.sweep.cluster_cache.use_cluster_cache`); ``log_dir``: where this
        process's output goes (``"log"``: the file). Stamps ``preload_begun`` / ``preloaded``:
        the imports Ray's preload did when the process started (:mod:`workbench.sweep.preload`)."""
        from workbench.sweep.cluster_cache import use_cluster_cache
        from workbench.sweep.cpus import pin_to_slot
        from workbench.sweep.preload import STAMPS

        log = log_to(log_dir, "measuring")
        stamps = {"process": process_start_time(), **STAMPS, "init": self.born}
        cpus = pin_to_slot(placement)
        use_host_triton_cache(cache_root)
        use_cluster_cache(store)
        import workbench.measure  # noqa: F401 - the measuring stack imported before the first measurement
        from workbench.compiling.target import device_facts

        stamps["imported"] = time.time()
        if device == "cuda":
            _check_gpu_binding()
        try:
            facts = device_facts(device)
        except Exception:  # noqa: BLE001 - no compile-ahead check then
            facts = None
        stamps["device"] = time.time()
        try:
            _warm_up(device, stamps)
        except Exception:  # noqa: BLE001 - the first measurement does it again, and says what failed
            pass
        stamps["warmed"] = time.time()
        return {"worker": worker_info(), "device": facts, "stamps": stamps, "cpus": cpus, "log": log}

    def run(self, task):
        """Say "started" (the timeout counts from here; ``at``: when, for the timeline), then
        give the record. A task compiled ahead first has its kernels copied from the cluster
        cache into this node's Triton cache where they are missing (``fetched``: how each was
        found, :func:`workbench.sweep.cluster_cache.fetch_kernels`), and notes whether they were
        all in this node's cache before the first call (``found_on_node``). A record that failed
        (not one that cannot run) carries what this process printed meanwhile (``failure_log``)."""
        from workbench.sweep.cluster_cache import fetch_kernels, release_mine

        use_host_triton_cache(task.triton_cache_root)
        yield {STARTED_KEY: True, "worker": worker_info(), "at": time.time()}
        offset = log_size()
        ahead = task.extra.get("compiled_ahead")
        if ahead is not None:  # before the first call: is the compile-ahead in this node's cache?
            from workbench.sweep.compile_ahead import found_in_cache

            fetched = fetch_kernels(ahead.get("kernels") or []) if ahead.get("ok") else {}
            ahead = {**ahead, "found_on_node": found_in_cache(ahead)}
            if fetched:
                ahead["fetched"] = fetched
            task = dataclasses.replace(task, extra={**task.extra, "compiled_ahead": ahead})
        try:
            body = run_task(task)
        finally:
            release_mine()
        if (body.get("error") or body.get("passed") is False) and not body.get("cannot_run"):
            body["failure_log"] = log_since(offset)
        yield body


def _check_gpu_binding() -> None:
    """Raise unless this process sees exactly the GPUs Ray gave it. CUDA reads
    ``CUDA_VISIBLE_DEVICES`` once, when it starts; had anything in this worker started it before
    Ray set the variable (an import in the preload, :mod:`workbench.sweep.preload`), the actor
    would see every GPU and measure on the first, beside the other actors."""
    import ray
    import torch

    given = ray.get_gpu_ids()
    if given and torch.cuda.device_count() != len(given):
        raise RuntimeError(
            f"this worker sees {torch.cuda.device_count()} GPUs but Ray gave it {len(given)} ({given}): CUDA started "
            "before Ray set CUDA_VISIBLE_DEVICES; run the executor with preload=False (sweep_scaling.py --no-preload)"
        )


def _warm_up(device: str, stamps: dict) -> None:
    """What a measurement on ``device`` does first, once per process, done ahead of it; when each
    step ended goes into ``stamps`` (``warm_<step>``)."""
    from workbench.device import get_device
    from workbench.provenance import code_version
    from workbench.record import versions

    versions()
    code_version()
    stamps["warm_versions"] = time.time()
    dev = get_device(device)
    if dev.kind != "cpu":
        dev.state()
        stamps["warm_state"] = time.time()
        dev.flush_l2()
        stamps["warm_flush"] = time.time()
        dev.copy_bandwidth_gbps()
        stamps["warm_copy_bandwidth"] = time.time()
        if dev.kind == "cuda":  # the profiler's first session (seconds), unless the bandwidth's was it
            from workbench.timing import start_profiler

            start_profiler()
            stamps["warm_profiler"] = time.time()
        from workbench.compiling.first_compile import first_launch

        first_launch(dev.torch_device)
        stamps["warm_first_compile"] = time.time()


class CompileWorker:
    """The Ray actor of a compile-ahead: a CPU-side process that asks for no GPU and touches
    none, and compiles one configuration per call into its host's Triton cache."""

    def __init__(self, cache_root: str | None, cpus=None, store: str | None = None, log_dir: str | None = None):
        """``cpus``: the CPUs it runs on (a :class:`workbench.sweep.cpus.Placement`'s compile
        CPUs, away from the measuring actors'; None: any). ``store``: the cluster cache's name;
        ``log_dir``: where its output goes (a compile's messages never reach the console)."""
        from workbench.sweep.cluster_cache import use_cluster_cache

        log_to(log_dir, "compile")
        use_cluster_cache(store)
        if cpus:
            from workbench.sweep.cpus import pin

            pin(cpus)
        try:
            os.nice(COMPILE_NICENESS)
        except OSError:
            pass
        use_host_triton_cache(cache_root)
        from workbench.compiling.target import build_host_utilities, prepare_compiler

        # First, before torch's import: the measuring actors of the host, still importing it,
        # then load Triton's host utilities instead of each building them.
        try:
            build_host_utilities()
        except Exception:  # noqa: BLE001 - no CUDA driver library here: each measuring actor builds its own
            pass
        try:
            prepare_compiler()  # while the target may not be known yet
        except Exception:  # noqa: BLE001 - its first compile imports again, and says what failed
            pass

    def warm_up(self, facts: dict) -> float | None:
        """Pay Triton's once-per-process compile costs for ``facts``' target before the first
        configuration (:func:`workbench.compiling.first_compile.first_compile`); its milliseconds, or
        None where it failed (the first configuration pays them then, as without this)."""
        from workbench.compiling.first_compile import first_compile

        try:
            return first_compile(facts)
        except Exception:  # noqa: BLE001 - best effort, like every compile-ahead
            return None

    def compile(self, task, facts: dict) -> dict:
        """:func:`workbench.sweep.compile_ahead.compile_task`, each kernel noting how it came
        (``"how"``: compiled here, or found in the node's or the cluster's cache)."""
        from workbench.sweep.cluster_cache import how_found, release_mine
        from workbench.sweep.compile_ahead import compile_task

        try:
            result = compile_task(task, facts)
        finally:
            release_mine()
        for kernel in result.get("kernels") or []:
            how = how_found(kernel.get("hash") or "")
            if how is not None:
                kernel["how"] = how
        result.setdefault("worker", {})["node"] = _node_id()
        return result


def _node_id() -> str | None:
    """This Ray worker's node id (None outside Ray)."""
    ray = sys.modules.get("ray")
    try:
        return ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - no node then
        return None
