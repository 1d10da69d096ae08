"""The tune loop: ask a strategy for configurations, measure them on the sweep engine, tell it
the kernel times, and pick one configuration per size.

Each size first measures its default (every tile "auto": what ``impl="auto"`` does today, the
installed table included). Where that default came from an installed table's entry (its
``tiles_source`` is ``tuned:...``) that is not empty, the size also measures the family's rule: the
same call with the tuned part's tables off (a task with ``tables=False``, or the part's name for a
part other than the forward, measured inside :func:`kernels.tuned_tables.disabled`), so an entry
that a later change of the rule overtook is seen and dropped (:mod:`workbench.tune.pick`). Then come
the strategy's proposals, in rounds: ``grid`` and ``random`` send every configuration they will
measure in one round (the executor keeps every worker busy); ``bayes`` asks about two configurations
per worker per round, spread over the sizes, and learns from each round before the next. Within a
round the larger sizes go first, so the slowest configurations do not form the tail. Every record
goes through :func:`workbench.sweep.engine.run_sweep` into the out folder's store (the driver its
one writer); a tune run again into the same folder takes what is recorded there instead of measuring
it again. ``budget_s`` stops asking and cancels what has not started once it is spent. Last, the
tiles chosen for each size (what the candidate table would set, or the rule where it keeps it) are
checked, briefly timed, in every other dtype the family declares: :attr:`TuneResult.wrong` holds
every wrong result, and nothing is installed while it has one.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from kernels import tuned_tables
from workbench.sweep.engine import opened, run_sweep
from workbench.sweep.tasks import make_task
from workbench.tune.pick import Choice, kernel_ms, passed, pick
from workbench.tune.search import make_search
from workbench.tune.space import Space


@dataclass(frozen=True)
class TuneOptions:
    """How one tune searches: the strategy and its seed, limits, and the timing budget per
    configuration. ``trials``: configurations per size for ``random`` / ``bayes`` (None: 30% of
    the size's grid, at least 8); ``grid`` measures the whole grid."""

    strategy: str = "grid"
    seed: int = 0
    budget_s: float | None = None
    trials: int | None = None
    rep_ms: float = 100.0

    def limit(self, grid_size: int) -> int:
        if self.strategy == "grid":
            return grid_size
        wanted = self.trials if self.trials is not None else max(8, math.ceil(0.3 * grid_size))
        return min(grid_size, wanted)


@dataclass
class TuneResult:
    space: Space
    choices: list[Choice]
    records: dict[str, dict]  # sweep key -> record, every configuration this tune looked at
    grid_sizes: dict  # size -> configurations in its grid
    wall_s: float
    arrivals: list[tuple[float, dict]] = field(default_factory=list)  # (seconds from start, worker)
    out_of_budget: bool = False
    workers: int = 1
    # The chosen tiles of each size checked in every other dtype the family declares (record dicts).
    dtype_checks: list[dict] = field(default_factory=list)

    @property
    def device_key(self) -> str | None:
        """``"<kind>:<name>"`` of the device the records ran on (the key the table is filed under)."""
        for r in self.records.values():
            if not r.get("error") and (key := record_device_key(r)):
                return key
        return None

    @property
    def wrong(self) -> list[dict]:
        """Every record with a wrong result: the tune's own and the other dtypes' checks."""
        rows = list(self.records.values()) + self.dtype_checks
        return [r for r in rows if not r.get("error") and r.get("passed") is False]


def run_tune(space: Space, options: TuneOptions, executor, store, device, device_kind: str, progress=None):
    """Tune every size of ``space`` on ``executor``; ``device`` checks configurations on the host
    (its core count), ``device_kind`` is where the tasks run. Then the tiles chosen per size are
    checked in every other dtype the family declares (``TuneResult.dtype_checks``)."""
    spec, t = space.spec, space.tuning
    started = time.monotonic()
    deadline = None if options.budget_s is None else started + options.budget_s
    cancel = threading.Event()
    known = {r["sweep_key"]: r for r in store.records() if r.get("sweep_key")} if store is not None else {}
    result = TuneResult(space, [], {}, {}, 0.0)

    def task(size, params, tables=True):
        return make_task(
            spec, t.variant, device=device_kind, dtype=t.dtype, mode=t.mode, problem=space.problem(size),
            params=params, quick=space.quick, rep_ms=options.rep_ms, warmup_ms=min(25.0, options.rep_ms),
            tables=tables,
        )  # fmt: skip

    def arrived(task_, body):
        known[task_.key] = body
        result.arrivals.append((time.monotonic() - started, body.get("worker") or {}))
        if deadline is not None and time.monotonic() > deadline:
            cancel.set()

    def measure(batch, label):
        tasks = [tk for _, _, tk in batch]
        run_sweep(tasks, executor, store, progress=progress, on_record=arrived, cancel=cancel, label=label)
        for size, params, tk in batch:
            if tk.key in known:
                result.records[tk.key] = known[tk.key]
                if params is not None:
                    rec = known[tk.key]
                    searches[size].tell(params, kernel_ms(rec) if passed(rec) else None)

    sizes = sorted(space.sizes, reverse=True)  # larger problems first: no slow tail
    rule_off = False if space.part == tuned_tables.FORWARD else space.part
    defaults = {size: task(size, {}) for size in sizes}  # every tile "auto"
    # The same with the tuned part's tables off (every table for the forward, as before parts).
    rule_tasks = {size: task(size, {}, tables=rule_off) for size in sizes}
    searches, limits, asked = {}, {}, {}
    for i, size in enumerate(sizes):
        candidates = space.candidates(size, device)
        result.grid_sizes[size] = len(candidates)
        searches[size] = make_search(options.strategy, candidates, options.seed + i)
        limits[size], asked[size] = options.limit(len(candidates)), 0
    with opened(executor):
        result.workers = executor.capacity(device_kind)
        measure([(size, None, defaults[size]) for size in sizes], "defaults: ")
        rules = [
            (size, None, rule_tasks[size])
            for size in sizes
            if _has_entry(known.get(defaults[size].key), spec.name, size, space.part)
        ]
        if rules and not cancel.is_set():
            measure(rules, "rules: ")
        rounds = 0
        while not cancel.is_set():
            active = [s for s in sizes if asked[s] < limits[s] and not searches[s].exhausted]
            if not active:
                break
            per_size = 2 * result.workers if options.strategy == "bayes" else None
            batch = []
            for size in active:
                n = limits[size] - asked[size]
                if per_size is not None:
                    n = min(n, max(1, math.ceil(per_size / len(active))))
                for params in searches[size].ask(n):
                    batch.append((size, params, task(size, params)))
                    asked[size] += 1
            if not batch:
                break
            rounds += 1
            measure(batch, f"{options.strategy} round {rounds}: ")
        result.out_of_budget = cancel.is_set()
        by_size: dict = {s: [] for s in sizes}
        for size in sizes:
            by_size[size] = [defaults[size].key, rule_tasks[size].key]
        for key, rec in result.records.items():
            size = (rec.get("problem") or {}).get(t.knob)
            if size in by_size and key not in by_size[size]:
                by_size[size].append(key)
        result.choices = [
            pick(
                size,
                [result.records[k] for k in by_size[size] if k in result.records],
                result.records.get(by_size[size][0]),
                space.simplicity,
                rule=result.records.get(by_size[size][1]),
            )
            for size in sorted(sizes)
        ]
        # The chosen tiles of every size, checked (briefly timed) in each other dtype the family
        # declares: a table is never installed for tiles that give a wrong result in any of them.
        checks = [(c.size, tiles) for c in result.choices if (tiles := _entry(space, result, c)) is not None]
        tasks = [
            make_task(
                spec,
                t.variant,
                device=device_kind,
                dtype=dtype,
                mode=t.mode,
                problem=space.problem(size),
                params=tiles,
                quick=space.quick,
                rep_ms=1.0,
                warmup_ms=0.0,
                tables=True if tiles else rule_off,
            )  # fmt: skip
            for size, tiles in checks
            for dtype in spec.dtypes
            if dtype != t.dtype
        ]
        if tasks:  # a tune run again into the same folder takes the checks recorded there
            run_sweep(tasks, executor, store, progress=progress, label="other dtypes: ",
                      on_record=lambda task_, body: known.__setitem__(task_.key, body))  # fmt: skip
            result.dtype_checks = [known[tk.key] for tk in tasks if tk.key in known]
    result.wall_s = time.monotonic() - started
    return result


def _entry(space: Space, result: TuneResult, choice) -> dict | None:
    """The tiles the candidate table sets for ``choice``'s size ({}: the rule), None where nothing passed."""
    from workbench.tune.table import entry_tiles

    if choice.chosen is None:
        return None
    key = result.device_key
    return entry_tiles(choice, space.spec.name, key, space.grid, space.part) if key is not None else None


def _has_entry(default: dict | None, family: str, size, part: str = tuned_tables.FORWARD) -> bool:
    """Whether ``default`` (a size's default record) ran an installed table's entry of ``part``
    other than an empty one (an empty entry is the rule already): then the rule is measured too."""
    if default is None or not tuned_tables.source_of(default.get("tiles_source", ""), part).startswith("tuned:"):
        return False
    key = record_device_key(default)
    return key is None or tuned_tables.lookup(family, key, size, part).tiles != {}


def record_device_key(record: dict) -> str | None:
    """The tuned-table key (:func:`kernels.tuned_tables.device_key`) of the device a record ran on."""
    if not (record.get("device_kind") and record.get("device_name")):
        return None
    return tuned_tables.device_key(_RecordDevice(record["device_kind"], record["device_name"]))


class _RecordDevice(NamedTuple):
    """A record's device as :func:`kernels.tuned_tables.device_key` reads one (kind and name)."""

    kind: str
    name: str
