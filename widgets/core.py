"""The session's result cache, shared by a notebook's Session and its Explorer."""

from __future__ import annotations

import threading

from workbench.record import Record


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

    def clear(self) -> None:
        """Forget every record (a tuned table was installed: "auto" tiles may now mean others)."""
        with self._lock:
            self._data.clear()

    def records(self) -> list[Record]:
        with self._lock:
            return list(self._data.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._data
