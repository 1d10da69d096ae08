"""The Ray executor's queue: one lane per measuring actor, each a contiguous share of the tasks.

:class:`Lanes` decides which queued configuration a free measuring actor of
:class:`workbench.sweep.ray_executor.RayExecutor` runs next (with the compile-ahead's say,
:meth:`workbench.sweep.compile_ahead_driver.CompileAhead.pick`), and in which order the
compile-ahead is fed (:meth:`Lanes.feed_order`).
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
    (family, variant, mode, dtype and problem), else of all so far, else one second. On the
    4xH100 (issue 44, lanes cut by count) three actors were busy 9.5-9.9 s and the fourth, holding
    larger problems, 11.9 s, while one waited 2.4 s for work."""

    def __init__(self, tasks: list, slots: int):
        count = max(1, min(slots, len(tasks)))
        cuts = [len(tasks) * i // count for i in range(count + 1)]
        self.lanes = [deque(tasks[cuts[i] : cuts[i + 1]]) for i in range(count)]
        self.owners: dict = {}  # actor -> its lane's index
        self._seconds: dict[str, list[float]] = {}  # a kind of task -> its finished tasks' seconds
        self._medians: dict[str, float] = {}  # a kind -> the median of its seconds
        self._overall = 1.0  # the median of every finished task's seconds (1 before any)
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
        return self._medians.get(self._kind_of(task), self._overall)

    def _heaviest(self) -> int:
        """The index of the lane with the most expected seconds left (before any finished task
        every one is expected to take a second: the longest lane)."""
        return max(range(len(self.lanes)), key=lambda i: sum(map(self.expected_s, self.lanes[i])))

    def _kind_of(self, task) -> str:
        kind = self._kinds.get(task.key)
        if kind is None:
            kind = self._kinds[task.key] = _kind(task)
        return kind

    def __len__(self) -> int:
        return sum(len(lane) for lane in self.lanes)

    def __bool__(self) -> bool:
        return any(self.lanes)

    def feed_order(self, actors=None):
        """Every queued task in the order the actors will reach them: the lanes' fronts in turn.
        ``actors`` (a node's measuring actors): the lanes those hold, then the lanes no actor
        holds yet, and none of the others (another node's actors will reach those)."""
        lanes = self.lanes
        if actors is not None:
            held = set(self.owners.values())
            mine = sorted({index for actor, index in self.owners.items() if actor in actors})
            lanes = [self.lanes[i] for i in mine] + [lane for i, lane in enumerate(self.lanes) if i not in held]
        for depth in range(max((len(lane) for lane in lanes), default=0)):
            for lane in lanes:
                if depth < len(lane):
                    yield lane[depth]

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
        while the compile-ahead holds every one it could take (``wait`` False: take one anyway)."""
        lane = self._lane_of(actor)
        backwards = not lane
        if backwards:
            lane = self.lanes[self._heaviest()]
        index = ahead.pick(reversed(lane) if backwards else lane) if ahead is not None else 0
        if index is None:
            if wait:
                return None
            index = 0
        if backwards:
            index = len(lane) - 1 - index
        task = lane[index]
        del lane[index]
        return ahead.attach(task) if ahead is not None else task


def _kind(task) -> str:
    """Tasks expected to take alike: one family, variant, mode, dtype and problem."""
    problem = json.dumps(task.problem, sort_keys=True, default=str)
    return f"{task.family}|{task.variant}|{task.mode}|{task.dtype}|{problem}"
