"""Executors: where a sweep's tasks run. Each yields (task, record dict) as results arrive; the
engine (:mod:`workbench.sweep.engine`) is the only one that writes them anywhere.

- :class:`LocalExecutor`: in this process, one configuration after another (today's sweep). A
  configuration that kills the process ends the sweep; one that hangs hangs it: use ``isolate``.
- :class:`IsolateExecutor` (``--isolate``): one fresh subprocess per configuration, with a
  timeout. A subprocess that dies (a signal, ``os._exit``, a device abort) or runs past the
  timeout becomes an error record; the next configuration gets a new process.
- :class:`workbench.sweep.ray_executor.RayExecutor`: one Ray actor per device slot, a configuration
  per call on a free actor.

No executor retries a task: a configuration that failed once is recorded as failed.
"""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator

from workbench.children import child_env, kill_group
from workbench.sweep.compile_ahead import settle_task
from workbench.sweep.tasks import ERROR_CRASH, ERROR_TIMEOUT, SweepTask, error_record, run_task, worker_info


class Executor:
    """Base: ``run(tasks, cancel)`` yields (task, record dict) in the order they finish."""

    name = "?"
    slots = 1  # tasks that can run at once
    timeout_s: float | None = None
    # True: the executor compiles its tasks ahead itself; False: the sweep engine submits them to
    # this process's compile service (workbench.compiling.service) before they run
    compiles_ahead = False

    def start(self) -> None:
        pass

    def run(self, tasks: Iterable[SweepTask], cancel: threading.Event | None = None) -> Iterator[tuple]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def capacity(self, device: str) -> int:
        """Tasks on ``device`` that can run at once (after :meth:`start`)."""
        return self.slots

    def describe(self) -> str:
        return self.name

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()


class LocalExecutor(Executor):
    """In this process, in order. ``lock``: held around each measurement (the notebook Session's);
    ``specs``: KernelSpecs by name, for families that are not registered (a notebook's own)."""

    name = "local"

    def __init__(self, lock=None, specs=None):
        self.lock = lock
        self.specs = dict(specs or {})

    def run(self, tasks, cancel=None):
        for task in tasks:
            if cancel is not None and cancel.is_set():
                return
            spec = self.specs.get(task.family)
            if self.lock is not None:
                with self.lock:
                    body = run_task(task, spec)
            else:
                body = run_task(task, spec)
            yield task, body


class IsolateExecutor(Executor):
    """One subprocess per configuration (``python -m workbench.sweep.tasks``), ``timeout_s``
    each (None: no limit)."""

    name = "isolate"

    def __init__(self, timeout_s: float | None = None):
        self.timeout_s = timeout_s
        self._env = None

    def start(self) -> None:
        self._env = child_env()

    def run(self, tasks, cancel=None):
        env = self._env or child_env()
        with tempfile.TemporaryDirectory(prefix="wb-isolate-") as tmp:
            for i, task in enumerate(tasks):
                if cancel is not None and cancel.is_set():
                    return
                # a compile process may be finishing it: the child then loads it from the cache
                settle_task(task)
                yield task, self._run_one(task, Path(tmp), i, env)

    def _run_one(self, task: SweepTask, tmp: Path, i: int, env: dict) -> dict:
        src, dst = tmp / f"task{i}.pkl", tmp / f"task{i}.json"
        src.write_bytes(pickle.dumps(task))
        cmd = [sys.executable, "-m", "workbench.sweep.tasks", str(src), str(dst)]
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        where = {**worker_info(), "pid": proc.pid}
        try:
            # The timeout counts the configuration, from when the child has imported the
            # measuring stack (it writes STARTED), not the interpreter's start-up.
            started = Path(str(dst) + ".started")
            while not started.exists() and proc.poll() is None:
                time.sleep(0.05)
            _, err = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.communicate()
            return error_record(
                task,
                ERROR_TIMEOUT,
                f"no result after {self.timeout_s:g} s; its process was killed (not retried)",
                where,
            )
        except BaseException:  # KeyboardInterrupt: do not leave the child running
            kill_group(proc)
            raise
        if proc.returncode == 0 and dst.exists():
            import json

            return json.loads(dst.read_text())
        return error_record(task, ERROR_CRASH, describe_exit(proc.returncode, err), where)


def describe_exit(returncode: int | None, stderr: str = "") -> str:
    """``"killed by SIGSEGV"`` / ``"exited with status 3"`` plus the last line of stderr."""
    if returncode is not None and returncode < 0:
        try:
            what = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            what = f"killed by signal {-returncode}"
    else:
        what = f"exited with status {returncode} before writing its record"
    tail = [ln for ln in (stderr or "").strip().splitlines() if ln.strip()]
    if tail:
        what += f" ({tail[-1].strip()[:300]})"
    return what + "; not retried"
