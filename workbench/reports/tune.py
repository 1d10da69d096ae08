"""The tune report: ``report.html`` (one offline file) and ``summary.md`` in the tune's out folder.

It opens with what was tuned where, then per size the default (and, where the installed table
had an entry, the rule: the same call with the tables off) against the fastest and the chosen
configuration (kernel times with their intervals, why the choice), the table as written,
its diff against the installed table, and — when the executor ran several workers — how the
configurations spread over them: per worker its configurations and busy time (from one arrival
to the next on that worker), and the parallel efficiency (busy time over workers x wall time).
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path

from kernels import tuned_tables
from workbench.reports import reader
from workbench.tune.pick import interval, kernel_ms
from workbench.tune.table import tiles_of


def _us(r: dict | None) -> str:
    if r is None or kernel_ms(r) is None:
        return "-"
    lo, hi = interval(r)
    return f"{kernel_ms(r) * 1e3:.2f} [{lo * 1e3:.2f}, {hi * 1e3:.2f}]"


def _tiles(r: dict | None, c, names) -> str:
    if r is None:
        return "-"
    if r is c.default:
        return "the default"
    if r is c.rule:
        return "the rule (tables off)"
    return ", ".join(f"{k}={v}" for k, v in tiles_of(r, names).items())


def size_rows(result) -> list[dict]:
    knob, names = result.space.tuning.knob, result.space.grid
    rows = []
    for c in result.choices:
        ratio = "-"
        if c.default is not None and c.chosen is not None and kernel_ms(c.default) and kernel_ms(c.chosen):
            ratio = f"{kernel_ms(c.default) / kernel_ms(c.chosen):.3f}"
        rows.append(
            {
                knob: c.size,
                "default us [interval]": _us(c.default),
                "rule us [interval]": _us(c.rule),
                "fastest us [interval]": _us(c.best),
                "fastest tiles": _tiles(c.best, c, names),
                "chosen tiles": _tiles(c.chosen, c, names),
                "chosen us": _us(c.chosen),
                "default / chosen": ratio,
                "why": c.why,
                "measured": f"{c.evaluated} of {result.grid_sizes.get(c.size, '?')} + default"
                + (" + rule" if c.rule is not None else ""),
            }
        )
    return rows


def worker_rows(result) -> list[dict]:
    """Per worker: configurations and busy seconds (gaps between its consecutive arrivals)."""
    last: dict = {}
    busy: dict = defaultdict(float)
    count: dict = defaultdict(int)
    for t, worker in sorted(result.arrivals, key=lambda a: a[0]):
        where = f"gpu {worker['gpus']}" if worker.get("gpus") else f"pid {worker.get('pid', '?')}"
        name = f"{worker.get('host', '?')} {where}"
        busy[name] += t - last.get(name, 0.0)
        last[name] = t
        count[name] += 1
    return [{"worker": n, "configurations": count[n], "busy s": f"{busy[n]:.1f}"} for n in sorted(count)]


def headline(result, key: str | None, options) -> list[str]:
    spec = result.space.spec
    measured = sum(c.evaluated for c in result.choices)
    grid = sum(result.grid_sizes.values())
    lines = [
        f"Tuned {spec.name}'s {result.space.part} tiles ({result.space.tuning.variant}, {result.space.tuning.mode}, "
        f"{result.space.tuning.dtype}) "
        f"on {key or 'no device (nothing ran)'}: strategy {options.strategy} (seed {options.seed}), "
        f"{measured} configurations measured of a {grid}-configuration grid over {len(result.choices)} sizes, "
        f"{result.wall_s:.1f} s" + (" (stopped by the budget)" if result.out_of_budget else "") + ".",
        "Kernel time ranks configurations; among those within noise of the fastest, the rule (measured "
        "with the tables off where the installed table has an entry) is chosen first, then the default, "
        "then the simplest (workbench/tune/pick.py); a rule of '-': the default is the rule there "
        "(no entry, or an empty one).",
    ]
    checks = getattr(result, "dtype_checks", [])
    if checks:
        dtypes = sorted({c.get("dtype") for c in checks})
        ok = sum(1 for c in checks if c.get("passed") and not c.get("error"))
        lines.append(f"The chosen tiles of each size checked in {', '.join(dtypes)}: {ok} of {len(checks)} passed.")
    wrong = getattr(result, "wrong", [])
    if wrong:
        lines.append(
            f"{len(wrong)} configurations gave wrong results (the records say which): no table may be installed."
        )
    if result.wall_s > 0 and len(worker_rows(result)) > 1:
        rows = worker_rows(result)
        busy = sum(float(r["busy s"]) for r in rows)
        lines.append(
            f"{len(rows)} workers; parallel efficiency {busy / (len(rows) * result.wall_s):.0%} "
            f"(busy time over workers x wall time)."
        )
    return lines


def write_tuned(tuned, out: Path, options) -> list[Path]:
    """:func:`write_report` of a finished tune (workbench.tune.job.Tuned): what ``workbench tune``
    and ``Session.tune`` write."""
    return write_report(tuned.result, out, tuned.key, options, tuned.table, tuned.diff)


def write_report(result, out: Path, key: str | None, options, table: dict | None, diff: list[str]) -> list[Path]:
    part = "" if result.space.part == tuned_tables.FORWARD else f" ({result.space.part})"
    title = f"Tune {result.space.spec.name}{part}"
    lines = headline(result, key, options)
    rows = size_rows(result)
    workers = worker_rows(result)
    parts = [f"<h1>{html.escape(title)}</h1>"] + [f"<p>{html.escape(ln)}</p>" for ln in lines]
    parts += ["<h2>Default against the fastest, per size</h2>", reader.table_html(rows)]
    parts += ["<h2>Against the installed table</h2>", f"<pre>{html.escape(chr(10).join(diff))}</pre>"]
    if len(workers) > 1:
        parts += ["<h2>Workers</h2>", reader.table_html(workers)]
    parts += ["<h2>The table</h2>", f"<pre>{html.escape(json.dumps(table, indent=1, default=str))}</pre>"]
    page = reader.page_html(title, parts)
    out.mkdir(parents=True, exist_ok=True)
    report = out / "report.html"
    report.write_text(reader.scrub_paths(page, [out]))
    columns = list(rows[0]) if rows else []
    sections = [("Against the installed table", "```\n" + "\n".join(diff) + "\n```")]
    if len(workers) > 1:
        sections.append(("Workers", reader.md_table(workers, list(workers[0]))))
    summary = reader.write_summary(
        out,
        title=title,
        headline=[f"- {ln}" for ln in lines],
        table=reader.md_table(rows, columns) if rows else "Nothing was measured.",
        figures_note="the tune report has tables only",
        sections=sections,
    )
    return [report, summary]


# --- the page again, from the folder a tune left ------------------------------------------------
def tiles_varied(records: list[dict]) -> list[str]:
    """The params whose values differ between a tune's records: the tiles it searched."""
    values: dict = defaultdict(set)
    for r in records:
        for k, v in (r.get("params") or {}).items():
            values[k].add(json.dumps(v, default=str))
    return [k for k, vs in values.items() if len(vs) > 1]


def times_figure(records: list[dict]):
    """Every passing configuration's kernel time per size (log scale, hover: its tiles); the
    configurations with every searched tile "auto" (the default, and the rule where it was
    measured) drawn apart. None where no record passed."""
    import plotly.graph_objects as go

    ok = [r for r in records if not r.get("error") and r.get("passed") and kernel_ms(r) is not None]
    if not ok:
        return None
    tiles = tiles_varied(records)
    axis = ok[0].get("axis") or "size"

    def auto(r):
        return all((r.get("params") or {}).get(k) == "auto" for k in tiles)

    fig = go.Figure()
    for name, group, marker in (
        ("searched tiles", [r for r in ok if not auto(r)], dict(size=6, color="#1f77b4", opacity=0.6)),
        (
            "every tile auto (default, rule)",
            [r for r in ok if auto(r)],
            dict(size=11, color="#d62728", symbol="diamond"),
        ),
    ):
        lo_hi = [interval(r) for r in group]
        fig.add_trace(
            go.Scatter(
                x=[str(r.get("x_value")) for r in group],
                y=[kernel_ms(r) * 1e3 for r in group],
                error_y=dict(
                    type="data",
                    array=[(hi - kernel_ms(r)) * 1e3 for r, (lo, hi) in zip(group, lo_hi)],
                    arrayminus=[(kernel_ms(r) - lo) * 1e3 for r, (lo, hi) in zip(group, lo_hi)],
                    thickness=1,
                ),
                mode="markers",
                name=name,
                marker=marker,
                text=[", ".join(f"{k}={(r.get('params') or {}).get(k)}" for k in tiles) for r in group],
                hovertemplate=f"{axis}=%{{x}}<br>%{{y:.3g}} us<br>%{{text}}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Kernel time of every configuration measured, per size (lower is better)",
        xaxis=dict(title=axis, type="category"),
        yaxis=dict(title="kernel time, us (log scale)", type="log"),
        template="plotly_white",
        height=480,
    )
    return fig


def render_folder(folder: Path, out: Path, plotly_src: str | None = None) -> Path:
    """``report.html`` of a tune's folder from what it keeps: ``summary.md`` (the choices as the
    tune made them: its headline, the table per size, the diff against the installed table)
    and the records (a figure of every configuration's time). The choices are not picked
    again: the rule that picked them may have changed since."""
    from workbench.store import read_records, records_path

    folder, out = Path(folder), Path(out)
    summary = (folder / "summary.md").read_text(encoding="utf-8")
    source = records_path(folder)
    records = read_records(source) if source else []
    title = summary.splitlines()[0].lstrip("# ").strip() if summary.strip() else "Tune"
    fig = times_figure(records)
    parts = [reader.markdown_html(summary)]
    if fig is not None:
        figure = fig.to_html(include_plotlyjs=plotly_src is None, full_html=False)
        parts.insert(1, f"<h2>Every configuration ({len(records)} records)</h2>{figure}")
    out.mkdir(parents=True, exist_ok=True)
    page = out / "report.html"
    page.write_text(reader.scrub_paths(reader.page_html(title, parts, plotly_src), [folder, out]), encoding="utf-8")
    return page
