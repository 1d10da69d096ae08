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
}


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
