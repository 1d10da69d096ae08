"""The driver's side of a Ray sweep's compile-ahead: which compile worker compiles what, and
which queued configuration a free measuring actor takes.

Compile workers (:class:`workbench.sweep.actors.CompileWorker`: CPU-side actors, no GPU asked
for, none touched, run at a lower priority) compile queued configurations for the measuring
device (:mod:`workbench.sweep.compile_ahead`) into the host's Triton cache while the GPUs
measure, in the order the measuring actors will reach them (:meth:`workbench.sweep.lanes.Lanes.feed_order`).
A measuring actor that frees up takes, from its lane, the first configuration whose
compile-ahead has finished (ok or not), else the first that no compile worker holds (and
compiles it itself), else waits for the compile in flight, which started earlier than it could.
Best effort: a configuration that could not be compiled ahead is compiled by its measuring
actor as before; its record notes what the compile-ahead did
(:func:`workbench.compiling.note.note_on_record`).

- :class:`CompileAhead`: one run's compile workers, their calls in flight and results.
- :class:`CompileAheadByNode`: a :class:`CompileAhead` per node of a cluster, each compiling into
  its own node's Triton cache (nodes need no shared disk).
- :func:`default_compile_workers`: how many compile workers a host gets.
- :func:`as_queued`: a task without the compile-ahead result attached to it, as it was queued.

:class:`workbench.sweep.ray_executor.RayExecutor` makes one :class:`CompileAhead` per run,
keeps its workers from run to run, and decides which device's facts it compiles for.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque

from workbench.sweep.actors import kill_actor

COMPILE_TIMEOUT_S = 300.0  # a compile-ahead past this (or the executor's timeout) is given up
LONG_COMPILE_S = 2.0  # a configuration expected to compile this long or longer starts first


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


def as_queued(task):
    """The task as it was queued (without the compile-ahead result the executor added)."""
    if "compiled_ahead" not in task.extra:
        return task
    return dataclasses.replace(task, extra={k: v for k, v in task.extra.items() if k != "compiled_ahead"})


class CompileAhead:
    """One run's compile-ahead: its compile workers, the calls in flight, the results by task key.

    ``feed`` gives idle compile workers the queued tasks none has had (the long ones first, see
    :meth:`feed`); ``pick`` chooses the
    task a free measuring actor takes (see the module docstring) and ``attach`` gives it its
    compile-ahead's result; ``collect`` files a finished call; ``expire`` gives up calls past
    ``limit_s`` (their worker is replaced); ``retarget`` starts again for other device facts.
    ``source``: where ``facts`` came from (the summary's ``target``)."""

    def __init__(self, ray, workers: list, facts: dict | None, limit_s: float, new_worker, source: str = "given"):
        self.ray = ray
        self.workers = list(workers)
        self.idle = deque(self.workers)
        self.facts = facts
        self.source = source
        self.retargeted = False
        self.limit_s = limit_s
        self.new_worker = new_worker
        self.calls: dict = {}  # ref -> (task key, worker, sent at)
        self.results: dict = {}  # task key -> compile_task's result
        self.taken = 0  # tasks measured with a compile-ahead result
        self._long: list | None = None  # queued tasks expected to compile long, longest first
        self._long_keys: set = set()
        self._sent_to_actors: set = set()  # keys of the tasks measuring actors have taken

    def compiling(self) -> set:
        """The keys of the tasks being compiled now."""
        return {key for key, _worker, _sent in self.calls.values()}

    def feed(self, tasks) -> None:
        """Give idle compile workers the tasks none has had: first, on up to a quarter of the
        workers at a time, those whose family expects a compile of :data:`LONG_COMPILE_S` or
        more (:func:`expected_compile_s`), longest first; then the first of ``tasks`` (in the
        order the measuring actors will take them).

        Why: on 4 H100s (issue 44, 7488ffb) the last configuration of the 208-configuration sweep
        was an RMSNorm forward at hidden 16384 with 4 rows on 2 warps (1024 elements a thread,
        2322 spilled registers) whose compile took 10.8-13.2 s. Begun when the actors' order
        reached it, it left one GPU waiting 3.9 s for it at the end (one node), or its actor
        compiled it itself for 11.8 s (two nodes, 27.6 s against 19.4). Begun first, it is
        done long before the measuring reaches it."""
        if self.facts is None or not self.idle:
            return
        if self._long is None:  # the first feed sees the whole queue
            tasks = list(tasks)
            expected = {task.key: expected_compile_s(task) for task in tasks}
            self._long = sorted((t for t in tasks if expected[t.key] >= LONG_COMPILE_S), key=lambda t: -expected[t.key])
            self._long_keys = {task.key for task in self._long}
        busy = self.compiling()
        slots = max(1, len(self.workers) // 4) - len(busy & self._long_keys)
        while slots > 0 and self.idle and self._long:
            task = self._long.pop(0)
            if task.key not in self.results and task.key not in busy and task.key not in self._sent_to_actors:
                self._send(task)
                busy.add(task.key)
                slots -= 1
        for task in tasks:
            if not self.idle:
                break
            if task.key in self.results or task.key in busy:
                continue
            self._send(task)
            busy.add(task.key)

    def _send(self, task) -> None:
        worker = self.idle.popleft()
        ref = worker.compile.remote(task, self.facts)
        self.calls[ref] = (task.key, worker, time.monotonic())

    def refs(self) -> list:
        return list(self.calls)

    def pick(self, tasks) -> int | None:
        """Which of ``tasks`` (queued, in a free measuring actor's order of preference) it takes,
        as an index: the first whose compile-ahead finished, else the first no compile worker
        holds (the actor compiles it itself), else None (it waits for a compile under way)."""
        first_free = None
        busy = self.compiling()
        for i, task in enumerate(tasks):
            if task.key in self.results:
                return i
            if first_free is None and task.key not in busy:
                first_free = i
        return first_free

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
        except self.ray.exceptions.RayError as exc:  # the compile worker died: a new one replaces it
            self.results[key] = _failed(f"compile worker lost: {type(exc).__name__}")
            self._replace(worker)

    def expire(self) -> None:
        now = time.monotonic()
        for ref, (key, worker, sent) in list(self.calls.items()):
            if now - sent > self.limit_s:
                self.calls.pop(ref)
                self.results[key] = _failed(f"no result after {self.limit_s:g} s; its compile worker was replaced")
                self._replace(worker)

    def retarget(self, facts: dict) -> None:
        """Compile for ``facts`` from now on: what was compiled, or is being compiled, for the
        old target is dropped (those calls' workers are replaced), and compiled again."""
        self.facts, self.source, self.retargeted = facts, "actor", True
        self.results.clear()
        self._long = None  # found again, from what is queued now, on the next feed
        for _key, worker, _sent in list(self.calls.values()):
            self._replace(worker)
        self.calls.clear()

    def _replace(self, worker) -> None:
        kill_actor(self.ray, worker)
        fresh = self.new_worker()
        self.workers = [fresh if w is worker else w for w in self.workers]
        self.idle.append(fresh)

    def finish(self) -> list:
        """The workers to keep for the next run; those still compiling are killed (their
        configurations were measured, or the run was cut short)."""
        for _key, worker, _sent in list(self.calls.values()):
            self._replace(worker)
        self.calls.clear()
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
    """One run's compile-ahead on every node of a cluster: a :class:`CompileAhead` per node whose
    compile workers run on that node and write into its own Triton cache, so nodes need no
    shared disk. Each node's compile workers are fed in the order that node's measuring actors
    will reach the queue (:meth:`workbench.sweep.lanes.Lanes.feed_order`), and a measuring actor
    takes what its own node compiled (:meth:`for_node`). On one host, one node: the same as its
    single :class:`CompileAhead`."""

    def __init__(self, by_node: dict):
        self.by_node = dict(by_node)  # node id -> CompileAhead

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
        return self.by_node.get(node)

    def feed(self, lanes, actor_nodes: dict) -> None:
        """Feed each node's idle compile workers from the lanes its measuring actors hold
        (``actor_nodes``: measuring actor -> node), then from the lanes nobody holds yet."""
        for node, ahead in self.by_node.items():
            if ahead.idle:
                ahead.feed(lanes.feed_order({actor for actor, where in actor_nodes.items() if where == node}))

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


def _failed(why: str) -> dict:
    return {"ok": False, "inputs": None, "kernels": [], "ms": 0.0, "error": why, "worker": {}}
