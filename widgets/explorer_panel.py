"""The Explorer's panel: which widgets exist, how they are laid out, which are shown for a mode.

:meth:`ExplorerPanel._build` makes every control from the KernelSpec (variant, device (only
devices present), dtype, mode, every problem knob, and every tile Param of the chosen variant
limited to its allowed values), the status and error lines, the figure widgets, the correctness
table, the why panel with its profile button (shown only where ncu is installed and the device
is CUDA), and the sweep panel, lays them out and wires their observers to the Explorer's
handlers. The tile controls follow the variant (:meth:`ExplorerPanel._rebuild_params`) and
the mode (:meth:`ExplorerPanel._refresh_tile_controls`: only the tiles a run in that mode reads,
with the values the variant's check refuses at the problem marked ✗ and the reason below); the
x axis and sweep axes follow the variant (:meth:`ExplorerPanel._refresh_axes`). Changes made
here run inside :meth:`ExplorerPanel._hold`, so they relaunch nothing.

In the page (browser tests): every control has the CSS class ``wb-control-<name>``
(``wb-control-BLOCK_SIZE``, ``wb-control-rows`` …) and its name as label; the status line is
``.wb-status`` (inside ``.wb-status-line``), an error ``.wb-error``, the figures ``.wb-speed``,
``.wb-memory`` and ``.wb-heatmap``, the correctness table ``table.wb-checks`` (its caption names
the configuration that ran), the sweep axes ``.wb-sweep-x`` / ``.wb-sweep-y`` and their value
boxes ``.wb-sweep-x-values`` / ``.wb-sweep-y-values``, the sweep button ``.wb-sweep-run``, its
progress bar ``.wb-progress`` and label ``.wb-sweep-label``, the best-config button
``.wb-apply-best`` and its text ``.wb-best``, the why panel ``.wb-why-panel`` (warnings
``.wb-why-warning``, the kernels' table ``table.wb-why-kernels``), the profile button
``.wb-profile`` and its line ``.wb-profile-status``.

A mixin of :class:`widgets.explorer.Explorer`: it sets the widgets (``w_*``, ``knob_widgets``,
``param_widgets``, ``params_box``, ``speed_fig``, ``memory_fig``, ``heatmap_fig``,
``heatmap_box``, ``widget``), ``_ncu``, ``profile_thread`` and ``_params_variant`` (whose tile
widgets are on display); it reads the Explorer's ``spec``, ``session``, ``_tile_memory`` (the
tiles last set per variant), ``_sweep_cancel`` (the Stop button sets it) and ``_hold_depth``,
and calls its ``controls``, ``_session_for``
and the handlers it wires: ``_on_control``, ``relaunch``, ``apply_best``, ``profile``,
``_render_current``, ``_start_sweep_from_panel`` and ``_safe``.
"""

from __future__ import annotations

import contextlib
import html
import threading

import ipywidgets as W
import plotly.graph_objects as go

from kernels.runtime import kinds_present
from widgets.controls import button, knob_widget, knobs_help, mark_refused, param_widget
from widgets.explorer_figures import figure_widget
from workbench import ncu
from workbench.reports import figures as F
from workbench.reports.text import short_reason
from workbench.sweep.plan import axis_kind, default_values


class ExplorerPanel:
    """The Explorer's widgets and layout, and the controls shown for its variant and mode (see
    the module docstring for the state it reads)."""

    def _build(self, variant, peers, metric) -> None:
        s = self.session
        runnable = s.runnable()
        if variant is None:
            ours = [n for n in runnable if not self.spec.variant(n).is_peer]
            variant = (ours or runnable or [self.spec.variants[0].name])[0]
        style = {"description_width": "initial"}
        self.w_variant = W.Dropdown(options=runnable, value=variant, description="variant", style=style)
        self.w_device = W.Dropdown(options=kinds_present(), value=s.device.kind, description="device", style=style)
        self.w_dtype = W.Dropdown(options=list(self.spec.dtypes), value=s.dtype, description="dtype", style=style)
        self.w_mode = W.ToggleButtons(options=list(self.spec.modes), value="forward", description="mode", style=style)
        self.knob_widgets = {k.name: knob_widget(k, s.problem[k.name]) for k in self.spec.knobs}
        self.param_widgets: dict[str, W.Widget] = {}
        self.params_box = W.HBox(layout=W.Layout(flex_flow="row wrap"))
        # under the tile controls: which values the variant's check refuses here, and why
        self.w_refused = W.HTML(value="")
        self.w_peers = W.Checkbox(value=peers, description="measure peers too", style=style)
        self.w_metric = W.Dropdown(options=list(F.METRICS), value=metric, description="metric", style=style)
        self.w_xaxis = W.Dropdown(description="x axis", style=style)
        self.w_remeasure = button("Re-measure", icon="refresh", tooltip="measure again, ignoring the cache")
        self.w_status = W.HTML(value="")
        self.w_error = W.HTML(value="")
        self.speed_fig = figure_widget(go.Figure(layout=dict(height=420, template=F.HOUSE_TEMPLATE)))
        self.memory_fig = figure_widget(go.Figure(layout=dict(height=380, template=F.HOUSE_TEMPLATE)))
        self.w_checks = W.HTML(value="")
        # the why panel: compile facts of the configuration on display, Nsight Compute's counters
        # on demand (the button shows only where ncu is installed and the device is CUDA)
        # beside the speed figure where the window is wide enough, below it where not (never cut off)
        self.w_why = W.HTML(value="", layout=W.Layout(min_width="320px", max_width="100%", overflow="auto"))
        self._ncu = ncu.find_ncu()
        self.w_profile = button(
            "Profile this configuration",
            icon="tachometer",
            tooltip="run Nsight Compute on the configuration on display (about 10 s, in the background)",
        )
        self.w_profile_status = W.HTML(value="")
        self.profile_thread: threading.Thread | None = None
        # sweep panel
        self.w_sweep_x = W.Dropdown(description="sweep", style=style)
        self.w_sweep_xv = W.Text(description="values", style=style, layout=W.Layout(width="340px"))
        self.w_sweep_y = W.Dropdown(description="and", style=style)
        self.w_sweep_yv = W.Text(description="values", style=style, layout=W.Layout(width="340px"))
        self.w_sweep_run = button("Run sweep", button_style="primary", icon="play")
        self.w_sweep_stop = button("Stop", icon="stop")
        self.w_progress = W.IntProgress(value=0, min=0, max=1, description="0/0", style=style)
        self.w_sweep_label = W.HTML(value="")
        self.w_apply_best = button("Apply best", button_style="success", icon="check", disabled=True)
        self.w_best = W.HTML(value="")
        self.w_failures = W.HTML(value="")
        # made on the first 2-D sweep: every FigureWidget ships plotly's widget bundle to the browser
        self.heatmap_fig = None
        self.heatmap_box = W.Box([])

        self._rebuild_params(variant)
        self._refresh_axes()
        for w in (self.w_variant, self.w_device, self.w_dtype, self.w_mode, *self.knob_widgets.values()):
            w.observe(self._on_control, names="value")
        self.w_peers.observe(self._on_control, names="value")
        self.w_metric.observe(lambda ch: self._safe(self._render_current), names="value")
        self.w_xaxis.observe(lambda ch: self._safe(self._render_current), names="value")
        self.w_remeasure.on_click(lambda _: self._safe(lambda: self.relaunch(force=True)))
        self.w_sweep_x.observe(
            lambda ch: self._safe(lambda: self._fill_sweep_values(self.w_sweep_x, self.w_sweep_xv)), names="value"
        )
        self.w_sweep_y.observe(
            lambda ch: self._safe(lambda: self._fill_sweep_values(self.w_sweep_y, self.w_sweep_yv)), names="value"
        )
        self.w_sweep_run.on_click(lambda _: self._safe(self._start_sweep_from_panel))
        self.w_sweep_stop.on_click(lambda _: self._sweep_cancel.set())
        self.w_apply_best.on_click(lambda _: self._safe(self.apply_best))
        self.w_profile.on_click(lambda _: self._safe(self.profile))

        title = W.HTML(f"<b>{html.escape(self.spec.title)} Explorer</b> — {html.escape(self.spec.doc)}")
        knobs = W.HBox(list(self.knob_widgets.values()), layout=W.Layout(flex_flow="row wrap"))
        knob_help = W.HTML(knobs_help(self.spec.knobs))
        top = W.HBox([self.w_variant, self.w_device, self.w_dtype], layout=W.Layout(flex_flow="row wrap"))
        opts = W.HBox(
            [self.w_xaxis, self.w_metric, self.w_peers, self.w_remeasure], layout=W.Layout(flex_flow="row wrap")
        )
        sweep = W.VBox(
            [
                W.HBox([self.w_sweep_x, self.w_sweep_xv]),
                W.HBox([self.w_sweep_y, self.w_sweep_yv]),
                W.HBox([self.w_sweep_run, self.w_sweep_stop, self.w_progress, self.w_sweep_label]),
                self.heatmap_box,
                W.HBox([self.w_apply_best, self.w_best]),
                self.w_failures,
            ]
        )
        why_box = W.VBox([self.w_why, W.HBox([self.w_profile, self.w_profile_status])])
        speed_row = W.HBox(
            [w for w in (self.speed_fig, why_box) if isinstance(w, W.Widget)],
            layout=W.Layout(flex_flow="row wrap", align_items="flex-start", width="100%"),
        )
        figs = W.VBox([speed_row] + ([self.memory_fig] if isinstance(self.memory_fig, W.Widget) else []))
        self.widget = W.VBox(
            [
                title,
                top,
                self.w_mode,
                knobs,
                knob_help,
                W.HTML("<i>tile parameters of the variant (those the chosen mode's kernels read)</i>"),
                self.params_box,
                self.w_refused,
                opts,
                self.w_status,
                self.w_error,
                figs,
                self.w_checks,
                W.HTML("<b>Sweep</b> (runs on the worker; records go to the store as measured)"),
                sweep,
            ]
        )
        self.widget.add_class("wb-explorer")
        # stable hooks for browser tests and styling: wb-control-<name>, wb-speed, wb-memory …
        for name, w in self.controls.items():
            w.add_class(f"wb-control-{name}")
        for cls, w in (
            ("wb-status-line", self.w_status),
            ("wb-error-line", self.w_error),
            ("wb-checks", self.w_checks),
            ("wb-speed", self.speed_fig),
            ("wb-memory", self.memory_fig),
            ("wb-sweep-x", self.w_sweep_x),
            ("wb-sweep-x-values", self.w_sweep_xv),
            ("wb-sweep-y", self.w_sweep_y),
            ("wb-sweep-y-values", self.w_sweep_yv),
            ("wb-sweep-run", self.w_sweep_run),
            ("wb-sweep-label", self.w_sweep_label),
            ("wb-best", self.w_best),
            ("wb-progress", self.w_progress),
            ("wb-apply-best", self.w_apply_best),
            ("wb-heatmap", self.heatmap_box),
            ("wb-failures", self.w_failures),
            ("wb-why-panel", self.w_why),
            ("wb-profile", self.w_profile),
            ("wb-profile-status", self.w_profile_status),
            ("wb-refused", self.w_refused),
            ("wb-knob-help", knob_help),
            ("wb-remeasure", self.w_remeasure),
        ):
            if isinstance(w, W.DOMWidget):
                w.add_class(cls)

    def _rebuild_params(self, variant: str) -> None:
        var = self.spec.variant(variant)
        self._params_variant = variant  # whose tile widgets are on display
        for w in self.param_widgets.values():
            w.unobserve(self._on_control, names="value")
        remembered = self._tile_memory.get(variant, {})
        self.param_widgets = {}
        for p in var.params:
            value = remembered.get(p.name, p.default)
            w = param_widget(p, value if value in p.values else p.default)
            w.add_class(f"wb-control-{p.name}")
            w.observe(self._on_control, names="value")
            self.param_widgets[p.name] = w
        modes = list(var.modes or self.spec.modes)
        if list(self.w_mode.options) != modes:
            with self._hold():
                current = self.w_mode.value
                self.w_mode.options = modes
                self.w_mode.value = current if current in modes else modes[0]
        self._refresh_tile_controls()

    def _tile_params(self, mode: str | None = None) -> list:
        """The shown variant's tiles that a run in ``mode`` (default: the chosen one) reads."""
        var = self.spec.variant(self._params_variant)
        return [p for p in var.params if p.used_in(mode or self.w_mode.value)]

    def _refresh_tile_controls(self) -> None:
        """Show the chosen mode's tile controls only, and mark the values the variant's check
        refuses at the problem, dtype and device the controls ask for (✗, with the reason below)."""
        shown = self._tile_params()
        children = [self.param_widgets[p.name] for p in shown]
        if not children:
            children = [W.HTML(f"<i>none in {html.escape(self.w_mode.value)} mode</i>")]
        if list(self.params_box.children) != children:
            self.params_box.children = children
        var = self.spec.variant(self._params_variant)
        notes = []
        with self._hold():
            for p in shown:
                refused = self._refused(var, p.name)
                mark_refused(self.param_widgets[p.name], p, refused)
                if refused:
                    values = ", ".join(map(str, refused))
                    reason = short_reason(next(iter(refused.values())), 160)
                    notes.append(f"<b>{html.escape(p.name)}</b> {html.escape(values)}: {html.escape(reason)}")
        self.w_refused.value = (
            '<div style="font-size:12px;color:#8a5a00">✗ refused here, before any launch — '
            + "; ".join(notes)
            + "</div>"
            if notes
            else ""
        )

    def _refresh_axes(self) -> None:
        var = self.spec.variant(self.w_variant.value)
        numeric_knobs = [
            k.name
            for k in self.spec.knobs
            if k.values is None and isinstance(k.default, (int, float)) and not isinstance(k.default, bool)
        ]
        param_names = [p.name for p in var.params]
        axes = numeric_knobs + param_names
        with self._hold():
            keep = self.w_xaxis.value
            self.w_xaxis.options = axes
            self.w_xaxis.value = keep if keep in axes else (self.spec.axis if self.spec.axis in axes else axes[0])
            knob_names = [k.name for k in self.spec.knobs]
            sweepable = knob_names + param_names
            keep = self.w_sweep_x.value
            self.w_sweep_x.options = sweepable
            self.w_sweep_x.value = keep if keep in sweepable else (param_names[0] if param_names else self.spec.axis)
            keep = self.w_sweep_y.value
            self.w_sweep_y.options = ["(none)"] + sweepable
            self.w_sweep_y.value = keep if keep in sweepable else (param_names[1] if len(param_names) > 1 else "(none)")
        self._fill_sweep_values(self.w_sweep_x, self.w_sweep_xv)
        self._fill_sweep_values(self.w_sweep_y, self.w_sweep_yv)

    def _fill_sweep_values(self, axis_w, values_w) -> None:
        axis = axis_w.value
        if not axis or axis == "(none)":
            values_w.value = ""
            return
        var = self.spec.variant(self.w_variant.value)
        vals = default_values(self.spec, axis, [var])
        if axis_kind(self.spec, axis, [var]) == "param":
            refused = self._refused(var, axis)  # offer what can run: a sweep of them draws every point
            vals = [v for v in vals if v not in refused] or vals
            if self.session.quick:
                vals = vals[:6]
        values_w.value = ", ".join(str(v) for v in vals)

    def _refused(self, var, name: str) -> dict:
        """The values of ``var``'s tile ``name`` its check refuses at the problem, dtype and device
        the controls ask for ({} where the problem itself is out of range)."""
        sess = self._session_for(self.w_device.value)
        try:
            problem = self.spec.resolve_problem({k: w.value for k, w in self.knob_widgets.items()}, sess.quick)
        except ValueError:
            return {}
        params = {k: w.value for k, w in self.param_widgets.items()}
        return var.refused_values(name, problem, params, self.w_dtype.value, sess.device)

    @contextlib.contextmanager
    def _hold(self):
        """Change controls without relaunching for each change."""
        self._hold_depth += 1
        try:
            yield
        finally:
            self._hold_depth -= 1
