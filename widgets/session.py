"""Session: what a family notebook talks to, live in JupyterLab or headless under papermill.

A notebook is a ``parameters`` cell followed by calls on one Session::

    # cell tagged "parameters" (papermill overrides these)
    device = "auto"; dtype = "bf16"; quick = None; headless = False; out_dir = None

    from widgets import Session
    s = Session("rms_norm", device=device, dtype=dtype, quick=quick, headless=headless, out_dir=out_dir)
    s.explorer()        # live: shows the Explorer (controls + live figures); headless: shows nothing, returns None
    values = [256, 1000, 4096] if not s.quick else [128, 300]
    df = s.sweep("hidden", values)                  # every variant runnable here, speed figure, DataFrame
    df = s.sweep("BLOCK_SIZE", [512, 1024, 2048], variants=["gpu_row"], mode="full")
    grid = s.sweep2d("BLOCK_SIZE", [256, 512, 1024], "BLOCK_SIZE_M", [1, 4, 16],
                     variant="gpu_multirow", metric="gbps")   # heatmap, failed cells marked, best outlined
    s.memory()                                      # peak MB per variant beside the bytes the problem must move
    s.correctness(mode="full", edges=True)          # every output and gradient against the reference, edge shapes too
    s.tune(install=True)                            # workbench tune in this process; "auto" then takes the table
    s.finish()          # <family>_records.csv/.json into out_dir (default results/); AssertionError if any check failed

Also: ``s.measure(variant, problem, params, mode)`` (one configuration, a Record),
``s.runnable()`` / ``s.unavailable()`` (what can run here, and why not), ``s.best`` (the best
config of the last ``sweep2d``; where none passed, a falsy :class:`NoBest` whose fields raise a
ValueError saying why) and ``s.apply(s.best)`` (set the Explorer to it),
``s.explorer(variant=..., debounce_s=0.2, peers=True, metric="ms")``, ``s.frame()`` (records as a
DataFrame), ``s.problem`` (the starting problem), ``s.device`` (a ``workbench.device.Device``).

Rules every method follows:

- Problems start from the spec's knob defaults (``spec.quick`` sizes with ``quick=True``) and are
  overridden by ``problem=`` and then by the swept value. Sweep *values* are the notebook's
  choice: keep them small when ``s.quick`` is set (``values = [...] if not s.quick else [...]``).
  ``quick=None`` (the notebooks' default) means small sizes on the CPU, where the kernels run in
  the Triton interpreter, and full sizes on a device; the session says so in one printed line.
- ``variants=None`` means every variant of the family that can run on this device; variants that
  cannot (``Variant.unavailable_reason(device.kind)``, e.g. ``torch_compile`` on the CPU, a peer
  library not installed) are skipped with a printed note, also when named explicitly.
- An axis is a problem knob (``"hidden"``, ``"rows"`` …) or a tile Param name (``"BLOCK_SIZE"``
  …). Sweeping a tile Param sweeps the variants that have it; the others are measured once at
  the same problem and drawn as flat reference lines (peers overlaid).
- ``params`` are tile overrides: ``{"BLOCK_SIZE": 1024}`` applies to every variant having that
  name, ``{"gpu_row": {"BLOCK_SIZE": 1024}}`` to one variant; both forms mix.
- Every configuration is measured once per session: results are cached by (variant, device,
  dtype, mode, problem, params) and shared with the Explorer. Newly measured records go to the
  store (SQLite: ``$WORKBENCH_STORE``, else the checkout's ``results/workbench.sqlite``, unless
  ``store=`` says otherwise) the moment they are measured.
- A configuration that cannot run (tile too small, impossible size) is never an exception: it
  becomes a record with ``.error`` (a failed cell or a missing point, reason shown).
- ``s.records`` is every record the session's sweeps / measurements returned (copies whose
  ``axis``/``x_value`` say what was swept), ``s.figures`` every figure shown (plotly
  ``go.Figure``, displayed as plotly JSON + offline HTML: interactive in JupyterLab, static in
  reports). Only the Explorer's figures are ``go.FigureWidget`` (updated in place).
- ``finish()`` fails the notebook (AssertionError listing them) when a record's correctness check
  failed, or when one of our own kernels (backend gpu / npu) failed to run at its default tile
  configuration — errors of explicitly chosen tiles are exploration results, not failures.

Why one long module: it is the notebook API, one method per thing a notebook does; planning
lives in :mod:`workbench.sweep.plan` and measuring in :mod:`workbench.measure`.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kernels import tuned_tables
from kernels.spec import KernelSpec, Variant, dtype_name, get
from widgets.core import ResultCache
from workbench.device import Device, get_device
from workbench.measure import measure, measure_many
from workbench.record import Record, failed_checks
from workbench.reports import checks
from workbench.reports import figures as F
from workbench.reports.text import short_reason
from workbench.store import DEFAULT_PATH, Store, records_frame, write_csv, write_json
from workbench.sweep.config import config_key, resolve_config, with_axis
from workbench.sweep.plan import Measuring, SweepPlan, SweepRequest, has_axis, plan_sweep, split_params

__all__ = ["NoBest", "Session", "quick_for", "default_results_dir"]

Progress = Callable[[int, int, str], None]


class Session:
    """One family on one device: measure, sweep, plot, check; see the module docstring.

    Parameters
    ----------
    family: a registered family name (``kernels.families()``) or a :class:`KernelSpec`.
    device: ``"auto"`` (cuda, then npu, then cpu), ``"cuda"``, ``"npu"`` or ``"cpu"``.
    dtype: ``"fp32"``, ``"fp16"`` or ``"bf16"`` (the default for every method).
    quick: problems default to ``spec.quick`` (small sizes for the CPU interpreter); ``None``
        (the default): on where the device is the CPU (the interpreter), off on a device; the
        session says which in one printed line.
    headless: no widgets at all (papermill / reports): no Explorer, no progress bar, no buttons.
    out_dir: where ``finish()`` writes ``<family>_records.csv`` and ``<family>_records.json``;
        ``None``: ``results/`` beside the default store (:func:`default_results_dir`), which git
        ignores, so running a notebook leaves the checkout clean.
    store: a :class:`workbench.store.Store`, a path to a SQLite file, ``None`` for the default
        store, or ``False`` for none.
    rep_ms: timing budget per configuration (default 20 on the CPU interpreter, 50 on devices as in
        the H100 suite; sampling stops earlier once the interval is within ±2%).
    problem: overrides of the starting problem (knob name -> value).
    executor: where the session's sweeps run unless a sweep says otherwise: ``"local"`` (this
        process), ``"isolate"`` or ``"ray"`` (every GPU of the machine, or a cluster through
        ``executor_options={"address": ...}``). A Ray executor is started once per Python
        process, when the session is made, its actors warming up in the background meanwhile,
        and every later sweep of every session reuses it
        (:func:`workbench.sweep.ray_executor.shared`).
    """

    # The live view ``explorer()`` builds: set by the widgets package (widgets/__init__.py) to the
    # Explorer, so the model never imports its view.
    view: Callable[..., Any] | None = None

    def __init__(
        self,
        family: str | KernelSpec,
        device: str | Device = "auto",
        dtype: str = "bf16",
        quick: bool | None = None,
        headless: bool = False,
        out_dir: str | Path | None = None,
        *,
        store: Store | str | Path | bool | None = None,
        rep_ms: float | None = None,
        seed: int = 0,
        problem: Mapping[str, Any] | None = None,
        executor: str | Any = "local",
        executor_options: Mapping | None = None,
    ):
        self.spec: KernelSpec = get(family) if isinstance(family, str) else family
        self.device: Device = get_device(device)
        self.dtype = dtype_name(dtype)
        if self.dtype not in self.spec.dtypes:
            raise ValueError(f"dtype={dtype!r} is not supported by {self.spec.name}; use {', '.join(self.spec.dtypes)}")
        self.quick = quick_for(self.device, quick)
        if self.device.kind == "cpu":  # say which sizes, and why, where a reader may expect others
            small = ", ".join(f"{k}={v}" for k, v in self.spec.quick.items())
            print(
                f"CPU: the Triton interpreter at small sizes (quick: {small}); a GPU runs the full sizes"
                if self.quick
                else "CPU: the Triton interpreter at full sizes (quick=False): expect minutes per sweep"
            )
        _note_broken_families()
        self.headless = bool(headless)
        self.out_dir = Path(out_dir) if out_dir is not None else default_results_dir()
        self.seed = seed
        self.rep_ms = rep_ms if rep_ms is not None else (20.0 if self.device.kind == "cpu" else 50.0)
        self.problem: dict = self.spec.resolve_problem(problem, quick=self.quick)
        # A peer's one-off builds (PyJuice's nvcc extensions) start now, in the background, as
        # the suite's do: the notebook's first sweeps overlap them instead of waiting on them.
        self.prebuilding = self.spec.start_prebuilds(self.device.kind)
        # The compile processes start now on a GPU (their imports take seconds), so the first
        # sweep, tune or Explorer launch finds them ready; nothing on the CPU or the NPU. A Ray
        # session's sweeps compile on Ray's own workers: its local pool waits for a local
        # measurement, so as not to take the host's cores while Ray's actors start.
        if executor != "ray":
            from workbench.compiling import service as compile_service

            compile_service.start(self.device.kind, graphs=self.spec.has_graph_peers(self.device.kind))
        if store is False:
            self.store = None
        elif store is None or store is True:
            self.store = Store(default_store_path())
        elif isinstance(store, Store):
            self.store = store
        else:
            self.store = Store(store)
        self.cache = ResultCache()
        self.records: list[Record] = []
        self.figures: list = []
        # The best config of the last sweep2d ({"variant", "params", "problem"}), or NoBest saying why none.
        self.best: dict | NoBest = NoBest("no sweep2d has run in this session yet")
        self.measured = 0  # configurations actually measured (cache misses)
        self._lock = threading.RLock()  # one measurement at a time (Explorer worker + notebook)
        self._explorer = None
        self._noted: set[str] = set()
        self._executors: dict = {}  # started executors (a Ray instance) kept for later sweeps
        self.executor, self.executor_options = executor, dict(executor_options or {})
        if executor == "ray":  # Ray's start now; its actors warm up while the notebook goes on
            self._executor(executor, self.executor_options)

    # --- what can run -----------------------------------------------------------------------
    @property
    def family(self) -> str:
        return self.spec.name

    def runnable(self, mode: str | None = None) -> list[str]:
        """Names of the variants that can run on this device (and support ``mode``)."""
        return [v.name for v in self._variants(None, mode, note=False)]

    def unavailable(self) -> dict[str, str]:
        """Variant name -> why it cannot run here."""
        out = {}
        for v in self.spec.variants:
            reason = v.unavailable_reason(self.device.kind)
            if reason:
                out[v.name] = reason
        return out

    def _variants(self, names: Sequence[str] | str | None, mode: str | None, note: bool = True) -> list[Variant]:
        if isinstance(names, str):
            names = [names]
        pool = [self.spec.variant(n) for n in names] if names else list(self.spec.variants)
        out = []
        for v in pool:
            reason = v.unavailable_reason(self.device.kind)
            if reason is None and mode is not None and mode not in (v.modes or self.spec.modes):
                reason = f"variant {v.name!r} has no mode {mode!r}"
            if reason:
                if note and v.name not in self._noted:
                    self._noted.add(v.name)
                    print(f"skipping {v.name}: {reason}")
                continue
            out.append(v)
        return out

    def _check_mode(self, mode: str) -> None:
        if mode not in self.spec.modes:
            raise ValueError(
                f"mode={mode!r} is not available for {self.family}; use one of {', '.join(self.spec.modes)}"
            )

    # --- measuring --------------------------------------------------------------------------
    def key(self, variant: str, problem=None, params=None, mode="forward", dtype=None) -> tuple:
        """Cache key of a configuration (problem / params resolved like ``measure`` does)."""
        var = self.spec.variant(variant)
        prob, prm, _ = resolve_config(self.spec, var, {**self.problem, **dict(problem or {})}, params, False)
        return config_key(var.name, self.device.kind, dtype_name(dtype or self.dtype), mode, prob, prm)

    def lookup(self, variant: str, problem=None, params=None, mode="forward", dtype=None) -> Record | None:
        """The cached record of a configuration, or None (does not measure, does not count)."""
        return self.cache.peek(self.key(variant, problem, params, mode, dtype))

    def measure_cached(
        self,
        variant: Variant,
        problem: Mapping | None,
        params: Mapping | None,
        mode: str,
        dtype: str | None,
        force: bool = False,
    ) -> tuple[Record, bool]:
        """One configuration's record and whether it came from the session's cache, not appended
        to ``records`` (the Explorer shows it, then keeps it itself). Never raises for a
        configuration that cannot run."""
        dt = dtype_name(dtype or self.dtype)
        prob, prm, _ = resolve_config(self.spec, variant, {**self.problem, **dict(problem or {})}, params, False)
        key = config_key(variant.name, self.device.kind, dt, mode, prob, prm)
        if not force:
            hit = self.cache.get(key)
            if hit is not None:
                return hit, True
        with self._lock:
            if not force:
                hit = self.cache.peek(key)  # measured by another thread meanwhile
                if hit is not None:
                    return hit, True
            rec = measure(
                self.spec,
                variant,
                device=self.device,
                dtype=dt,
                mode=mode,
                problem=prob,
                params=prm,
                seed=self.seed,
                rep_ms=self.rep_ms,
                warmup_ms=min(25.0, self.rep_ms),
                store=self.store,
                on_error="record",
            )
            self.measured += 1
            self.cache.put(key, rec)
        return rec, False

    def _measure_each(
        self, variants: Sequence[Variant], problem: Mapping | None, params: Mapping | None, mode: str, dtype: str | None
    ) -> list[Record]:
        """:meth:`_measure` of each variant in turn (memory, correctness), the ones the cache lacks
        handed to the compile service first (a GPU's; nothing elsewhere), so the later variants
        compile while the first are measured."""
        from workbench.compiling import service as compile_service

        dt = dtype_name(dtype or self.dtype)
        ahead = []
        for var in variants:
            prm = split_params(params, var)
            prob, resolved, _ = resolve_config(self.spec, var, {**self.problem, **dict(problem or {})}, prm, False)
            if self.cache.peek(config_key(var.name, self.device.kind, dt, mode, prob, resolved)) is None:
                ahead.append(dict(variant=var, dtype=dt, mode=mode, problem=prob, params=prm))
        if ahead:
            compile_service.submit_configs(self.spec, ahead, self.device.kind)
        return [self.measure_cached(var, problem, split_params(params, var), mode, dtype)[0] for var in variants]

    def measure_side_by_side(
        self, variants: Sequence[tuple[Variant, Mapping]], problem: Mapping | None, mode: str, dtype: str | None
    ) -> list[Record]:
        """Measure (variant, params) pairs together, trials interleaved (A B C A B C ...),
        so the overlay compares numbers taken under the same conditions; replaces their cache
        entries. Never raises for a configuration that cannot run."""
        dt = dtype_name(dtype or self.dtype)
        configs, keys = [], []
        for var, params in variants:
            prob, prm, _ = resolve_config(self.spec, var, {**self.problem, **dict(problem or {})}, params, False)
            configs.append(dict(variant=var, dtype=dt, mode=mode, problem=prob, params=prm, seed=self.seed))
            keys.append(config_key(var.name, self.device.kind, dt, mode, prob, prm))
        with self._lock:
            recs = measure_many(
                self.spec,
                configs,
                device=self.device,
                rep_ms=self.rep_ms,
                warmup_ms=min(25.0, self.rep_ms),
                store=self.store,
                on_error="record",
            )
            for key, rec in zip(keys, recs):
                self.measured += 1
                self.cache.put(key, rec)
        return recs

    def measure(
        self,
        variant: str,
        problem: Mapping | None = None,
        params: Mapping | None = None,
        mode: str = "forward",
        dtype: str | None = None,
        *,
        force: bool = False,
    ) -> Record:
        """Measure one configuration (or take it from the cache); appended to ``records``.
        ``force=True`` measures again and replaces the cached record."""
        self._check_mode(mode)
        var = self.spec.variant(variant)
        rec, _ = self.measure_cached(var, problem, params, mode, dtype, force=force)
        self.records.append(rec)
        return rec

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
        fig, best = F.heatmap_figure(
            rows,
            x_axis,
            x_values,
            y_axis,
            y_values,
            metric,
            title=title
            or self._title(f"{var.name}: {y_axis} x {x_axis}", mode, dtype, problem, exclude=(x_axis, y_axis)),
            at={**self.problem, **dict(problem or {})},  # a size axis: the best tile at the session's size
        )
        if on_rows is not None:  # the Explorer's heatmap shows the finished grid, not "sweep running"
            self._explorer.partial_heatmap(
                rows, x_axis, x_values, y_axis, y_values, metric, title=f"{var.name}: {y_axis} x {x_axis}"
            )
        self.best = NoBest(_why_no_best(rows, var.name))
        if best is not None:
            self.best = {
                "variant": var.name,
                "params": dict(best["params"]),
                "problem": dict(best["problem"]),
                "ties": best.get("ties", []),
            }
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
            bar = _progress_bar(len(plan.items), request.label)
            progress = lambda done, total, text: _show_progress(bar, done, total)  # noqa: E731
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

    # --- memory and correctness ---------------------------------------------------------------
    def memory(
        self,
        problem: Mapping | None = None,
        variants: Sequence[str] | str | None = None,
        mode: str = "full",
        params: Mapping | None = None,
        *,
        dtype: str | None = None,
        title: str | None = None,
        show: bool = True,
    ):
        """Peak memory above baseline (MB) of every variant at one problem beside the bytes the
        problem must move (``spec.min_bytes``); n/a where the device keeps no allocator
        statistics (the CPU). Returns a DataFrame (variant, peak_mb, min_mb, error)."""
        import pandas as pd

        self._check_mode(mode)
        rows = []
        for rec in self._measure_each(self._variants(variants, mode), problem, params, mode, dtype):
            row = with_axis(rec, self.spec.axis, rec.problem.get(self.spec.axis))
            rows.append(row)
            self.records.append(row)
        fig = F.memory_figure(
            rows,
            order=[v.name for v in self.spec.variants],
            title=title or self._title("memory", mode, dtype, problem),
        )
        if show:
            self._show(fig)
        return pd.DataFrame(
            [
                {
                    "variant": r.variant,
                    "peak_mb": r.peak_mb,
                    "min_mb": None if r.min_bytes is None else r.min_bytes / 2**20,
                    "error": r.error,
                }
                for r in rows
            ]
        )

    def correctness(
        self,
        problem: Mapping | None = None,
        variants: Sequence[str] | str | None = None,
        mode: str = "full",
        params: Mapping | None = None,
        *,
        dtype: str | None = None,
        show: bool = True,
        edges: bool = False,
    ):
        """Every output and gradient of every variant against the reference at one problem:
        max abs / max rel error, the error ratio against the reference's own (and the rule's k),
        tolerance, NaN/Inf mismatches, pass; with ``edges=True`` our kernels also at the edge
        shapes derived from the declaration (one row, odd sizes, the smallest and largest
        accepted tiles, strided inputs where the family takes them: :mod:`workbench.edges`), a
        failed edge failing its record. Displays the table and returns it as a DataFrame (one row
        per tensor; errors as rows with tensor ``"-"``)."""
        import pandas as pd

        from workbench import edges as edge_shapes
        from workbench.measure import check_records

        self._check_mode(mode)
        chosen = self._variants(variants, mode)
        pairs = list(zip(self._measure_each(chosen, problem, params, mode, dtype), chosen))
        if edges:
            # every variant's edge cases planned (and compiled ahead on a GPU) before the first runs
            unchecked = [(rec, var) for rec, var in pairs if not var.is_peer and rec.error is None and not rec.edges]
            with self._lock:
                found = check_records(self.spec, unchecked, self.device, seed=self.seed)
            for (rec, var), verdicts in zip(unchecked, found):
                edge_shapes.attach(rec, verdicts)
                print(f"{var.name}: {edge_shapes.summary(verdicts)}")
        recs = [rec for rec, _ in pairs]
        for rec in recs:
            self.records.append(with_axis(rec, self.spec.axis, rec.problem.get(self.spec.axis)))
        if show:
            F.show_html(f"<b>{self._title('correctness', mode, dtype, problem)}</b>" + checks.checks_html(recs))
        rows = []
        for r in recs:
            rows.extend(checks.checks_rows(r))
            if r.error:
                rows.append({"variant": r.variant, "tensor": "-", "pass": False, "error": short_reason(r.error)})
        return pd.DataFrame(rows)

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

    # --- the Explorer ---------------------------------------------------------------------------
    def explorer(self, variant: str | None = None, **kwargs):
        """Live: build and display the Explorer on this session (shared cache, store, records)
        and return it. Headless: display nothing interactive and return None."""
        if self.headless:
            print("Explorer: live only (this run is headless; the fixed sweeps below stand in for it)")
            return None
        ex = self.view(self, variant=variant, **kwargs)
        ex.display()
        return ex

    def attach(self, view) -> None:
        """Called by a view (the Explorer) built on this session: ``apply`` goes to it."""
        self._explorer = view

    def on_device(self, kind: str) -> Session:
        """A session on another device kind sharing this one's cache (its keys carry the device
        kind), store, records and measuring lock: the Explorer's device switch."""
        sib = Session(self.spec, device=kind, dtype=self.dtype, quick=self.quick, headless=self.headless, store=False)
        sib.store, sib.cache, sib.records, sib._lock, sib.seed = (
            self.store,
            self.cache,
            self.records,
            self._lock,
            self.seed,
        )
        return sib

    def apply(self, config: Mapping | None = None) -> None:
        """Set the Explorer's controls to ``config`` (default: ``self.best``)."""
        config = config or self.best
        if not config:
            raise ValueError(f"nothing to apply: {getattr(config, 'why', 'pass a config')}")
        if self._explorer is None:
            raise ValueError("no Explorer in this session: call s.explorer() first")
        self._explorer.apply(config)

    # --- output ---------------------------------------------------------------------------------
    def frame(self):
        """``records`` as a DataFrame."""
        return records_frame(self.records)

    def finish(self) -> dict:
        """Write ``<family>_records.csv`` / ``.json`` into ``out_dir``; raise AssertionError
        listing every record whose correctness check failed and every run of our own kernels
        (backend gpu / npu) that failed at its default tile configuration."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        csv_path = write_csv(self.records, self.out_dir / f"{self.family}_records.csv")
        json_path = write_json(self.records, self.out_dir / f"{self.family}_records.json")
        wrong = [r for r in self.records if r.error is None and r.passed is False]
        broken = [r for r in self.records if r.error and self._is_default_run(r)]
        errors = [r for r in self.records if r.error]
        ok = [r for r in self.records if r.ok]
        print(
            f"{self.family}: {len(self.records)} records ({len(ok)} passed, {len(wrong)} failed their check, "
            f"{len(errors)} could not run) -> {csv_path}, {json_path}"
        )
        problems = []
        for r in wrong:
            bad = failed_checks(r)
            problems.append(
                f"WRONG RESULT {r.variant} {r.mode} {r.dtype} {F.mapping_str(r.problem)} {F.mapping_str(r.params)}: {bad}"
            )
        for r in broken:
            problems.append(
                f"DEFAULT CONFIG FAILED {r.variant} {r.mode} {r.dtype} {F.mapping_str(r.problem)}: {short_reason(r.error)}"
            )
        if problems:
            raise AssertionError(f"{len(problems)} check(s) failed in {self.family}:\n" + "\n".join(problems))
        return {"csv": csv_path, "json": json_path, "records": len(self.records)}

    def _is_default_run(self, rec: Record) -> bool:
        try:
            var = self.spec.variant(rec.variant)
        except ValueError:
            return False
        if var.is_peer:
            return False
        try:
            return var.resolve_params(rec.params) == var.resolve_params({})
        except ValueError:
            return False

    # --- helpers --------------------------------------------------------------------------------
    def _title(self, head: str, mode: str, dtype: str | None, problem: Mapping | None, exclude=()) -> str:
        prob = {**self.problem, **dict(problem or {})}
        shown = ", ".join(f"{k}={v}" for k, v in prob.items() if k not in exclude)
        return f"{self.spec.title} {head} — {mode}, {dtype_name(dtype or self.dtype)}, {self.device.kind} ({shown})"

    def _show(self, fig) -> None:
        self.figures.append(fig)
        F.show(fig)

    def _show_failures(self, failures: list[dict]) -> None:
        import pandas as pd
        from IPython.display import display

        print(f"{len(failures)} configuration(s) without a time (cannot run, or failed):")
        display(pd.DataFrame(failures))

    def _show_best(self, best: dict) -> None:
        text = f"best: {best['variant']} {F.mapping_str(best['params'])}" + F.ties_note(best)
        if self.headless:
            print(text)
            return
        import ipywidgets as W
        from IPython.display import display

        from widgets.controls import button as make_button  # as wide as its label

        button = make_button("Apply best to Explorer", button_style="success", icon="check")
        label = W.HTML(text)

        def click(_):
            try:
                self.apply(best)
                label.value = text + " — applied"
            except Exception as exc:  # never raise out of a callback
                label.value = f"{text} — {exc}"

        button.on_click(click)
        display(W.HBox([button, label]))

    def __repr__(self) -> str:
        return (
            f"Session({self.family!r}, device={self.device.kind!r}, dtype={self.dtype!r}, quick={self.quick}, "
            f"headless={self.headless}, records={len(self.records)})"
        )


@dataclass
class Swept:
    """A sweep's rows (records at the swept axis, in plan order) and the plan that made them."""

    rows: list[Record]
    plan: SweepPlan


def _show_progress(bar, done: int, total: int) -> None:
    bar.max = max(total, 1)
    bar.value = done
    bar.description = f"{done}/{total}"


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


_BROKEN_NOTED: set[str] = set()


def _note_broken_families() -> None:
    """Say once per process which registered families cannot load (a stale entry point), each in
    one line: the others work as usual."""
    from kernels import broken_families

    for name, reason in broken_families().items():
        if name not in _BROKEN_NOTED:
            _BROKEN_NOTED.add(name)
            print(f"note: kernel family {name!r} cannot load ({reason}); the other families are unaffected")


def default_store_path() -> Path:
    """``$WORKBENCH_STORE``; else ``results/workbench.sqlite`` of the checkout the kernels
    package lives in (so notebooks opened in notebooks/ share the repository's store); else
    ``workbench.store.DEFAULT_PATH`` (relative to the working directory)."""
    env = os.environ.get("WORKBENCH_STORE")
    if env:
        return Path(env)
    import kernels

    root = Path(kernels.__file__).resolve().parent.parent
    if (root / "pyproject.toml").exists() and os.access(root, os.W_OK):
        return root / "results" / "workbench.sqlite"
    return DEFAULT_PATH


def quick_for(device: str | Device, quick: bool | None) -> bool:
    """Whether a notebook runs its small sizes: ``quick`` when given, else on the CPU (the Triton
    interpreter runs a kernel's programs one by one in Python: full sizes would take hours)."""
    if quick is not None:
        return bool(quick)
    return get_device(device).kind == "cpu"


def default_results_dir() -> Path:
    """Where a notebook's records go when it names no ``out_dir``: the folder of the default
    store (``results/`` of the checkout, which git ignores), never the notebooks' folder."""
    return default_store_path().parent


def _progress_bar(total: int, label: str):
    try:
        import ipywidgets as W
        from IPython.display import display
    except ImportError:
        return None
    bar = W.IntProgress(value=0, min=0, max=max(total, 1), description=f"0/{total}")
    display(W.HBox([bar, W.Label(label)]))
    return bar
