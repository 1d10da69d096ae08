"""Benchmark suites as data: targets, the runs that measure them, and the ratio maths.

``workbench bench --suite h100`` runs :data:`SUITES` ``["h100"]``: every target below, with every
peer installed, side by side in one process, and judges each point against its thresholds.
``smoke`` is the same targets at tiny sizes, so CI runs the whole path on the CPU interpreter.

A target is one of three kinds:

- :class:`Versus` — "ours" (one named variant of a family at its API defaults) against the best
  peer at each value of the family's axis: ``ratio = best peer time / our time`` (> 1: we are
  faster), plus, where a rule asks, our share of the device's copy bandwidth.
- :class:`Chain` — the HMM chain (T steps of L latents) forward + backward host wall: ours
  (CUDA-graph replay where there is CUDA, else eager) against PyJuice's eager ``pc(x)`` +
  ``pc.backward``; PyJuice's own graph replay is shown beside it, not judged.
- :class:`Defaults` — a variant's default tiles against the best configuration a bounded sweep
  of its tile :class:`~kernels.spec.Param` values finds (one parameter at a time, the others at
  their defaults; values whose ``check`` raises are skipped): ``ratio = best / default``.

Thresholds are data: a tuple of :class:`Rule` (``value`` from ``from_x`` on); at each x the
largest rule that applies is required. Every point ends as ``MET``, ``MISSED``, ``not measured``
(a peer missing or failed, a number the device cannot give), ``not comparable`` (CPU interpreter
or CPU wall times, which are never judged against device numbers) or ``wrong result``.

Every measurement goes to the store the moment it is taken (:func:`kernels.bench.measure` with
``on_error="record"``; the chain's records are appended the same way), so a later failure loses
nothing already measured.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from kernels.bench import Record, compare, git_commit, measure, versions
from kernels.spec import DTYPES, get

# The variant that is "ours" per family: the one whose defaults are the functional API's.
OURS = {"rms_norm": "gpu_multirow", "fused_add_rms_norm": "gpu_multirow", "block_sparse": "gpu"}
PEER_BACKENDS = ("torch", "peer")
# Distributions of the peer libraries, for the environment block.
PEER_DISTRIBUTIONS = ("liger-kernel", "pyjuice")
CPU_TIMINGS = ("interpreter-wall", "cpu-wall")

MET, MISSED, NOT_MEASURED, NOT_COMPARABLE, WRONG = "MET", "MISSED", "not measured", "not comparable", "wrong result"


# --- targets as data ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """Require at least ``value`` at every x >= ``from_x`` (every x when ``from_x`` is None)."""

    value: float
    from_x: float | None = None

    def applies(self, x: Any) -> bool:
        if self.from_x is None:
            return True
        return isinstance(x, (int, float)) and not isinstance(x, bool) and x >= self.from_x

    def text(self) -> str:
        return f">= {self.value:g}" + ("" if self.from_x is None else f" from {self.from_x:g}")


def required(rules: Sequence[Rule], x: Any) -> float | None:
    """The threshold at ``x``: the largest value among the rules that apply, or None."""
    values = [r.value for r in rules if r.applies(x)]
    return max(values) if values else None


@dataclass(frozen=True)
class Versus:
    """Ours against the best peer along the family's axis (see the module docstring).

    ``peers`` None: every variant with a torch or peer backend that can run here. ``kernel_only``:
    peers whose judged time is their bare kernel (their Variant's ``kernel``), because the
    variant also stages our inputs into the peer's buffers; the variant's own record still checks
    its result and its time is shown as the informative ``alt`` column."""

    name: str
    title: str
    family: str
    mode: str
    values: tuple
    ours: str
    peers: tuple[str, ...] | None = None
    problem: Mapping[str, Any] = field(default_factory=dict)
    dtype: str = "bf16"
    min_ratio: tuple[Rule, ...] = (Rule(1.0),)
    min_pct_bw: tuple[Rule, ...] = ()
    kernel_only: tuple[str, ...] = ()
    kind: str = "versus"

    def axis(self) -> str:
        return get(self.family).axis


@dataclass(frozen=True)
class Chain:
    """The HMM chain forward + backward wall: ours against PyJuice (module docstring)."""

    name: str
    title: str
    T: int
    L: int
    batches: tuple[int, ...]
    V: int = 64
    min_ratio: tuple[Rule, ...] = (Rule(2.0),)
    family: str = "block_sparse"
    mode: str = "full"
    ours: str = "ours_graph"  # falls back to ours_eager where there are no CUDA graphs
    peers: tuple[str, ...] = ("pyjuice_eager",)
    alt_peer: str = "pyjuice_graph"
    kind: str = "chain"

    @property
    def values(self) -> tuple:
        return self.batches

    def axis(self) -> str:
        return "batch"


@dataclass(frozen=True)
class Defaults:
    """Default tiles of ``variant`` against the best of a 1-D sweep of each tile parameter.

    ``params`` None sweeps every tile parameter of the variant; ``max_values`` caps how many
    runnable non-default values each parameter visits (None: all declared values)."""

    name: str
    title: str
    family: str
    variant: str
    mode: str
    values: tuple
    problem: Mapping[str, Any] = field(default_factory=dict)
    params: tuple[str, ...] | None = None
    max_values: int | None = None
    dtype: str = "bf16"
    min_ratio: tuple[Rule, ...] = (Rule(0.95),)
    kind: str = "defaults"

    @property
    def ours(self) -> str:
        return self.variant

    def axis(self) -> str:
        return get(self.family).axis


Target = Versus | Chain | Defaults


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    targets: tuple
    rep_ms: float = 100
    warmup_ms: float = 25
    doc: str = ""

    def target(self, name: str):
        for t in self.targets:
            if t.name == name:
                return t
        raise ValueError(f"suite {self.name!r} has no target {name!r}; targets: {', '.join(self.names())}")

    def names(self) -> list[str]:
        return [t.name for t in self.targets]


def _targets(
    *,
    rows: int,
    norm_hidden: tuple,
    fused_hidden: tuple,
    norm_big: int,
    fused_bw_from: int,
    nodes: int,
    batches: tuple,
    hmm: dict,
    defaults: dict,
) -> tuple:
    """The issue-8 targets at one set of sizes (the h100 suite's, or the smoke suite's)."""
    rn, fa, bsp = OURS["rms_norm"], OURS["fused_add_rms_norm"], OURS["block_sparse"]
    layer = {"layer": "sum", "nodes": nodes, "block_size": 0, "K": 0, "tied": False}
    d = defaults
    return (
        Versus(
            "rms_norm_forward",
            "1. RMSNorm forward",
            "rms_norm",
            "forward",
            norm_hidden,
            rn,
            problem={"rows": rows},
            min_pct_bw=(Rule(90.0, norm_big),),
        ),
        Versus(
            "rms_norm_full",
            "2. RMSNorm forward+backward",
            "rms_norm",
            "full",
            norm_hidden,
            rn,
            problem={"rows": rows},
            min_ratio=(Rule(1.0), Rule(1.3, norm_big)),
        ),
        Versus(
            "fused_forward",
            "3. Fused add+RMSNorm forward",
            "fused_add_rms_norm",
            "forward",
            fused_hidden,
            fa,
            problem={"rows": rows},
            min_pct_bw=(Rule(90.0, fused_bw_from),),
        ),
        Versus(
            "fused_full",
            "4. Fused add+RMSNorm forward+backward",
            "fused_add_rms_norm",
            "full",
            fused_hidden,
            fa,
            problem={"rows": rows},
        ),
        Versus(
            "block_sparse_forward",
            f"5. Block-sparse sum layer forward, L={nodes} (one block of {nodes} nodes, K={nodes})",
            "block_sparse",
            "forward",
            batches,
            bsp,
            peers=("pyjuice",),
            problem=layer,
            dtype="fp32",
            kernel_only=("pyjuice",),
        ),
        Chain(
            "hmm_chain",
            f"6. HMM chain T={hmm['T']}, L={hmm['L']} forward+backward wall (ours <= 0.5x PyJuice eager)",
            **hmm,
        ),
        Defaults(
            "defaults_rms_norm_forward",
            "7. Defaults vs best tiles: RMSNorm forward",
            "rms_norm",
            rn,
            "forward",
            d["rms_forward"],
            problem={"rows": rows},
            params=("BLOCK_SIZE", "BLOCK_SIZE_M", "num_warps"),  # GRID steers the backward only
            max_values=d.get("max_values"),
        ),
        Defaults(
            "defaults_rms_norm_full",
            "7. Defaults vs best tiles: RMSNorm forward+backward",
            "rms_norm",
            rn,
            "full",
            d["rms_full"],
            problem={"rows": rows},
            params=d.get("full_params"),
            max_values=d.get("max_values"),
        ),
        Defaults(
            "defaults_fused_forward",
            "7. Defaults vs best tiles: fused add+RMSNorm forward",
            "fused_add_rms_norm",
            fa,
            "forward",
            d["fused_forward"],
            problem={"rows": rows},
            params=("BLOCK_SIZE", "BLOCK_SIZE_M", "num_warps"),
            max_values=d.get("max_values"),
        ),
        Defaults(
            "defaults_block_sparse_forward",
            f"7. Defaults vs best tiles: block-sparse sum forward, L={nodes}",
            "block_sparse",
            bsp,
            "forward",
            d["block_sparse"],
            problem=layer,
            params=d.get("block_sparse_params"),
            max_values=d.get("max_values"),
            dtype="fp32",
        ),
    )


SUITES: dict[str, Suite] = {
    "h100": Suite(
        "h100",
        "Issue 8 targets on an H100 (bf16 norms at 4096 rows; block-sparse fp32 at L=1024)",
        _targets(
            rows=4096,
            norm_hidden=(1024, 2048, 4096, 8192, 16384, 32768),
            fused_hidden=(512, 1024, 2048, 4096, 8192, 16384),
            norm_big=4096,
            fused_bw_from=2048,
            nodes=1024,
            batches=(1, 2, 4, 8, 16),
            hmm={"T": 32, "L": 1024, "batches": (1, 16)},
            defaults={
                "rms_forward": (1024, 4096, 16384),
                "rms_full": (4096,),
                "fused_forward": (1024, 4096),
                "block_sparse": (1, 16),
            },
        ),
        rep_ms=100,
        doc="the issue's sizes; ratios measured side by side in one run",
    ),
    "smoke": Suite(
        "smoke",
        "Issue 8 targets at tiny sizes (CPU interpreter; checks the path, judges nothing)",
        _targets(
            rows=16,
            norm_hidden=(128, 300),
            fused_hidden=(128, 300),
            norm_big=300,
            fused_bw_from=300,
            nodes=48,
            batches=(1, 3),
            hmm={"T": 4, "L": 16, "V": 8, "batches": (1, 2)},
            defaults={
                "rms_forward": (300,),
                "rms_full": (128,),
                "fused_forward": (300,),
                "block_sparse": (3,),
                "max_values": 1,
                "full_params": ("BLOCK_SIZE_M",),
                "block_sparse_params": ("heuristic",),
            },
        ),
        rep_ms=1,
        warmup_ms=1,
        doc="the same targets with tiny shapes, for CI on the CPU",
    ),
}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}")
    return SUITES[name]


# --- the ratio maths (pure: records in, rows out) ---------------------------------------------
@dataclass
class RatioRow:
    """One judged point of one target (a row of ``ratios.csv``)."""

    target: str
    kind: str
    title: str
    family: str
    mode: str
    x_name: str
    x: Any
    ours: str
    ours_us: float | None = None
    peer: str | None = None
    peer_us: float | None = None
    ratio: float | None = None
    pct_copy_bw: float | None = None
    min_ratio: float | None = None
    min_pct_bw: float | None = None
    status: str = NOT_MEASURED
    reason: str = ""
    alt_peer: str | None = None
    alt_peer_us: float | None = None
    alt_ratio: float | None = None
    note: str = ""
    timing: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def threshold(self) -> str:
        bits = []
        if self.min_ratio is not None:
            bits.append(f"ratio>={self.min_ratio:g}")
        if self.min_pct_bw is not None:
            bits.append(f"%BW>={self.min_pct_bw:g}")
        return ", ".join(bits) or "-"

    def verdict(self) -> str:
        return f"{self.status} ({self.reason})" if self.reason else self.status


def record_dict(record: Any) -> dict:
    """A record (a :class:`~kernels.bench.Record` or its dict) as a dict, with its sweep
    ``label`` where it has one (the configuration of a :class:`Defaults` sweep)."""
    if hasattr(record, "to_dict"):
        d = record.to_dict()
        if getattr(record, "label", None) is not None:
            d["label"] = record.label
        return d
    return dict(record)


_d = record_dict


def _ok(r: dict) -> bool:
    return not r.get("error") and r.get("passed") is True and r.get("ms_p50") is not None


def _us(ms: float | None) -> float | None:
    return None if ms is None else ms * 1e3


def _cpu_timed(*records: dict) -> bool:
    return any(r.get("timing_method") in CPU_TIMINGS for r in records)


def _short(text: Any, n: int = 160) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def best_of(records: Iterable[Any]) -> dict | None:
    """The fastest record that ran and passed its check (None when none did)."""
    ok = [r for r in map(_d, records) if _ok(r)]
    return min(ok, key=lambda r: r["ms_p50"]) if ok else None


def label(record: dict) -> str:
    """A record's name in the table: its variant, or for a tile sweep its non-default params."""
    return record.get("label") or record.get("variant") or "?"


def judge(
    row: RatioRow,
    ours: Any | None,
    candidates: Sequence[Any],
    *,
    missing: Mapping[str, str] | None = None,
    ratio_rules: Sequence[Rule] = (),
    bw_rules: Sequence[Rule] = (),
    alt: Any | None = None,
) -> RatioRow:
    """Fill ``row`` from our record and the candidates' (peers, or sweep configurations).

    ``missing``: candidates that could not be measured here (name -> reason). The ratio is the
    best candidate's time over ours; the status is MISSED when any threshold that could be
    evaluated is missed, else "not measured" / "not comparable" when one could not be, else MET.
    """
    missing = dict(missing or {})
    x = row.x
    row.min_ratio = required(ratio_rules, x)
    row.min_pct_bw = required(bw_rules, x)
    if ours is None:
        row.status, row.reason = NOT_MEASURED, "ours was not measured"
        return row
    o = _d(ours)
    row.timing = o.get("timing_method") or ""
    if o.get("error"):
        row.status, row.reason = NOT_MEASURED, f"ours failed: {_short(o['error'])}"
        return row
    if o.get("passed") is False:
        row.status, row.reason = WRONG, "our result is wrong"
        return row
    row.ours_us = _us(o.get("ms_p50"))
    row.pct_copy_bw = o.get("pct_copy_bw")
    cands = [_d(c) for c in candidates]
    best = best_of(cands)
    if alt is not None:
        a = _d(alt)
        row.alt_peer = label(a)
        if _ok(a):
            row.alt_peer_us = _us(a["ms_p50"])
            if row.ours_us:
                row.alt_ratio = row.alt_peer_us / row.ours_us
    states: list[tuple[str, str]] = []  # (state, reason) per threshold
    if best is not None:
        row.peer, row.peer_us = label(best), _us(best["ms_p50"])
        if row.ours_us:
            row.ratio = row.peer_us / row.ours_us
    if row.min_ratio is not None:
        if best is None:
            if missing and not cands:
                why = "; ".join(f"{k}: {v}" for k, v in missing.items())
                states.append((NOT_MEASURED, f"peer missing: {why}"))
            elif cands:
                failed = "; ".join(f"{label(c)}: {_short(c.get('error') or 'wrong result', 80)}" for c in cands)
                states.append((NOT_MEASURED, f"peer failed: {failed}"))
            else:
                states.append((NOT_MEASURED, "no peer can run on this device"))
        elif _cpu_timed(o, best):
            states.append((NOT_COMPARABLE, "CPU interpreter / CPU wall times"))
        elif row.ratio is None:
            states.append((NOT_MEASURED, "no time"))
        elif row.ratio >= row.min_ratio:
            states.append((MET, ""))
        else:
            states.append((MISSED, f"ratio {row.ratio:.2f} < {row.min_ratio:g}"))
    if row.min_pct_bw is not None:
        if _cpu_timed(o):
            states.append((NOT_COMPARABLE, "no copy bandwidth on the CPU"))
        elif row.pct_copy_bw is None:
            states.append((NOT_MEASURED, "no copy bandwidth measured"))
        elif row.pct_copy_bw >= row.min_pct_bw:
            states.append((MET, ""))
        else:
            states.append((MISSED, f"{row.pct_copy_bw:.1f}% of copy BW < {row.min_pct_bw:g}%"))
    if missing and best is not None:
        row.note = "not here: " + "; ".join(f"{k} ({_short(v, 80)})" for k, v in missing.items())
    for state in (MISSED, NOT_MEASURED, NOT_COMPARABLE):
        hits = [why for s, why in states if s == state]
        if hits:
            row.status, row.reason = state, "; ".join(h for h in hits if h)
            return row
    row.status, row.reason = (MET, "") if states else (NOT_MEASURED, "no threshold")
    return row


def _at(records: Sequence[dict], x: Any, *, variant: str | None = None, mode: str | None = None) -> list[dict]:
    return [
        r
        for r in records
        if str(r.get("x_value")) == str(x)
        and (variant is None or r.get("variant") == variant)
        and (mode is None or r.get("mode") == mode)
    ]


def _last(records: Sequence[dict]) -> dict | None:
    return records[-1] if records else None


def _row(target, x) -> RatioRow:
    return RatioRow(
        target=target.name,
        kind=target.kind,
        title=target.title,
        family=target.family,
        mode=target.mode,
        x_name=target.axis(),
        x=x,
        ours=target.ours,
    )


def versus_rows(target: Versus, records: Iterable[Any], missing: Mapping[str, str] | None = None) -> list[RatioRow]:
    """Judge a :class:`Versus` target from its records (ours and every peer at each x)."""
    recs = [r for r in map(_d, records) if r.get("mode") == target.mode]
    rows = []
    for x in target.values:
        here = _at(recs, x)
        ours = _last([r for r in here if r.get("variant") == target.ours and not r.get("label")])
        cands, alt = [], None
        peer_names = sorted({r["variant"] for r in here if r.get("variant") != target.ours})
        for name in peer_names:
            mine = [r for r in here if r["variant"] == name]
            if name in target.kernel_only:
                alt = _last(mine)
                alt = dict(alt, label=f"{name} (incl. input staging)") if alt else None
                continue
            cands.append(_last(mine))
        for name in target.kernel_only:
            kernel = _last([r for r in here if r.get("variant") == f"{name}_kernel"])
            checked = _last([r for r in here if r.get("variant") == name])
            if kernel is None:
                continue
            cands = [c for c in cands if c.get("variant") != f"{name}_kernel"]
            if checked is not None and not _ok(checked):
                # the bare kernel counts only when the variant's result on our inputs passed
                kernel = dict(kernel, error=checked.get("error") or "its result on our inputs is wrong")
            cands.append(kernel)
        rows.append(
            judge(
                _row(target, x),
                ours,
                cands,
                missing=missing,
                ratio_rules=target.min_ratio,
                bw_rules=target.min_pct_bw,
                alt=alt,
            )
        )
    return rows


def chain_rows(target: Chain, records: Iterable[Any], missing: Mapping[str, str] | None = None) -> list[RatioRow]:
    """Judge the HMM chain: ours (graph replay, else eager) against PyJuice's eager wall."""
    recs = [r for r in map(_d, records) if r.get("mode") == target.mode]
    rows = []
    for x in target.values:
        here = _at(recs, x)
        ours = _last(_at(here, x, variant=target.ours)) or _last(_at(here, x, variant="ours_eager"))
        row = _row(target, x)
        if ours is not None:
            row.ours = ours["variant"]
        cands = [r for name in target.peers for r in _at(here, x, variant=name)[-1:]]
        alt = _last(_at(here, x, variant=target.alt_peer))
        rows.append(judge(row, ours, cands, missing=missing, ratio_rules=target.min_ratio, alt=alt))
    return rows


def defaults_rows(target: Defaults, records: Iterable[Any]) -> list[RatioRow]:
    """Judge default tiles: ``ratio = best configuration's time / default's`` (<= 1)."""
    recs = [r for r in map(_d, records) if r.get("mode") == target.mode and r.get("variant") == target.variant]
    rows = []
    for x in target.values:
        here = _at(recs, x)
        default = _last([r for r in here if r.get("label") == "default"])
        row = _row(target, x)
        row.ours = "default"
        measured = [r for r in here if r.get("label")]
        sweep = [r for r in measured if r.get("label") != "default"]
        judge(row, default, measured, ratio_rules=target.min_ratio)
        tried = len(sweep)
        failed = sum(1 for r in sweep if not _ok(r))
        row.note = f"{tried} configurations" + (f", {failed} failed" if failed else "")
        rows.append(row)
    return rows


def sweep_label(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "default"


# --- running ---------------------------------------------------------------------------------
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

    def record_dicts(self) -> list[dict]:
        return [_d(r) for r in self.records]


@dataclass
class _Context:
    device: Any
    store: Any
    rep_ms: float
    warmup_ms: float
    emit: Callable[[Any], None]


def peer_plan(target: Versus, device_kind: str) -> tuple[list[str], dict[str, str]]:
    """(peers to measure here, {peer: why it cannot run here}) for a :class:`Versus` target."""
    spec = get(target.family)
    if target.peers is None:
        names = [
            v.name
            for v in spec.variants
            if v.backend in PEER_BACKENDS and v.name != target.ours and (v.modes is None or target.mode in v.modes)
        ]
    else:
        names = list(target.peers)
    run, missing = [], {}
    for name in names:
        var = spec.variant(name)
        reason = (var.available() if var.available else None) or var.unavailable_reason(device_kind)
        if reason:
            missing[name] = reason
        else:
            run.append(name)
    return run, missing


def _new_record(kernel, variant, backend, mode, dtype, dev, problem, params, axis, x) -> Record:
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
        commit=git_commit(),
        timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )


def _run_versus(target: Versus, ctx: _Context, run: SuiteRun) -> None:
    spec = get(target.family)
    peers, missing = peer_plan(target, ctx.device.kind)
    run.missing[target.name] = missing
    axis = spec.axis
    for x in target.values:
        problem = {**target.problem, axis: x}
        for name in [target.ours] + peers:
            rec = measure(
                spec,
                name,
                device=ctx.device,
                dtype=target.dtype,
                mode=target.mode,
                problem=problem,
                warmup_ms=ctx.warmup_ms,
                rep_ms=ctx.rep_ms,
                store=ctx.store,
                on_error="record",
            )
            ctx.emit(rec)
            if name in target.kernel_only:
                ctx.emit(_bare_kernel_record(spec, spec.variant(name), problem, target, ctx), to_store=True)


def _bare_kernel_record(spec, var, problem: dict, target: Versus, ctx: _Context) -> Record:
    """A peer's bare kernel (its variant's ``kernel``) timed on the target's problem, recorded as
    ``<variant>_kernel``; the variant's own record has checked its result on our inputs."""
    dev = ctx.device
    prob = spec.resolve_problem(problem)
    rec = _new_record(
        spec.name, f"{var.name}_kernel", "peer", "forward", target.dtype, dev, prob, {}, spec.axis, prob[spec.axis]
    )
    try:
        import torch

        inputs = spec.make_inputs(prob, DTYPES[target.dtype], dev.torch_device, 0)
        fn = var.kernel(inputs, prob)
        with torch.no_grad():
            fn()
            timing = dev.time(fn, warmup_ms=ctx.warmup_ms, rep_ms=ctx.rep_ms)
        rec.timing_method = timing.method
        rec.ms_p50, rec.ms_p20, rec.ms_p80 = timing.p50, timing.p20, timing.p80
        rec.min_bytes = int(spec.min_bytes(prob, "forward", target.dtype))
        if dev.kind != "cpu" and timing.p50 > 0:
            rec.gbps = rec.min_bytes / (timing.p50 * 1e-3) / 1e9
            rec.copy_bw_gbps = dev.copy_bandwidth_gbps()
            if rec.copy_bw_gbps:
                rec.pct_copy_bw = 100.0 * rec.gbps / rec.copy_bw_gbps
        rec.passed = True  # its result on our inputs is checked by the variant's own record
    except Exception as exc:  # noqa: BLE001 - a peer that cannot be timed is reported, not fatal
        rec.error, rec.passed = f"{type(exc).__name__}: {exc}"[:2000], False
    return rec


def _run_defaults(target: Defaults, ctx: _Context, run: SuiteRun) -> None:
    spec = get(target.family)
    var = spec.variant(target.variant)
    axis = spec.axis
    names = [p.name for p in var.params] if target.params is None else list(target.params)
    for x in target.values:
        problem = {**target.problem, axis: x}
        configs: list[dict] = [{}]
        prob = spec.resolve_problem(problem)
        for pname in names:
            p = var.param(pname)
            taken = 0
            for value in p.values:
                if value == p.default:
                    continue
                if target.max_values is not None and taken >= target.max_values:
                    break
                if var.check is not None:
                    try:
                        var.check(prob, var.resolve_params({pname: value}), target.dtype, ctx.device)
                    except ValueError:
                        continue  # a value this problem cannot take: skipped, not measured
                configs.append({pname: value})
                taken += 1
        for params in configs:
            rec = measure(
                spec,
                var,
                device=ctx.device,
                dtype=target.dtype,
                mode=target.mode,
                problem=problem,
                params=params,
                warmup_ms=ctx.warmup_ms,
                rep_ms=ctx.rep_ms,
                store=ctx.store,
                on_error="record",
            )
            ctx.emit(rec, label=sweep_label(params))


def _chain_checks(hmm, ll, flows, want, want_flows) -> list:
    """Log-likelihoods and transition / prior flows against the classical recursion (fp64)."""
    out = [compare("ll", ll, want, 1e-3, 1e-5)]
    for name, got in (("trans", hmm.trans_matrix(flows["trans"])), ("prior", flows["prior"])):
        ref = want_flows[name]
        scale = max(1.0, float(ref.abs().max()))
        out.append(compare(f"flows_{name}", got, ref, 1e-3 * scale, 1e-5))
    return out


def _run_chain(target: Chain, ctx: _Context, run: SuiteRun) -> None:
    import torch

    from kernels.block_sparse import peer
    from kernels.block_sparse.hmm import HMM, chain_timings

    dev = ctx.device
    missing: dict[str, str] = {}
    run.missing[target.name] = missing
    hmm = HMM(T=target.T, L=target.L, V=target.V, device=dev)
    problem = {"T": target.T, "L": target.L, "V": target.V, "block_size": hmm.block_size}
    pj, reason = None, peer.available()
    if reason is None:
        try:
            pj = peer.PyJuiceHMM.like(hmm)
        except Exception as exc:  # noqa: BLE001 - reported as the peer failing to build
            reason = f"PyJuice's HMM could not be built: {type(exc).__name__}: {exc}"
    if pj is None:
        missing["pyjuice"] = reason
    graphs = dev.kind == "cuda"

    def record(variant, backend, mode, batch, ms, method, checks=(), error=None, params=None):
        rec = _new_record(
            "hmm_chain", variant, backend, mode, "fp32", dev, {**problem, "batch": batch}, params or {}, "batch", batch
        )
        rec.timing_method = method
        rec.ms_p50 = rec.wall_ms = ms
        rec.checks = [asdict(c) for c in checks]
        rec.max_abs_err = max((c.max_abs for c in checks), default=None)
        rec.max_rel_err = max((c.max_rel for c in checks), default=None)
        rec.error = error
        rec.passed = False if error else all(c.passed for c in checks)
        ctx.emit(rec, to_store=True)

    wall_rep = min(ctx.rep_ms, 50)
    for batch in target.batches:
        x = hmm.sample(batch)
        try:
            want, want_flows = hmm.reference_loglik(x, grads=True)

            ll, flows = hmm.forward_backward(x)
            eager_checks = _chain_checks(hmm, ll, flows, want, want_flows)
            graph_checks = []
            if graphs:
                g = hmm.graphed(batch)
                g.x.copy_(x)
                g_ll, g_flows = g.replay()
                dev.synchronize()
                graph_checks = _chain_checks(hmm, g_ll, g_flows, want, want_flows)
            for row in chain_timings(hmm, batch, rep_ms=ctx.rep_ms, graphs=graphs):
                mode = "full" if row["mode"] == "forward+backward" else "forward"
                cpu = dev.kind == "cpu"
                n = len(eager_checks) if mode == "full" else 1  # forward: the log-likelihood only
                method = row["timing"] if cpu else "host-wall"
                record("ours_eager", "gpu", mode, batch, row["eager_wall_ms"], method, eager_checks[:n])
                if not cpu:
                    record("ours_eager_kernels", "gpu", mode, batch, row["device_ms"], row["timing"], eager_checks[:n])
                if row["graph_wall_ms"] is not None:
                    record("ours_graph", "gpu", mode, batch, row["graph_wall_ms"], "host-wall", graph_checks[:n])
        except Exception as exc:  # noqa: BLE001 - one batch failing must not stop the suite
            record("ours_eager", "gpu", target.mode, batch, None, "", error=f"{type(exc).__name__}: {exc}"[:2000])
        if pj is None:
            continue
        for variant, use_graph in (("pyjuice_eager", False), ("pyjuice_graph", True)):
            try:
                theirs = pj.forward(x)
                checks = [compare("ll", theirs, hmm.reference_loglik(x), 1e-3, 1e-5)]
                fn = lambda g=use_graph, x=x: pj.forward_backward(x, graph=g)  # noqa: E731
                with torch.no_grad():
                    fn()  # with graph=True PyJuice records its graph here and replays it afterwards
                    ms = dev.wall_per_call(fn, rep_ms=wall_rep).p50
                record(variant, "peer", "full", batch, ms, "host-wall", checks, params={"graph": use_graph})
            except Exception as exc:  # noqa: BLE001
                record(variant, "peer", "full", batch, None, "", error=f"{type(exc).__name__}: {exc}"[:2000])


_RUNNERS = {"versus": _run_versus, "chain": _run_chain, "defaults": _run_defaults}


def rows_for(target, records: Iterable[Any], missing: Mapping[str, str] | None = None) -> list[RatioRow]:
    """The judged rows of one target from its records."""
    if target.kind == "versus":
        return versus_rows(target, records, missing)
    if target.kind == "chain":
        return chain_rows(target, records, missing)
    return defaults_rows(target, records)


def failures(target, records: Iterable[Any]) -> list[str]:
    """What makes the command fail: a wrong result of ours, or one of our kernels (backend gpu /
    npu) not running at its default tiles. A peer that fails or whose result is wrong (PyJuice's
    batch-16 kernel on the H100 was off by 1e-3 against the fp32 reference), and a configuration a
    tile sweep explores that cannot run, are reported in the table, not failures; a peer that is
    not installed is never attempted."""
    out = []
    for r in map(_d, records):
        where = f"{target.name}: {r.get('variant')} {r.get('mode')} {r.get('axis')}={r.get('x_value')}"
        if r.get("label") not in (None, "default"):
            where += f" [{r['label']}]"
        if r.get("backend") in PEER_BACKENDS:
            continue
        if not r.get("error") and r.get("passed") is False:
            out.append(f"{where}: WRONG RESULT (max abs err {r.get('max_abs_err')})")
        elif r.get("error") and r.get("label") in (None, "default") and r.get("backend") not in PEER_BACKENDS:
            out.append(f"{where}: could not run: {_short(r['error'])}")
    return out


def run_suite(
    suite: Suite | str,
    *,
    device="auto",
    store=None,
    rep_ms: float | None = None,
    warmup_ms: float | None = None,
    only: Sequence[str] | None = None,
    on_record: Callable[[Any], None] | None = None,
    on_target: Callable[[Any, SuiteRun], None] | None = None,
) -> SuiteRun:
    """Measure every target (or those in ``only``) and judge it; see the module docstring.

    ``on_record(record)`` is called after each measurement (the CLI prints a line), and
    ``on_target(target, run)`` after each target (the CLI rewrites its files)."""
    from kernels.device import get_device

    suite = get_suite(suite) if isinstance(suite, str) else suite
    targets = [suite.target(n) for n in only] if only else list(suite.targets)
    dev = get_device(device)
    run = SuiteRun(suite.name, dev.kind, dev.name)
    for target in targets:
        mine: list = []

        def emit(rec, *, label=None, to_store=False, _mine=mine):
            if label is not None:
                rec.label = label  # which configuration of a tile sweep (kept in records.json)
            if to_store and store is not None:
                store.append(rec)
            _mine.append(len(run.records))
            run.records.append(rec)
            if on_record is not None:
                on_record(rec)

        ctx = _Context(dev, store, suite.rep_ms if rep_ms is None else rep_ms, suite.warmup_ms, emit)
        if warmup_ms is not None:
            ctx.warmup_ms = warmup_ms
        run.target_records[target.name] = mine
        try:
            _RUNNERS[target.kind](target, ctx, run)
        except Exception as exc:  # noqa: BLE001 - a target that cannot start is reported; the rest go on
            run.failures.append(f"{target.name}: could not run: {type(exc).__name__}: {exc}")
        recs = [run.records[i] for i in mine]
        run.rows.extend(rows_for(target, recs, run.missing.get(target.name)))
        run.failures.extend(failures(target, recs))
        if on_target is not None:
            on_target(target, run)
    return run


def load_previous(suite: Suite, device_kind: str, out) -> SuiteRun | None:
    """An earlier run of ``suite`` on ``device_kind`` as ``out``'s suite.json / records.json hold
    it (None when there is none, or it is another suite or device kind)."""
    import json
    from pathlib import Path

    out = Path(out)
    try:
        body = json.loads((out / "suite.json").read_text())
        records = json.loads((out / "records.json").read_text())
    except (OSError, ValueError):
        return None
    if body.get("suite") != suite.name or body.get("device_kind") != device_kind:
        return None
    run = SuiteRun(suite.name, device_kind, body.get("device_name", ""))
    for info in body.get("targets", []):
        name = info["name"]
        start = len(run.records)
        run.records.extend(records[i] for i in info.get("records", []))
        run.target_records[name] = list(range(start, len(run.records)))
    run.rows = [RatioRow(**row) for row in body.get("rows", [])]
    run.failures = list(body.get("failures", []))
    run.missing = dict(body.get("missing", {}))
    return run


def combined(run: SuiteRun, earlier: SuiteRun | None, suite: Suite) -> SuiteRun:
    """``run`` plus every target of ``earlier`` that ``run`` did not measure: a suite too long
    for one command runs in parts (``--only`` ... ``--resume``) into one folder."""
    if earlier is None:
        return run
    both = SuiteRun(run.suite, run.device_kind, run.device_name)
    for source in (earlier, run):
        for name, indices in source.target_records.items():
            if source is earlier and name in run.target_records:
                continue
            start = len(both.records)
            both.records.extend(source.records[i] for i in indices)
            both.target_records[name] = list(range(start, len(both.records)))
            both.rows.extend(r for r in source.rows if r.target == name)
            both.failures.extend(f for f in source.failures if f.startswith(f"{name}:"))
            if name in source.missing:
                both.missing[name] = source.missing[name]
    order = {t.name: i for i, t in enumerate(suite.targets)}
    both.rows.sort(key=lambda r: order.get(r.target, len(order)))  # stable: keeps x order per target
    return both


# --- files -----------------------------------------------------------------------------------
def peer_versions() -> dict[str, str]:
    """Installed version of each peer library (``not installed`` otherwise)."""
    import importlib.metadata as md

    out = {}
    for dist in PEER_DISTRIBUTIONS:
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def target_info(target) -> dict:
    """A target as plain data (for ``suite.json``; the report reads it)."""
    info = {
        "name": target.name,
        "title": target.title,
        "kind": target.kind,
        "family": target.family,
        "mode": target.mode,
        "axis": target.axis(),
        "values": list(target.values),
        "ours": target.ours,
        "peers": None if getattr(target, "peers", None) is None else list(target.peers),
        "min_ratio": [asdict(r) for r in target.min_ratio],
        "min_pct_bw": [asdict(r) for r in getattr(target, "min_pct_bw", ())],
    }
    if target.kind == "chain":
        info.update({"T": target.T, "L": target.L, "V": target.V, "alt_peer": target.alt_peer})
    return info


RATIO_COLUMNS = tuple(RatioRow.__dataclass_fields__)


def write_files(run: SuiteRun, suite: Suite, out) -> dict:
    """``records.csv`` / ``records.json`` (every record), ``ratios.csv`` (the judged rows) and
    ``suite.json`` (targets, which records each took, rows, failures) into ``out``."""
    import csv
    import json
    from pathlib import Path

    from kernels.store import write_csv, write_json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records = run.record_dicts()
    paths = {
        "records_csv": write_csv(records, out / "records.csv"),
        "records_json": write_json(records, out / "records.json"),
    }
    with (out / "ratios.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["suite", *RATIO_COLUMNS])
        writer.writeheader()
        for row in run.rows:
            writer.writerow({"suite": run.suite, **row.to_dict()})
    paths["ratios_csv"] = out / "ratios.csv"
    taken = [t for t in suite.targets if t.name in run.target_records]
    body = {
        "suite": suite.name,
        "title": suite.title,
        "device_kind": run.device_kind,
        "device_name": run.device_name,
        "targets": [{**target_info(t), "records": run.target_records[t.name]} for t in taken],
        "missing": run.missing,
        "rows": [r.to_dict() for r in run.rows],
        "failures": run.failures,
    }
    (out / "suite.json").write_text(json.dumps(body, indent=1, default=str))
    paths["suite_json"] = out / "suite.json"
    return paths
