"""What the widgets share: the session's result cache, the plottable metrics, short reasons."""

from __future__ import annotations

import threading

from workbench.measure import Record

# Metrics a figure can plot: (record field, label, "higher is better").
METRICS: dict[str, tuple[str, str, bool]] = {
    "ms": ("ms_p50", "kernel time per call (ms, median)", False),
    "call_ms": ("call_ms", "eager call time (ms, median, host included)", False),
    "wall_ms": ("wall_ms", "eager call time per call (ms)", False),
    "gbps": ("gbps", "achieved GB/s", True),
    "pct_copy_bw": ("pct_copy_bw", "% of copy bandwidth", True),
}


class ResultCache:
    """Thread-safe ``config_key -> Record`` map with hit / miss counters."""

    def __init__(self):
        self._lock = threading.Lock()
        self._data: dict[tuple, Record] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple) -> Record | None:
        with self._lock:
            rec = self._data.get(key)
            if rec is None:
                self.misses += 1
            else:
                self.hits += 1
            return rec

    def peek(self, key: tuple) -> Record | None:
        """Like :meth:`get` without counting."""
        with self._lock:
            return self._data.get(key)

    def put(self, key: tuple, record: Record) -> None:
        with self._lock:
            self._data[key] = record

    def discard(self, key: tuple) -> None:
        with self._lock:
            self._data.pop(key, None)

    def records(self) -> list[Record]:
        with self._lock:
            return list(self._data.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._data


def as_dict(record) -> dict:
    """A record (or a record's dict) as a dict."""
    return record.to_dict() if hasattr(record, "to_dict") else dict(record)


def mapping_str(m) -> str:
    """``k=v, k=v``."""
    return ", ".join(f"{k}={v}" for k, v in m.items())


def short_reason(error: str | None, limit: int = 160) -> str:
    if not error:
        return ""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
