"""The Explorer's sweep panel: 1-D and 2-D sweeps of the current variant, run on its worker.

:meth:`ExplorerSweep.run_sweep` plans a :class:`workbench.sweep.plan.SweepRequest` at the
settings the controls ask for and runs it through the session (``Session.run_sweep``) with the
progress bar: the sweep's executor is the Explorer's ``executor`` ("local", "isolate", "ray" or
an executor object, with ``executor_options``). A 1-D sweep (peers too, where the axis is a knob
and "measure peers too" is on) redraws the speed figure along its axis; a 2-D sweep draws a
heatmap that fills in as results arrive (:meth:`ExplorerSweep.partial_heatmap`, which the
Session calls for its own sweeps too), each cell's hover carrying its registers, spills and
occupancy, failed cells marked (naming the device limit they went over) and the best config
outlined; "Apply best" or a click on a cell sets the controls to it. Either way, the failed
configurations are listed under the panel and the rows become ``sweep_frame``.

A mixin of :class:`widgets.explorer.Explorer`: it sets the Explorer's ``best``, ``sweep_frame``
and ``heatmap_fig``; it reads its ``spec``, ``executor``, ``executor_options``, ``_worker``,
``_sweep_cancel``, ``_render_lock`` and the sweep panel's widgets that
:mod:`widgets.explorer_panel` builds (``w_sweep_*``, ``w_progress``, ``w_apply_best``,
``w_best``, ``w_failures``, ``heatmap_box``, ``w_metric``, ``w_peers``, ``w_xaxis``,
``w_variant``), and calls its ``config``, ``apply``, ``wait``, ``_session_for``, ``_hold``,
``_render_current``, ``_safe`` and ``_show_exception``.
"""

from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from widgets.controls import parse_values
from widgets.explorer_figures import figure_widget, update_figure
from workbench.reports import checks
from workbench.reports import figures as F
from workbench.sweep.plan import SweepRequest, axis_kind, default_values


class ExplorerSweep:
    """The sweep panel's sweeps, heatmap and its click hooks (see the module docstring for the
    state it reads)."""

    def run_sweep(self, x_axis: str, x_values, y_axis: str | None = None, y_values=None, *, wait: bool = False):
        """Run a 1-D (``y_axis=None``) or 2-D sweep of the current variant at the current settings
        on the worker, with the progress bar; 2-D draws the heatmap and offers "Apply best"."""
        self._sweep_cancel.clear()
        cfg = self.config()
        x_values, y_values = list(x_values), list(y_values or [])
        self.w_progress.value = 0
        self.w_progress.bar_style = ""
        self.w_sweep_label.value = "queued"

        def progress(i, n, label):
            self.w_progress.max = max(n, 1)
            self.w_progress.value = i
            self.w_progress.description = f"{i}/{n}"
            self.w_sweep_label.value = html.escape(label)

        def job():
            try:
                sess = self._session_for(cfg["device"])
                var0 = self.spec.variant(cfg["variant"])
                base_params = {cfg["variant"]: cfg["params"]}
                metric = self.w_metric.value if self.w_metric.value != "ms" else "gbps"
                if y_axis:
                    request = SweepRequest(
                        x_axis,
                        x_values,
                        y_axis,
                        y_values,
                        variants=cfg["variant"],
                        mode=cfg["mode"],
                        problem={k: v for k, v in cfg["problem"].items() if k not in (x_axis, y_axis)},
                        params=base_params,
                        dtype=cfg["dtype"],
                        executor=self.executor,
                        executor_options=self.executor_options,
                    )
                    swept = sess.run_sweep(
                        request,
                        progress=progress,
                        cancel=self._sweep_cancel,
                        on_rows=lambda rows: self.partial_heatmap(rows, x_axis, x_values, y_axis, y_values, metric),
                    )
                    rows, var = swept.rows, swept.plan.variants[0]
                    xs, ys = swept.plan.x_values, swept.plan.y_values
                    fig, self.best = swept.heatmap(metric, title=f"{var.name}: {y_axis} x {x_axis}", at=cfg["problem"])
                    self._draw_heatmap(fig)
                    self._hook_heatmap_clicks(var.name, x_axis, xs, y_axis, ys)
                    self.w_apply_best.disabled = self.best is None
                    self.w_best.value = (
                        f"best: {html.escape(F.mapping_str(self.best['params']) + F.ties_note(self.best))}"
                        if self.best
                        else "no passing cell at the problem set above"
                    )
                    failures = checks.failures_table(rows, [x_axis, y_axis])
                else:
                    names = [cfg["variant"]]
                    if self.w_peers.value and axis_kind(self.spec, x_axis, [var0]) == "knob":
                        names += [
                            n
                            for n in sess.runnable(cfg["mode"])
                            if n != cfg["variant"] and self.spec.variant(n).is_peer
                        ]
                    request = SweepRequest(
                        x_axis,
                        x_values,
                        variants=names,
                        mode=cfg["mode"],
                        problem={k: v for k, v in cfg["problem"].items() if k != x_axis},
                        params=base_params,
                        dtype=cfg["dtype"],
                        executor=self.executor,
                        executor_options=self.executor_options,
                    )
                    rows = sess.run_sweep(request, progress=progress, cancel=self._sweep_cancel).rows
                    with self._hold():
                        if x_axis in self.w_xaxis.options:
                            self.w_xaxis.value = x_axis
                    self._render_current()
                    failures = checks.failures_table(rows, [x_axis])
                from workbench.store import records_frame

                self.sweep_frame = records_frame(rows)
                self.w_failures.value = _failures_html(failures)
                self.w_progress.bar_style = "success" if not self._sweep_cancel.is_set() else "warning"
            except Exception as exc:
                self.w_progress.bar_style = "danger"
                self._show_exception(exc)

        self._worker.submit(job)
        if wait:
            self.wait(None)
        return self

    def partial_heatmap(self, rows, x_axis, x_values, y_axis, y_values, metric="gbps", title="sweep running") -> None:
        """Draw the heatmap of the cells measured so far (a sweep in progress fills it in; the
        Session redraws it with the finished grid's ``title`` when its own sweep ends)."""
        fig, _ = F.heatmap_figure(rows, x_axis, list(x_values), y_axis, list(y_values), metric, title=title)
        with self._render_lock:
            self._draw_heatmap(fig)

    def _draw_heatmap(self, fig) -> None:
        """Show ``fig`` in the heatmap slot: the first time as a new widget, then in place."""
        if self.heatmap_fig is None:
            self.heatmap_fig = figure_widget(fig)
            if isinstance(self.heatmap_fig, W.Widget):
                self.heatmap_box.children = [self.heatmap_fig]
        else:
            update_figure(self.heatmap_fig, fig)

    def _start_sweep_from_panel(self) -> None:
        var = self.spec.variant(self.w_variant.value)
        x_axis = self.w_sweep_x.value
        like_x = default_values(self.spec, x_axis, [var])
        xs = parse_values(self.w_sweep_xv.value, like_x)
        y_axis = self.w_sweep_y.value if self.w_sweep_y.value != "(none)" else None
        ys = parse_values(self.w_sweep_yv.value, default_values(self.spec, y_axis, [var])) if y_axis else None
        if not xs or (y_axis and not ys):
            raise ValueError("give the sweep some values (comma separated)")
        self.run_sweep(x_axis, xs, y_axis, ys)

    def _hook_heatmap_clicks(self, variant, x_axis, x_values, y_axis, y_values) -> None:
        if not isinstance(self.heatmap_fig, go.FigureWidget) or not self.heatmap_fig.data:
            return
        kinds = {a: axis_kind(self.spec, a, [self.spec.variant(variant)]) for a in (x_axis, y_axis)}

        def clicked(trace, points, state):
            def go_there():
                if not points.point_inds:
                    return
                i = points.point_inds[0]
                iy, ix = i if isinstance(i, (tuple, list)) else (points.ys[0], points.xs[0])
                xv, yv = x_values[int(ix)], y_values[int(iy)]
                config = {"variant": variant, "params": {}, "problem": {}}
                for a, v in ((x_axis, xv), (y_axis, yv)):
                    config["params" if kinds[a] == "param" else "problem"][a] = v
                self.apply(config)

            self._safe(go_there)

        self.heatmap_fig.data[0].on_click(clicked)


def _failures_html(rows: list[dict]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])
    head = "".join(f"<th style='text-align:left;padding:0 6px'>{html.escape(k)}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f"<td style='padding:0 6px'>{html.escape(str(r.get(k)))}</td>" for k in keys) + "</tr>"
        for r in rows
    )
    return f"<b>{len(rows)} failed configuration(s)</b><table style='font-size:12px'><tr>{head}</tr>{body}</table>"
