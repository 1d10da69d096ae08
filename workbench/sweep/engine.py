"""The sweep engine: tasks -> an executor -> records, with one writer and resume.

One engine serves the command line (``workbench sweep``, ``workbench tune``) and the notebooks
(a Session's sweeps, the Explorer's sweep panel):

- :func:`run_plan` measures what a :class:`~workbench.sweep.plan.SweepPlan` still needs and
  returns its rows (each record at the swept axis, in plan order);
- :func:`run_sweep` skips tasks whose key is already in the store (resume), hands the rest to
  an executor, and appends every record to the store *on the driver* as it arrives (the only
  writer: workers never open the store), calling ``on_record`` and ``progress`` each time;
- :class:`Progress` is done / failed / remaining / ETA (:meth:`workbench.progress.Progress.sweep` shows it).

An out folder (``--out DIR``) holds ``records.sqlite`` (the store resume reads) and, after a
run, ``records.csv``, ``records.json`` and ``report.html`` (:func:`workbench.reports.sweep.write_outputs`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from workbench.sweep.compile_ahead import submit_tasks
from workbench.sweep.config import with_axis
from workbench.sweep.tasks import SweepTask

STORE_NAME = "records.sqlite"


@dataclass
class Progress:
    """Where a sweep stands: ``done`` includes ``failed`` (real failures: a compile or launch that
    failed, a wrong result, a crash, a timeout) and ``cannot_run`` (configurations refused before
    anything launched, a tile the family's check rejects: :func:`cannot_run`); ``skipped`` were
    recorded before (resume)."""

    total: int
    done: int = 0
    failed: int = 0
    cannot_run: int = 0
    skipped: int = 0
    started: float = field(default_factory=time.monotonic)
    label: str = ""

    @property
    def remaining(self) -> int:
        return self.total - self.done

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def eta_s(self) -> float | None:
        if self.done == 0:
            return None
        return self.elapsed_s / self.done * self.remaining

    def line(self) -> str:
        eta = self.eta_s
        eta_text = "?" if eta is None else _duration(eta)
        skipped = f", {self.skipped} already recorded" if self.skipped else ""
        refused = f", {self.cannot_run} cannot run" if self.cannot_run else ""
        return (
            f"{self.label}{self.done}/{self.total} done{refused}, {self.failed} failed, {self.remaining} remaining, "
            f"{_duration(self.elapsed_s)} elapsed, ETA {eta_text}{skipped}"
        )


def _duration(s: float) -> str:
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def recorded_keys(store) -> set[str]:
    """Keys of the configurations already in ``store`` (records written by the engine)."""
    if store is None:
        return set()
    return {r["sweep_key"] for r in store.records() if r.get("sweep_key")}


@dataclass
class SweepResult:
    records: list[dict]  # this run's records, in the order they arrived
    skipped: list[SweepTask]  # already recorded (resume)
    progress: Progress
    interrupted: bool = False
    arrived_s: list[float] = field(default_factory=list)  # when each record arrived, seconds from the start
    write_s: float = 0.0  # the driver's time appending records to the store

    @property
    def failed(self) -> list[dict]:
        """Records of real failures (not those that cannot run)."""
        return [r for r in self.records if is_failed(r)]

    @property
    def refused(self) -> list[dict]:
        """Records of configurations that cannot run (:func:`cannot_run`)."""
        return [r for r in self.records if cannot_run(r)]


def cannot_run(record: dict) -> bool:
    """The configuration was refused before anything launched (the family's check rejected its
    tile, or the spec its problem, dtype or mode): the record's ``cannot_run``."""
    return bool(record.get("cannot_run"))


def is_failed(record: dict) -> bool:
    """A real failure: an error or a wrong result, other than a configuration that cannot run."""
    return (bool(record.get("error")) or record.get("passed") is False) and not cannot_run(record)


def run_sweep(
    tasks: Sequence[SweepTask],
    executor,
    store=None,
    *,
    resume: bool = True,
    progress: Callable[[Progress, dict | None], None] | None = None,
    on_record: Callable[[SweepTask, dict], None] | None = None,
    cancel: threading.Event | None = None,
    label: str = "",
) -> SweepResult:
    """Run ``tasks`` on ``executor``; the driver appends each record to ``store`` as it arrives.
    Tasks on a GPU are first submitted to this process's compile service (unless the executor
    compiles ahead itself: Ray), so they are compiled while the ones before them are measured.
    An executor with a ``log_dir`` not set yet (Ray's) that this call starts keeps its workers'
    output in ``logs/`` beside the store.

    ``resume``: tasks whose key is already in the store are skipped (counted in
    ``progress.skipped``). A KeyboardInterrupt stops the sweep: what arrived is in the store, the
    executor cancels what was running, and the interrupt propagates.
    """
    done_keys = recorded_keys(store) if resume else set()
    todo = [t for t in tasks if t.key not in done_keys]
    skipped = [t for t in tasks if t.key in done_keys]
    prog = Progress(total=len(todo), skipped=len(skipped), label=label)
    result = SweepResult(records=[], skipped=skipped, progress=prog)
    if progress is not None:
        progress(prog, None)
    if not todo:
        return result
    if not executor.compiles_ahead:  # compile processes compile what is queued while the GPU measures
        submit_tasks(todo, getattr(executor, "specs", None))
    owned = False
    if not getattr(executor, "_started", False):
        if getattr(executor, "log_dir", False) is None and getattr(store, "path", ":memory:") != ":memory:":
            executor.log_dir = str(Path(store.path).resolve().parent / "logs")  # workers' output: the run's folder
        executor.start()
        executor._started = owned = True
    stream = executor.run(todo, cancel)
    try:
        for task, body in stream:
            result.arrived_s.append(prog.elapsed_s)
            if store is not None:
                t0 = time.monotonic()
                store.append(body)  # the one writer
                result.write_s += time.monotonic() - t0
            result.records.append(body)
            prog.done += 1
            prog.failed += is_failed(body)
            prog.cannot_run += cannot_run(body)
            if on_record is not None:
                on_record(task, body)
            if progress is not None:
                progress(prog, body)
    except KeyboardInterrupt:
        result.interrupted = True
        raise
    finally:
        stream.close()  # cancels what is still running
        if owned:
            executor.close()
            executor._started = False
    if cancel is not None and cancel.is_set() and prog.remaining:
        result.interrupted = True
    return result


@contextlib.contextmanager
def opened(executor):
    """``executor`` started for several :func:`run_sweep` calls (rounds of a search), closed after."""
    executor.start()
    executor._started = True
    try:
        yield executor
    finally:
        executor._started = False
        executor.close()


def make_executor(
    executor: str = "local",
    *,
    isolate: bool = False,
    address: str | None = None,
    gpus_per_task: float = 1,
    timeout_s: float | None = None,
    num_cpus: int | None = None,
    lock=None,
    specs=None,
):
    """``"local"`` (``isolate``: a subprocess per configuration) or ``"ray"``; ValueError for
    options that do not fit together."""
    from workbench.sweep.executors import IsolateExecutor, LocalExecutor

    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"--timeout-s {timeout_s:g}: the timeout must be a positive number of seconds")
    if gpus_per_task is not None and not gpus_per_task > 0:
        raise ValueError(f"--gpus-per-task {gpus_per_task:g}: must be a positive number")
    if executor == "local":
        if address:
            raise ValueError("--address joins a Ray cluster: use it with --executor ray")
        if isolate:
            return IsolateExecutor(timeout_s=timeout_s)
        if timeout_s is not None:
            raise ValueError("--timeout-s needs a process to stop: add --isolate, or use --executor ray")
        return LocalExecutor(lock=lock, specs=specs)
    if executor == "ray":
        if isolate:
            raise ValueError("--isolate is for the local executor; Ray already runs each configuration in a worker")
        from workbench.sweep.ray_executor import RayExecutor

        return RayExecutor(address, gpus_per_task=gpus_per_task, timeout_s=timeout_s, num_cpus=num_cpus)
    raise ValueError(f"unknown executor {executor!r}; use local or ray")


def dedupe_latest(records: Iterable[dict]) -> list[dict]:
    """One record per sweep key (the last one written), in first-seen order."""
    by_key: dict = {}
    for r in records:
        by_key[r.get("sweep_key") or id(r)] = r
    return list(by_key.values())


def run_plan(
    plan,
    executor,
    store=None,
    *,
    on_record: Callable | None = None,
    on_rows: Callable[[list], None] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
) -> list:
    """Measure what a :class:`~workbench.sweep.plan.SweepPlan` still needs and return its rows:
    every point's record (a copy whose ``axis`` / ``x_value`` say what was swept) in plan order,
    only the finished ones when cancelled. Records go to ``store`` as they arrive (the driver is
    the one writer); ``on_record(task, record)`` sees each, ``on_rows`` the rows so far (a
    heatmap filling in), ``progress(done, total, text)`` the count."""
    from workbench.sweep.tasks import as_record

    request, found = plan.request, plan.found
    total = len(plan.items)

    def rows_so_far() -> list:
        out = []
        for i, item in enumerate(plan.items):
            if i in found:
                rec = found[i]
                x = item.x if item.x is not None else rec.problem.get(request.axis, rec.params.get(request.axis))
                out.append(with_axis(rec, request.axis, x))
        return out

    def note(text: str) -> None:
        if progress is not None:
            progress(len(found), total, f"{request.label}: {text}")

    def arrived(task, body) -> None:
        rec = as_record(body)
        for i in plan.slots[task.key]:
            found[i] = rec
        if on_record is not None:
            on_record(task, rec)
        note(" ".join([task.variant] + [f"{k}={v}" for k, v in {**task.params, **task.problem}.items()]))
        if on_rows is not None:
            on_rows(rows_so_far())

    note("starting")
    if plan.tasks and not (cancel is not None and cancel.is_set()):
        run_sweep(plan.tasks, executor, store, resume=False, on_record=arrived, cancel=cancel)
    rows = rows_so_far()
    note("done")
    return rows
