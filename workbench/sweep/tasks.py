"""One sweep configuration as a task a worker can run: plain data in, a record (as a dict) out.

A :class:`SweepTask` is picklable and small (names, numbers, dicts), so it travels to a Ray
worker or a subprocess unchanged. :func:`run_task` measures it with ``on_error="record"``, so a
configuration that raises becomes a record whose ``error`` says why; a configuration that kills
or hangs its worker never returns, and the executor writes :func:`error_record` for it instead.

Every record dict carries ``sweep_key`` (the configuration's key: what resume compares),
``host`` and ``worker`` (pid, GPUs it was given), besides the :class:`~workbench.record.Record`
fields. :func:`as_record` turns such a dict back into a Record.

The family travels by name plus the module that defines it (``kernels.spec.module_path``),
so a family registered only in the driver (a plugin, or a test family) is found by the worker too.

Run one task in a fresh process (the ``--isolate`` executor)::

    python -m workbench.sweep.tasks TASK.pkl RESULT.json
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import pickle
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.compiling.cache import triton_cache_dir
from workbench.compiling.jobs import register_module, tables_state
from workbench.compiling.note import note_on_record

ERROR_TIMEOUT = "timed out"
ERROR_CRASH = "worker died"


@dataclass(frozen=True)
class SweepTask:
    """One configuration of one family; ``key`` is :func:`task_key` of it (set by :func:`make_task`)."""

    family: str
    family_module: str
    variant: str
    device: str  # "cuda" | "npu" | "cpu": what the worker measures on
    dtype: str
    mode: str
    problem: dict
    params: dict
    seed: int = 0
    quick: bool = False
    rep_ms: float = 100.0
    warmup_ms: float = 25.0
    axis: str | None = None  # the swept axis and value (x_value of the record)
    x: Any = None
    key: str = ""
    triton_cache_root: str | None = None  # set: the worker keeps its host's Triton cache below it
    extra: dict = field(default_factory=dict)  # "compiled_ahead": a compile-ahead's result (the Ray executor)
    l2: str = "cold"  # kernel timing with the L2 flushed ("cold") or left warm (measure_many's l2)
    # False: measured with the tuned tables off (kernels.tuned_tables.disabled): the rule; a part's
    # name ("backward"): that part's tables off, the others on
    tables: bool | str = True


def task_key(
    variant: str,
    device: str,
    dtype: str,
    mode: str,
    problem: dict,
    params: dict,
    l2: str = "cold",
    tables: bool | str = True,
) -> str:
    """The configuration key as text (the JSON of :func:`workbench.sweep.config.config_key`; a
    warm-L2 timing, or one with the tuned tables off, is another measurement of the same
    configuration, so its key says so)."""
    from workbench.sweep.config import config_key

    key = config_key(variant, device, dtype, mode, problem, params)
    if l2 != "cold":
        key = (*key, ("l2", l2))
    if tables is not True:
        key = (*key, ("tables", "off" if tables is False else f"{tables} off"))
    return json.dumps(key, default=str)


def make_task(
    spec,
    variant,
    *,
    device: str,
    dtype: str,
    mode: str,
    problem: dict | None,
    params: dict | None,
    seed: int = 0,
    quick: bool = False,
    rep_ms: float = 100.0,
    warmup_ms: float = 25.0,
    axis: str | None = None,
    x: Any = None,
    l2: str = "cold",
    tables: bool | str = True,
) -> SweepTask:
    """A task with problem and params resolved against the spec (raw where invalid: the worker
    then records why), keyed like the notebook Session's cache. ``tables=False``: measured with
    the tuned tables off (what the family's rule gives where a table has an entry); a part's name:
    with that part's tables off (:func:`workbench.compiling.jobs.tables_state`)."""
    from kernels.spec import dtype_name, worker_module
    from workbench.sweep.config import resolve_config

    var = spec.variant(variant) if isinstance(variant, str) else variant
    prob, prm, _ = resolve_config(spec, var, problem, params, quick)
    dt = dtype_name(dtype)
    return SweepTask(
        family=spec.name,
        family_module=worker_module(spec) or "",
        variant=var.name,
        device=device,
        dtype=dt,
        mode=mode,
        problem=dict(prob),
        params=dict(prm),
        seed=seed,
        quick=quick,
        rep_ms=rep_ms,
        warmup_ms=warmup_ms,
        axis=axis,
        x=x,
        key=task_key(var.name, device, dt, mode, prob, prm, l2, tables),
        l2=l2,
        tables=tables,
    )


def worker_info() -> dict:
    """Where a task ran: host, pid, the GPUs this process may use, and in a Ray worker its node's
    id (``node``: several nodes may share a host)."""
    info = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }
    ray = sys.modules.get("ray")  # never imported for this: only a Ray worker has a node
    if ray is not None:
        try:
            if ray.is_initialized():
                info["node"] = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - a partial Ray install: no node id
            pass
    return info


# A task's ``triton_cache_root`` that names no folder: each worker's own node's, below the Triton
# cache folder of its own environment (a cluster's nodes may share no disk).
NODE_CACHE = "node"


def triton_cache_root() -> str:
    """The folder below which the workers of this host (on a cluster: this node) share a Triton
    cache, one folder per host: ``workbench-workers`` below :func:`triton_cache_dir`."""
    return str(Path(triton_cache_dir()) / "workbench-workers")


def use_host_triton_cache(root: str | None) -> None:
    """Point this worker's Triton cache at its host's folder below ``root``, unless the user chose
    one. One folder per host, shared by the measuring workers and the compile-ahead processes
    there: what a compile-ahead writes is what a measuring worker's first call finds (Triton
    writes each file under a temporary name and renames it, so concurrent writers are safe).
    Triton reads the variable when it compiles. ``root`` :data:`NODE_CACHE`: below this node's own
    (:func:`triton_cache_root`)."""
    if not root or os.environ.get("WORKBENCH_TRITON_CACHE_SET"):
        return
    if root == NODE_CACHE:
        root = triton_cache_root()
    path = Path(root) / socket.gethostname()
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = str(path)
    os.environ["WORKBENCH_TRITON_CACHE_SET"] = "1"


def register_family(task: SweepTask) -> None:
    """Make the task's family known to this process (a family registered only in the driver)."""
    register_module(task.family, task.family_module)


def run_task(task: SweepTask, spec=None) -> dict:
    """Measure the task's configuration in this process; the record as a dict (never raises
    for a configuration that cannot run: its record says why). ``spec``: the family's
    KernelSpec when the caller holds it (in-process; a family that is not registered). A task
    with ``tables`` other than True is measured inside :func:`kernels.tuned_tables.disabled`
    (:func:`workbench.compiling.jobs.tables_state`). A task whose
    ``extra["compiled_ahead"]`` holds a compile-ahead's result gets it noted on its record
    (:func:`workbench.compiling.note.note_on_record`)."""
    use_host_triton_cache(task.triton_cache_root)
    register_family(task)
    from kernels.spec import get
    from workbench.measure import measure

    spec = spec if spec is not None and spec.name == task.family else get(task.family)
    with tables_state(task.tables):
        rec = measure(
            spec,
            task.variant,
            device=task.device,
            dtype=task.dtype,
            mode=task.mode,
            problem=task.problem,
            params=task.params,
            seed=task.seed,
            quick=task.quick,
            rep_ms=task.rep_ms,
            warmup_ms=task.warmup_ms,
            on_error="record",
            l2=task.l2,
        )
    body = rec.to_dict()
    ahead = task.extra.get("compiled_ahead")
    if ahead is not None:
        body = note_on_record(body, ahead)
    if os.environ.get("WORKBENCH_KERNEL_STORE"):  # a Ray sweep's cluster cache: how each kernel came
        body = _note_cluster_cache(body)
    return stamp(body, task, worker_info())


def _note_cluster_cache(body: dict) -> dict:
    """``compile_facts["cluster_cache"]``: per kernel hash of the record's first call, how this
    process got it (:func:`workbench.sweep.cluster_cache.how_found`: compiled here, or found)."""
    from workbench.sweep.cluster_cache import how_found

    facts = body.get("compile_facts") or {}
    how = {k["hash"]: how_found(k["hash"]) for k in facts.get("kernels") or [] if k.get("hash")}
    how = {digest: way for digest, way in how.items() if way}
    if how:
        body = {**body, "compile_facts": {**facts, "cluster_cache": how}}
    return body


def stamp(body: dict, task: SweepTask, worker: dict | None) -> dict:
    """The record dict with the sweep's fields: key, swept axis / value, where it ran."""
    body = dict(body)
    body["sweep_key"] = task.key
    if task.axis is not None:
        body["axis"] = task.axis
        body["x_value"] = task.x if task.x is not None else _axis_value(body, task.axis)
    worker = worker or {}
    body["host"] = worker.get("host", "")
    body["worker"] = worker
    return body


def _axis_value(body: dict, axis: str):
    if axis in (body.get("params") or {}):
        return body["params"][axis]
    return (body.get("problem") or {}).get(axis)


def error_record(task: SweepTask, kind: str, message: str, worker: dict | None = None) -> dict:
    """The record of a configuration that gave no record of its own (its worker died, or it ran
    past its timeout): ``error`` is ``"<kind>: <message>"``, ``passed`` False."""
    from workbench.provenance import code_version
    from workbench.record import Record, versions

    rec = Record(
        kernel=task.family,
        variant=task.variant,
        backend="?",
        mode=task.mode,
        dtype=task.dtype,
        device_kind=task.device,
        device_name="",
        problem=dict(task.problem),
        params=dict(task.params),
        axis=task.axis or "",
        x_value=task.x,
        passed=False,
        error=f"{kind}: {message}",
        seed=task.seed,
        versions=versions(),
        commit=code_version(),
        timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    return stamp(rec.to_dict(), task, worker)


_RECORD_FIELDS: set[str] | None = None


def as_record(body: dict):
    """A :class:`~workbench.record.Record` from a record dict (extra keys dropped)."""
    global _RECORD_FIELDS
    from workbench.record import Record

    if _RECORD_FIELDS is None:
        _RECORD_FIELDS = {f.name for f in dataclasses.fields(Record)}
    return Record(**{k: v for k, v in body.items() if k in _RECORD_FIELDS})


def _main(argv: list[str]) -> int:
    """Subprocess entry: read a pickled task, write its record as JSON."""
    src, dst = argv
    with open(src, "rb") as f:
        task = pickle.load(f)
    import workbench.measure  # noqa: F401 - the parent's timeout starts once this is imported

    Path(dst + ".started").touch()
    body = run_task(task)
    tmp = dst + ".tmp"
    with open(tmp, "w") as f:
        json.dump(body, f, default=str)
    os.replace(tmp, dst)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
