"""The Ray executor's queue: one lane per measuring actor, each a contiguous share of the tasks.

:class:`Lanes` decides which queued configuration a free measuring actor of
:class:`workbench.sweep.ray_executor.RayExecutor` runs next (with the compile-ahead's say,
:meth:`workbench.sweep.compile_ahead_driver.CompileAhead.pick`), and tells the compile-ahead
when the actors are expected to reach each queued task (:meth:`Lanes.reach_times`), which it
compiles by (:meth:`workbench.sweep.compile_ahead_driver.CompileAhead.feed`).
"""

from __future__ import annotations

import json
import statistics
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.sweep.compile_ahead_driver import CompileAhead


class Lanes:
    """A run's queued tasks, one lane per measuring slot: lane ``i`` holds the ``i``-th
    contiguous share of them, in their order.

    Why: a sweep queues each problem's configurations together, and a measuring process makes a
    problem's inputs once (:mod:`workbench.measure` keeps them). Taking turns from one queue,
    every actor made every problem's inputs: on the 2xH200, making those of RMSNorm 4096 x 16384
    on the CPU cost about 0.5 s each time. Working through a share of its own, an actor makes
    only its share's, and a problem's configurations are mostly timed on one device. An actor
    takes from the front of its lane (the first lane no other actor holds, or the longest); one
    whose lane is empty takes from the back of the longest other lane, which its owner reaches
    last. One slot: one lane, the queue's order.

    "Longest" is in expected seconds, not in tasks: the executor reports each finished task's
    time (:meth:`done`), and a queued task is expected to take the median of those of its kind
    (family, variant, mode, dtype and problem), else of all so far, else what its timing budget
    suggests (:func:`guess_s`). On the 4xH100 (issue 44, lanes cut by count) three actors were
    busy 9.5-9.9 s and the fourth, holding larger problems, 11.9 s, while one waited 2.4 s for
    work.

    Ending together: an actor whose lane holds nothing it can start now (every task of it is
    being compiled ahead) or nothing at all takes, from the back of the other lanes, heaviest
    first, a task whose compile-ahead has finished; else one from the heaviest lane that no
    compile worker holds (compiling it itself); it waits only when every queued task is being
    compiled. Before, a thief looked at the heaviest lane alone and waited for its compiles
    while other lanes held compiled tasks."""

    def __init__(self, tasks: list, slots: int):
        count = max(1, min(slots, len(tasks)))
        cuts = [len(tasks) * i // count for i in range(count + 1)]
        self.lanes = [deque(tasks[cuts[i] : cuts[i + 1]]) for i in range(count)]
        self.owners: dict = {}  # actor -> its lane's index
        self._seconds: dict[str, list[float]] = {}  # a kind of task -> its finished tasks' seconds
        self._medians: dict[str, float] = {}  # a kind -> the median of its seconds
        self._overall: float | None = None  # the median of every finished task's seconds
        self._kinds: dict[str, str] = {}  # a task's key -> its kind (worked out once)

    def done(self, task, seconds: float) -> None:
        """``task`` ran in ``seconds`` (its call, compile included): what others of its kind expect."""
        kind = self._kind_of(task)
        times = self._seconds.setdefault(kind, [])
        times.append(float(seconds))
        self._medians[kind] = statistics.median(times)
        self._overall = statistics.median([s for kind_times in self._seconds.values() for s in kind_times])

    def expected_s(self, task) -> float:
        """The seconds ``task`` is expected to take (see the class docstring)."""
        seconds = self._medians.get(self._kind_of(task), self._overall)
        return guess_s(task) if seconds is None else seconds

    def _heaviest(self) -> int:
        """The index of the lane with the most expected seconds left."""
        return self._by_weight()[0]

    def _by_weight(self, but: int | None = None) -> list[int]:
        """The indexes of the lanes that hold tasks (other than ``but``), the most expected
        seconds left first."""
        weights = {i: sum(map(self.expected_s, lane)) for i, lane in enumerate(self.lanes) if lane and i != but}
        return sorted(weights, key=lambda i: -weights[i])

    def _kind_of(self, task) -> str:
        kind = self._kinds.get(task.key)
        if kind is None:
            kind = self._kinds[task.key] = _kind(task)
        return kind

    def __len__(self) -> int:
        return sum(len(lane) for lane in self.lanes)

    def __bool__(self) -> bool:
        return any(self.lanes)

    def reach_times(self, actors=None) -> list[tuple]:
        """``[(task, seconds)]``: every queued task and when, from now, an actor is expected to
        start it: its lane's owner, after the tasks before it (their expected seconds). ``actors``
        (a node's measuring actors): the lanes those hold, then the lanes no actor holds yet, and
        none of the others (another node's actors will reach those)."""
        lanes = self.lanes
        if actors is not None:
            held = set(self.owners.values())
            mine = sorted({index for actor, index in self.owners.items() if actor in actors})
            lanes = [self.lanes[i] for i in mine] + [lane for i, lane in enumerate(self.lanes) if i not in held]
        out = []
        for lane in lanes:
            at = 0.0
            for task in lane:
                out.append((task, at))
                at += self.expected_s(task)
        return out

    def release(self, actor) -> None:
        """``actor`` is gone: its lane waits for the actor that takes its place."""
        self.owners.pop(actor, None)

    def _lane_of(self, actor) -> deque:
        if actor not in self.owners:
            held = set(self.owners.values())
            free = [i for i in range(len(self.lanes)) if i not in held]
            self.owners[actor] = free[0] if free else self._heaviest()
        return self.lanes[self.owners[actor]]

    def take(self, actor, ahead: CompileAhead | None, wait: bool = True):
        """The task ``actor`` runs next, out of the queue (with its compile-ahead result), or None
        while the compile-ahead holds every queued task (``wait`` False: take one anyway). See
        the class docstring for the order."""
        own = self._lane_of(actor)
        if ahead is None:
            lane = own if own else self.lanes[self._heaviest()]
            return lane.popleft() if lane is own else lane.pop()
        if own:
            index = ahead.pick(own)
            if index is not None:
                return self._remove(own, index, ahead)
        others = self._by_weight(but=self.owners[actor])
        for i in others:  # a compiled task from the back of another lane
            lane = self.lanes[i]
            index = ahead.pick(reversed(lane), compiled_only=True)
            if index is not None:
                return self._remove(lane, len(lane) - 1 - index, ahead)
        if not own and others:  # nothing compiled anywhere: one no compile worker holds
            lane = self.lanes[others[0]]
            index = ahead.pick(reversed(lane))
            if index is not None:
                return self._remove(lane, len(lane) - 1 - index, ahead)
        if wait:
            return None
        lane = own if own else self.lanes[others[0]]
        return self._remove(lane, 0 if lane is own else len(lane) - 1, ahead)

    @staticmethod
    def _remove(lane: deque, index: int, ahead: CompileAhead):
        task = lane[index]
        del lane[index]
        return ahead.attach(task)


def guess_s(task) -> float:
    """The seconds a task is expected to take before any of its kind finished: its timing budget
    (``rep_ms``, spent on the kernel, call and host timings, plus the warm-up) and about 0.05 s
    of inputs and checks. The 208-configuration scaling sweep's 40 ms budget gives 0.29 s; its
    configurations took 0.21-0.24 s (median) on H100s."""
    return 0.05 + 6 * float(getattr(task, "rep_ms", 100.0) or 100.0) / 1e3


def _kind(task) -> str:
    """Tasks expected to take alike: one family, variant, mode, dtype and problem."""
    problem = json.dumps(task.problem, sort_keys=True, default=str)
    return f"{task.family}|{task.variant}|{task.mode}|{task.dtype}|{problem}"
