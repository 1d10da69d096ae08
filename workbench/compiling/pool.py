"""Compile processes: a pool that compiles :class:`~workbench.compiling.jobs.CompileJob` s into the
Triton disk cache for the measuring device, beside the process that measures.

Built on pebble's :class:`pebble.ProcessPool`, chosen because a worker that dies fails only the
job it held (``ProcessExpired``) and is replaced, a queued job can be cancelled, and a job past
its timeout has its worker stopped and replaced; :mod:`concurrent.futures` breaks the whole pool
when one worker dies. Workers are started with ``spawn`` (the measuring process holds CUDA and
threads; a fork of it is not safe).

Jobs wait in the pool's own queue and are handed to pebble only as processes come free
(:class:`HelperPool`): pebble sends every scheduled task down its pipe at once, and a task
cancelled there before a process acknowledged it still reaches a process, which pebble then
stops and replaces. Withdrawing a queued job (the measuring process compiling it itself) stopped
a compile process each time (pebble 5.2.3 here); a replacement pays its start again.

Each compile process, when it starts (:func:`_start_worker`):

- sends its standard output and error to the pool's log file, so a compiler's messages (a
  failing ``ptxas`` prints its whole PTX) never reach the console; the log keeps them;
- hides every GPU from itself (``CUDA_VISIBLE_DEVICES=""``, before CUDA could start): compiling
  ahead compiles for the facts it is given and never touches a device, so it never runs on the
  measuring process's GPU, let alone its stream;
- compiles into the measuring process's Triton cache folder with its ``ptxas``, both fixed in
  the measuring process before the pool starts
  (:func:`workbench.compiling.cache.pin_triton_environment`), so a kernel compiled here has the
  key the measuring process's first call looks up;
- lowers its priority (niceness 10), so the measuring process's host work comes first;
- builds Triton's host utilities, imports the compiler and pays Triton's first compile
  (:func:`workbench.compiling.first_compile.first_compile`), before its first job.
"""

from __future__ import annotations

import collections
import concurrent.futures
import multiprocessing
import os
import threading
from pathlib import Path

from workbench.compiling.jobs import CompileJob, compile_job

NICENESS = 10
JOB_TIMEOUT_S = 300.0  # a compile past this has its process stopped; the measuring process compiles it


def default_workers(cpus: int | None = None) -> int:
    """Compile processes for a host of ``cpus`` CPUs (default: those this process may run on):
    all but two, at most 16, at least 1. Two stay with the measuring process and the rest of the
    host; a compile is CPU-bound (LLVM, ptxas), one process each."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(16, cpus - 2))


def into_log_and_lowered(log_path: str, niceness: int) -> None:
    """This helper process's standard output and error sent to ``log_path`` (a compiler's
    messages never reach the console) and its priority lowered by ``niceness``; best effort."""
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    except OSError:
        pass
    try:
        os.nice(niceness)
    except OSError:
        pass


def _start_worker(facts: dict, log_path: str, triton_environment: dict) -> None:
    """A compile process's start; see the module docstring. Never raises (a raising initializer
    would have the pool start it again and again): what fails here is paid in the first job."""
    into_log_and_lowered(log_path, NICENESS)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.update(triton_environment)  # the measuring process's, whatever it holds when this starts
    from workbench.compiling.first_compile import first_compile
    from workbench.compiling.target import build_host_utilities, prepare_compiler

    for step in (
        lambda: build_host_utilities(facts.get("backend", "cuda")),
        prepare_compiler,
        lambda: first_compile(facts),
    ):
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - into the log; the first job pays for it instead
            print(f"compile process {os.getpid()}: start step failed: {type(exc).__name__}: {exc}", flush=True)
    print(f"compile process {os.getpid()}: started", flush=True)


class JobFuture(concurrent.futures.Future):
    """A job's future in a :class:`HelperPool`: pending while it waits in the pool's queue,
    running once handed to a process. :meth:`cancel` drops a waiting job without touching any
    process, and stops the process of a running one (pebble replaces it)."""

    def __init__(self):
        super().__init__()
        self.handed: concurrent.futures.Future | None = None  # pebble's future, once handed over

    def cancel(self) -> bool:
        if super().cancel():
            return True
        handed = self.handed
        return handed is not None and not handed.done() and handed.cancel()


class HelperPool:
    """``workers`` helper processes (spawned: the measuring process holds CUDA and threads), each
    started by ``initializer(*initargs)``, writing to ``log_path``; jobs past ``timeout_s`` have
    their process stopped and replaced. Jobs wait here in submission order and go to pebble one
    per free process (see the module docstring). What the compile and graph pools share."""

    def __init__(self, workers: int, log_path: str | os.PathLike, timeout_s: float, initializer, initargs: tuple):
        from pebble import ProcessPool

        self.workers = workers
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self._pool = ProcessPool(
            max_workers=workers,
            initializer=initializer,
            initargs=initargs,
            context=multiprocessing.get_context("spawn"),
        )
        self._lock = threading.Lock()
        self._waiting: collections.deque = collections.deque()  # (future, function, args)
        self._handed = 0  # jobs with pebble now

    def start(self):
        """Start the processes now rather than with the first job, so their start (imports, a
        first compile: seconds) is paid before there is work for them. Returns the future of a
        first, empty task, done once a process has started."""
        return self._pool.schedule(os.getpid)

    def schedule(self, function, *args) -> JobFuture:
        """Queue ``function(*args)`` for a process; its :class:`JobFuture`."""
        future = JobFuture()
        with self._lock:
            self._waiting.append((future, function, args))
        self._hand_over()
        return future

    def _hand_over(self) -> None:
        """Hand waiting jobs to pebble while fewer than ``workers`` are with it (withdrawn ones
        skipped)."""
        while True:
            with self._lock:
                if self._handed >= self.workers or not self._waiting:
                    return
                future, function, args = self._waiting.popleft()
                if not future.set_running_or_notify_cancel():
                    continue  # withdrawn while it waited
                self._handed += 1
            try:
                handed = self._pool.schedule(function, args=args, timeout=self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - a stopped pool: the job fails, the caller compiles it
                self._finished(future, None, exc)
                continue
            future.handed = handed
            handed.add_done_callback(lambda done, future=future: self._finished(future, done))

    def _finished(self, future: JobFuture, handed, error: BaseException | None = None) -> None:
        with self._lock:
            self._handed -= 1
        if error is None:
            if handed.cancelled():
                error = concurrent.futures.CancelledError()
            else:
                error = handed.exception()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(handed.result())
        self._hand_over()

    def close(self) -> None:
        """Stop every process now (what is queued or in flight is dropped; a process stopped in
        the middle of a compile writes only to the log)."""
        with self._lock:
            waiting, self._waiting = list(self._waiting), collections.deque()
        for future, _function, _args in waiting:
            future.cancel()
        self._pool.stop()
        self._pool.join(timeout=10)


class CompilePool(HelperPool):
    """``workers`` compile processes compiling for the device ``facts`` describe; their output
    goes to ``log_path``. :meth:`submit` returns a :class:`JobFuture` of
    :func:`~workbench.compiling.jobs.compile_job`'s result: ``running()`` once handed to a
    process, ``cancel()`` drops a queued one (and stops the process of a running one)."""

    def __init__(self, facts: dict, workers: int, log_path: str | os.PathLike, timeout_s: float = JOB_TIMEOUT_S):
        from workbench.compiling.cache import pin_triton_environment

        self.facts = dict(facts)
        # Where the measuring process's first calls look, and the ptxas in their kernels' keys
        environment = pin_triton_environment()
        super().__init__(workers, log_path, timeout_s, _start_worker, (self.facts, str(log_path), environment))

    def submit(self, job: CompileJob):
        return self.schedule(compile_job, job, self.facts)
