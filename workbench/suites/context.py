"""What a suite run carries while it measures: its records, rows and per-target bookkeeping."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Callable

from workbench.phases import Phases
from workbench.provenance import code_version
from workbench.record import Record, versions
from workbench.suites.judge import record_dict


@dataclass
class SuiteRun:
    """What one run produced: every record (in order), the rows, and which records each target took."""

    suite: str
    device_kind: str
    device_name: str
    records: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    target_records: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)  # target -> {peer: reason}
    failures: list = field(default_factory=list)
    # target -> its wall seconds split into phases (workbench.phases: setup, compile, check,
    # timing, other, wall), so every run shows where its time went.
    target_wall: dict = field(default_factory=dict)
    # What this process's compile service did (workbench.compiling.service.CompileService.summary):
    # configurations submitted, compiled ahead, withdrawn, waited for; {} where none ran (CPU).
    compile_ahead: dict = field(default_factory=dict)

    def record_dicts(self) -> list[dict]:
        return [record_dict(r) for r in self.records]


@dataclass
class RunContext:
    device: Any
    store: Any
    rep_ms: float
    warmup_ms: float
    emit: Callable[[Any], None]
    # Records already taken in this run, by what they measured: a target that judges another
    # timing of the same cells (the call targets) reuses them instead of measuring again.
    taken: dict = field(default_factory=dict)
    phases: Phases = field(default_factory=Phases)  # this target's wall seconds per phase


def new_record(kernel, variant, backend, mode, dtype, dev, problem, params, axis, x) -> Record:
    return Record(
        kernel=kernel,
        variant=variant,
        backend=backend,
        mode=mode,
        dtype=dtype,
        device_kind=dev.kind,
        device_name=dev.name,
        problem=dict(problem),
        params=dict(params),
        axis=axis,
        x_value=x,
        versions=versions(),
        commit=code_version(),
        timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
