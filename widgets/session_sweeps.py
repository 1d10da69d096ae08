"""The sweeps a session runs: ``sweep`` (1-D), ``sweep2d`` (a grid, its best cell in ``s.best``),
``run_sweep`` (what both and the Explorer's sweep panel measure through), ``tune`` (``workbench
tune`` in this process) and the executors they run on. Planning lives in
:mod:`workbench.sweep.plan`, running in :mod:`workbench.sweep.engine`; this module binds them to a
session's cache, store, records and figures.

:class:`SessionSweeps` is a part of :class:`widgets.session.Session` (its base class), never used
alone, and imports nothing of the session. It reads the session's ``spec``, ``family``, ``device``,
``dtype``, ``problem``, ``seed``, ``rep_ms``, ``quick``, ``headless``, ``out_dir``, ``store``,
``executor`` / ``executor_options``, ``_lock`` and ``_explorer``, and calls its ``_variants``,
``unavailable`` and ``_check_mode`` (:mod:`widgets.session`) and its ``_title``, ``_show``,
``_show_failures`` and ``_show_best`` (:mod:`widgets.session_figures`). It writes ``records``,
``measured``, ``best``, the ``cache`` (filled by sweeps, emptied by ``tune(install=True)``) and
``_executors`` (the executors started, kept for later sweeps).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kernels import tuned_tables
from kernels.spec import Variant, dtype_name
from widgets.session_figures import progress_bar, show_progress
from workbench.record import Record
from workbench.reports import checks
from workbench.reports import figures as F
from workbench.store import records_frame
from workbench.sweep.plan import Measuring, SweepPlan, SweepRequest, has_axis, plan_sweep

Progress = Callable[[int, int, str], None]


@dataclass
class Swept:
    """A sweep's rows (records at the swept axis, in plan order) and the plan that made them."""

    rows: list[Record]
    plan: SweepPlan

    def heatmap(self, metric: str, title: str, at: Mapping | None = None) -> tuple:
        """A 2-D sweep's heatmap of ``metric`` (:func:`workbench.reports.figures.heatmap_figure`) and
        its best passing cell as a configuration to apply (``{"variant", "params", "problem",
        "ties"}``; None where no cell passed). What ``Session.sweep2d`` and the Explorer's sweep
        panel show."""
        plan, request = self.plan, self.plan.request
        fig, best = F.heatmap_figure(
            self.rows, request.axis, plan.x_values, request.y_axis, plan.y_values, metric, title=title, at=at
        )
        if best is None:
            return fig, None
        config = {"params": dict(best["params"]), "problem": dict(best["problem"]), "ties": best.get("ties", [])}
        return fig, {"variant": plan.variants[0].name, **config}


class NoBest:
    """``s.best`` where no configuration of the last ``sweep2d`` passed (or none ran yet): falsy,
    ``None`` from ``.get``, and a ValueError saying why from ``s.best["params"]``."""

    def __init__(self, why: str):
        self.why = why

    def __bool__(self) -> bool:
        return False

    def __getitem__(self, key):
        raise ValueError(f"s.best has no {key!r}: {self.why}")

    def get(self, key, default=None):
        return default

    def __repr__(self) -> str:
        return f"NoBest({self.why!r})"


def _why_no_best(rows: Sequence[Record], variant: str) -> str:
    wrong = sum(1 for r in rows if r.error is None and r.passed is False)
    failed = sum(1 for r in rows if r.error)
    return (
        f"no configuration of {variant} in the last sweep2d passed ({len(rows)} cells: {wrong} failed their "
        f"check, {failed} could not run; the failures table says why)"
    )


class SessionSweeps:
    """The sweeping half of a :class:`~widgets.session.Session`: sweeps, grids, tuning, executors."""

    # --- sweeps -----------------------------------------------------------------------------
    def sweep(
        self,
        axis: str,
        values: Sequence[Any] | None = None,
        variants: Sequence[str] | str | None = None,
        mode: str = "forward",
        problem: Mapping | None = None,
        params: Mapping | None = None,
        *,
        metric: str = "ms",
        dtype: str | None = None,
        title: str | None = None,
        show: bool = True,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        executor: str | Any | None = None,
        executor_options: Mapping | None = None,
    ):
        """1-D sweep of ``axis`` (problem knob or tile Param) over ``values`` for ``variants``.

        Measures (or reuses) every point, stores new records, displays the speed figure (p50 with
        the p20-p80 band, peers dashed, copy-bandwidth bound on devices; static when headless) and
        returns the records as a DataFrame (one row per point: Record fields, ``x_value`` the
        swept value; failed points have ``error`` set). ``metric``: ``"ms"`` (default),
        ``"gbps"``, ``"pct_copy_bw"`` or ``"wall_ms"`` (GB/s needs device times: on the CPU the
        figure falls back to ms and says so).

        ``executor``: ``"local"`` (this process), ``"isolate"`` (a subprocess per configuration)
        or ``"ray"`` (one Ray actor per GPU: an embedded local Ray, or
        ``executor_options={"address": ...}``; also ``timeout_s``, ``gpus_per_task``,
        ``num_cpus``), or an executor object (:mod:`workbench.sweep.executors`); None: the
        session's (its ``executor``, ``"local"`` by default). Every executor
        goes through the one sweep engine (:mod:`workbench.sweep.engine`): this process writes
        the store; a configuration that crashes or hangs its worker is an error record.
        """
        request = SweepRequest(
            axis,
            None if values is None else list(values),
            variants=variants,
            mode=mode,
            problem=problem,
            params=params,
            dtype=dtype,
            executor=executor,
            executor_options=executor_options,
        )
        swept = self.run_sweep(request, progress=progress, cancel=cancel)
        rows = swept.rows
        fig = F.speed_figure(
            rows,
            axis,
            metric,
            order=[v.name for v in self.spec.variants],
            x_order=swept.plan.x_values,
            title=title or self._title(f"speed vs {axis}", mode, dtype, problem, exclude=(axis,)),
        )
        if show:
            self._show(fig)
        failures = checks.failures_table(rows, [axis])
        if show and failures:
            self._show_failures(failures)
        return records_frame(rows)

    def sweep2d(
        self,
        x_axis: str,
        x_values: Sequence[Any],
        y_axis: str,
        y_values: Sequence[Any],
        variant: str | None = None,
        mode: str = "forward",
        metric: str = "gbps",
        problem: Mapping | None = None,
        params: Mapping | None = None,
        *,
        dtype: str | None = None,
        title: str | None = None,
        show: bool = True,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        executor: str | Any | None = None,
        executor_options: Mapping | None = None,
    ):
        """2-D sweep of one variant over ``x_axis x y_axis`` (knobs and/or tile Params).

        Displays a heatmap of ``metric`` (``"gbps"`` default; ms on the CPU, where there is no
        GB/s) with failed cells marked ✗ and their reasons (hover, and a table below), the best
        passing cell outlined; ``self.best`` holds that config (``{"variant", "params",
        "problem"}``) and, live, a button applies it to the Explorer. Returns the DataFrame of the
        grid's records (row-major over y then x) with ``df.attrs["best"]``. ``executor``: as for
        :meth:`sweep`; with an Explorer shown, its heatmap fills in as the results arrive.
        """
        request = SweepRequest(
            x_axis,
            list(x_values),
            y_axis,
            list(y_values),
            variants=variant,
            mode=mode,
            problem=problem,
            params=params,
            dtype=dtype,
            executor=executor,
            executor_options=executor_options,
        )
        on_rows = None
        if self._explorer is not None and hasattr(self._explorer, "partial_heatmap"):
            on_rows = lambda rows: self._explorer.partial_heatmap(rows, x_axis, x_values, y_axis, y_values, metric)
        swept = self.run_sweep(request, progress=progress, cancel=cancel, on_rows=on_rows)
        rows, var = swept.rows, swept.plan.variants[0]
        x_values, y_values = swept.plan.x_values, swept.plan.y_values
        fig, best = swept.heatmap(
            metric,
            title=title
            or self._title(f"{var.name}: {y_axis} x {x_axis}", mode, dtype, problem, exclude=(x_axis, y_axis)),
            at={**self.problem, **dict(problem or {})},  # a size axis: the best tile at the session's size
        )
        if on_rows is not None:  # the Explorer's heatmap shows the finished grid, not "sweep running"
            self._explorer.partial_heatmap(
                rows, x_axis, x_values, y_axis, y_values, metric, title=f"{var.name}: {y_axis} x {x_axis}"
            )
        self.best = best if best is not None else NoBest(_why_no_best(rows, var.name))
        if show:
            self._show(fig)
            failures = checks.failures_table(rows, [x_axis, y_axis])
            if failures:
                self._show_failures(failures)
            if self.best:
                self._show_best(self.best)
            else:
                print(f"no best configuration: {self.best.why}")
        df = records_frame(rows)
        df.attrs["best"] = self.best or None
        return df

    def run_sweep(
        self,
        request: SweepRequest,
        *,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        on_rows: Callable[[list], None] | None = None,
    ) -> Swept:
        """Measure a :class:`~workbench.sweep.plan.SweepRequest` (what :meth:`sweep`, :meth:`sweep2d`
        and the Explorer's sweep panel ask for): plan it once against this session's device,
        dtype, problem and cache, measure what the cache lacks through the sweep engine (records go
        to the store and the cache as they arrive) and return the rows with their plan. Draws
        nothing: the callers do. ``progress(done, total, text)`` replaces the progress bar."""
        from workbench.sweep.engine import run_plan

        self._check_mode(request.mode)
        plan = plan_sweep(request, self._sweep_variants(request), self._measuring(), known=self.cache.get)
        cached = plan.cached  # before the run fills in the rest
        bar, quiet = None, progress is not None  # a caller with its own progress prints its own summary
        if progress is None and not self.headless:
            bar = progress_bar(len(plan.items), request.label)
            progress = lambda done, total, text: show_progress(bar, done, total)  # noqa: E731
        t0 = time.perf_counter()

        def measured(task, rec) -> None:
            key = plan.keys[plan.slots[task.key][0]]
            self.cache.put(key, rec)
            self.measured += 1

        rows = run_plan(
            plan,
            self._executor(request.executor, request.executor_options),
            self.store,
            on_record=measured,
            on_rows=on_rows,
            progress=progress,
            cancel=cancel,
        )
        self.records.extend(rows)
        if bar is not None:
            bar.bar_style = "success"
        if not quiet:
            refused = sum(1 for r in rows if r.error and r.cannot_run)
            failed = sum(1 for r in rows if r.error and not r.cannot_run)
            wrong = sum(1 for r in rows if r.error is None and r.passed is False)
            print(
                f"{request.label}: {len(rows)} configurations ({len(rows) - cached} measured, "
                f"{cached} cached), {refused} cannot run, {failed} failed, {wrong} failed their check, "
                f"{time.perf_counter() - t0:.1f} s"
            )
        return Swept(rows, plan)

    def _measuring(self) -> Measuring:
        return Measuring(self.spec, self.device.kind, self.dtype, dict(self.problem), self.seed, self.rep_ms)

    def _sweep_variants(self, request: SweepRequest) -> list[Variant]:
        """The variants a request sweeps here: every runnable one of those named (notes printed for
        the others); for a grid, the one named or the first of ours having both axes."""
        if not request.is_grid:
            return self._variants(request.variants, request.mode)
        if request.variants is None:
            axes = (request.axis, request.y_axis)
            candidates = [
                v
                for v in self._variants(None, request.mode, note=False)
                if all(has_axis(self.spec, v, a) for a in axes)
            ]
            ours = [v for v in candidates if not v.is_peer]
            if not (ours or candidates):
                raise ValueError(
                    f"no variant runnable on {self.device.kind} has both {request.axis} and {request.y_axis}"
                )
            return [(ours or candidates)[0]]
        name = request.variants if isinstance(request.variants, str) else list(request.variants)[0]
        found = self._variants([name], request.mode)
        if not found:
            raise ValueError(f"variant {name!r} cannot run here: {self.unavailable().get(name, request.mode)}")
        return found[:1]

    def _executor(self, executor, options: Mapping | None):
        """The executor a sweep runs on: ``"local"`` (holding the session's lock), ``"isolate"``,
        ``"ray"`` (the process's, :func:`workbench.sweep.ray_executor.shared`: started once and
        kept for every later sweep) or an executor object; None: the session's."""
        from kernels.spec import worker_module
        from workbench.sweep.engine import make_executor

        if executor is None:
            executor, options = self.executor, options if options is not None else self.executor_options

        if executor == "local" and not options:
            return make_executor("local", lock=self._lock, specs={self.spec.name: self.spec})
        if worker_module(self.spec) is None:
            raise ValueError(
                f"{self.spec.name} is defined in a notebook cell or a script, which a worker process cannot import: "
                "its sweeps run with executor='local' only; declare it in a module (a .py file on the path) for "
                "'isolate' or 'ray'"
            )
        if not isinstance(executor, str):
            return executor
        name = (executor, tuple(sorted(dict(options or {}).items())))
        ex = self._executors.get(name)
        if ex is None:
            opts = dict(options or {})
            if executor == "isolate":
                ex = make_executor("local", isolate=True, timeout_s=opts.get("timeout_s"))
            elif executor == "ray":
                from workbench.sweep.ray_executor import shared

                make_executor("ray", **opts)  # checks the options (and that Ray is installed) first
                options = {k: v for k, v in opts.items() if v is not None}
                ex = shared(options, warm_device=self.device.kind, log_dir=self.out_dir / "ray-logs")
            else:
                ex = make_executor(executor, **opts)
            if not getattr(ex, "_started", False):
                ex.start()
                ex._started = True  # kept for the next sweep; run_sweep leaves it running
            self._executors[name] = ex
        return ex

    # --- tuning -----------------------------------------------------------------------------------
    def tune(
        self,
        sizes: Sequence | None = None,
        *,
        strategy: str = "grid",
        trials: int | None = None,
        seed: int = 0,
        rep_ms: float | None = None,
        budget_s: float | None = None,
        install: bool = False,
        out: str | Path | None = None,
        part: str = tuned_tables.FORWARD,
        dtype: str | None = None,
    ):
        """``workbench tune`` from a notebook: search the family's tune grid (``spec.tuning``;
        ``part="backward"``: ``spec.backward_tuning``, the backward kernel's own tiles) at each
        size (default: the family's tune sizes, the quick ones when ``s.quick``) on this
        device, in this process (so a family declared in a notebook cell tunes too), pick one
        configuration per size, and write the candidate table, the records and the tune report
        into ``out`` (default ``out_dir/tune-<family>-<device>``). Shows the per-size table and
        returns the :class:`workbench.tune.job.Tuned` (``.table``, ``.diff``, ``.install()``).
        ``install=True`` installs the table where the family keeps its tables, so its ``"auto"``
        tiles take it from then on (not where a configuration gave a wrong result), and empties
        the session's cache, so later sweeps measure the tuned tiles. ``dtype``: the dtype the tune
        times in, one of the family's tune dtypes (``Tuning.timed_dtypes``); default the session's
        where it is one of them, else the family's. Whatever it times in, the chosen tiles are
        checked at every tuned size in every dtype the family declares, and a table is installed
        only where all of them passed."""

        from workbench.reports import reader
        from workbench.reports import tune as report
        from workbench.tune.job import tune_family
        from workbench.tune.run import TuneOptions
        from workbench.tune.search import STRATEGIES
        from workbench.tune.space import Space

        if strategy not in STRATEGIES:
            raise ValueError(f"strategy={strategy!r}: use one of {', '.join(STRATEGIES)}")
        space = Space.of(self.spec, quick=self.quick, part=part)
        allowed = space.tuning.timed_dtypes
        chosen = dtype_name(dtype) if dtype is not None else (self.dtype if self.dtype in allowed else allowed[0])
        if chosen not in allowed:
            raise ValueError(f"dtype={dtype!r}: {self.family} tunes in {', '.join(allowed)} (its tune dtypes)")
        if chosen != self.dtype:
            print(
                f"tuning {self.family} in {chosen} (its tune dtypes: {', '.join(allowed)}); the tiles are checked in every dtype"
            )
        space = space.with_dtype(chosen)
        if sizes is not None:
            knob = self.spec.knob(space.tuning.knob)
            space = space.with_sizes(knob.validate(v) for v in sizes)
        rep_ms = rep_ms if rep_ms is not None else (5.0 if self.device.kind == "cpu" else self.rep_ms)
        options = TuneOptions(strategy, seed, budget_s, trials, rep_ms)
        suffix = "" if part == tuned_tables.FORWARD else f"-{part}"
        out = Path(out) if out is not None else self.out_dir / f"tune-{self.family}-{self.device.kind}{suffix}"
        command = (f"Session({self.family!r}, device={self.device.kind!r}).tune(strategy={strategy!r}, part={part!r}, "
                   f"dtype={chosen!r})")  # fmt: skip
        tuned = tune_family(space, options, self._executor("local", None), self.device, self.device.kind, out,
                            command=command)  # fmt: skip
        paths = report.write_tuned(tuned, out, options)
        F.show_html(
            f"<b>{self.spec.title}: tuned on {tuned.key}</b> ({len(tuned.result.records)} configurations, "
            f"{tuned.result.wall_s:.1f} s; report {paths[0]})" + reader.table_html(report.size_rows(tuned.result))
        )
        if tuned.wrong and not install:  # installing raises with the same lines
            print(tuned.wrong_message())
        if install:
            print(f"installed {tuned.install()}")
            self.cache.clear()  # "auto" tiles now take the table: measure them again
        return tuned
