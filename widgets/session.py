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

Where the parts live: this module is the model of a session (construction, what can run, cache
keys and lookup, measuring, memory and correctness, the device switch, ``finish``);
:class:`Session` takes its sweeps and ``tune`` from :class:`~widgets.session_sweeps.SessionSweeps`
and what it displays from :class:`~widgets.session_figures.SessionFigures`, its base classes, which
import nothing of this module; a notebook's defaults (``quick_for``, where the store and the
records go) are in :mod:`widgets.defaults`. Planning lives in :mod:`workbench.sweep.plan` and
measuring in :mod:`workbench.measure`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kernels.spec import KernelSpec, Variant, dtype_name, get
from widgets.core import ResultCache
from widgets.defaults import default_results_dir, default_store_path, note_broken_families, quick_for
from widgets.session_figures import SessionFigures
from widgets.session_sweeps import NoBest, SessionSweeps
from workbench.device import Device, get_device
from workbench.measure import measure, measure_many
from workbench.record import Record, failed_checks
from workbench.reports import checks
from workbench.reports import figures as F
from workbench.reports.text import short_reason
from workbench.store import Store, records_frame, write_csv, write_json
from workbench.sweep.config import config_key, resolve_config, with_axis
from workbench.sweep.plan import split_params

__all__ = ["NoBest", "Session", "quick_for", "default_results_dir"]


class Session(SessionSweeps, SessionFigures):
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
        note_broken_families()
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
        return self._resolved(self.spec.variant(variant), problem, params, mode, dtype_name(dtype or self.dtype))[2]

    def _resolved(self, var: Variant, problem: Mapping | None, params: Mapping | None, mode: str, dt: str) -> tuple:
        """(problem, params, cache key) of a configuration: the call's problem over the session's,
        both resolved against the family's spec, as every measuring path here keys its cache."""
        prob, prm, _ = resolve_config(self.spec, var, {**self.problem, **dict(problem or {})}, params, False)
        return prob, prm, config_key(var.name, self.device.kind, dt, mode, prob, prm)

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
        prob, prm, key = self._resolved(variant, problem, params, mode, dt)
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
            prob, _, key = self._resolved(var, problem, prm, mode, dt)
            if self.cache.peek(key) is None:
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
            prob, prm, key = self._resolved(var, problem, params, mode, dt)
            configs.append(dict(variant=var, dtype=dt, mode=mode, problem=prob, params=prm, seed=self.seed))
            keys.append(key)
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

    def __repr__(self) -> str:
        return (
            f"Session({self.family!r}, device={self.device.kind!r}, dtype={self.dtype!r}, quick={self.quick}, "
            f"headless={self.headless}, records={len(self.records)})"
        )
