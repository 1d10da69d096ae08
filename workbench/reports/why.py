"""Why a configuration is fast or slow, as HTML and hover text built from its record: the compile
facts (registers, spills, shared memory, occupancy and its limit per kernel; the Unified Buffer
on the NPU), the warnings they raise, and Nsight Compute's counters where a profile ran. No
widget state here: the Explorer shows :func:`why_html` beside its speed figure, heatmaps put
:func:`hover_text` on every cell and :func:`failure_text` on failed ones.
"""

from __future__ import annotations

import html
from typing import Any

from workbench import compile_facts as CF
from workbench.occupancy import limit_of_error
from workbench.reports.text import as_dict, mapping_str, short_reason


def _cell(v: Any, fmt: str = "{}") -> str:
    return "n/a" if v is None else html.escape(fmt.format(v))


def _occupancy_cells(k: dict) -> list[str]:
    occ = k.get("occupancy") or {}
    if not occ:
        return ["n/a", "n/a", "n/a"]
    if occ.get("error"):
        return ["0", html.escape(f"cannot launch: {occ['error']}"), "n/a"]
    pct = f"{occ['occupancy_pct']:.0f}% ({occ['blocks_per_sm']} x {k['num_warps']} warps)"
    limit = occ["limit"] + (f" (tile: {occ['resource_limit']})" if occ["limit"] == "grid" else "")
    return [html.escape(pct), html.escape(limit), _cell(occ.get("waves"), "{:.2f}")]


def facts_table_html(facts: dict) -> str:
    """One row per kernel: grid, registers, spills, shared memory, warps, stages, occupancy, limit,
    waves."""
    head = ("kernel", "grid", "regs", "spills", "shared", "warps", "stages", "occupancy", "limit", "waves")
    rows = []
    for k in facts.get("kernels") or []:
        grid = "×".join(str(g) for g in k["grid"]) if k.get("grid") else "n/a"
        shared = None if k.get("shared_bytes") is None else f"{k['shared_bytes'] / 1024:.1f} KB"
        cells = [
            html.escape(CF.short_name(k["name"])),
            html.escape(grid),
            _cell(k.get("regs")),
            _cell(k.get("spills")),
            _cell(shared),
            _cell(k.get("num_warps")),
            _cell(k.get("num_stages")),
            *_occupancy_cells(k),
        ]
        rows.append("<tr>" + "".join(f"<td style='padding:0 6px'>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th style='text-align:left;padding:0 6px'>{h}</th>" for h in head)
    return f"<table class='wb-why-kernels' style='font-size:12px'><tr>{header}</tr>{''.join(rows)}</table>"


def counters_html(counters: dict) -> str:
    """Nsight Compute's counters per kernel (a profile of this configuration)."""
    head = ("kernel", "DRAM % peak", "L2 hit %", "achieved occ. %", "SM % peak", "top warp stalls")
    rows = []
    for k in counters.get("kernels") or []:
        stalls = ", ".join(f"{r} {v:.3g}" for r, v in k.get("top_stalls") or [])
        cells = [
            html.escape(CF.short_name(k.get("kernel") or "?")),
            _cell(k.get("dram_pct"), "{:.1f}"),
            _cell(k.get("l2_hit_pct"), "{:.1f}"),
            _cell(k.get("achieved_occupancy_pct"), "{:.1f}"),
            _cell(k.get("sm_throughput_pct"), "{:.1f}"),
            html.escape(stalls),
        ]
        rows.append("<tr>" + "".join(f"<td style='padding:0 6px'>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th style='text-align:left;padding:0 6px'>{h}</th>" for h in head)
    note = html.escape(counters.get("note") or "")
    return (
        f"<div><b>Nsight Compute</b> <span style='color:#777'>{note}</span></div>"
        f"<table class='wb-why-counters' style='font-size:12px'><tr>{header}</tr>{''.join(rows)}</table>"
    )


def why_html(record: Any) -> str:
    """The why panel of one record: its facts per kernel, a warning line per thing to look at
    (spills, an occupancy limit, a grid smaller than the device, a UB over capacity), the reason
    where facts are unavailable, and the counters where a profile ran."""
    if record is None:
        return "<div class='wb-why'></div>"
    r = as_dict(record)
    title = f"<b>why</b> — {html.escape(r.get('variant') or '')} {html.escape(mapping_str(r.get('params') or {}))}"
    parts = [title]
    if r.get("error"):
        limit = limit_of_error(r["error"])
        text = limit[1] if limit else short_reason(r["error"], 300)
        parts.append(f"<div class='wb-why-warning' style='color:#b00'>cannot run: {html.escape(text)}</div>")
        return "<div class='wb-why' style='font-size:12px'>" + "".join(parts) + "</div>"
    facts = r.get("compile_facts") or {}
    for line in CF.warnings(facts):
        parts.append(f"<div class='wb-why-warning' style='color:#b45f06'>⚠ {html.escape(line)}</div>")
    if facts.get("kernels"):
        parts.append(facts_table_html(facts))
    if facts.get("ub_bytes") is not None:
        parts.append(
            f"<div>{CF.ub_use(facts)} per core on {html.escape(facts.get('ub_device') or 'the NPU')} "
            f"(the family's calibrated model of the Unified Buffer)</div>"
        )
    if facts.get("reason"):
        parts.append(f"<div class='wb-why-unavailable' style='color:#777'><i>{html.escape(facts['reason'])}</i></div>")
    if r.get("counters"):
        parts.append(counters_html(r["counters"]))
    return "<div class='wb-why' style='font-size:12px'>" + "".join(parts) + "</div>"


def hover_text(record: Any) -> str:
    """A heatmap cell's hover lines: registers, spills and occupancy per kernel (``<br>``-joined)."""
    r = as_dict(record)
    facts = r.get("compile_facts") or {}
    if not facts:
        return ""
    known = [k for k in facts.get("kernels") or [] if k.get("regs") is not None]
    if not known:
        if facts.get("ub_bytes") is not None:
            return CF.ub_use(facts)
        return "registers, spills, occupancy: n/a" + (" (interpreter)" if facts.get("source") == "cpu" else "")
    lines = []
    for k in known:
        occ = k.get("occupancy") or {}
        pct = f"{occ['occupancy_pct']:.0f}% ({occ['limit']})" if "occupancy_pct" in occ else "n/a"
        name = f"{CF.short_name(k['name'])}: " if len(known) > 1 else ""
        lines.append(f"{name}regs {k['regs']}, spills {k['spills']}, occupancy {pct}")
    return "<br>".join(html.escape(line) for line in lines)


def failure_text(record: Any) -> str:
    """Why a failed cell failed, naming the device limit it went over where the error says so."""
    r = as_dict(record)
    limit = limit_of_error(r.get("error"))
    if limit:
        return limit[1]
    return short_reason(r.get("error")) or "correctness check failed"
