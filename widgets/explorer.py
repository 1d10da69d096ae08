"""The live Explorer: controls built from a KernelSpec, relaunch on change, live figures.

    from widgets import Session
    ex = Session("rms_norm").explorer()          # or Explorer("rms_norm", device="auto")

Controls (all from the spec): variant, device (only devices present), dtype, mode, every
problem knob, and every tile Param of the chosen variant limited to its allowed values. Any
change relaunches the kernel:

- cached configurations — keyed by (variant, device, dtype, mode, problem, params) — are shown
  at once, in the callback;
- new ones are measured on one background worker thread, so the control that triggered them
  never blocks: at once after a quiet spell, debounced (``debounce_s``) within a burst of
  changes (:class:`widgets.controls.Worker`); only the latest request is kept while one runs,
  and a result is drawn only if the controls still ask for it (otherwise it is cached for later);
- an invalid configuration shows its reason in the error line; nothing raises out of a
  callback and the kernel stays alive.

After a result is shown, the configurations one notch away on each control go to the compile
service (:mod:`workbench.compiling.service`), and the peers are measured side by side with the
variant. On CUDA the first measurement's number comes from graph replay; then the process's
first profiler session is started on the notebook's event loop (the main thread, where Kineto
wants it) and the measurement refined. "Profile this configuration" runs Nsight Compute in a
background thread and adds its counters to the why panel.

The Explorer is one object, :class:`Explorer`, its jobs in one module each: the panel, the view
and the sweeps are mixins it inherits, working on its state (each module's docstring names what
it reads and sets; every attribute and lock is the Explorer's own), and the figure bindings are
free functions:

- this module: construction and the configuration state (``controls``, ``config``, ``set``,
  ``apply``, ``apply_best``), control changes, the relaunch and its background job, ``wait``,
  ``busy``, ``profile``, display and ``close``;
- :mod:`widgets.explorer_panel`: the widgets, their layout and the controls shown for a variant
  and mode (and the page's CSS hooks);
- :mod:`widgets.explorer_view`: the live view, rendering a record into the status line, the
  figures, the correctness table and the why panel;
- :mod:`widgets.explorer_figures`: which cached records the figures draw, and figure widgets
  updated in place;
- :mod:`widgets.explorer_sweep`: the sweep panel, its sweeps and heatmap.

What knows no family (the worker, the control builders) is :mod:`widgets.controls`, and sweep
planning is :mod:`workbench.sweep.plan`.

Programmatic use (tests, scripts): ``ex.set(BLOCK_SIZE=1024)``, ``ex.wait()``, ``ex.record``,
``ex.error_text``, ``ex.status_text``, ``ex.why_text``, ``ex.profile(wait=True)``, ``ex.last_cached``, ``ex.last_latency_s``, ``ex.first_shown_s``,
``ex.run_sweep("BLOCK_SIZE", [...], "BLOCK_SIZE_M", [...])``, ``ex.apply_best()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import threading
import time
from typing import Any, Callable, Mapping

import ipywidgets as W

from kernels.spec import KernelSpec
from widgets.controls import Worker, neighbour_values
from widgets.explorer_panel import ExplorerPanel
from widgets.explorer_sweep import ExplorerSweep
from widgets.explorer_view import ExplorerView, status_html
from widgets.session import Session
from workbench import ncu, timing
from workbench.compiling import service as compile_service
from workbench.reports import figures as F
from workbench.reports import why
from workbench.reports.text import short_reason

__all__ = ["Explorer"]


class Explorer(ExplorerPanel, ExplorerView, ExplorerSweep):
    """Live controls and figures for one KernelSpec (see the module docstring).

    ``Explorer(family_or_session, variant=None, *, device="auto", dtype="bf16", quick=False,
    debounce_s=0.2, peers=True, metric="ms")``. Built on a :class:`Session` (its cache, store
    and records are shared); passing a family name makes a live Session.
    """

    def __init__(
        self,
        source: str | KernelSpec | Session,
        variant: str | None = None,
        *,
        device: str = "auto",
        dtype: str = "bf16",
        quick: bool = False,
        debounce_s: float = 0.2,
        peers: bool = True,
        metric: str = "ms",
        store=None,
        autostart: bool = True,
    ):
        if isinstance(source, Session):
            self.session = source
        else:
            self.session = Session(source, device=device, dtype=dtype, quick=quick, headless=False, store=store)
        self.spec = self.session.spec
        self.session.attach(self)
        self._sessions = {self.session.device.kind: self.session}
        self._worker = Worker(debounce_s)
        self._hold_depth = 0
        self._token = 0
        self._tile_memory: dict[str, dict] = {}
        self.record = None  # the record on display
        self.last_cached: bool | None = None
        self.last_latency_s: float | None = None
        self.first_shown_s: float | None = None  # the last request's first number, drawn
        self.relaunches = 0  # renders of a configuration (cached or measured)
        self._requested_at = 0.0
        self._sweep_cancel = threading.Event()
        self._render_lock = threading.RLock()  # the notebook thread and the worker both draw
        self.sweep_frame = None
        self.best: dict | None = None
        # Where the sweep panel's sweeps run: "local", "isolate", "ray" or an executor object
        # (workbench.sweep); the heatmap fills in as results arrive.
        self.executor = "local"
        self.executor_options: dict | None = None
        # the notebook's event loop, where the profiler's first session runs (main thread only)
        self._main_loop = _main_thread_loop()
        self._profiler_asked = False
        self._build(variant, peers, metric)
        if autostart:
            self.relaunch()

    # --- display ------------------------------------------------------------------------------
    def display(self) -> None:
        from IPython.display import display

        display(self.widget)
        self._displayed_in = _execution_count()

    def _ipython_display_(self):
        # ``s.explorer()`` already displayed this in the same cell: do not show it twice
        if getattr(self, "_displayed_in", None) is not None and self._displayed_in == _execution_count():
            return
        self.display()

    def __repr__(self) -> str:
        return f"<Explorer {self.spec.name}: {self.w_variant.value} on {self.w_device.value}>"

    # --- configuration ------------------------------------------------------------------------
    @property
    def controls(self) -> dict[str, W.Widget]:
        """Name -> widget: variant, device, dtype, mode, every knob, every tile Param."""
        out = {"variant": self.w_variant, "device": self.w_device, "dtype": self.w_dtype, "mode": self.w_mode}
        out.update(self.knob_widgets)
        for name, w in self.param_widgets.items():
            out[name if name not in out else f"param:{name}"] = w
        return out

    def config(self) -> dict:
        """What the controls ask for now: variant, device, dtype, mode, problem, params."""
        return {
            "variant": self.w_variant.value,
            "device": self.w_device.value,
            "dtype": self.w_dtype.value,
            "mode": self.w_mode.value,
            "problem": {k: w.value for k, w in self.knob_widgets.items()},
            "params": {k: w.value for k, w in self.param_widgets.items()},
        }

    def _session_for(self, kind: str) -> Session:
        if kind not in self._sessions:
            self._sessions[kind] = self.session.on_device(kind)
        return self._sessions[kind]

    def set(self, **values) -> Explorer:
        """Set controls by name as a person would (``variant``, ``device``, knobs, tile params);
        one relaunch for all of them. Unknown names are a ValueError."""
        controls = self.controls
        known = set(controls) | {p.name for v in self.spec.variants for p in v.params}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"no control {', '.join(unknown)}; controls: {', '.join(controls)}")
        with self._hold():
            if "device" in values:
                self._switch_device(values.pop("device"))
            if "variant" in values:
                self._switch_variant(values.pop("variant"))
            controls = self.controls  # the variant may have changed its tile widgets
            unknown = sorted(set(values) - set(controls))
            if unknown:
                raise ValueError(f"variant {self.w_variant.value!r} has no control {', '.join(unknown)}")
            for name, value in values.items():
                controls[name].value = value
            self._tile_memory[self.w_variant.value] = {k: w.value for k, w in self.param_widgets.items()}
        self.relaunch()
        return self

    def apply(self, config: Mapping) -> None:
        """Set the controls to ``config`` ({"variant", "params", "problem"}; any part optional)."""
        values: dict[str, Any] = {}
        if config.get("variant"):
            values["variant"] = config["variant"]
        values.update(config.get("problem") or {})
        with self._hold():
            if "variant" in values:
                self._switch_variant(values.pop("variant"))
            for name, value in values.items():
                if name in self.knob_widgets:
                    self.knob_widgets[name].value = value
            for name, value in (config.get("params") or {}).items():
                if name in self.param_widgets:
                    self.param_widgets[name].value = value
            self._tile_memory[self.w_variant.value] = {k: w.value for k, w in self.param_widgets.items()}
        self.relaunch()

    def apply_best(self) -> None:
        if self.best is None:
            raise ValueError("no best configuration yet: run a 2-D sweep")
        self.apply(self.best)

    # --- relaunching --------------------------------------------------------------------------
    def _on_control(self, change) -> None:
        if self._hold_depth:
            return
        owner = change.get("owner") if isinstance(change, dict) else None
        self._safe(lambda: self._changed(owner))

    def _changed(self, owner) -> None:
        if owner is self.w_variant:
            self._switch_variant(self.w_variant.value)
        elif owner is self.w_device:
            self._switch_device(self.w_device.value)
        else:
            self._tile_memory[self.w_variant.value] = {k: w.value for k, w in self.param_widgets.items()}
        self.relaunch()

    def _switch_variant(self, name: str) -> None:
        """Make ``name`` the variant: its tile controls, modes and axes (no relaunch). Already
        shown (e.g. "Apply best" within the variant): nothing to rebuild, so the tile widgets and
        the sweep values typed into the panel stay as they are."""
        if name == self.w_variant.value and getattr(self, "_params_variant", None) == name:
            return
        with self._hold():
            if self.w_variant.value != name:
                self.w_variant.value = name
            self._rebuild_params(name)
        self._refresh_axes()

    def _switch_device(self, kind: str) -> None:
        """Make ``kind`` the device: only variants that run there are offered (no relaunch)."""
        sess = self._session_for(kind)
        with self._hold():
            if self.w_device.value != kind:
                self.w_device.value = kind
            keep = self.w_variant.value
            names = sess.runnable()
            self.w_variant.options = names
            self.w_variant.value = keep if keep in names else names[0]
        self._switch_variant(self.w_variant.value)

    def relaunch(self, force: bool = False) -> None:
        """Show the configuration the controls ask for: from the cache at once, else measured
        on the worker after the debounce delay."""
        if self._hold_depth:
            return
        self._refresh_tile_controls()  # the mode's tiles, the refused values at this problem
        self._token += 1
        token = self._token
        self._requested_at = time.perf_counter()
        self.first_shown_s = None
        cfg = self.config()
        sess = self._session_for(cfg["device"])
        if not force:
            hit = sess.cache.get(sess.key(cfg["variant"], cfg["problem"], cfg["params"], cfg["mode"], cfg["dtype"]))
            if hit is not None:
                self._show_record(hit, cached=True)
                self._compile_neighbours(cfg)
                if self.w_peers.value:
                    self._worker.request(lambda: self._measure_peers(cfg, token))
                return
        self.w_status.value = status_html(
            f"measuring {cfg['variant']} {F.mapping_str(cfg['params'])} … (the notebook stays usable)", busy=True
        )
        self._worker.request(lambda: self._job(cfg, token, force))

    def _job(self, cfg: dict, token: int, force: bool) -> None:
        try:
            sess = self._session_for(cfg["device"])
            var = self.spec.variant(cfg["variant"])
            # Before this process's first profiler session (Kineto wants it on the main thread,
            # after this cell), a first number from graph replay.
            # once, beside the first launch: ready for its neighbours (the peers' graphs too)
            compile_service.start(sess.device.kind, graphs=self.spec.has_graph_peers(sess.device.kind))
            first = sess.device.kind == "cuda" and not timing.profiler_started() and not self._profiler_asked
            with timing.profiler_deferred() if first else contextlib.nullcontext():
                rec, cached = sess.measure_cached(
                    var, cfg["problem"], cfg["params"], cfg["mode"], cfg["dtype"], force=force
                )
            if not cached:
                sess.records.append(rec)
            if token == self._token:
                self._show_record(rec, cached=cached)
            self._compile_neighbours(cfg)
            if first and not cached:  # refined once the profiler runs; the peers come after that
                self._profiler_asked = True
                self._start_profiler_then(lambda: self._job(cfg, token, force=True))
                return
            if self.w_peers.value and not rec.error:
                self._measure_peers(cfg, token)
        except Exception as exc:  # never out of the worker
            self._show_exception(exc)

    def _start_profiler_then(self, after: Callable[[], None]) -> None:
        """Start the process's first profiler session on the main thread, through the notebook's
        event loop (it runs once the notebook is idle; Kineto reports a start from another thread
        as an error), then queue ``after`` on the worker. Without a notebook loop (a script), here."""

        def on_main():
            try:
                timing.start_profiler()
            except Exception:  # noqa: BLE001 - no profiler here: the timings fall back and say so
                pass
            finally:
                self._worker.submit(after)

        loop = self._main_loop
        if loop is not None and loop.is_running() and not loop.is_closed():
            loop.call_soon_threadsafe(on_main)
        else:
            on_main()

    def _compile_neighbours(self, cfg: dict) -> None:
        """Submit to the compile service (:mod:`workbench.compiling.service`) the configurations one
        step away on each control (the previous and next tile, size in a list, dtype, mode and
        variant) and this configuration on the other device, so a one-notch move measures a kernel
        already compiled. Costs nothing where nothing is compiled (the CPU interpreter)."""
        configs = []
        for name, w in self.param_widgets.items():
            configs += [{**cfg, "params": {**cfg["params"], name: v}} for v in neighbour_values(w)]
        for name, w in self.knob_widgets.items():
            configs += [{**cfg, "problem": {**cfg["problem"], name: v}} for v in neighbour_values(w)]
        for key, w in (("dtype", self.w_dtype), ("mode", self.w_mode)):
            configs += [{**cfg, key: v} for v in neighbour_values(w)]
        for name in neighbour_values(self.w_variant):
            configs.append({**cfg, "variant": name, "params": dict(self._tile_memory.get(name, {}))})
        quick = self.session.quick  # every device's session shares it (Session.on_device)
        compile_service.submit_configs(self.spec, configs, cfg["device"], quick=quick)
        for kind in self.w_device.options:
            if kind != cfg["device"]:
                compile_service.submit_configs(self.spec, [cfg], kind, quick=quick)

    def _measure_peers(self, cfg: dict, token: int) -> None:
        """The peers at their defaults, timed side by side with ours (interleaved trials)."""
        try:
            sess = self._session_for(cfg["device"])
            peers = [
                self.spec.variant(name)
                for name in sess.runnable(cfg["mode"])
                if self.spec.variant(name).is_peer and name != cfg["variant"]
            ]
            missing = [p for p in peers if sess.lookup(p.name, cfg["problem"], {}, cfg["mode"], cfg["dtype"]) is None]
            if not missing or token != self._token:
                return
            ours = (self.spec.variant(cfg["variant"]), cfg["params"])
            pairs = [ours] + [(p, {}) for p in missing]
            recs = sess.measure_side_by_side(pairs, cfg["problem"], cfg["mode"], cfg["dtype"])
            sess.records.extend(recs)
            if token == self._token:
                self._render_current()
        except Exception as exc:
            self._show_exception(exc)

    def wait(self, timeout: float | None = 120) -> bool:
        """Wait until every requested relaunch / sweep is done (programmatic use)."""
        return self._worker.wait(timeout)

    @property
    def busy(self) -> bool:
        return self._worker.busy

    # --- profiling ----------------------------------------------------------------------------
    def profile(self, wait: bool = False) -> None:
        """Run Nsight Compute on the configuration on display, in a background thread; its
        counters join the record (``record.counters``) and show in the why panel; an error is one
        line beside the button. ``wait``: return when it is done (programmatic use)."""
        rec = self.record
        if rec is None or rec.error:
            raise ValueError("no configuration that ran is on display: nothing to profile")
        if self.profile_thread is not None and self.profile_thread.is_alive():
            raise ValueError("a profile is running already; wait for it")
        config = {
            "family": self.spec.name,
            "variant": rec.variant,
            "device": rec.device_kind,
            "dtype": rec.dtype,
            "mode": rec.mode,
            "problem": dict(rec.problem),
            "params": dict(rec.params),
            "seed": rec.seed,
            "quick": self.session.quick,
        }
        self.w_profile.disabled = True
        self.w_profile_status.value = status_html("profiling with Nsight Compute …", busy=True)

        def job():
            try:
                kernels = ncu.profile(config, ncu=self._ncu)
                rec.counters = ncu.as_record_counters(kernels, self._ncu)
                self.w_profile_status.value = status_html(f"profiled: {len(kernels)} kernel(s)")
                with self._render_lock:
                    if self.record is rec:
                        self.w_why.value = why.why_html(rec)
            except Exception as exc:  # one line beside the button, never out of the thread
                self.w_profile_status.value = (
                    '<div class="wb-error" style="color:#b00;font-family:monospace">'
                    f"{html.escape(short_reason(' '.join(str(exc).split()), 400))}</div>"
                )
            finally:
                self.w_profile.disabled = False

        self.profile_thread = threading.Thread(target=job, name="workbench-profile", daemon=True)
        self.profile_thread.start()
        if wait:
            self.profile_thread.join()

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        self._worker.stop()
        self.widget.close()


def _main_thread_loop():
    """The event loop running in the main thread when called there from inside it (a notebook's
    kernel runs its cells so), else None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _execution_count():
    try:
        from IPython import get_ipython

        ip = get_ipython()
        return None if ip is None else ip.execution_count
    except Exception:
        return None
