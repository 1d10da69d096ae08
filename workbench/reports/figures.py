"""Plotly figures and small HTML pieces built from records; no widget state here.

Every function takes records (``workbench.record.Record`` or their dicts) and returns a plain
``plotly.graph_objects.Figure`` (or HTML text). The Explorer wraps figures in
``go.FigureWidget`` to update them live; headless notebooks display them statically with
:func:`show` (JSON for JupyterLab plus HTML that needs only ``window.Plotly``, which the report
embeds once per page).

Why one long module: every figure and table the Session, the Explorer and the reports draw
shares one colour order, metric table and hover format.
"""

from __future__ import annotations

import contextlib
import contextvars
import html
from typing import Any, Iterable, Mapping, Sequence

import plotly.graph_objects as go

from kernels.spec import PEER_BACKENDS  # records carry the backend name, not the Variant
from workbench.reports import why
from workbench.reports.text import METRICS, as_dict, mapping_str, short_reason

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)


def color_for(name: str, order: Sequence[str]) -> str:
    try:
        i = list(order).index(name)
    except ValueError:
        i = abs(hash(name))
    return PALETTE[i % len(PALETTE)]


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)
    return f"rgba({r},{g},{b},{alpha})"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# --- the house style: every figure fits a JupyterLab cell and a report page ----------------------
# Plotly never wraps a title and cuts it at the figure's edge; a multi-line title centred in a
# fixed top margin runs into the plot. So titles are wrapped here (the narrowest place a figure
# is drawn is about 600 px wide: the Explorer's speed figure beside its why panel, a report page),
# pinned to the top left of the figure, and the top margin is made for their lines (plotly's
# title automargin as well, in case a font is wider than counted).
HOUSE_TEMPLATE = "plotly_white"  # one style for every figure, the notebooks' own included
TITLE_CHARS = 64  # a title line at plotly's 17 px title font: about 560 px
NOTE_CHARS = 96  # a subtitle line (<sup>, about 12 px): about 580 px
# Measured in Chromium (plotly 7): a title line at 17 px takes 21 px, a <sup> line up to 21 px; pinned
# to the top (yanchor "top") plotly places a title of several lines 12 px higher than one of a
# single line, so its top padding is 12 px more.
TITLE_LINE_PX, NOTE_LINE_PX = 21, 21
TITLE_PAD_PX, TITLE_PAD_LINES_PX = 10, 22  # above a one-line title, above a title of several lines
TITLE_GAP_PX = 18  # below the title's last line, before the plot area


def wrap_words(text: str, width: int) -> list[str]:
    """``text`` broken at spaces into lines of at most about ``width`` characters (a word longer
    than that stays whole on a line of its own)."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


def _title_lines(text: str) -> list[str]:
    """A plotly title (lines joined by ``<br>``; ``<sup>`` lines are subtitles) with each line
    wrapped to its width."""
    out = []
    for line in text.split("<br>"):
        stripped = line.strip()
        if stripped.startswith("<sup>") and stripped.endswith("</sup>"):
            out += [f"<sup>{part}</sup>" for part in wrap_words(stripped[5:-6], NOTE_CHARS)]
        elif stripped:
            out += wrap_words(stripped, TITLE_CHARS)
    return out


def title_text(head: str, notes: Sequence[str] = ()) -> str:
    """A title of ``head`` (wrapped) with each of ``notes`` as subtitle lines beneath (wrapped)."""
    return "<br>".join(_title_lines("<br>".join([head] + [f"<sup>{n}</sup>" for n in notes if n])))


_TEMPLATE_HELD = contextvars.ContextVar("template_held", default=False)


@contextlib.contextmanager
def template_held():
    """Within the block :func:`fit` leaves a figure's template alone: for figures whose layout is
    copied into one that carries the house template already (the Explorer's figure widgets,
    ``widgets.explorer_figures.update_figure``). Plotly validates the whole template on every assignment,
    about 20 ms a figure, which each Explorer relaunch paid for its two figures."""
    token = _TEMPLATE_HELD.set(True)
    try:
        yield
    finally:
        _TEMPLATE_HELD.reset(token)


def fit(fig: go.Figure, *, plot_height: int | None = None) -> go.Figure:
    """``fig`` in the house style, fitted to a cell or a page (in place; returned): the house
    template, the title wrapped and pinned to the top left with a top margin for its lines, log
    axes labelled without a crowd of minor ticks. ``plot_height``: the plot area's height, to
    which the title's and the bottom margin's are added (default: the figure's height grows by
    what its title needs beyond its top margin). Every figure a notebook shows goes through it
    (:func:`show`), hand-made ones included; fitting twice changes nothing. Inside
    :func:`template_held` the template is left as it is."""
    if not _TEMPLATE_HELD.get():
        fig.update_layout(template=HOUSE_TEMPLATE)
    text = fig.layout.title.text or ""
    lines = _title_lines(text) if text else []
    margin = fig.layout.margin
    notes = sum(line.startswith("<sup>") for line in lines)
    pad = TITLE_PAD_PX if len(lines) == 1 else TITLE_PAD_LINES_PX
    top = pad + TITLE_LINE_PX * (len(lines) - notes) + NOTE_LINE_PX * notes + TITLE_GAP_PX
    if not lines:
        top = margin.t if margin.t is not None else 40
    subtitle_lines = _wrap_subplot_titles(fig)
    if lines and subtitle_lines:
        top += 8 + 18 * subtitle_lines  # subplot titles sit between the title and the plots

    if plot_height is not None:
        fig.update_layout(height=plot_height + top + (margin.b if margin.b is not None else 80))
    if lines:
        grow = max(0, top - (margin.t if margin.t is not None else 100))
        height = None if plot_height is not None else fig.layout.height
        fig.update_layout(
            title=dict(
                text="<br>".join(lines),
                x=0.01,
                xref="container",
                xanchor="left",
                y=1,
                yref="container",
                yanchor="top",
                pad=dict(t=pad),
                automargin=True,
            ),
            margin=dict(t=top if plot_height is not None else max(top, margin.t or 0)),
        )
        if height is not None:
            fig.update_layout(height=height + grow)
    _tidy_log_axes(fig)
    return fig


def _above_plot(annotation) -> bool:
    """An annotation written above the top of the plot area (a subplot's title on the first row)."""
    return annotation.yref == "paper" and (annotation.y or 0) >= 0.999 and annotation.yanchor == "bottom"


FIGURE_PX = 600  # the narrowest width a figure is drawn at (see TITLE_CHARS)


def _wrap_subplot_titles(fig: go.Figure) -> int:
    """Subplot titles (annotations centred over their column, anchored at their bottom) wrapped
    to their column's width at :data:`FIGURE_PX`, so neighbours never run into each other; the
    most lines a first-row title has (0: no subplot titles)."""
    titles = [a for a in fig.layout.annotations or () if a.yref == "paper" and a.yanchor == "bottom" and a.text]
    centres = sorted({round(a.x, 4) for a in titles if a.x is not None})
    if len(centres) < 2:
        return max((a.text.count("<br>") + 1 for a in titles if _above_plot(a)), default=0)
    column = min(b - a for a, b in zip(centres, centres[1:]))  # a column's width, in the figure's share
    most = 0
    for a in titles:
        size = (a.font.size if a.font and a.font.size else None) or 16
        chars = max(12, int(column * FIGURE_PX / (0.55 * size)))
        wrapped = [part for line in a.text.split("<br>") for part in wrap_words(line, chars)]
        a.text = "<br>".join(wrapped)
        if _above_plot(a):
            most = max(most, len(wrapped))
    return most


def tick_label(v: float) -> str:
    """A size as a tick label: exact up to 99,999, then binary (``4Mi``) or three digits."""
    if float(v).is_integer():
        n = int(v)
        if abs(n) < 100_000:
            return str(n)
        for shift, unit in ((30, "Gi"), (20, "Mi"), (10, "Ki")):
            if n % (1 << shift) == 0:
                return f"{n >> shift}{unit}"
    return f"{v:.3g}"


def _tidy_log_axes(fig: go.Figure) -> None:
    """Log axes labelled at what was measured (an x axis of at most a dozen sizes), else at powers
    of ten (at their 2s and 5s too where the data span less than a decade), never at every
    minor tick."""
    import math

    layout = fig.layout
    for name in [k for k in layout.to_plotly_json() if k.startswith(("xaxis", "yaxis"))]:
        axis = layout[name]
        if axis.type != "log" or axis.tickvals is not None or axis.dtick is not None:
            continue
        letter, suffix = name[0], name[5:]
        ref = f"{letter}{suffix}"  # the traces' xaxis / yaxis name this axis: "x", "x2" …
        values = []
        for trace in fig.data:
            if (getattr(trace, f"{letter}axis", None) or letter) != ref:
                continue
            data = getattr(trace, letter, None)  # a list, a tuple or a numpy array
            for v in () if data is None else data:
                if isinstance(v, (str, bool)) or v is None:
                    continue
                try:
                    v = float(v)
                except (TypeError, ValueError):
                    continue
                if v > 0 and math.isfinite(v):
                    values.append(v)
        if not values:
            continue
        distinct = sorted(set(values))
        if letter == "x" and len(distinct) <= 12:
            axis.update(tickvals=distinct, ticktext=[tick_label(v) for v in distinct])
        else:
            decades = math.log10(max(distinct) / min(distinct))
            axis.update(dtick=1 if decades >= 1 else "D2")


def timing_note(records: Iterable[dict]) -> str:
    methods = {r.get("timing_method") for r in records if r.get("timing_method")}
    if methods & {"interpreter-wall", "cpu-wall"}:
        return "CPU: Triton interpreter / CPU wall times, not device times"
    return ""


def metric_values(rec: dict, metric: str) -> tuple[float | None, float | None, float | None]:
    """(p50, low, high) of ``metric`` for one record; None where the record has no such number."""
    field = METRICS[metric][0]
    mid = rec.get(field)
    if mid is None:
        return None, None, None
    lo, hi = interval_ms(rec, "call" if metric == "call_ms" else "kernel")
    if metric in ("ms", "call_ms"):
        return mid, lo, hi
    if metric == "pct_same_size_copy":  # its own interval: the copy's and the kernel's times
        return mid, rec.get("pct_same_size_copy_lo"), rec.get("pct_same_size_copy_hi")
    if metric in ("gbps", "pct_copy_bw"):
        p50 = rec.get("ms_p50")
        if lo and hi and p50:
            # the faster end of the time's interval gives the higher bandwidth
            return mid, mid * p50 / hi, mid * p50 / lo
    return mid, None, None


def interval_ms(rec: dict, timing: str = "kernel") -> tuple[float | None, float | None]:
    """The confidence interval of a record's median ``timing`` (older records: its p20-p80)."""
    lo, hi = rec.get(f"{timing}_lo_ms"), rec.get(f"{timing}_hi_ms")
    if lo is not None and hi is not None:
        return lo, hi
    if timing == "kernel":
        return rec.get("ms_p20"), rec.get("ms_p80")
    return None, None


def ties_note(best: dict) -> str:
    """' (a tie with N others within noise: ...)' when other configurations cannot be told apart."""
    ties = best.get("ties") or []
    if not ties:
        return ""
    shown = "; ".join(mapping_str(t) for t in ties[:3]) + ("; ..." if len(ties) > 3 else "")
    return f" (a tie with {len(ties)} other(s) within noise: {shown})"


def ties_with(best: dict, others: Iterable[dict]) -> list[dict]:
    """The records whose kernel-time interval overlaps ``best``'s: they cannot be told apart from it."""
    b_lo, b_hi = interval_ms(best)
    if b_lo is None or b_hi is None:
        return []
    out = []
    for r in others:
        if r is best or r.get("error") or r.get("ms_p50") is None:
            continue
        lo, hi = interval_ms(r)
        if lo is not None and hi is not None and lo <= b_hi and b_lo <= hi:
            out.append(r)
    return out


def usable_metric(records: Sequence[dict], metric: str) -> tuple[str, str]:
    """``metric`` if any record has it, else ``"ms"`` with a note (GB/s needs device times)."""
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r} is not known; use one of {', '.join(METRICS)}")
    field = METRICS[metric][0]
    if any(r.get(field) is not None for r in records) or not records:
        return metric, ""
    if metric == "ms":
        return metric, ""
    return "ms", f"{METRICS[metric][1]} needs device times; showing ms"


def speed_figure(
    records: Iterable[Any],
    axis: str,
    metric: str = "ms",
    *,
    order: Sequence[str] = (),
    x_order: Sequence[Any] | None = None,
    title: str | None = None,
    highlight: str | None = None,
    bound: bool = True,
    show_calls: bool = True,
    tiles: str | None = None,
) -> go.Figure:
    """Median kernel time with its 95% interval as a band, and (dotted) the eager call time,
    against ``axis`` (each record's ``x_value``), one line per
    variant; peers (torch / peer backends) dashed; a variant measured once (it lacks a swept
    tile parameter) drawn as a flat reference line; the copy-bandwidth bound when the records
    carry a device copy bandwidth. Failed records are left out and counted in the title.
    ``tiles``: what the ``highlight`` variant's line was measured at (``"gpu_row at
    BLOCK_SIZE=1024, …"``), written on a line under the plot and in that line's hover."""
    recs = [as_dict(r) for r in records]
    ok = [r for r in recs if not r.get("error") and r.get("ms_p50") is not None]
    failed = [r for r in recs if r.get("error")]
    metric, note = usable_metric(ok, metric)
    field, label, _ = METRICS[metric]
    xs_all = list(x_order) if x_order is not None else []
    for r in ok:
        if r.get("x_value") is not None and r.get("x_value") not in xs_all:
            xs_all.append(r.get("x_value"))
    # One point on a numeric axis would draw a meaningless range around it (299-301,
    # 16.777215M-16.77217M): a single value is shown as one category, labelled exactly.
    numeric_x = len(xs_all) > 1 and all(_is_number(x) for x in xs_all)
    if numeric_x:
        xs_all = sorted(set(xs_all))
    categories = [str(x) for x in xs_all]

    def xpos(x):
        return x if numeric_x else str(x)

    names = list(order) + sorted({r["variant"] for r in ok} - set(order))
    calls = show_calls and any(r.get("call_ms") is not None for r in ok)
    fig = go.Figure()
    for name in names:
        rows = [r for r in ok if r["variant"] == name]
        if not rows:
            continue
        color = color_for(name, names)
        peer = rows[0].get("backend") in PEER_BACKENDS
        dash = "dash" if peer else "solid"
        width = 3 if name == highlight else 2
        if all(r.get("x_value") is None for r in rows):
            if not xs_all:
                continue
            # measured once (no such tile parameter): a flat reference across the axis
            mid, lo, hi = metric_values(rows[-1], metric)
            xline = [xpos(xs_all[0]), xpos(xs_all[-1])] if len(xs_all) > 1 else [xpos(xs_all[0])] * 2
            fig.add_trace(
                go.Scatter(
                    x=xline,
                    y=[mid, mid],
                    mode="lines",
                    name=f"{name} (fixed)",
                    line=dict(color=color, dash="dot", width=width),
                    hovertemplate=f"{name}: %{{y:.4g}}<extra></extra>",
                )
            )
            continue
        rows = [r for r in rows if r.get("x_value") is not None]
        rows.sort(key=lambda r: xs_all.index(r.get("x_value")))
        x = [xpos(r.get("x_value")) for r in rows]
        trio = [metric_values(r, metric) for r in rows]
        lows = [t[1] for t in trio]
        highs = [t[2] for t in trio]
        if all(v is not None for v in lows + highs):
            # The interval as a shaded band: an unseen upper edge, then the lower edge filled up to it.
            edge = dict(
                x=x, mode="lines", line=dict(width=0, color=color), showlegend=False, legendgroup=name, hoverinfo="skip"
            )
            fig.add_trace(go.Scatter(y=highs, **edge))
            fig.add_trace(go.Scatter(y=lows, fill="tonexty", fillcolor=_rgba(color, 0.18), **edge))
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[t[0] for t in trio],
                mode="lines+markers",
                name=name + (" (peer)" if peer else ""),
                legendgroup=name,
                line=dict(color=color, dash=dash, width=width),
                customdata=[[lows[i], highs[i], r.get("gbps"), r.get("passed")] for i, r in enumerate(rows)],
                hovertemplate=(
                    f"{name}<br>{axis}=%{{x}}<br>{label}: %{{y:.4g}}"
                    "<br>95% interval: %{customdata[0]:.4g} - %{customdata[1]:.4g}<br>pass: %{customdata[3]}"
                    + (f"<br>{'<br>'.join(wrap_words(html.escape(tiles), 60))}" if tiles and name == highlight else "")
                    + "<extra></extra>"
                ),
            )
        )
        if metric == "ms" and calls and all(r.get("call_ms") is not None for r in rows):
            # The eager call beside the kernel: the gap is what the host adds per call.
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=[r["call_ms"] for r in rows],
                    mode="lines+markers",
                    name=f"{name} call",
                    legendgroup=name,
                    marker=dict(symbol="circle-open"),
                    line=dict(color=color, dash="dot", width=1),
                    hovertemplate=f"{name} eager call<br>{axis}=%{{x}}<br>%{{y:.4g}} ms<extra></extra>",
                )
            )
    if bound:
        _add_bound(fig, ok, metric, xs_all, xpos)
    parts = [title or f"speed vs {axis}"]
    if calls:
        parts.append("solid: kernel time (device work, band = 95% interval); dotted: eager call, host included")
    if note:
        parts.append(note)
    tnote = timing_note(ok)
    if tnote:
        parts.append(tnote)
    if failed:
        parts.append(f"{len(failed)} configuration(s) failed")
    tile_lines = wrap_words(tiles, NOTE_CHARS) if tiles else []
    bottom = 50 + 18 * len(tile_lines)
    fig.update_layout(
        title=dict(text=title_text(parts[0], parts[1:])),
        xaxis_title=axis,
        yaxis_title=label,
        margin=dict(l=60, r=20, b=bottom),
        legend=dict(orientation="v"),
    )
    if tile_lines:  # under the axis title: the plot keeps its width and the title its lines
        fig.add_annotation(
            text="<br>".join(html.escape(line) for line in tile_lines),
            xref="paper",
            yref="paper",
            x=0,
            y=0,
            xanchor="left",
            yanchor="top",
            yshift=-46,
            align="left",
            showarrow=False,
            font=dict(size=12, color="#444"),
        )
    if numeric_x and len(xs_all) > 1 and xs_all[0] > 0 and xs_all[-1] / xs_all[0] >= 8:
        fig.update_xaxes(type="log")
    if not numeric_x:
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=categories)
    ys = [metric_values(r, metric)[0] for r in ok]
    ys = [y for y in ys if y]
    if metric in ("ms", "wall_ms") and ys and min(ys) > 0 and max(ys) / min(ys) >= 20:
        fig.update_yaxes(type="log")
    return fit(fig, plot_height=300)


def _add_bound(fig, ok, metric, xs_all, xpos):
    """Copy-bandwidth bound: the time (or GB/s) of moving the problem's minimum bytes at the
    device's measured copy bandwidth."""
    if metric == "pct_same_size_copy":
        fig.add_hline(
            y=100.0,
            line=dict(color="black", dash="dash", width=1),
            annotation_text="a copy of the same bytes in as many launches",
            annotation_position="top left",
        )
        return
    withbw = [r for r in ok if r.get("copy_bw_gbps") and r.get("min_bytes")]
    if not withbw:
        return
    if metric in ("gbps", "pct_copy_bw"):
        bw = withbw[0]["copy_bw_gbps"]
        y = bw if metric == "gbps" else 100.0
        fig.add_hline(
            y=y,
            line=dict(color="black", dash="dash", width=1),
            annotation_text=f"copy bandwidth {bw:.0f} GB/s",
            annotation_position="top left",
        )
        return
    if metric != "ms":
        return
    by_x: dict[str, tuple] = {}
    for r in withbw:
        by_x[str(r.get("x_value"))] = (r.get("x_value"), r["min_bytes"] / (r["copy_bw_gbps"] * 1e9) * 1e3)
    pts = [by_x[str(x)] for x in xs_all if str(x) in by_x]
    if not pts:
        return
    if len(pts) == 1 and len(xs_all) > 1:
        pts = [(xs_all[0], pts[0][1]), (xs_all[-1], pts[0][1])]
    fig.add_trace(
        go.Scatter(
            x=[xpos(p[0]) for p in pts],
            y=[p[1] for p in pts],
            mode="lines",
            name="copy-bandwidth bound",
            line=dict(color="black", dash="dash", width=1),
            hovertemplate="bound: %{y:.4g} ms<extra></extra>",
        )
    )


def memory_figure(records: Iterable[Any], *, order: Sequence[str] = (), title: str | None = None) -> go.Figure:
    """Peak memory above baseline (MB) per variant beside the bytes the problem must move."""
    recs = [as_dict(r) for r in records]
    names = list(order) + sorted({r["variant"] for r in recs} - set(order))
    rows = {}
    for r in recs:
        if r["variant"] in names:
            rows[r["variant"]] = r  # last record per variant
    shown = [n for n in names if n in rows]
    peaks = [rows[n].get("peak_mb") for n in shown]
    moves = [(rows[n].get("min_bytes") or 0) / 2**20 if rows[n].get("min_bytes") else None for n in shown]
    texts = []
    for n, p in zip(shown, peaks):
        if rows[n].get("error"):
            texts.append("failed")
        elif p is None:
            texts.append("n/a")
        else:
            texts.append(f"{p:.2f}")
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=shown,
            y=[p if p is not None else 0 for p in peaks],
            name="peak allocated above baseline (MB)",
            text=texts,
            textposition="outside",
            marker_color=[color_for(n, names) for n in shown],
            hovertext=[short_reason(rows[n].get("error")) for n in shown],
        )
    )
    fig.add_trace(
        go.Bar(
            x=shown,
            y=[m if m is not None else 0 for m in moves],
            name="bytes the problem must move (MB)",
            marker_color="rgba(0,0,0,0.25)",
            text=[f"{m:.2f}" if m is not None else "" for m in moves],
            textposition="outside",
        )
    )
    notes = []
    if shown and all(p is None for p in peaks):
        kinds = sorted({rows[n].get("device_kind") or "?" for n in shown})
        notes.append(f"peak memory unavailable on {', '.join(kinds)} (no allocator statistics); not invented")
    problem = rows[shown[0]].get("problem") if shown else {}
    head = title or "memory" + sub_lines(", ".join(f"{k}={v}" for k, v in (problem or {}).items()))
    fig.update_layout(
        title=dict(text=title_text(head, notes)),
        barmode="group",
        yaxis_title="MB",
        margin=dict(l=60, r=20, b=60),
    )
    return fit(fig, plot_height=260)


def sub_lines(text: str, width: int = NOTE_CHARS) -> str:
    """``text`` as subtitle lines of a plotly title (``<br><sup>…</sup>`` each, at most about
    ``width`` characters, broken at a space): plotly never wraps a title, and a long one is cut
    at the figure's edge."""
    return "".join(f"<br><sup>{html.escape(part)}</sup>" for part in wrap_words(text, width))


def heatmap_figure(
    records: Sequence[Any],
    x_axis: str,
    x_values: Sequence[Any],
    y_axis: str,
    y_values: Sequence[Any],
    metric: str = "gbps",
    *,
    title: str | None = None,
    at: Mapping[str, Any] | None = None,
) -> tuple[go.Figure, dict | None]:
    """A ``y_values x x_values`` grid of ``metric``; each cell's hover carries its registers,
    spills and occupancy (:func:`workbench.reports.why.hover_text`); failed cells drawn as grey crosses
    whose hover text is the reason, naming the device limit where one was exceeded. Returns
    (figure, best record dict or None).

    The best passing cell is outlined where both axes are tiles (the record's ``params``): that
    is the configuration to choose. Where one axis is a problem knob (a size is not a choice),
    the best tile of each problem size is outlined instead, and the one returned is the best at
    the size in ``at`` (the problem the caller is at), None where ``at`` names none of the grid's
    sizes; with two problem knobs nothing is outlined.

    ``records`` are in row-major order over (y, x) or carry the axis values in problem/params."""
    recs = [as_dict(r) for r in records]
    metric, note = usable_metric([r for r in recs if not r.get("error")], metric)
    field, label, higher = METRICS[metric]

    def cell_of(r):
        def val(axis):
            if axis in (r.get("params") or {}):
                return r["params"][axis]
            return (r.get("problem") or {}).get(axis)

        return val(y_axis), val(x_axis)

    grid = {}
    for r in recs:
        y, x = cell_of(r)
        grid[(str(y), str(x))] = r
    z, text, hover = [], [], []
    failed_x, failed_y, failed_text = [], [], []
    passing: list[tuple[dict, int, int]] = []
    pos: dict[int, tuple[int, int]] = {}
    for iy, yv in enumerate(y_values):
        zr, tr, hr = [], [], []
        for ix, xv in enumerate(x_values):
            r = grid.get((str(yv), str(xv)))
            if r is not None:
                pos[id(r)] = (ix, iy)
            v = r.get(field) if r else None
            bad = r is None or r.get("error") or r.get("passed") is False
            if r is not None and bad:
                reason = why.failure_text(r)
                failed_x.append(ix)
                failed_y.append(iy)
                failed_text.append(f"{x_axis}={xv}, {y_axis}={yv}<br>failed: {html.escape(reason)}")
                zr.append(None)
                tr.append("✗")
                hr.append(reason)
                continue
            zr.append(v)
            tr.append("" if v is None else f"{v:.3g}")
            hr.append(why.hover_text(r) if r is not None else "")
            if v is not None:
                passing.append((r, ix, iy))
        z.append(zr)
        text.append(tr)
        hover.append(hr)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(len(x_values))),
            y=list(range(len(y_values))),
            text=text,
            texttemplate="%{text}",
            customdata=hover,
            colorscale="Viridis" if higher else "Viridis_r",
            colorbar=dict(title=dict(text=label)),
            hovertemplate=f"{x_axis}=%{{x}} {y_axis}=%{{y}}<br>{label}: %{{z:.4g}}<br>%{{customdata}}<extra></extra>",
            xgap=2,
            ygap=2,
        )
    )
    if failed_x:
        fig.add_trace(
            go.Scatter(
                x=failed_x,
                y=failed_y,
                mode="markers",
                marker=dict(symbol="x", size=18, color="rgba(120,120,120,0.9)", line=dict(width=1)),
                name="failed (hover for the reason)",
                hovertext=failed_text,
                hoverinfo="text",
                showlegend=False,  # the subtitle says what ✗ is; a legend would sit on an axis title
            )
        )
    parts = [title or f"{label}: {y_axis} x {x_axis}"]
    if note:
        parts.append(note)
    tnote = timing_note([r for r in recs if not r.get("error")])
    if tnote:
        parts.append(tnote)

    def better(a, b):
        return b is None or (a[0][field] > b[0][field] if higher else a[0][field] < b[0][field])

    def outline(ix, iy, **line):
        fig.add_shape(type="rect", x0=ix - 0.5, x1=ix + 0.5, y0=iy - 0.5, y1=iy + 0.5, line=line)

    tiles = [a for a in (x_axis, y_axis) if any(a in (r.get("params") or {}) for r in recs)]
    sizes = [a for a in (x_axis, y_axis) if a not in tiles]
    groups: dict[str, list] = {}
    here = None if len(tiles) != 1 or at is None or sizes[0] not in at else str(at[sizes[0]])
    if len(tiles) == 2:
        groups[""] = passing
    elif len(tiles) == 1:  # the best tile per problem size: a size is not something to choose
        for cell in passing:
            groups.setdefault(str(cell_of(cell[0])[0 if sizes[0] == y_axis else 1]), []).append(cell)
    best = None
    tied_total = 0
    for size, cells in groups.items():
        top = None
        for cell in cells:
            top = cell if better(cell, top) else top
        if top is None:
            continue
        r, ix, iy = top
        outline(ix, iy, color="red", width=4)
        # Cells of the same problem whose kernel-time interval overlaps the best's: crowning one
        # of them over the others would crown noise.
        same_problem = [c[0] for c in cells if c[0].get("problem") == r.get("problem")]
        tied = [o for o in ties_with(r, same_problem) if o.get("passed") is not False]
        tied_total += len(tied)
        for o in tied:
            outline(*pos[id(o)], color="red", width=2, dash="dot")
        if len(tiles) == 2:
            parts.append(f"best: {x_axis}={x_values[ix]}, {y_axis}={y_values[iy]} ({r[field]:.4g} {label})")
            best = dict(r, ties=[dict(o.get("params") or {}) for o in tied])
        elif size == here:
            tile = x_values[ix] if tiles[0] == x_axis else y_values[iy]
            parts.append(f"best at {sizes[0]}={size}: {tiles[0]}={tile} ({r[field]:.4g} {label})")
            best = dict(r, ties=[dict(o.get("params") or {}) for o in tied])
    if len(tiles) == 1 and groups:
        parts.append(f"outlined: the best {tiles[0]} at each {sizes[0]} (a {sizes[0]} is given, not chosen)")
    if tied_total:
        parts.append(f"{tied_total} more within noise of the best (dotted)")
    if failed_x:
        parts.append(f"{len(failed_x)} failed cell(s) marked ✗ (hover for the reason)")
    fig.update_layout(
        title=dict(text=title_text(parts[0], parts[1:])),
        xaxis=dict(title=x_axis, tickvals=list(range(len(x_values))), ticktext=[str(v) for v in x_values]),
        yaxis=dict(title=y_axis, tickvals=list(range(len(y_values))), ticktext=[str(v) for v in y_values]),
        margin=dict(l=80, r=20, b=60),
        showlegend=False,
    )
    fit(fig, plot_height=max(200, 60 * len(y_values) + 40))
    return fig, best


# --- text pieces --------------------------------------------------------------------------
def static_bundle(fig: go.Figure) -> dict:
    """MIME bundle for a static figure: plotly JSON (JupyterLab renders it) and HTML that draws
    with ``window.Plotly`` (the report page embeds plotly.js once; no CDN, no require.js)."""
    import plotly.io as pio

    fig = fit(go.Figure(fig))  # the house style and a title that fits, hand-made figures included
    return {
        "application/vnd.plotly.v1+json": fig.to_plotly_json(),
        "text/html": pio.to_html(fig, include_plotlyjs=False, full_html=False, config={"responsive": True}),
        "text/plain": f"<plotly figure: {fig.layout.title.text or ''}>",
    }


def show(fig: go.Figure, live: bool = False) -> Any:
    """Display ``fig``. Default: the static bundle of :func:`static_bundle`, which JupyterLab
    renders as an interactive plotly figure (zoom, hover) and the report as HTML. ``live=True``:
    a ``go.FigureWidget`` that Python can update later (the Explorer's figures); each one ships
    plotly's ~5 MB widget bundle to the browser, so finished sweep figures stay static.
    Returns the widget when one was made."""
    from IPython.display import display

    if live:
        try:
            widget = go.FigureWidget(fit(go.Figure(fig)))
        except Exception:  # no anywidget / no front end: fall back to the static form
            widget = None
        if widget is not None:
            display(widget)
            return widget
    display(static_bundle(fig), raw=True)
    return None


def show_html(text: str) -> None:
    from IPython.display import HTML, display

    display(HTML(text))
