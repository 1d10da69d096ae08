"""The CI gate: a run's correctness checks and its speed against a baseline run (pure; files in, verdict out).

A *cell* is one measured configuration of ours: kernel, variant, mode, dtype, problem, tile
params (and a tile sweep's label). Peers are never gated: their speed is data, not ours to keep.

- A correctness failure is one of our records whose result was wrong (``passed`` False), each
  counted and named with its shape, dtype, tiles and the outputs that failed, or another failure
  the suite run recorded (``suite.json``'s ``failures``: a default configuration that could not run).
- A cell *regressed* by more than ``pct`` when even its fastest plausible time now is slower
  than its slowest plausible baseline time by more than ``pct`` percent: ``now_lo >
  base_hi * (1 + pct / 100)``, with each interval the median's confidence interval (issue 14;
  a record without one is a point). Noise therefore never fails a build, and a real slowdown
  of more than ``pct`` beyond the noise does.

Used by ``workbench bench --suite NAME --baseline DIR --fail-on-regression PCT`` and
``workbench report DIR --check [--baseline DIR --fail-on-regression PCT]``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from workbench.record import failed_checks
from workbench.store import kept_names, kept_path, read_json, read_records
from workbench.suites.targets import PEER_BACKENDS

_NOT_WRONG = "FAILED: "  # the prefix of a recorded failure that is not a wrong result


def load_records(directory: str | Path, option: str = "DIR") -> list[dict]:
    """Every record of a run's folder: ``records.json`` (a suite run; compressed as committed
    reports keep it) or ``*_records.json`` (the notebooks of ``workbench report`` or papermill).
    A folder without them is a ValueError that says what to point at."""
    d = Path(directory)
    where = f"{option} {d}".strip()  # "" for a command's own argument: the command names itself
    if not d.is_dir():
        raise ValueError(
            f"{where}: no such folder; give a folder written by `workbench bench --suite` or `workbench report`"
        )
    own = kept_path(d, "records.json")
    files = (
        [own] if own else next((found for name in kept_names("*_records.json") if (found := sorted(d.glob(name)))), [])
    )
    if not files:
        raise ValueError(
            f"{where} holds no records.json or *_records.json; give a folder written by "
            "`workbench bench --suite NAME --out DIR` or by the notebooks (`workbench report --out DIR`)"
        )
    records: list[dict] = []
    for f in files:
        try:
            records.extend(read_records(f))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    return records


def load_failures(directory: str | Path) -> list[str]:
    """The failures a suite run wrote into ``suite.json`` (none for a notebook folder)."""
    p = kept_path(directory, "suite.json") or Path(directory) / "suite.json"
    try:
        return list(read_json(p).get("failures") or [])
    except (OSError, ValueError, AttributeError, EOFError):
        return []


def ours(record: dict) -> bool:
    return record.get("backend") not in PEER_BACKENDS and record.get("label") in (None, "default")


def cell_key(r: dict) -> tuple:
    return (
        r.get("kernel"),
        r.get("variant"),
        r.get("mode"),
        r.get("dtype"),
        json.dumps(r.get("problem") or {}, sort_keys=True, default=str),
        json.dumps(r.get("params") or {}, sort_keys=True, default=str),
        r.get("label") or "",
    )


def cell_name(r: dict) -> str:
    name = f"{r.get('kernel')}/{r.get('variant')} {r.get('mode')} {r.get('dtype')} {r.get('axis')}={r.get('x_value')}"
    if r.get("label") not in (None, "default"):
        name += f" [{r['label']}]"
    return name


def timed(r: dict, timing: str) -> tuple[float | None, float, float]:
    """(median, lo, hi) in ms of ``timing`` ("kernel", "call" or "ms_p50"); a missing interval is the median."""
    if timing == "ms_p50":
        m = r.get("ms_p50")
        return m, m, m
    m = r.get(f"{timing}_ms")
    lo, hi = r.get(f"{timing}_lo_ms"), r.get(f"{timing}_hi_ms")
    return m, (m if lo is None else lo), (m if hi is None else hi)


def common_timing(a: dict, b: dict) -> str | None:
    """The timing both records carry: kernel time first, then call time, then the plain median."""
    for timing in ("kernel", "call", "ms_p50"):
        if timed(a, timing)[0] and timed(b, timing)[0]:
            return timing
    return None


@dataclass
class Change:
    """One cell of ours against its baseline."""

    cell: str
    timing: str
    base_ms: float
    base_lo: float
    base_hi: float
    now_ms: float
    now_lo: float
    now_hi: float
    change_pct: float
    beyond_noise: bool
    regressed: bool = False

    def describe(self) -> str:
        return (
            f"{self.cell}: {self.base_ms * 1e3:.4g} -> {self.now_ms * 1e3:.4g} µs ({self.change_pct:+.1f}%, "
            f"{self.timing}; now [{self.now_lo * 1e3:.4g}, {self.now_hi * 1e3:.4g}], "
            f"baseline [{self.base_lo * 1e3:.4g}, {self.base_hi * 1e3:.4g}])"
        )


@dataclass
class GateResult:
    """What the gate found; :attr:`ok` is the exit status's source."""

    wrong: list[str] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    pct: float | None = None
    baseline: str | None = None

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regressed]

    @property
    def ok(self) -> bool:
        return not self.wrong and not self.regressions

    def to_dict(self) -> dict:
        body = asdict(self)
        body["regressions"] = [c.cell for c in self.regressions]
        body["ok"] = self.ok
        return body

    def message(self) -> str:
        """The gate's verdict: a line per failing cell, then one summary line."""
        lines = []
        for w in self.wrong:
            lines.append(w if w.startswith(_NOT_WRONG) else f"WRONG RESULT: {w}")
        for c in self.regressions:
            lines.append(f"REGRESSION (> {self.pct:g}% beyond noise): {c.describe()}")
        if self.baseline is not None:
            slower = sum(1 for c in self.changes if c.beyond_noise and c.change_pct > 0)
            faster = sum(1 for c in self.changes if c.beyond_noise and c.change_pct < 0)
            base = (
                f"; against {self.baseline}: {len(self.changes)} cells compared, {slower} slower and {faster} "
                f"faster beyond noise, {len(self.regressions)} regressed"
                + (f" by more than {self.pct:g}%" if self.pct is not None else " (no --fail-on-regression: not gated)")
                + (f", {len(self.new)} new" if self.new else "")
                + (f", {len(self.not_compared)} not comparable" if self.not_compared else "")
            )
        else:
            base = ""
        verdict = "gate: PASSED" if self.ok else "gate: FAILED"
        wrong = sum(1 for w in self.wrong if not w.startswith(_NOT_WRONG))
        others = len(self.wrong) - wrong
        failed = f"{wrong} wrong result{'s' if wrong != 1 else ''}" + (f", {others} other failures" if others else "")
        lines.append(f"{verdict}: {failed}{base}")
        return "\n".join(lines)

    def table(self, limit: int = 40) -> str:
        """The compared cells, largest slowdown first (``limit`` rows)."""
        if not self.changes:
            return ""
        rows = sorted(self.changes, key=lambda c: -c.change_pct)[:limit]
        header = f"{'cell':60s} {'baseline µs':>12s} {'now µs':>10s} {'change':>8s}  beyond noise"
        lines = [header, "-" * len(header)]
        for c in rows:
            flag = ("REGRESSED" if c.regressed else "yes") if c.beyond_noise else "no"
            lines.append(
                f"{c.cell[:60]:60s} {c.base_ms * 1e3:12.4g} {c.now_ms * 1e3:10.4g} {c.change_pct:+7.1f}%  {flag}"
            )
        if len(self.changes) > limit:
            lines.append(f"... {len(self.changes) - limit} more cells")
        return "\n".join(lines)


def _device(r: dict) -> str:
    return str(r.get("device_name") or r.get("device_kind") or "?")


def compare(current: Iterable[dict], baseline: Iterable[dict], pct: float | None = None) -> GateResult:
    """Each cell of ours in ``current`` against the same cell in ``baseline`` (last record of each wins)."""
    result = GateResult(pct=pct)
    base = {cell_key(r): r for r in baseline if ours(r) and not r.get("error")}
    now = {cell_key(r): r for r in current if ours(r) and not r.get("error")}
    for key, r in now.items():
        b = base.get(key)
        if b is None:
            result.new.append(cell_name(r))
            continue
        if _device(r) != _device(b):
            result.not_compared.append(f"{cell_name(r)} (measured on {_device(r)}, baseline on {_device(b)})")
            continue
        timing = common_timing(r, b)
        if timing is None:
            result.not_compared.append(f"{cell_name(r)} (no time in both runs)")
            continue
        n, n_lo, n_hi = timed(r, timing)
        m, b_lo, b_hi = timed(b, timing)
        change = Change(
            cell=cell_name(r),
            timing=timing,
            base_ms=m,
            base_lo=b_lo,
            base_hi=b_hi,
            now_ms=n,
            now_lo=n_lo,
            now_hi=n_hi,
            change_pct=(n / m - 1.0) * 100.0,
            beyond_noise=n_lo > b_hi or n_hi < b_lo,
        )
        change.regressed = pct is not None and n_lo > b_hi * (1.0 + pct / 100.0)
        result.changes.append(change)
    return result


def wrong_name(r: dict) -> str:
    """One wrong record: its cell, shape, tiles and what failed, e.g. ``swiglu_x1_01/ours forward bf16
    rows=4096, cols=4096 (BLOCK_SIZE=1024): out: 12.1x the reference's error (...)``."""
    shape = ", ".join(f"{k}={v}" for k, v in (r.get("problem") or {}).items())
    tiles = ", ".join(f"{k}={v}" for k, v in (r.get("params") or {}).items() if v != "auto")
    name = f"{r.get('kernel')}/{r.get('variant')} {r.get('mode')} {r.get('dtype')} {shape}"
    name += f" ({tiles})" if tiles else ""
    if r.get("label") not in (None, "default"):
        name += f" [{r['label']}]"
    return f"{name}: {failed_checks(r)}"


def wrong_results(records: Iterable[dict], failures: Sequence[str] = ()) -> list[str]:
    """Every record of ours whose result is wrong, each named (:func:`wrong_name`), then the run's
    other recorded failures (a default configuration of ours that could not run). The run's own
    "WRONG RESULT" lines name the same records, so they are not counted again."""
    out = [
        wrong_name(r)
        for r in records
        if r.get("backend") not in PEER_BACKENDS and not r.get("error") and r.get("passed") is False
    ]
    out += [f"{_NOT_WRONG}{f}" for f in failures if "WRONG RESULT" not in f]
    return out


def check(
    current: Sequence[dict],
    baseline: Sequence[dict] | None = None,
    pct: float | None = None,
    *,
    failures: Sequence[str] = (),
    baseline_name: str | None = None,
) -> GateResult:
    """Correctness of ``current`` and, with a ``baseline``, each cell against it."""
    result = compare(current, baseline, pct) if baseline is not None else GateResult(pct=pct)
    if baseline is not None:
        result.baseline = baseline_name or "the baseline"
    result.wrong = wrong_results(current, failures)
    return result


def check_pct(pct: Any, has_baseline: bool) -> float | None:
    """``--fail-on-regression PCT``: a number >= 0, and only with ``--baseline``."""
    if pct is None:
        return None
    if not has_baseline:
        raise ValueError("--fail-on-regression needs --baseline DIR (the run to compare against)")
    if not pct >= 0:
        raise ValueError(f"--fail-on-regression {pct:g}: give a percentage of 0 or more (e.g. 5)")
    return float(pct)


def write(result: GateResult, out: str | Path) -> Path:
    """``baseline.json`` beside the run's files (the report shows it)."""
    path = Path(out) / "baseline.json"
    path.write_text(json.dumps(result.to_dict(), indent=1, default=str))
    return path
