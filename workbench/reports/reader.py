"""Pieces of a reader-first report that need no plotly: path scrubbing, environment tables,
verdict counts and the Markdown summary (``summary.md``) written beside every HTML report.

Every report (``workbench report``, ``workbench bench --suite``, a sweep's) opens with a headline
(what was measured, on what device, where ours stands), then its tables, then the environment.
The figures live in :mod:`workbench.reports.suite`; this module is what the command line and the
notebooks share. A new report is: its HTML page (a notebook run by
:func:`workbench.reports.notebooks.render_notebook_report`, code hidden) and :func:`write_summary`.
"""

from __future__ import annotations

import html
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from workbench.reports.text import same_size_copy_text

# --- no local paths ------------------------------------------------------------------------------
_HERE = Path(__file__).resolve().parent.parent


def _prefixes(extra: Iterable[str | os.PathLike] = ()) -> list[tuple[str, str]]:
    """(absolute prefix, what it becomes), longest first."""
    pairs = [(str(Path(p).resolve()), ".") for p in extra if p]
    pairs += [
        (str(Path.cwd().resolve()), "."),
        (str(_HERE), "."),
        (sys.prefix, "<python>"),
        (sys.base_prefix, "<python>"),
        (str(Path.home()), "~"),
    ]
    seen, out = set(), []
    for prefix, repl in sorted(pairs, key=lambda p: -len(p[0])):
        if prefix and prefix not in seen and len(prefix) > 1:
            seen.add(prefix)
            out.append((prefix, repl))
    return out


def scrub_paths(text: str, extra: Iterable[str | os.PathLike] = ()) -> str:
    """``text`` with this machine's absolute paths (the report folder ``extra``, the working
    directory, the checkout, the Python installation, the home folder) made relative or named."""
    for prefix, repl in _prefixes(extra):
        if prefix not in text:
            continue
        # ``prefix/...`` and ``prefix`` itself, never a longer name that starts with it (``/app`` in ``/apple``)
        text = re.sub(
            re.escape(prefix) + r"(/|(?![\w.+-]))",
            lambda m, repl=repl: ("" if repl == "." else repl + "/") if m.group(1) == "/" else repl,
            text,
        )
    return text


def scrub_command(argv: Sequence[str]) -> str:
    """A command line as a report shows it: an absolute path argument (``/a/b/out``, ``--out=/a/b``)
    becomes relative to the working directory when under it, else ``…/`` and its name."""

    def one(token: str) -> str:
        head, eq, value = token.partition("=") if token.startswith("--") else ("", "", token)
        if not os.path.isabs(value):
            return token
        p = Path(value)
        try:
            shown = str(p.resolve().relative_to(Path.cwd().resolve())) or "."
        except ValueError:
            shown = f"…/{p.name}"
        return f"{head}{eq}{shown}"

    return " ".join(one(t) for t in argv)


def scrub(value: Any, extra: Iterable[str | os.PathLike] = ()) -> Any:
    """:func:`scrub_paths` through nested dicts / lists (an environment block)."""
    extra = list(extra)
    if isinstance(value, str):
        return scrub_paths(value, extra)
    if isinstance(value, Mapping):
        return {k: scrub(v, extra) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v, extra) for v in value]
    return value


# --- the environment as readable tables ------------------------------------------------------------
ENV_GROUPS = (
    ("Device", ("device_name", "device_kind", "driver", "num_cores", "l2_bytes", "copy_bw_gbps", "memory_bytes")),
    ("Software", ("python", "torch", "triton", "plotly", "liger-kernel", "pyjuice", "platform")),
    ("Run", ("suite", "command", "date", "git_commit", "git_commit_note", "host", "cpu_count", "report_rendered_on")),
)
ENV_LABELS = {
    "device_name": "device",
    "device_kind": "kind",
    "num_cores": "cores (SMs / AI cores)",
    "l2_bytes": "L2 cache",
    "copy_bw_gbps": "measured copy bandwidth",
    "memory_bytes": "memory",
    "git_commit": "commit",
    "git_commit_note": "commit note",
    "cpu_count": "host CPU cores",
    "report_rendered_on": "report rendered on",
}


def _human(key: str, value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if key.endswith("_bytes") and value >= 2**20:
            return f"{value / 2**20:.0f} MiB"
        if key == "copy_bw_gbps":
            return f"{value:g} GB/s"
    return str(value)


_TD = 'style="border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top"'


def table_html(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, cls: str = "") -> str:
    """A list of dicts as a plain table (columns: the union of keys, in order)."""
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th {_TD}>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td {_TD}>{html.escape(_text(r.get(c, '')))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f'<table class="{cls}" style="border-collapse:collapse;font-size:13px"><tr>{head}</tr>{body}</table>'


_PAGE_STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;font-size:13px}th{background:#f3f3f3}"
)


def page_html(title: str, parts: Iterable[str], plotly_src: str | None = None) -> str:
    """A standalone offline HTML page: ``title`` and the HTML ``parts`` in order, with the plain
    table style the sweep, tune and why reports share. ``plotly_src``: the plotly.js file the page
    loads in its head (a relative path: a site serves one copy to every page); without it a
    page's first figure embeds plotly.js."""
    script = f'<script type="text/javascript" src="{html.escape(plotly_src)}"></script>' if plotly_src else ""
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>{script}'
        f"<style>{_PAGE_STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )


def markdown_html(text: str) -> str:
    """Markdown (a ``summary.md``, a report's README) as HTML, tables included (mistune, which
    nbconvert brings)."""
    import mistune

    return mistune.create_markdown(plugins=["table"], escape=True)(text)


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_text(v)}" for k, v in value.items())
    return "" if value is None else str(value)


def _value_html(key: str, value: Any) -> str:
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Mapping) for v in value):
        return table_html(value)
    if isinstance(value, Mapping):
        return table_html([{"name": k, "value": _text(v)} for k, v in value.items()])
    return html.escape(_human(key, _text(value) if isinstance(value, (list, tuple)) else value))


def environment_html(env: Mapping[str, Any]) -> str:
    """The environment as tables: device, software, run (a list of dicts, e.g. the parts of a run,
    becomes its own table), then anything else; paths scrubbed."""
    env = scrub(dict(env))
    used: set[str] = set()
    parts = []
    groups = list(ENV_GROUPS) + [("Other", tuple(k for k in env if not any(k in g for _, g in ENV_GROUPS)))]
    for name, keys in groups:
        present = [k for k in keys if k in env]
        if not present:
            continue
        used.update(present)
        rows = "".join(
            f"<tr><th {_TD}>{html.escape(ENV_LABELS.get(k, k))}</th><td {_TD}>{_value_html(k, env[k])}</td></tr>"
            for k in present
        )
        parts.append(
            f'<h4 style="margin:0.8em 0 0.3em">{name}</h4>'
            f'<table class="environment" style="border-collapse:collapse;font-size:13px">{rows}</table>'
        )
    return "".join(parts)


# --- verdicts -------------------------------------------------------------------------------------
VERDICT_ORDER = ("MET", "within noise", "MISSED", "wrong result", "not measured", "not comparable")


def counts(statuses: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in statuses:
        out[s] = out.get(s, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: VERDICT_ORDER.index(kv[0]) if kv[0] in VERDICT_ORDER else 99))


def counts_text(c: Mapping[str, int]) -> str:
    return ", ".join(f"{v} {k}" for k, v in c.items()) or "nothing judged"


def _num(v: Any, spec: str = "{:.3g}") -> str:
    return "-" if v is None or v == "" else spec.format(v)


def ratio_text(row: Mapping[str, Any]) -> str:
    """``1.18 [1.15, 1.21]`` (the interval where it is known)."""
    r = row.get("ratio")
    if r is None:
        return "-"
    lo, hi = row.get("ratio_lo"), row.get("ratio_hi")
    if lo is not None and hi is not None and (lo != r or hi != r):
        return f"{r:.3g} [{lo:.3g}, {hi:.3g}]"
    return f"{r:.3g}"


def threshold_text(row: Mapping[str, Any]) -> str:
    bits = []
    if row.get("min_ratio") is not None:
        bits.append(f"ratio ≥ {row['min_ratio']:g}")
    if row.get("min_pct_bw") is not None:
        basis = "a same-size copy" if str(row.get("bw_basis") or "").startswith("same-size") else "copy BW"
        bits.append(f"≥ {row['min_pct_bw']:g}% {basis}")
    return ", ".join(bits) or "-"


# --- summary.md -----------------------------------------------------------------------------------
def md_escape(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(md_escape(r.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def ratio_md_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The headline table's rows from judged ratio rows (``ratios.csv`` / ``suite.json``)."""
    out = []
    for r in rows:
        out.append(
            {
                "target": r.get("title") or r.get("target"),
                "size": f"{r.get('x_name')}={r.get('x')}",
                "ours µs": _num(r.get("ours_us"), "{:.1f}"),
                "best peer": r.get("peer") or "-",
                "peer µs": _num(r.get("peer_us"), "{:.1f}"),
                "ratio [interval]": ratio_text(r),
                "% copy BW": _num(r.get("pct_copy_bw"), "{:.0f}"),
                "% same-size copy": same_size_copy_text(r, "{:.0f}"),
                "threshold": threshold_text(r),
                "precision, max error": precision_text(r),
                "verdict": f"**{r.get('status')}**" if r.get("status") in ("MET", "MISSED") else r.get("status"),
            }
        )
    return out


RATIO_MD_COLUMNS = (
    "target",
    "size",
    "ours µs",
    "best peer",
    "peer µs",
    "ratio [interval]",
    "% copy BW",
    "% same-size copy",
    "threshold",
    "precision, max error",
    "verdict",
)


def precision_text(row: Mapping[str, Any]) -> str:
    """Both sides' arithmetic, largest error against the reference and that error as a multiple of
    the reference's own in the dtype: "ieee 2e-06 (0.4x ref) / tf32 0.001" (ours / the peer); "-" for
    rows judged before precisions were kept."""
    sides = []
    for side in ("ours", "peer"):
        name = row.get(f"{side}_precision")
        if name:
            err, ratio = row.get(f"{side}_err"), row.get(f"{side}_ratio")
            sides.append(
                name + ("" if err is None else f" {err:.2g}") + ("" if ratio is None else f" ({ratio:.2g}x ref)")
            )
    return " / ".join(sides) or "-"


def write_summary(
    out: str | Path,
    *,
    title: str,
    headline: Sequence[str],
    table: str,
    figures: Mapping[str, Sequence[str]] | None = None,
    figures_note: str | None = None,
    html_name: str = "report.html",
    sections: Sequence[tuple[str, str]] = (),
) -> Path:
    """``summary.md`` beside an HTML report: title, headline lines, the headline table, links to
    the exported figures (name -> file names, relative to ``out``) or why there are none, then
    extra ``sections`` (heading, Markdown)."""
    lines = [f"# {title}", ""]
    lines += [scrub_paths(h, [out]) for h in headline]
    lines += ["", table, ""]
    if figures:
        lines.append(
            "Figures: "
            + "; ".join(
                f"{name}: " + ", ".join(f"[{Path(f).suffix[1:].upper()}]({f})" for f in files)
                for name, files in figures.items()
            )
        )
        first = next(iter(figures.values()))
        svg = [f for f in first if f.endswith(".svg")] or list(first)
        lines += ["", f"![{next(iter(figures))}]({svg[0]})"]
    else:
        lines.append(f"Figures: not exported ({figures_note or 'none'}); every number is in the table above.")
    lines += ["", f"The full report, with every table and the environment: [{html_name}]({html_name})."]
    for heading, body in sections:
        lines += ["", f"## {heading}", "", body]
    path = Path(out) / "summary.md"
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return path
