"""The record: one tidy row per measured configuration, the type every tool reads.

:class:`Record` is what :func:`workbench.measure.measure_many` fills in (one variant, one
configuration, one mode, on one device: timings, bandwidth shares, checks, compile facts, the
edge verdicts, or the error that stopped it) and what the store (:mod:`workbench.store`), the
sweeps, suites, reports and the notebooks read back. Beside it: :func:`failed_checks` (what
failed in a record, in a few words), :func:`versions` (the versions a record carries) and
:func:`new_record` (a record before its configuration runs). Reading records needs nothing of
the measuring pipeline.
"""

from __future__ import annotations

import datetime as _dt
import functools
import platform
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import torch

from workbench.provenance import code_version


@dataclass
class Record:
    """One tidy row: one variant, one configuration, one mode, on one device."""

    kernel: str
    variant: str
    backend: str
    mode: str
    dtype: str
    device_kind: str
    device_name: str
    problem: dict
    params: dict
    axis: str
    x_value: Any
    timing_method: str = ""
    ms_p50: float | None = None
    ms_p20: float | None = None
    ms_p80: float | None = None
    wall_ms: float | None = None
    launch_overhead_ms: float | None = None
    compile_ms: float | None = None
    # Issue 14's three timings, each a median with its confidence interval and sample count.
    # kernel: device work only (method says how: cuda-graph, profiler, npu-events, cpu-wall);
    # call: a user's eager call, host included; host: the time to issue one call from Python.
    kernel_ms: float | None = None
    kernel_lo_ms: float | None = None
    kernel_hi_ms: float | None = None
    kernel_n: int | None = None
    kernel_method: str = ""
    call_ms: float | None = None
    call_lo_ms: float | None = None
    call_hi_ms: float | None = None
    call_n: int | None = None
    host_ms: float | None = None
    host_lo_ms: float | None = None
    host_hi_ms: float | None = None
    host_n: int | None = None
    noisy: bool | None = None  # the kernel time's interval did not reach +-rel_width in the budget
    device_state: dict = field(default_factory=dict)
    min_bytes: int | None = None
    gbps: float | None = None
    pct_copy_bw: float | None = None
    copy_bw_gbps: float | None = None
    # The device operations one timed call launched and how that is known: "profiler" (counted
    # per call by the kernel timing) or "launch path" (the launches kernels.launch recorded in
    # the first call: our Triton kernels, not torch's own operations).
    launches: int | None = None
    launches_source: str = ""
    # A device copy of min_bytes in as many launches, timed as the kernel time was and in the same
    # run (Device.same_size_copy; measure_many's same_size_copy): its time with interval, GB/s and
    # method (or why it was not measured), and this cell's share of it with the interval the two
    # medians' intervals imply.
    same_size_copy_ms: float | None = None
    same_size_copy_lo_ms: float | None = None
    same_size_copy_hi_ms: float | None = None
    same_size_copy_n: int | None = None
    same_size_copy_gbps: float | None = None
    same_size_copy_method: str = ""
    pct_same_size_copy: float | None = None
    pct_same_size_copy_lo: float | None = None
    pct_same_size_copy_hi: float | None = None
    peak_mb: float | None = None
    checks: list[dict] = field(default_factory=list)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    # The worst output's or gradient's error as a multiple of the reference's own error in this
    # dtype (kernels.testing.judge; at most the rule's k passes), over the tensors the rule judged
    # (None where it judged none).
    err_ratio: float | None = None
    passed: bool | None = None
    # The arithmetic the variant used (KernelSpec.precision_of): "ieee" is plain fp32 and the
    # dtype's own arithmetic; "tf32"/"tf32x3" for TF32 matrix products. Checked at its tolerance.
    precision: str = "ieee"
    # Why a tile is fast or slow (workbench.compile_facts): registers, spills, shared memory,
    # occupancy and its limit per kernel on CUDA; UB bytes on the NPU; marked unavailable in the
    # interpreter. Read once after the first call.
    compile_facts: dict = field(default_factory=dict)
    # Nsight Compute counters per kernel, where `workbench profile` ran (workbench.ncu).
    counters: dict = field(default_factory=dict)
    # Where our kernel's tiles came from (Variant.tiles_source): "tuned:<device key>@<bucket>",
    # "heuristic (<why no table>)" or "explicit", then "; backward: <the same>" for a part with a
    # table of its own (kernels.tuned_tables.joined_sources); "" for variants without tiles.
    tiles_source: str = ""
    # "contiguous", or "strided": floating inputs of two or more axes as views of every row inside
    # a wider buffer (row stride > row length), as a slice of a fused projection is.
    layout: str = "contiguous"
    # The edge shapes checked beside this configuration (workbench.edges): one verdict each; a
    # failed one makes the record fail, its failing checks listed in ``checks`` under its label.
    edges: list[dict] = field(default_factory=list)
    error: str | None = None
    # True: the configuration was refused before anything launched (the variant's check, a tile
    # or problem the spec rejects, a dtype or mode it lacks): it cannot run, which is no failure
    cannot_run: bool = False
    seed: int = 0
    versions: dict = field(default_factory=dict)
    commit: str = ""
    timestamp: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.passed)


def failed_checks(record: Record | Mapping[str, Any]) -> str:
    """What failed in a record, in a few words per output or gradient: ``"out: 6.01x the
    reference's error (scale bias; k=2)"``, a check's note, or its error against the outer bound."""
    body = record.to_dict() if isinstance(record, Record) else record
    if body.get("error"):
        return f"could not run: {body['error'][:200]}"
    parts = []
    for c in body.get("checks") or []:
        if c.get("passed"):
            continue
        if c.get("note"):
            parts.append(f"{c['name']}: {c['note']}")
        elif not c.get("within_tolerance", True) or c.get("err_ratio") is None:
            parts.append(f"{c['name']}: max abs err {c.get('max_abs', float('nan')):.3g} "
                         f"over atol {c.get('atol', 0):.3g} + rtol {c.get('rtol', 0):.3g} x |truth|")  # fmt: skip
        else:
            stat = _STAT_NAMES.get(c.get("worst"), c.get("worst"))
            parts.append(f"{c['name']}: {c['err_ratio']:.3g}x the reference's error ({stat}; k={c.get('k', 0):g})")
    if not parts and body.get("max_abs_err") is not None:
        parts.append(f"check failed (max abs err {body['max_abs_err']:.3g})")
    return "; ".join(parts) or "check failed"


_STAT_NAMES = {"max": "max error", "rms": "RMS error", "shift": "mean error", "scale": "mean error away from zero"}


@functools.lru_cache(maxsize=1)
def versions() -> dict:
    import triton

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": getattr(triton, "__version__", "?"),
    }


def new_record(spec, var_name, backend, mode, dtype, dev_kind, dev_name, prob, params, seed) -> Record:
    """A record of one configuration before it runs: what it is, on which device, with the
    versions, the code's commit and the time; the measuring pipeline fills in the rest."""
    return Record(
        kernel=spec.name,
        variant=var_name,
        backend=backend,
        mode=mode,
        dtype=dtype,
        device_kind=dev_kind,
        device_name=dev_name,
        problem=prob,
        params=dict(params or {}),
        axis=spec.axis,
        x_value=(prob or {}).get(spec.axis),
        seed=seed,
        versions=versions(),
        commit=code_version(),
        timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
