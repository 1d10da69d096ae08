"""Where a Ray sweep's time went: the stamps the Ray executor keeps of its last run or warm-up.

:class:`Timeline` collects them as they happen in the driver (:mod:`workbench.sweep.ray_executor`:
when each measuring actor was asked for, and when each configuration was given, started and
recorded) together with the stamps each measuring actor takes of its own start
(:meth:`workbench.sweep.actors.DeviceWorker.ready`: its process's start,
:func:`process_start_time`, and each step of its warm-up). ``RayExecutor.timeline`` holds what
:meth:`Timeline.close` gives; benchmarks/sweep_scaling.py sums it up.
"""

from __future__ import annotations

import os
import time


class Timeline:
    """When things happened in an executor's last run or warm-up, as ``time.time()`` seconds
    (one host's clock: the actors' stamps compare with the driver's), for finding where a sweep's
    time goes. :meth:`close` gives::

        {"kind": "run" | "warm-up", "begun",
         "actors": [{"actor", "asked", "process", "init", "imported", "device", "warm_*", "warmed",
                     "seen", "cpus"}],
         "tasks": [{"actor", "idle", "sent", "started", "arrived"}]}

    An actor's ``asked`` (the driver made it), ``process`` (its process started), ``init`` (the
    actor object was made), ``imported`` / ``device`` / ``warm_*`` / ``warmed`` (the steps of its
    warm-up), ``seen`` (the driver took it as ready) and ``cpus`` (where it runs, when placed). A
    task's ``idle`` (its actor was free), ``sent``, ``started`` (the actor began it) and
    ``arrived`` (its record reached the driver). Actors are numbered in the order they were first
    asked for, across runs."""

    def __init__(self):
        self._numbers: dict = {}
        self._data: dict | None = None
        self._idle: dict = {}
        self._calls: dict = {}

    def open(self, warm: bool) -> None:
        self._data = {"kind": "warm-up" if warm else "run", "begun": time.time(), "actors": {}, "tasks": []}
        self._idle, self._calls = {}, {}

    def close(self) -> dict:
        data, self._data = self._events(), None
        return {**data, "actors": list(data["actors"].values())}

    def _number(self, actor) -> int:
        return self._numbers.setdefault(actor, len(self._numbers))

    def _events(self) -> dict:
        if self._data is None:
            self.open(warm=False)
        return self._data

    def asked(self, actor) -> None:
        n = self._number(actor)
        self._events()["actors"][n] = {"actor": n, "asked": time.time()}

    def ready(self, actor, stamps: dict | None, cpus=None) -> None:
        n = self._number(actor)
        entry = self._events()["actors"].setdefault(n, {"actor": n})
        entry.update(stamps or {})
        entry["cpus"] = cpus
        entry["seen"] = self._idle[n] = time.time()

    def idle(self, actor) -> None:
        self._idle[self._number(actor)] = time.time()

    def sent(self, call, actor, at: float) -> None:
        n = self._number(actor)
        task = {"actor": n, "idle": self._idle.pop(n, None), "sent": at}
        self._calls[call] = task
        self._events()["tasks"].append(task)

    def started(self, call, at: float | None) -> None:
        if call in self._calls:
            self._calls[call]["started"] = at

    def arrived(self, call) -> None:
        task = self._calls.pop(call, None)
        if task is not None:
            task["arrived"] = time.time()


def process_start_time() -> float | None:
    """When this process started, as ``time.time()`` (Linux, to 10 ms); None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time in clock ticks
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - since_boot)
