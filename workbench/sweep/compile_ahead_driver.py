"""The driver's side of a Ray sweep's compile-ahead: which compile worker compiles what, and
which queued configuration a free measuring actor takes.

Compile workers (:class:`workbench.sweep.actors.CompileWorker`: CPU-side actors, no GPU asked
for, none touched, run at a lower priority) compile queued configurations for the measuring
device (:mod:`workbench.sweep.compile_ahead`) into the host's Triton cache while the GPUs
measure, each started by when it must begin to be done as the measuring actors reach it
(:meth:`CompileAhead.feed`, from :meth:`workbench.sweep.lanes.Lanes.reach_times`).
A measuring actor that frees up takes, from its lane, the first configuration whose
compile-ahead has finished (ok or not), else the first that no compile worker holds (and
compiles it itself), else a finished one from another lane, else waits for the compile in
flight, which started earlier than it could (:meth:`workbench.sweep.lanes.Lanes.take`).
Best effort: a configuration that could not be compiled ahead is compiled by its measuring
actor as before; its record notes what the compile-ahead did
(:func:`workbench.compiling.note.note_on_record`).

- :class:`CompileAhead`: one run's compile workers, their calls in flight and results.
- :class:`CompileAheadByNode`: a :class:`CompileAhead` per node of a cluster, each compiling into
  its own node's Triton cache (nodes need no shared disk).
- :func:`default_compile_workers`: how many compile workers a host gets.
- :func:`embedded_ray_cpus`: the CPUs an embedded Ray on a host's GPUs declares (so it starts
  only the worker processes a sweep places).
- :func:`as_queued`: a task without the compile-ahead result attached to it, as it was queued.

:class:`workbench.sweep.ray_executor.RayExecutor` makes one :class:`CompileAhead` per run,
keeps its workers from run to run, and decides which device's facts it compiles for.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import statistics
import time
from collections import deque

from workbench.sweep.actors import kill_actor

SHARED = "all nodes"  # the key of a run's one compile-ahead when its nodes share a cluster cache
COMPILE_TIMEOUT_S = 300.0  # a compile-ahead past this (or the executor's timeout) is given up
REACH_SAFETY = 0.5  # a task may be reached this much sooner than its lane predicts (steals, faster timings)


def expected_compile_s(task) -> float:
    """The seconds ``task``'s family expects its compile to take (``KernelSpec.compile_s``),
    else 0 (unknown, or a family this process cannot look up)."""
    try:
        from kernels import get

        estimate = get(task.family).compile_s
        return float(estimate(task.problem, task.params) or 0.0) if estimate is not None else 0.0
    except Exception:  # noqa: BLE001 - an estimate only orders the compiles
        return 0.0


def default_compile_workers(cpus: int, slots: int) -> int:
    """Compile workers for a host of ``cpus`` CPUs measuring on ``slots`` GPUs: 4 per GPU and 4
    more, at most half the CPUs the measuring actors leave (the rest stay theirs), at least 1.

    Why per GPU: a compile is about 0.75 s of one CPU and a measurement about 0.2 s of a GPU (the
    208-configuration scaling sweep on H100s), so each GPU measuring keeps about 4 compile workers
    busy. With 8 for two GPUs the compile-ahead fell behind at a sweep's start (whose first
    configurations no one had compiled yet) and the measuring actors compiled 10 configurations
    themselves, 4 s of GPU time idle in a 29 s sweep."""
    return max(1, min(4 * slots + 4, (cpus - slots) // 2))


def embedded_ray_cpus(
    host_cpus: int, gpus: int, gpus_per_task: float, cpus_per_task: float, workers: int | None
) -> int:
    """The CPUs an embedded Ray on ``gpus`` of this host's GPUs declares: enough for the
    processes a GPU sweep places (a measuring actor per slot with ``cpus_per_task`` each, the
    ``workers`` compile workers, :func:`default_compile_workers` where None, the cluster cache's
    store and one spare), never more than the host's ``host_cpus``.

    Why not the host's count: Ray starts one worker process per declared CPU as it comes up,
    and each imports the measuring stack as it starts (:mod:`workbench.sweep.preload`). On a
    host of 64 CPUs and 4 H200s a sweep used 25 of those 64 processes, and the 64 imports side
    by side took 7.3-9.6 s each in the actors that measured (the 4 x H100's actors, importing
    alone, 4.4-5.5 s): the actors' start waited on imports for processes that never got an
    actor."""
    slots = max(1, int(gpus // max(gpus_per_task, 1e-9)))
    if workers is None:
        workers = default_compile_workers(host_cpus, slots)
    return max(1, min(host_cpus, max(math.ceil(slots * cpus_per_task), slots + workers + 2)))


def as_queued(task):
    """The task as it was queued (without the compile-ahead result the executor added)."""
    if "compiled_ahead" not in task.extra:
        return task
    return dataclasses.replace(task, extra={k: v for k, v in task.extra.items() if k != "compiled_ahead"})


class CompileAhead:
    """One run's compile-ahead: its compile workers, the calls in flight, the results by task key.

    ``feed`` gives idle compile workers the queued tasks none has had, those that must start
    soonest first (see :meth:`feed`); ``pick`` chooses the task a free measuring actor takes (see
    the module docstring) and ``attach`` gives it its compile-ahead's result; ``collect`` files a
    finished call (and learns from its seconds); ``expire`` gives up calls past ``limit_s`` (their
    worker is replaced); ``retarget`` starts again for other device facts. ``source``: where
    ``facts`` came from (the summary's ``target``)."""

    def __init__(
        self, ray, workers: list, facts: dict | None, limit_s: float, new_worker, source: str = "given", kill=None
    ):
        """``new_worker(old)``: a compile worker to take ``old``'s place (on its node);
        ``kill(worker)``: how a worker is stopped (the executor's, which also releases its
        leases in the cluster cache; default :func:`kill_actor`)."""
        self.ray = ray
        self.kill = kill or (lambda worker: kill_actor(ray, worker))
        self.workers = list(workers)
        self.idle = deque(self.workers)
        self.facts = facts
        self.source = source
        self.retargeted = False
        self.limit_s = limit_s
        self.new_worker = new_worker
        self.calls: dict = {}  # ref -> (task key, worker, sent at)
        self._dropped: list = []  # calls of workers replaced mid-compile: collected at finish
        self.results: dict = {}  # task key -> compile_task's result
        self.taken = 0  # tasks measured with a compile-ahead result
        self._sent_to_actors: set = set()  # keys of the tasks measuring actors have taken
        self._estimates: dict[str, float] = {}  # task key -> its family's compile estimate (s)
        self._ratios: dict[str, list[float]] = {}  # family -> compile seconds / its estimate, finished ones
        self._seconds: dict[str, list[float]] = {}  # family -> compile seconds, finished ones
        self._medians: dict[tuple, float] = {}  # ("ratio" | "seconds", family) -> the median of those
        self._families: dict = {}  # task key -> (family, estimate), of the compiles in flight

    def compiling(self) -> set:
        """The keys of the tasks being compiled now."""
        return {key for key, _worker, _sent in self.calls.values()}

    def feed(self, queued) -> None:
        """Give idle compile workers the queued tasks none has had (``queued``: ``[(task, seconds
        until an actor is expected to start it)]``, :meth:`workbench.sweep.lanes.Lanes.reach_times`),
        those whose compile must start soonest first: the time an actor reaches the task less
        its expected compile (:meth:`expected_compile_s`).

        Why: a compile begun only when the actors' order came near its task made the GPU that
        reached it wait at the sweep's end. On 4 H100s (issue 44, 7488ffb) the last configuration
        was an RMSNorm forward at hidden 16384 with 4 rows on 2 warps (2322 spilled registers)
        whose compile took 10.8-13.2 s: one GPU waited 3.9 s for it at the end. b775391 started
        the families' longest expected compiles first on a quarter of the workers; replayed with
        that run's times (benchmarks/diagnostics/lane_replay.py), block-sparse tiles expected to
        compile for 2-6 s (they took 1-1.7 s) filled that quarter, the 9.1 s compile began 4.9 s
        in, and one actor waited 2.2 s for it at the end. Ordered by when each compile must
        start, with the estimates corrected by the compiles finished so far, it began first."""
        if self.facts is None or not self.idle:
            return
        busy = self.compiling()
        candidates = (
            (REACH_SAFETY * reach - self.expected_compile_s(task), reach, i, task)
            for i, (task, reach) in enumerate(queued)
            if task.key not in self.results and task.key not in busy
        )
        for _start, _reach, _i, task in heapq.nsmallest(len(self.idle), candidates):
            self._send(task)

    def expected_compile_s(self, task) -> float:
        """The seconds ``task``'s compile is expected to take: its family's estimate
        (:func:`expected_compile_s`) times the median of finished compiles' ratio to theirs; for
        a family without an estimate, the median of its finished compiles (0 before any)."""
        estimate = self._estimates.get(task.key)
        if estimate is None:
            estimate = self._estimates[task.key] = expected_compile_s(task)
        if estimate > 0:
            return estimate * self._medians.get(("ratio", task.family), 1.0)
        return self._medians.get(("seconds", task.family), 0.0)

    def _learn(self, key: str, result: dict) -> None:
        family, estimate = self._families.pop(key, (None, 0.0))
        if family is None or not result.get("ok"):
            return
        seconds = float(result.get("ms") or 0.0) / 1e3
        self._seconds.setdefault(family, []).append(seconds)
        self._medians[("seconds", family)] = statistics.median(self._seconds[family])
        if estimate > 0:
            self._ratios.setdefault(family, []).append(seconds / estimate)
            self._medians[("ratio", family)] = statistics.median(self._ratios[family])

    def _send(self, task) -> None:
        worker = self.idle.popleft()
        ref = worker.compile.remote(task, self.facts)
        self.calls[ref] = (task.key, worker, time.monotonic())
        self._families[task.key] = (task.family, self._estimates.get(task.key) or 0.0)

    def refs(self) -> list:
        return list(self.calls)

    def pick(self, tasks, compiled_only: bool = False) -> int | None:
        """Which of ``tasks`` (queued, in a free measuring actor's order of preference) it takes,
        as an index: the first whose compile-ahead finished, else (unless ``compiled_only``) the
        first no compile worker holds (the actor compiles it itself), else None (it waits for a
        compile under way)."""
        first_free = None
        busy = self.compiling()
        for i, task in enumerate(tasks):
            if task.key in self.results:
                return i
            if first_free is None and task.key not in busy:
                first_free = i
        return None if compiled_only else first_free

    def attach(self, task):
        """``task`` as sent to its measuring actor: with its compile-ahead's result, if any."""
        self._sent_to_actors.add(task.key)
        result = self.results.get(task.key)
        if result is None:
            return task
        self.taken += 1
        return dataclasses.replace(task, extra={**task.extra, "compiled_ahead": result})

    def collect(self, ref) -> None:
        key, worker, _sent = self.calls.pop(ref)
        try:
            self.results[key] = self.ray.get(ref)
            self.idle.append(worker)
            self._learn(key, self.results[key])
        except self.ray.exceptions.RayError as exc:  # the compile worker died: a new one replaces it
            self.results[key] = _failed(f"compile worker lost: {type(exc).__name__}")
            self._replace(worker)

    def expire(self) -> None:
        now = time.monotonic()
        for ref, (key, worker, sent) in list(self.calls.items()):
            if now - sent > self.limit_s:
                self.calls.pop(ref)
                self._dropped.append(ref)
                self.results[key] = _failed(f"no result after {self.limit_s:g} s; its compile worker was replaced")
                self._replace(worker)

    def retarget(self, facts: dict) -> None:
        """Compile for ``facts`` from now on: what was compiled, or is being compiled, for the
        old target is dropped (those calls' workers are replaced), and compiled again."""
        self.facts, self.source, self.retargeted = facts, "actor", True
        self.results.clear()
        for ref, (_key, worker, _sent) in list(self.calls.items()):
            self._dropped.append(ref)
            self._replace(worker)
        self.calls.clear()

    def _replace(self, worker) -> None:
        self.kill(worker)
        fresh = self.new_worker(worker)
        self.workers = [fresh if w is worker else w for w in self.workers]
        self.idle.append(fresh)

    def finish(self) -> list:
        """The workers to keep for the next run. Those still compiling (the run was cut short)
        are stopped, not replaced: their output goes to their log file, so nothing reaches the
        console, and their calls' errors are collected here, not printed by Ray as unhandled.
        The executor starts new ones when a later run needs them."""
        stopped = [(ref, worker) for ref, (_key, worker, _sent) in self.calls.items()]
        for _ref, worker in stopped:
            self.kill(worker)
        self.calls.clear()
        drain(self.ray, [ref for ref, _worker in stopped] + self._dropped)
        self._dropped = []
        gone = {id(worker) for _ref, worker in stopped}
        self.workers = [w for w in self.workers if id(w) not in gone]
        return self.workers

    def summary(self) -> dict:
        done = list(self.results.values())
        return {
            "workers": len(self.workers),
            "target": self.source,
            "retargeted": self.retargeted,
            "compiled": sum(1 for r in done if r.get("ok")),
            "failed": sum(1 for r in done if not r.get("ok")),
            "measured_after": self.taken,
            "busy_s": sum(float(r.get("ms") or 0.0) for r in done) / 1e3,
            "launchers_built": sum(1 for r in done for k in r.get("kernels") or [] if k.get("launcher_ms") is not None),
        }


class CompileAheadByNode:
    """One run's compile-ahead on every node of a cluster.

    Without a cluster cache: a :class:`CompileAhead` per node whose compile workers run on that
    node and write into its own Triton cache, so nodes need no shared disk. Each node's compile
    workers are fed in the order that node's measuring actors will reach the queue
    (:meth:`workbench.sweep.lanes.Lanes.reach_times`), and a measuring actor takes what its own
    node compiled (:meth:`for_node`). On one host, one node: the same as its single
    :class:`CompileAhead`.

    With one (:mod:`workbench.sweep.cluster_cache`): a single :class:`CompileAhead`, under the key
    :data:`SHARED`, over every node's compile workers: each configuration is compiled once in the
    cluster, in the order all the actors reach the queue, and a measuring actor on any node takes
    it (its node fetches the kernels from the cluster cache)."""

    def __init__(self, by_node: dict):
        self.by_node = dict(by_node)  # node id (or SHARED) -> CompileAhead

    @property
    def facts(self) -> dict | None:
        return next(iter(self.by_node.values())).facts if self.by_node else None

    @facts.setter
    def facts(self, facts: dict) -> None:
        for ahead in self.by_node.values():
            ahead.facts = facts

    def retarget(self, facts: dict) -> None:
        for ahead in self.by_node.values():
            ahead.retarget(facts)

    def for_node(self, node) -> CompileAhead | None:
        """The compile-ahead of the node a measuring actor runs on (None: that node has none)."""
        return self.by_node.get(node) or self.by_node.get(SHARED)

    def feed(self, lanes, actor_nodes: dict) -> None:
        """Feed each node's idle compile workers from the lanes its measuring actors hold
        (``actor_nodes``: measuring actor -> node), then from the lanes nobody holds yet; the
        shared compile-ahead from every lane."""
        for node, ahead in self.by_node.items():
            if not ahead.idle:
                continue
            if node == SHARED:
                ahead.feed(lanes.reach_times())
            else:
                ahead.feed(lanes.reach_times({actor for actor, where in actor_nodes.items() if where == node}))

    def refs(self) -> list:
        return [ref for ahead in self.by_node.values() for ref in ahead.calls]

    def collect(self, ref) -> None:
        for ahead in self.by_node.values():
            if ref in ahead.calls:
                ahead.collect(ref)
                return

    def expire(self) -> None:
        for ahead in self.by_node.values():
            ahead.expire()

    def finish(self) -> dict:
        """The compile workers to keep for the next run, by node."""
        return {node: ahead.finish() for node, ahead in self.by_node.items()}

    def summary(self) -> dict:
        """The nodes' summaries added up (``nodes``: how many had compile workers;
        ``compiled_by_node``: what each node's compiled)."""
        parts = [ahead.summary() for ahead in self.by_node.values()]
        total = {key: sum(part[key] for part in parts) for key in ("workers", "compiled", "failed", "measured_after")}
        total["busy_s"] = sum(part["busy_s"] for part in parts)
        total["launchers_built"] = sum(part["launchers_built"] for part in parts)
        total["target"] = parts[0]["target"] if parts else None
        total["retargeted"] = any(part["retargeted"] for part in parts)
        total["nodes"] = len(parts)
        total["compiled_by_node"] = {node: part["compiled"] for node, part in zip(self.by_node, parts)}
        return total


def drain(ray, refs: list, timeout_s: float = 5.0) -> None:
    """Collect the results (errors, for killed workers) of calls no one waits for any more, so
    Ray does not print them as unhandled errors."""
    if not refs:
        return
    try:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    except Exception:  # noqa: BLE001 - Ray stopping
        return
    for ref in ready:
        try:
            ray.get(ref)
        except Exception:  # noqa: BLE001 - a killed worker's call: expected
            pass


def _failed(why: str) -> dict:
    return {"ok": False, "inputs": None, "kernels": [], "ms": 0.0, "error": why, "worker": {}}
