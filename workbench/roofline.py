"""The roofline of one family's configurations: where each one's speed sits against the device.

For a family that computes (its spec has ``flops``: block_sparse), the classic roofline: each
configuration at its arithmetic intensity (FLOPs over the fewest bytes its mode must move) and
its achieved FLOP/s, under two roofs: the device's measured copy bandwidth (the records'
``copy_bw_gbps``) and its datasheet DRAM peak (:data:`workbench.device_limits.PEAKS`), each capped
by the datasheet's fp32 (and TF32, where a record used it) peak. For a family that only moves
data, each configuration's achieved GB/s against the same two bandwidth lines.

Markers are coloured by what the compile facts say binds the tile (spills first), so a slow
configuration's reason is on the figure. Interpreter records carry no device bandwidth: a
family with none gets no figure (None), never an invented one.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from workbench import compile_facts
from workbench.device_limits import peak_of
from workbench.tune.pick import kernel_ms, passed

# facts' reason -> marker colour
COLOURS = {
    "spills": "#d62728",
    "registers": "#ff7f0e",
    "shared memory": "#9467bd",
    "grid": "#8c564b",
    "warps": "#2ca02c",
    "blocks": "#17becf",
    "n/a": "#7f7f7f",
}


def reason_of(r: dict) -> str:
    """What binds this configuration per its compile facts: spills, else the occupancy limit."""
    cols = compile_facts.columns(r.get("compile_facts"))
    if cols["spills"]:
        return "spills"
    return cols["occupancy_limit"] or "n/a"


def _label(r: dict) -> str:
    prm = r.get("params") or {}
    text = ", ".join(f"{k}={v}" for k, v in prm.items() if v != "auto") or "defaults"
    return f"{r.get('variant')} {text}"


def _plotted(records: Iterable[dict], family: str) -> list[dict]:
    """The family's passing device records that have a byte count (interpreter runs have none)."""
    return [
        r
        for r in records
        if r.get("kernel") == family and passed(r) and r.get("device_kind") not in (None, "cpu") and r.get("min_bytes")
    ]


def roofline_figure(records: Iterable[dict], family: str, device_name: str | None = None):
    """The family's roofline figure over its passing device records on one device, or None when
    none has a device time and byte count (interpreter runs).

    The roofs are that device's: records from several devices need ``device_name`` (ValueError
    without it), as one device's copy bandwidth and datasheet peak say nothing of another's."""
    recs = _plotted(records, family)
    if device_name is not None:
        recs = [r for r in recs if r.get("device_name") == device_name]
    names = sorted({str(r.get("device_name")) for r in recs})
    if len(names) > 1:
        raise ValueError(f"{family} records from {len(names)} devices ({', '.join(names)}); name one (device_name)")
    return _figure(family, recs)


def figures(records: list[dict]) -> list:
    """One roofline per family and device among ``records`` that has one
    (:func:`roofline_figure`), by name; none where plotly is missing."""
    out = []
    for family in sorted({str(r.get("kernel")) for r in records}):
        by_device = defaultdict(list)
        for r in _plotted(records, family):
            by_device[r.get("device_name") or ""].append(r)
        for _, recs in sorted(by_device.items()):
            try:
                fig = _figure(family, recs)
            except ImportError:
                fig = None
            if fig is not None:
                out.append(fig)
    return out


def _figure(family: str, recs: list[dict]):
    """The roofline of one family's plotted records of one device; None without any."""
    import kernels

    if not recs or family not in kernels.families():  # a suite's chain targets are no family
        return None
    spec = kernels.get(family)
    if spec.flops is not None:
        return _compute_roofline(spec, recs)
    return _bandwidth_figure(spec, recs)


def _ceilings(recs: list[dict]) -> tuple[float | None, object]:
    """The copy bandwidth measured on the records' one device and its datasheet peaks."""
    copy = max((r.get("copy_bw_gbps") or 0 for r in recs), default=0) or None
    return copy, peak_of(recs[0].get("device_name"))


def _hover(r: dict, extra: str) -> str:
    facts = compile_facts.brief(r.get("compile_facts")) or "n/a"
    return f"{_label(r)}<br>{r.get('mode')} {r.get('dtype')} {r.get('problem')}<br>{extra}<br>regs/spills/occ {facts}"


def _bandwidth_figure(spec, recs: list[dict]):
    import plotly.graph_objects as go

    copy, peak = _ceilings(recs)
    recs = sorted(recs, key=lambda r: -(r.get("gbps") or 0))
    fig = go.Figure()
    by_reason = defaultdict(list)
    for r in recs:
        by_reason[reason_of(r)].append(r)
    for reason, rs in by_reason.items():
        fig.add_scatter(
            x=[f"{_label(r)} | {r.get('mode')} {r.get('problem')}" for r in rs],
            y=[r.get("gbps") for r in rs],
            mode="markers",
            marker=dict(size=10, color=COLOURS.get(reason, "#333")),
            name=f"bound by {reason}" if reason != "n/a" else "facts n/a",
            hovertext=[_hover(r, f"{r['gbps']:.0f} GB/s, {kernel_ms(r):.4g} ms") for r in rs],
            hoverinfo="text",
        )
    if copy:
        fig.add_hline(
            y=copy,
            line=dict(color="#444", dash="dash"),
            annotation_text=f"measured copy {copy:.0f} GB/s",
            annotation_position="top left",  # the two lines are close: their labels at either end
        )
    if peak:
        fig.add_hline(
            y=peak.dram_gbps,
            line=dict(color="#b00", dash="dot"),
            annotation_text=f"DRAM peak {peak.dram_gbps:.0f} GB/s",
            annotation_position="top right",
        )
    fig.update_layout(
        title=f"{spec.title}: achieved bandwidth per configuration against the {recs[0].get('device_name')}",
        yaxis_title="GB/s (fewest bytes / kernel time)",
        xaxis=dict(showticklabels=len(recs) <= 24, tickangle=45),
        template="plotly_white",
        height=520,
        margin=dict(b=200 if len(recs) <= 24 else 60),
    )
    return fig


def _compute_roofline(spec, recs: list[dict]):
    import plotly.graph_objects as go

    copy, peak = _ceilings(recs)
    points = []
    for r in recs:
        flops = spec.flops(r.get("problem") or {}, r.get("mode") or "forward")
        seconds = kernel_ms(r) * 1e-3
        points.append((r, flops / r["min_bytes"], flops / seconds / 1e9))
    fig = go.Figure()
    by_reason = defaultdict(list)
    for point in points:
        by_reason[reason_of(point[0])].append(point)
    for reason, pts in by_reason.items():
        fig.add_scatter(
            x=[p[1] for p in pts],
            y=[p[2] for p in pts],
            mode="markers",
            marker=dict(size=10, color=COLOURS.get(reason, "#333")),
            name=f"bound by {reason}" if reason != "n/a" else "facts n/a",
            hovertext=[_hover(p[0], f"{p[2]:.0f} GFLOP/s at {p[1]:.2f} FLOP/B, {kernel_ms(p[0]):.4g} ms") for p in pts],
            hoverinfo="text",
        )
    lo = min(p[1] for p in points) / 4
    hi = max(p[1] for p in points) * 4
    xs = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    compute = []
    if peak:
        compute.append(("fp32 peak", peak.fp32_tflops * 1e3))
        if peak.tf32_tflops and any(r.get("precision", "ieee") != "ieee" for r in recs):
            compute.append(("TF32 peak", peak.tf32_tflops * 1e3))
    top = max((c[1] for c in compute), default=None)
    for name, gbps, style in (("measured copy", copy, "dash"), ("DRAM peak", peak.dram_gbps if peak else None, "dot")):
        if gbps:
            ys = [min(x * gbps, top) if top else x * gbps for x in xs]
            fig.add_scatter(x=xs, y=ys, mode="lines", line=dict(dash=style), name=f"{name} {gbps:.0f} GB/s roof")
    for name, gflops in compute:
        fig.add_hline(
            y=gflops, line=dict(color="#999", dash="dot"), annotation_text=f"{name} {gflops / 1e3:.1f} TFLOP/s"
        )
    fig.update_layout(
        title=f"{spec.title}: roofline on the {recs[0].get('device_name')} (FLOPs over the fewest bytes; kernel time)",
        xaxis=dict(title="arithmetic intensity (FLOP / byte)", type="log"),
        yaxis=dict(title="GFLOP/s", type="log"),
        template="plotly_white",
        height=520,
    )
    return fig
