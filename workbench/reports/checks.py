"""What a view says about one configuration in words: the Explorer's status line, the
correctness table (every output and gradient against the reference) and the table of the
configurations a sweep could not run."""

from __future__ import annotations

import html
import math
from typing import Any, Iterable, Sequence

from workbench.record import failed_checks
from workbench.reports.figures import interval_ms
from workbench.reports.text import as_dict, short_reason


def _fmt(v: Any, spec: str = "{:.4g}", unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return spec.format(v) + unit


def status_text(
    record: Any, *, cached: bool = False, ub_bytes: int | None = None, elapsed_s: float | None = None
) -> str:
    """One line: compile time, kernel time with its interval, eager call and host issue time (the
    host's overhead), noise and throttling flags, GB/s, % copy BW (and % of a same-size copy where
    the record has one), peak memory, pass."""
    r = as_dict(record)
    if r.get("error"):
        return f"error: {short_reason(r['error'], 400)}"
    method = r.get("timing_method") or ""
    on_cpu = method in ("interpreter-wall", "cpu-wall")
    timelabel = "interpreter time" if method == "interpreter-wall" else ("cpu time" if on_cpu else "kernel")
    lo, hi = interval_ms(r)
    bits = [
        f"{r['variant']} {r['mode']} {r['dtype']} on {r.get('device_kind')}",
        f"compile+first call {_fmt(r.get('compile_ms'), '{:.1f}', ' ms')}",
        f"{timelabel} {_fmt(r.get('ms_p50'), '{:.4g}', ' ms')} [{_fmt(lo)}, {_fmt(hi)}]"
        + (f" ({r['kernel_method']})" if r.get("kernel_method") and not on_cpu else ""),
    ]
    if not on_cpu:
        bits += [
            f"eager call {_fmt(r.get('call_ms'), '{:.4g}', ' ms')}",
            f"host issue {_fmt(r.get('host_ms'), '{:.3g}', ' ms')}",
        ]
    if r.get("noisy") and not on_cpu:
        bits.append("NOISY (interval wider than ±2%)")
    if (r.get("device_state") or {}).get("throttled"):
        bits.append("THROTTLED: " + ", ".join(r["device_state"].get("slowdowns", [])))
    bits += [
        f"{_fmt(r.get('gbps'), '{:.1f}')} GB/s",
        f"{_fmt(r.get('pct_copy_bw'), '{:.1f}')}% of copy BW",
    ]
    if r.get("pct_same_size_copy") is not None:  # where the copy of its own bytes was timed beside it
        bits.append(f"{r['pct_same_size_copy']:.1f}% of a same-size copy")
    bits += [
        f"peak {_fmt(r.get('peak_mb'), '{:.2f}', ' MB')}",
        "pass" if r.get("passed") else "CHECK FAILED",
    ]
    if ub_bytes is not None:
        bits.append(f"UB estimate {ub_bytes / 1024:.1f} KB")
    if cached:
        bits.append("cached")
    if elapsed_s is not None:
        bits.append(f"relaunch {elapsed_s * 1e3:.0f} ms")
    return " | ".join(bits)


def checks_rows(record: Any) -> list[dict]:
    r = as_dict(record)
    rows = []
    for c in r.get("checks") or []:
        rows.append(
            {
                "variant": r.get("variant"),
                "tensor": c["name"],
                "max_abs": c["max_abs"],
                "max_rel": c["max_rel"],
                "err_x_ref": c.get("err_ratio"),
                "k": c.get("k"),
                "judged_by": c.get("judged_by", "tolerance"),
                "atol": c["atol"],
                "rtol": c["rtol"],
                "nan_inf_mismatch": c["nan_mismatch"],
                "pass": bool(c["passed"]),
                **({"note": c["note"]} if c.get("note") else {}),
            }
        )
    return rows


def checks_html(records: Iterable[Any]) -> str:
    """Correctness table: every output and gradient, max abs / rel error, the error as a multiple of
    the reference's own in the dtype (the rule passes at most k; "-" where the tolerance alone
    judged, e.g. TF32), tolerance, pass."""
    head = ["variant", "tensor", "max abs", "max rel", "error × ref (k)", "atol", "rtol", "NaN/Inf mismatch", "pass"]
    out = [
        '<table class="wb-checks" style="border-collapse:collapse;font-family:monospace;font-size:12px">',
        "<tr>" + "".join(f'<th style="border:1px solid #ccc;padding:2px 6px">{h}</th>' for h in head) + "</tr>",
    ]
    cell = '<td style="border:1px solid #ccc;padding:2px 6px">{}</td>'
    for rec in records:
        r = as_dict(rec)
        if r.get("error"):
            out.append(
                "<tr>"
                + cell.format(html.escape(str(r.get("variant"))))
                + f'<td colspan="8" style="border:1px solid #ccc;padding:2px 6px;color:#b00">'
                f"error: {html.escape(short_reason(r['error'], 400))}</td></tr>"
            )
            continue
        for row in checks_rows(r):
            ok = row["pass"]
            verdict = '<b style="color:#080">pass</b>' if ok else '<b style="color:#b00">FAIL</b>'
            out.append(
                "<tr>"
                + "".join(
                    cell.format(v)
                    for v in (
                        html.escape(str(row["variant"])),
                        html.escape(row["tensor"]),
                        f"{row['max_abs']:.3g}",
                        f"{row['max_rel']:.3g}",
                        _ratio_cell(row),
                        f"{row['atol']:.3g}",
                        f"{row['rtol']:.3g}",
                        row["nan_inf_mismatch"],
                        verdict,
                    )
                )
                + "</tr>"
            )
    out.append("</table>")
    return "".join(out)


def _ratio_cell(row: dict) -> str:
    ratio = row.get("err_x_ref")
    if ratio is None:
        return "-"
    text = f"{ratio:.3g} ({row.get('k') or 0:g})"
    judged = row.get("judged_by") or ""
    return text if judged.startswith("rule") else f"{text}; {html.escape(judged)}"


def failures_table(records: Iterable[Any], axes: Sequence[str]) -> list[dict]:
    rows = []
    for rec in records:
        r = as_dict(rec)
        if r.get("error") or r.get("passed") is False:
            row = {"variant": r.get("variant")}
            for a in axes:
                row[a] = (r.get("params") or {}).get(a, (r.get("problem") or {}).get(a))
            row["reason"] = short_reason(r.get("error")) or short_reason(failed_checks(r), 300)
            rows.append(row)
    return rows
