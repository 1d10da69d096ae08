"""The process's compile service: configurations about to be measured on a GPU are compiled by a
pool of processes while the GPU measures others.

Whatever is about to measure submits what it will measure, in the order it will measure it: a
suite its targets' configurations (:func:`workbench.suites.run.run_suite`), a sweep its tasks
(:func:`workbench.sweep.engine.run_sweep` for the local and isolate executors; the Ray executor
has compile workers of its own), a notebook's Session its sweeps and tunes, the Explorer the
configurations one step away from the one on screen. A configuration's Triton kernels go to the
compile processes (:mod:`workbench.compiling.pool`), a torch.compile peer's graphs to the graph
processes (:mod:`workbench.compiling.graphs`). Then :func:`workbench.measure.measure_many`,
before a configuration's first call, :func:`settle` s it:

- compiled ahead (or failed to): its first call loads the kernels from Triton's disk cache; the
  record notes what the compile process did (``compile_facts["compiled_ahead"]``);
- being compiled now: it waits for that compile, which started before it could (at most
  :data:`WAIT_LIMIT_S`);
- still queued: the job is withdrawn and the measuring process compiles it itself, as without
  the service (the pool is behind: waiting would be slower);
- never submitted: nothing changes.

It never changes what is measured or in which order, and nothing it does runs on a GPU: the
compile processes see none, and the graph processes, which hold a CUDA context to compile
Inductor's graphs, launch nothing there. On the CPU it is never started: the
interpreter compiles nothing. ``WORKBENCH_COMPILE_AHEAD=0`` turns it off (every first call
compiles in the measuring process, one after another: ``workbench bench --serial-compile``);
``WORKBENCH_COMPILE_WORKERS`` sets the number of compile processes
(:func:`workbench.compiling.pool.default_workers` by default), ``WORKBENCH_GRAPH_WORKERS`` that of
graph processes (:func:`workbench.compiling.graphs.default_graph_workers`; 0: torch.compile's
graphs are compiled by the measuring process, as before).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from workbench.compiling.jobs import CompileJob, job_of

ENV_SWITCH = "WORKBENCH_COMPILE_AHEAD"
ENV_WORKERS = "WORKBENCH_COMPILE_WORKERS"
ENV_GRAPH_WORKERS = "WORKBENCH_GRAPH_WORKERS"
WAIT_LIMIT_S = 120.0  # the longest a measuring process waits for a compile in flight


def enabled() -> bool:
    """False where ``WORKBENCH_COMPILE_AHEAD`` is 0 / off / false / no."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


class CompileService:
    """One process's compile-ahead: a :class:`~workbench.compiling.pool.CompilePool` started on the
    first :meth:`submit` of a Triton job, a :class:`~workbench.compiling.graphs.GraphPool` on the
    first of a graphs job (none with ``graph_workers`` 0: those jobs are not taken), the jobs
    submitted (by key) and what became of them. ``pool_factory(facts, workers, log_path)`` and
    ``graph_pool_factory(workers, log_path)`` replace the pools (tests)."""

    def __init__(
        self,
        facts: dict,
        workers: int,
        log_path: str | os.PathLike,
        pool_factory=None,
        graph_workers: int = 0,
        graph_pool_factory=None,
    ):
        self.facts = dict(facts)
        self.workers = workers
        self.graph_workers = graph_workers
        self.log_path = Path(log_path)
        self._factories = {"compile": pool_factory, "graphs": graph_pool_factory}
        self._pools: dict[str, Any] = {}  # "compile" / "graphs" -> its pool, made on first use
        self._start_asked: set[str] = set()  # the pools start() asked to start their processes
        self._futures: dict[str, Any] = {}  # key -> the pool's future, until settled
        self._settled: set[str] = set()
        self._lock = threading.Lock()
        self.counts = {"submitted": 0, "compiled": 0, "failed": 0, "withdrawn": 0, "waited": 0, "waited_s": 0.0}

    def _pool(self, name: str):
        """Pool ``name`` ("compile": the compile processes; "graphs": the graph processes), made
        now where it is not yet; None for graphs where there are no graph processes."""
        if name not in self._pools:
            factory = self._factories[name]
            if name == "compile":
                from workbench.compiling.pool import CompilePool

                made = (factory or CompilePool)(self.facts, self.workers, self.log_path)
            elif self.graph_workers <= 0:
                return None
            elif factory is not None:
                made = factory(self.graph_workers, self.log_path)
            else:
                import torch

                from workbench.compiling.graphs import GraphPool

                made = GraphPool(torch.cuda.current_device(), self.graph_workers, self.log_path)
            self._pools[name] = made
        return self._pools[name]

    def start(self, graphs: bool = False) -> None:
        """Start the compile processes now (they otherwise start with the first submission): for a
        caller that knows work is coming, a notebook's Session when it is made (widgets/session.py)
        and the Explorer at its first launch; with ``graphs``, the graph processes too (a family
        with a torch.compile peer). Each pool once only."""
        with self._lock:
            for name in ("compile", "graphs") if graphs else ("compile",):
                if name not in self._start_asked:
                    self._start_asked.add(name)
                    pool = self._pool(name)
                    if pool is not None:
                        pool.start()

    def submit(self, jobs: Iterable[CompileJob | None]) -> int:
        """Queue ``jobs`` (None entries skipped, and graphs jobs where there are no graph processes)
        in this order, each key once; how many were new."""
        new = 0
        with self._lock:
            for job in jobs:
                if job is None or job.key in self._futures or job.key in self._settled:
                    continue
                pool = self._pool("graphs" if job.kind == "graphs" else "compile")
                if pool is None:
                    continue
                self._futures[job.key] = pool.submit(job)
                new += 1
            self.counts["submitted"] += new
        return new

    def pending(self) -> int:
        """Jobs submitted and not settled yet (queued, compiling, or compiled and not measured)."""
        with self._lock:
            return len(self._futures)

    def state(self, job: CompileJob | None) -> str:
        """Where ``job`` stands: ``"none"`` (never submitted, or settled already: its first call
        will not wait), ``"queued"``, ``"compiling"`` or ``"done"`` (compiled, or failed)."""
        if job is None:
            return "none"
        with self._lock:
            future = self._futures.get(job.key)
        if future is None:
            return "none"
        if future.done():
            return "done"
        return "compiling" if future.running() else "queued"

    def wait_any(self, jobs: Iterable[CompileJob | None], limit_s: float = WAIT_LIMIT_S) -> None:
        """Return once one of ``jobs`` is done (or none is pending, or ``limit_s`` passed)."""
        with self._lock:
            futures = [self._futures[j.key] for j in jobs if j is not None and j.key in self._futures]
        if futures:
            concurrent.futures.wait(futures, timeout=limit_s, return_when=concurrent.futures.FIRST_COMPLETED)

    def settle(self, job: CompileJob | None, limit_s: float = WAIT_LIMIT_S, take_over: bool = True) -> dict | None:
        """Before the first call of ``job``'s configuration: the compile process's result to note
        on its record (``waited_ms`` added when it waited), or None where the measuring process
        compiles it itself (never submitted, still queued and ``take_over``, or not done within
        ``limit_s``)."""
        if job is None:
            return None
        with self._lock:
            future = self._futures.pop(job.key, None)
            self._settled.add(job.key)
        if future is None:
            return None
        waited_ms = None
        if not future.done():
            if take_over and not future.running() and future.cancel():
                self._count("withdrawn")
                return None
            started = time.perf_counter()
            try:
                future.result(timeout=limit_s)
            except Exception:  # noqa: BLE001 - read below (a failed compile is noted, not raised)
                pass
            if not future.done():
                future.cancel()  # stops its process; the measuring process compiles it
                self._count("withdrawn")
                return None
            waited_ms = (time.perf_counter() - started) * 1e3
            self._count("waited", waited_ms / 1e3)
        try:
            result = dict(future.result())
        except Exception as exc:  # noqa: BLE001 - its process died or timed out: compiled here
            result = {"ok": False, "inputs": None, "kernels": [], "ms": 0.0, "worker": {}}
            result["error"] = f"compile process lost: {' '.join(f'{type(exc).__name__}: {exc}'.split())[:300]}"
        self._count("compiled" if result.get("ok") else "failed")
        if waited_ms is not None:
            result["waited_ms"] = waited_ms
        return result

    def _count(self, name: str, seconds: float = 0.0) -> None:
        with self._lock:
            self.counts[name] += 1
            if seconds:
                self.counts["waited_s"] += seconds

    def summary(self) -> dict:
        """Counts so far: submitted, compiled / failed (settled with a compile process's result),
        withdrawn (compiled by the measuring process instead), waited (and ``waited_s``), with the
        compile processes and the log file."""
        with self._lock:
            return {**self.counts, "workers": self.workers, "graph_workers": self.graph_workers,
                    "log": str(self.log_path)}  # fmt: skip

    def close(self) -> None:
        """Stop the compile and graph processes (jobs not settled are dropped)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
            self._futures.clear()
        for pool in pools:
            pool.close()


_SERVICE: CompileService | None = None
_SERVICE_LOCK = threading.Lock()


def for_kind(kind: str) -> CompileService | None:
    """This process's service for measuring on ``kind`` (started the first time), or None where
    nothing is compiled ahead: a device other than cuda, the switch off, or facts that cannot be
    read (no GPU)."""
    global _SERVICE
    if kind != "cuda" or not enabled():
        return None
    with _SERVICE_LOCK:
        if _SERVICE is None:
            from workbench.compiling.graphs import default_graph_workers
            from workbench.compiling.pool import default_workers
            from workbench.compiling.target import visible_device_facts

            facts = visible_device_facts("cuda")
            if facts is None:
                return None
            workers = int(os.environ.get(ENV_WORKERS) or default_workers())
            graph_workers = os.environ.get(ENV_GRAPH_WORKERS, "").strip()
            graph_workers = int(graph_workers) if graph_workers else default_graph_workers()
            log = Path(tempfile.gettempdir()) / f"workbench-compile-{os.getpid()}.log"
            _SERVICE = CompileService(facts, workers, log, graph_workers=graph_workers)
        return _SERVICE


def install(service: CompileService | None) -> CompileService | None:
    """Make ``service`` this process's (tests, or a caller with its own facts); the one it
    replaces is closed. Returns it."""
    global _SERVICE
    with _SERVICE_LOCK:
        old, _SERVICE = _SERVICE, service
    if old is not None and old is not service:
        old.close()
    return service


def active() -> CompileService | None:
    """This process's service if one was started, else None (nothing is started here)."""
    return _SERVICE


def start(device_kind: str, graphs: bool = False) -> bool:
    """Start this process's compile processes for ``device_kind`` now, where it compiles ahead
    (with ``graphs``, its graph processes too); whether a service is there (False on the CPU, or
    with the switch off)."""
    service = for_kind(device_kind)
    if service is None:
        return False
    service.start(graphs=graphs)
    return True


def submit_configs(spec, configs: Iterable[Mapping[str, Any]], device_kind: str, quick: bool = False) -> int:
    """Submit configurations as :func:`workbench.measure.measure_many` takes them (``variant``,
    ``dtype``, ``mode``, ``problem``, ``params``) for measuring on ``device_kind``; how many
    were new (0 where nothing is compiled ahead)."""
    service = for_kind(device_kind)
    if service is None:
        return 0
    jobs = (
        job_of(
            spec,
            c["variant"],
            dtype=c.get("dtype", "bf16"),
            mode=c.get("mode", "forward"),
            problem=c.get("problem"),
            params=c.get("params"),
            quick=quick,
        )
        for c in configs
    )
    return service.submit(jobs)


def in_readiness_order(spec, configs: list[Mapping[str, Any]]) -> Iterable[int]:
    """The indices of ``configs`` (as :func:`submit_configs` took them) in the order to
    run them when the order does not matter (checks, not timings): each time, the first whose
    compile is done or that has nothing to wait for; else the first still queued (the measuring
    process compiles it itself, as :meth:`CompileService.settle` would); else, every one left
    compiling, the first to finish. In the given order where no service was started."""
    service = _SERVICE
    left = list(range(len(configs)))
    if service is None:
        yield from left
        return
    jobs = {
        i: job_of(spec, c["variant"], dtype=c.get("dtype", "bf16"), mode=c.get("mode", "forward"),
                  problem=c.get("problem"), params=c.get("params"))
        for i, c in enumerate(configs)
    }  # fmt: skip

    def first(wanted: tuple[str, ...]) -> int | None:
        return next((i for i in left if service.state(jobs[i]) in wanted), None)

    while left:
        pick = first(("none", "done"))
        if pick is None:
            pick = first(("queued",))
        if pick is None:
            service.wait_any([jobs[i] for i in left])
            pick = first(("none", "done"))
        pick = left[0] if pick is None else pick
        left.remove(pick)
        yield pick


def settle(spec, variant, dtype: str, mode: str, problem: dict, params: dict) -> dict | None:
    """:meth:`CompileService.settle` for a configuration whose problem and tiles are resolved, in
    this process's service; None at once where no service was started."""
    service = _SERVICE
    if service is None:
        return None
    return service.settle(job_of(spec, variant, dtype=dtype, mode=mode, problem=problem, params=params, resolved=True))


def shutdown() -> None:
    """Stop this process's compile processes (at exit)."""
    install(None)


atexit.register(shutdown)
