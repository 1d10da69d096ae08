"""Records as the lines and tables the command line prints."""

from __future__ import annotations


def _fmt(v, spec="{:.3f}"):
    """``v`` formatted by ``spec``; a missing value is "-" right-aligned in the same width, so
    the columns of a table line up whether or not a cell has a number."""
    if v is None:
        return "-".rjust(len(spec.format(0.0)))
    return spec.format(v)


def format_row(rec) -> str:
    from workbench.edges import summary
    from workbench.record import failed_checks

    status = "PASS" if rec.passed else ("ERROR" if rec.error else "FAIL")
    tail = f"  {rec.error}" if rec.error else (f"  {failed_checks(rec)}" if rec.passed is False else "")
    if rec.edges:
        tail += f"  [{summary(rec.edges)}]"
    return (
        f"{rec.kernel}/{rec.variant} {rec.mode} {rec.dtype} {rec.axis}={rec.x_value}: "
        f"{_fmt(rec.ms_p50)} ms [{rec.timing_method}] {status}{tail}"
    )


def format_table(records) -> str:
    """variant x size: ms (p50), GB/s, % of the device's large copy (``%BW``), % of a copy of the
    same bytes in as many launches (``%same``; "n/a (CPU)" on the CPU, "-" where not measured),
    peak MB, max err, the error as a multiple of the reference's own (``err×ref``), pass."""
    from workbench.reports.text import same_size_copy_text

    header = f"{'mode':8s} {'dtype':5s} {'x':>7s} {'variant':18s} {'ms':>9s} {'GB/s':>8s} {'%BW':>6s} {'%same':>9s} {'peakMB':>8s} {'max_err':>9s} {'err×ref':>8s} {'pass':>5s} {'timing':16s}"
    lines = [header, "-" * len(header)]
    for r in records:
        lines.append(
            f"{r.mode:8s} {r.dtype:5s} {str(r.x_value):>7s} {r.variant:18s} {_fmt(r.ms_p50, '{:9.4f}')} "
            f"{_fmt(r.gbps, '{:8.1f}')} {_fmt(r.pct_copy_bw, '{:6.1f}')} {same_size_copy_text(r, interval=False):>9s} "
            f"{_fmt(r.peak_mb, '{:8.1f}')} "
            f"{_fmt(r.max_abs_err, '{:9.2e}')} {_fmt(r.err_ratio, '{:8.3g}')} "
            f"{('yes' if r.passed else ('err' if r.error else 'NO')):>5s} "
            f"{r.timing_method or (r.error or '')[:40]}"
        )
    return "\n".join(lines)
