"""The Ray executor: one Ray task per configuration, each pinned to its own device.

- No address: an embedded local Ray instance (this machine's GPUs, or ``num_cpus`` CPU workers
  for the interpreter), shut down at the end. With ``address`` (``"auto"``, ``"ray://…"``,
  ``"HOST:PORT"``): join that cluster; its nodes must have the workbench and the families
  installed (the same checkout or package).
- A task asks for ``gpus_per_task`` GPUs on cuda (Ray sets CUDA_VISIBLE_DEVICES, so the task
  sees its own GPU as device 0) or one CPU in the interpreter. At most as many tasks are in
  flight as the cluster has slots. A task tells the driver when it starts (the first item of a
  streaming task, sent once torch and triton are imported): its timeout counts from there.
  Every worker keeps its own Triton cache (:func:`tasks._own_triton_cache`).
- ``max_retries=0``: a configuration is never retried blindly. A task past ``timeout_s`` is
  cancelled with ``force=True`` (its worker is killed; Ray starts a new one) and recorded as
  timed out; a worker that dies (``os._exit``, a signal, a device abort, out of memory) is
  recorded as ``worker died`` with Ray's reason; the sweep goes on.
- If the Ray instance is already initialised in this process (a notebook, a test fixture) it is
  used as it is and left running.
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
        self._remote = None
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
        self._remote = ray.remote(max_retries=0, num_returns="streaming")(run_task_streaming)

    def close(self) -> None:
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
        root = triton_cache_root()
        queue = deque(dataclasses.replace(t, triton_cache_root=root) for t in tasks)
        pending: dict = {}  # generator -> [task, started at (None until the worker says so), worker]
        begun, self.drained_s = time.monotonic(), None
        try:
            while queue or pending:
                while queue and len(pending) < self.slots and not (cancel is not None and cancel.is_set()):
                    task = queue.popleft()
                    pending[self._remote.options(**opts).remote(task)] = [task, None, None]
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
                    yield entry[0], value
                if self.timeout_s is not None:
                    now = time.monotonic()
                    for gen, (task, t0, worker) in list(pending.items()):
                        if t0 is not None and now - t0 > self.timeout_s:
                            pending.pop(gen)
                            ray.cancel(gen, force=True)
                            yield (
                                task,
                                error_record(
                                    task,
                                    ERROR_TIMEOUT,
                                    f"no result after {self.timeout_s:g} s; the task was cancelled and its "
                                    "worker replaced (not retried)",
                                    worker,
                                ),
                            )
                if cancel is not None and cancel.is_set() and not queue:
                    break
        finally:
            for gen in pending:  # interrupted: nothing left running for a sweep no one reads
                try:
                    ray.cancel(gen, force=True)
                except Exception:  # noqa: BLE001
                    pass

    def _next(self, gen, task) -> tuple[str, dict]:
        """("started", worker info) or ("record", record dict) from a task's stream."""
        try:
            ref = next(gen)
        except StopIteration:
            return "record", error_record(task, ERROR_CRASH, "the task ended without a record (not retried)")
        except self.ray.exceptions.RayError as exc:
            return "record", self._error(task, exc)
        try:
            value = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            return "record", self._error(task, exc)
        if isinstance(value, dict) and value.get(_STARTED):
            return "started", value["worker"]
        return "record", value

    def _error(self, task, exc) -> dict:
        ray = self.ray
        if isinstance(exc, ray.exceptions.TaskCancelledError):
            return error_record(task, ERROR_TIMEOUT, "cancelled")
        if isinstance(exc, ray.exceptions.RayTaskError):
            # run_task records every error of a configuration; this is the task machinery's own
            cause = getattr(exc, "cause", None) or exc
            text = " ".join(str(cause).split())[:500]
            return error_record(task, "task failed", f"{type(cause).__name__}: {text} (not retried)")
        # WorkerCrashedError, OutOfMemoryError, NodeDiedError ...
        text = " ".join(str(exc).split())[:500]
        return error_record(task, ERROR_CRASH, f"{type(exc).__name__}: {text} (not retried)")


_STARTED = "__workbench_task_started__"


def run_task_streaming(task):
    """The Ray task: say "started" once the measuring stack is imported (the timeout counts from
    here), then give the record."""
    from workbench.sweep.tasks import _own_triton_cache, worker_info

    _own_triton_cache(task.triton_cache_root)
    import workbench.measure  # noqa: F401

    yield {_STARTED: True, "worker": worker_info()}
    yield run_task(task)
