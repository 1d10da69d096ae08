"""Small words every view of records shares: a record as a dict, ``k=v`` lists, a short reason,
and the metrics a figure can plot."""

from __future__ import annotations

# Metrics a figure can plot: (record field, label, "higher is better").
METRICS: dict[str, tuple[str, str, bool]] = {
    "ms": ("ms_p50", "kernel time per call (ms, median)", False),
    "call_ms": ("call_ms", "eager call time (ms, median, host included)", False),
    "wall_ms": ("wall_ms", "eager call time per call (ms)", False),
    "gbps": ("gbps", "achieved GB/s", True),
    "pct_copy_bw": ("pct_copy_bw", "% of copy bandwidth", True),
    "pct_same_size_copy": ("pct_same_size_copy", "% of a same-size copy (same bytes, same launches)", True),
}


NO_DEVICE_COPY = "n/a (CPU)"


def same_size_copy_text(row, spec: str = "{:.1f}", interval: bool = True) -> str:
    """A record's (or a judged row's) share of a copy of its own bytes in as many launches:
    ``"88.1 [86.0, 90.3]"``, the interval where known; ``"n/a (CPU)"`` where the record says no
    device copy compares with its time; "-" where it has none (a record from before the copy was
    measured, or one that did not ask for it)."""
    d = row if isinstance(row, dict) else (row.to_dict() if hasattr(row, "to_dict") else vars(row))
    pct = d.get("pct_same_size_copy")
    if pct is None:
        return NO_DEVICE_COPY if (d.get("same_size_copy_method") or "").startswith(NO_DEVICE_COPY) else "-"
    lo, hi = d.get("pct_same_size_copy_lo"), d.get("pct_same_size_copy_hi")
    if interval and lo is not None and hi is not None:
        return f"{spec.format(pct)} [{spec.format(lo)}, {spec.format(hi)}]"
    return spec.format(pct)


def as_dict(record) -> dict:
    """A record (or a record's dict) as a dict."""
    return record.to_dict() if hasattr(record, "to_dict") else dict(record)


def mapping_str(m) -> str:
    """``k=v, k=v``."""
    return ", ".join(f"{k}={v}" for k, v in m.items())


def short_reason(error: str | None, limit: int = 160) -> str:
    """An error on one line, cut to ``limit`` characters."""
    if not error:
        return ""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
