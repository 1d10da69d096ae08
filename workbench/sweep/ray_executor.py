"""The Ray executor: one Ray actor per device slot, each configuration a call on a free actor.

- No address: an embedded local Ray instance (this machine's GPUs, or ``num_cpus`` CPU workers
  for the interpreter), shut down at the end. With ``address`` (``"auto"``, ``"ray://…"``,
  ``"HOST:PORT"``): join that cluster; its nodes must have the workbench and the families
  installed (the same checkout or package).
- Why actors, not tasks: a worker process is bound to the GPU it first touched (its CUDA
  context), while Ray leases a reused task worker whichever GPU is free and only resets
  ``CUDA_VISIBLE_DEVICES`` per task. On the CPU with two declared GPUs, 80 plain tasks sent as
  slots freed up went to two worker processes that were each handed both GPU ids (44 and 36
  tasks): on real GPUs, two configurations timed at once on one device. Streaming tasks, as this
  executor sent them before, kept their ids in three such trials, but Ray promises neither. An
  actor asks for ``gpus_per_task`` GPUs on cuda (one CPU in the interpreter) once, when it
  starts, and keeps them for its life; at most as many actors run as the cluster has slots, and
  each runs one configuration at a time. Actors live from the first run until
  :meth:`RayExecutor.close` (a tune's rounds reuse them: imports and CUDA start once).
- A call tells the driver when its configuration starts (the first item of a streaming call,
  sent once torch and triton are imported): its timeout counts from there. Every worker keeps its
  own Triton cache (:func:`tasks._own_triton_cache`).
- No retries: a configuration is never retried blindly. A call past ``timeout_s`` is recorded as
  timed out and its actor killed (a new one takes its place); an actor that dies (``os._exit``, a
  signal, a device abort, out of memory) is recorded as ``worker died`` with Ray's reason, and
  replaced; the sweep goes on.
- If the Ray instance is already initialised in this process (a notebook, a test fixture) it is
  used as it is and left running; the executor's actors are killed at :meth:`close`.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import deque
from pathlib import Path

from workbench.children import import_path
from workbench.sweep.executors import Executor
from workbench.sweep.tasks import ERROR_CRASH, ERROR_TIMEOUT, error_record, run_task

MISSING_RAY = (
    "--executor ray needs Ray, which is not installed: pip install 'kernel-workbench[distributed]' (or 'ray==2.60.0')"
)


def import_ray():
    """``ray``, or ValueError with the one line that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ValueError(MISSING_RAY) from None
    return ray


def triton_cache_root() -> str:
    base = os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton" / "cache")
    return str(Path(base) / "workbench-workers")


class RayExecutor(Executor):
    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        gpus_per_task: float = 1,
        cpus_per_task: float = 1,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        timeout_s: float | None = None,
        poll_s: float = 0.2,
    ):
        self.ray = import_ray()
        self.address = address
        self.gpus_per_task = gpus_per_task
        self.cpus_per_task = cpus_per_task
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._owns = False
        self._actor_class = None
        self._pools: dict[str, _Pool] = {}  # actors by the resources they hold
        self.slots = 1
        self.drained_s: float | None = None  # seconds into the last run() when its last task was sent

    # --- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            kwargs = dict(include_dashboard=False, ignore_reinit_error=True, configure_logging=False)
            if self.address:
                kwargs["address"] = self.address
            else:
                # Workers start from the raylet this process starts: they inherit this path.
                os.environ["PYTHONPATH"] = os.pathsep.join(import_path())
                if self.num_cpus is not None:
                    kwargs["num_cpus"] = self.num_cpus
                if self.num_gpus is not None:
                    kwargs["num_gpus"] = self.num_gpus
            for attempt in range(3):
                try:
                    ray.init(**kwargs)
                    break
                except ConnectionError as exc:
                    raise ValueError(f"cannot join the Ray cluster at {self.address!r}: {exc}") from None
                except Exception as exc:  # noqa: BLE001
                    # On a loaded machine the node's agents can miss the raylet's start-up wait
                    # (it gives up after ~15 s: "node timed out during startup"); start again.
                    if self.address or attempt == 2 or "timed out during startup" not in str(exc):
                        raise
                    ray.shutdown()
            self._owns = True
        self._actor_class = ray.remote(max_restarts=0, max_task_retries=0)(DeviceWorker)

    def close(self) -> None:
        if self.ray.is_initialized():
            for pool in self._pools.values():
                for actor in list(pool.live):
                    self._retire(pool, actor)
        self._pools.clear()
        if self._owns and self.ray.is_initialized():
            self.ray.shutdown()
        self._owns = False

    def describe(self) -> str:
        where = self.address or "embedded local Ray"
        return f"ray ({where}, {self.slots} slot(s))"

    def capacity(self, device: str) -> int:
        return self._slots(device)

    def _options(self, device: str) -> dict:
        if device == "cpu":
            return {"num_cpus": self.cpus_per_task, "num_gpus": 0}
        if device == "npu":
            return {"num_cpus": self.cpus_per_task, "resources": {"NPU": self.gpus_per_task}}
        return {"num_cpus": self.cpus_per_task, "num_gpus": self.gpus_per_task}

    def _slots(self, device: str) -> int:
        res = self.ray.cluster_resources()
        if device == "cpu":
            n = int(res.get("CPU", 0) // max(self.cpus_per_task, 1e-9))
        else:
            name = "GPU" if device != "npu" else "NPU"
            have = res.get(name, 0)
            if not have:
                raise ValueError(
                    f"the Ray cluster has no {name} (resources: {', '.join(f'{k}={v:g}' for k, v in res.items() if '.' not in k and ':' not in k)}); "
                    "use --device cpu for the interpreter"
                )
            n = int(min(have // self.gpus_per_task, res.get("CPU", 0) // max(self.cpus_per_task, 1e-9)))
        return max(n, 1)

    # --- running --------------------------------------------------------------------------
    def run(self, tasks, cancel: threading.Event | None = None):
        ray = self.ray
        tasks = list(tasks)
        if not tasks:
            return
        device = tasks[0].device
        opts = self._options(device)
        self.slots = self._slots(device)
        pool = self._pools.setdefault(repr(sorted(opts.items())), _Pool(opts))
        root = triton_cache_root()
        queue = deque(dataclasses.replace(t, triton_cache_root=root) for t in tasks)
        # generator -> [task, started at (None until the worker says so), worker, actor]
        pending: dict = {}
        begun, self.drained_s = time.monotonic(), None
        try:
            while queue or pending:
                while queue and not (cancel is not None and cancel.is_set()):
                    actor = self._free_actor(pool)
                    if actor is None:
                        break
                    task = queue.popleft()
                    gen = actor.run.options(num_returns="streaming").remote(task)
                    pending[gen] = [task, None, None, actor]
                    if not queue:
                        self.drained_s = time.monotonic() - begun
                if not pending:
                    return
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=self.poll_s)
                for gen in ready:
                    entry = pending[gen]
                    kind, value = self._next(gen, entry[0])
                    if kind == "started":
                        entry[1], entry[2] = time.monotonic(), value
                        continue
                    pending.pop(gen)
                    if kind == "record":
                        pool.idle.append(entry[3])
                    else:  # the actor died or its call broke: a fresh one takes its place
                        self._retire(pool, entry[3])
                    yield entry[0], value
                if self.timeout_s is not None:
                    now = time.monotonic()
                    for gen, (task, t0, worker, actor) in list(pending.items()):
                        if t0 is not None and now - t0 > self.timeout_s:
                            pending.pop(gen)
                            self._retire(pool, actor)
                            yield (
                                task,
                                error_record(
                                    task,
                                    ERROR_TIMEOUT,
                                    f"no result after {self.timeout_s:g} s; its worker was killed and replaced "
                                    "(not retried)",
                                    worker,
                                ),
                            )
                if cancel is not None and cancel.is_set() and not queue:
                    break
        finally:
            for _task, _t0, _worker, actor in pending.values():  # interrupted: nothing left running
                self._retire(pool, actor)

    def _free_actor(self, pool: "_Pool"):
        """An idle actor of ``pool``, a new one while the pool has fewer than ``slots``, else None."""
        if pool.idle:
            return pool.idle.popleft()
        if len(pool.live) < self.slots:
            actor = self._actor_class.options(**pool.options).remote()
            pool.live.append(actor)
            return actor
        return None

    def _retire(self, pool: "_Pool", actor) -> None:
        if actor in pool.live:
            pool.live.remove(actor)
        if actor in pool.idle:
            pool.idle.remove(actor)
        try:
            self.ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already dead
            pass

    def _next(self, gen, task) -> tuple[str, dict]:
        """("started", worker info), ("record", record dict) or ("broken", error record) from a
        call's stream."""
        try:
            ref = next(gen)
        except StopIteration:
            return "broken", error_record(task, ERROR_CRASH, "the call ended without a record (not retried)")
        except self.ray.exceptions.RayError as exc:
            return "broken", self._error(task, exc)
        try:
            value = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            return "broken", self._error(task, exc)
        if isinstance(value, dict) and value.get(_STARTED):
            return "started", value["worker"]
        return "record", value

    def _error(self, task, exc) -> dict:
        ray = self.ray
        if isinstance(exc, ray.exceptions.RayTaskError):
            # run_task records every error of a configuration; this is the task machinery's own
            cause = getattr(exc, "cause", None) or exc
            text = " ".join(str(cause).split())[:500]
            return error_record(task, "task failed", f"{type(cause).__name__}: {text} (not retried)")
        # ActorDiedError, OutOfMemoryError, NodeDiedError ... (timeouts kill the actor: no cancel)
        text = " ".join(str(exc).split())[:500]
        return error_record(task, ERROR_CRASH, f"{type(exc).__name__}: {text} (not retried)")


_STARTED = "__workbench_task_started__"


@dataclasses.dataclass
class _Pool:
    """The actors holding one kind of resources (``options``): all of them, and the idle ones."""

    options: dict
    live: list = dataclasses.field(default_factory=list)
    idle: deque = dataclasses.field(default_factory=deque)


class DeviceWorker:
    """The Ray actor: one process that keeps the device Ray gave it when it started, and
    measures one configuration per call."""

    def run(self, task):
        """Say "started" once the measuring stack is imported (the timeout counts from here),
        then give the record."""
        from workbench.sweep.tasks import _own_triton_cache, worker_info

        _own_triton_cache(task.triton_cache_root)
        import workbench.measure  # noqa: F401

        yield {_STARTED: True, "worker": worker_info()}
        yield run_task(task)
