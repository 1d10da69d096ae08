"""The Explorer's figure bindings: which cached records its figures draw, and how a figure widget
takes a new figure.

A figure widget is made once (:func:`figure_widget`) and then updated in place
(:func:`update_figure`): the speed and memory figures each time the Explorer renders a record,
the heatmap each time it draws a sweep.

The records come from a session's cache and match the configuration the controls ask for
(``cfg``: variant, device, dtype, mode, problem, params, as ``Explorer.config`` returns it) in
everything but the x axis: the current variant's along the axis (:func:`variant_slice`), the
peers' at their own defaults along a knob axis (:func:`peer_slice`), and the peers at this very
problem (:func:`peer_records`, for the memory figure and the correctness table). Nothing here
holds state or touches the Explorer: the functions take the spec and the session.
"""

from __future__ import annotations

import plotly.graph_objects as go

from workbench.sweep.config import with_axis
from workbench.sweep.plan import axis_kind


def figure_widget(fig):
    """``fig`` as a ``go.FigureWidget`` (updated in place in the page), or as a plain figure where
    the widget cannot be made (no anywidget: still updated, shown statically)."""
    try:
        return go.FigureWidget(fig)
    except Exception:  # no anywidget: keep a plain figure (still updated, shown statically)
        return go.Figure(fig)


def update_figure(target, new: go.Figure) -> None:
    """Replace the traces and layout of a (FigureWidget) figure in place, in one batch. The target
    keeps its own template (the house one, from when it was made; build ``new`` inside
    :func:`workbench.reports.figures.template_held`): assigning a template makes plotly validate
    all of it again, about 20 ms."""
    layout = new.layout.to_plotly_json()
    layout.pop("template", None)
    stale = set(target.layout.to_plotly_json()) - set(layout) - {"template"}
    with target.batch_update():
        target.data = []
        for key in stale:
            target.layout[key] = None
        target.layout.update(layout, overwrite=True)
        target.add_traces(list(new.data))


def matches(rec, cfg, axis, variant, params) -> bool:
    """``rec`` is ``variant``'s at ``cfg``'s device, dtype, mode and problem and at ``params``,
    except along ``axis`` (None: everywhere)."""
    if rec.variant != variant or rec.mode != cfg["mode"] or rec.dtype != cfg["dtype"]:
        return False
    if rec.device_kind != cfg["device"]:
        return False
    for k, v in cfg["problem"].items():
        if k != axis and rec.problem.get(k) != v:
            return False
    for k, v in params.items():
        if k != axis and rec.params.get(k) != v:
            return False
    return True


def variant_slice(spec, sess, cfg, axis) -> list:
    """Cached records of the current variant along ``axis`` (everything else as set)."""
    kind = axis_kind(spec, axis, [spec.variant(cfg["variant"])])
    out = []
    for rec in sess.cache.records():
        if matches(rec, cfg, axis, cfg["variant"], cfg["params"]):
            x = rec.problem.get(axis) if kind == "knob" else rec.params.get(axis)
            out.append(with_axis(rec, axis, x))
    return out


def peer_slice(spec, sess, cfg, axis) -> list:
    """Cached records of the peers at their defaults: along ``axis`` where it is a knob, else at
    the problem set with no x (the speed figure draws those as a flat reference line)."""
    out = []
    kind = axis_kind(spec, axis, [spec.variant(cfg["variant"])])
    for rec in sess.cache.records():
        var = variant_or_none(spec, rec.variant)
        if var is None or not var.is_peer or rec.variant == cfg["variant"]:
            continue
        if matches(rec, cfg, axis if kind == "knob" else None, rec.variant, {}):
            x = rec.problem.get(axis) if kind == "knob" else None
            out.append(with_axis(rec, axis, x))
    return out


def peer_records(spec, sess, cfg) -> list:
    """Cached records of the peers at their defaults at the problem set."""
    out = []
    for rec in sess.cache.records():
        var = variant_or_none(spec, rec.variant)
        if var is None or not var.is_peer or rec.variant == cfg["variant"]:
            continue
        if matches(rec, cfg, None, rec.variant, {}):
            out.append(rec)
    return out


def variant_or_none(spec, name):
    """``spec``'s variant ``name``, or None where the spec has none of that name."""
    try:
        return spec.variant(name)
    except ValueError:
        return None
