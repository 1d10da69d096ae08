"""Results store: every record goes to a SQLite file the moment it is measured.

Each ``append`` is its own committed transaction, so a crash in the middle of a sweep loses
nothing measured before it. Reading back gives a pandas DataFrame; exports give CSV with the
common kernel-benchmark columns first (the ones Liger-Kernel's benchmark CSVs use) followed by
ours (the compile facts among them, flat and as JSON), and JSON with the nested fields kept as
objects.
"""

from __future__ import annotations

import json
import lzma
import os
import sqlite3
import threading
from pathlib import Path
from typing import Iterable

from workbench import compile_facts
from workbench.record import Record

DEFAULT_PATH = Path(os.environ.get("WORKBENCH_STORE", "results/workbench.sqlite"))

COMMON_COLUMNS = (
    "kernel_name",
    "kernel_provider",
    "kernel_operation_mode",
    "metric_name",
    "metric_unit",
    "x_name",
    "x_value",
    "y_value_50",
    "y_value_20",
    "y_value_80",
    "extra_benchmark_config_str",
    "gpu_name",
    "timestamp",
)
OUR_COLUMNS = (
    "device_kind",
    "backend",
    "dtype",
    "timing_method",
    "kernel_ms",
    "kernel_lo_ms",
    "kernel_hi_ms",
    "kernel_n",
    "kernel_method",
    "call_ms",
    "call_lo_ms",
    "call_hi_ms",
    "call_n",
    "host_ms",
    "host_lo_ms",
    "host_hi_ms",
    "host_n",
    "noisy",
    "params",
    "problem",
    "wall_ms",
    "launch_overhead_ms",
    "compile_ms",
    "min_bytes",
    "gbps",
    "pct_copy_bw",
    "copy_bw_gbps",
    # the launches of a timed call and a device copy of the same bytes in as many (Record)
    "launches",
    "launches_source",
    "same_size_copy_ms",
    "same_size_copy_lo_ms",
    "same_size_copy_hi_ms",
    "same_size_copy_gbps",
    "same_size_copy_method",
    "pct_same_size_copy",
    "pct_same_size_copy_lo",
    "pct_same_size_copy_hi",
    "peak_mb",
    "max_abs_err",
    "max_rel_err",
    "precision",
    # compile facts (workbench.compile_facts): flat columns of the kernel that explains most,
    # the compact regs/spills/occupancy cell of every kernel, and the facts themselves as JSON
    "regs",
    "spills",
    "shared_bytes",
    "occupancy_pct",
    "occupancy_limit",
    "regs_spills_occ",
    "compile_facts",
    "counters",
    "tiles_source",
    "passed",
    "error",
    "torch",
    "triton",
    "python",
    "commit",
)


class Store:
    """Append-only record store in one SQLite file (``:memory:`` for a throwaway one)."""

    def __init__(self, path: str | os.PathLike = DEFAULT_PATH):
        """Open (or create) the store; a path that is not a results store is a ValueError that
        says so, and the file is left exactly as it was (nothing is written before the check)."""
        self.path = str(path)
        self._lock = threading.Lock()
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._check_schema()
            self._conn.execute("PRAGMA journal_mode=WAL" if self.path != ":memory:" else "PRAGMA journal_mode=MEMORY")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS records (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL)"
            )
        except (sqlite3.DatabaseError, OSError) as exc:
            raise ValueError(
                f"store {self.path!r} cannot be used as a results store ({exc}); it was left untouched: "
                "choose another file with --store (or WORKBENCH_STORE)"
            ) from None

    def _check_schema(self) -> None:
        """Reading the schema makes SQLite read the file's header (a non-database fails here,
        before anything is written); an existing ``records`` table must be ours."""
        tables = self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        if ("records",) in tables:
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(records)")}
            if "body" not in columns:
                raise sqlite3.DatabaseError("its 'records' table is not a workbench store's")

    def append(self, record: Record | dict) -> None:
        body = record.to_dict() if isinstance(record, Record) else dict(record)
        text = json.dumps(body, default=str)
        with self._lock:
            self._conn.execute("INSERT INTO records (body) VALUES (?)", (text,))

    def extend(self, records: Iterable[Record | dict]) -> None:
        for r in records:
            self.append(r)

    def records(self) -> list[dict]:
        with self._lock:
            rows = self._conn.execute("SELECT body FROM records ORDER BY id").fetchall()
        return [json.loads(r[0]) for r in rows]

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    def frame(self):
        return records_frame(self.records())

    def to_csv(self, path: str | os.PathLike) -> Path:
        return write_csv(self.records(), path)

    def to_json(self, path: str | os.PathLike) -> Path:
        return write_json(self.records(), path)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def records_frame(records: Iterable[Record | dict]):
    """A DataFrame with one row per record: every Record field, nested ones as objects."""
    import pandas as pd

    rows = [r.to_dict() if isinstance(r, Record) else dict(r) for r in records]
    return pd.DataFrame(rows)


def _csv_row(rec: dict) -> dict:
    versions = rec.get("versions") or {}
    problem = rec.get("problem") or {}
    extra = {"dtype": rec.get("dtype"), "device": rec.get("device_kind"), **problem}
    row = {
        "kernel_name": rec.get("kernel"),
        "kernel_provider": rec.get("variant"),
        "kernel_operation_mode": rec.get("mode"),
        "metric_name": "speed",
        "metric_unit": "ms",
        "x_name": rec.get("axis"),
        "x_value": rec.get("x_value"),
        "y_value_50": rec.get("ms_p50"),
        "y_value_20": rec.get("ms_p20"),
        "y_value_80": rec.get("ms_p80"),
        "extra_benchmark_config_str": json.dumps(extra, sort_keys=True),
        "gpu_name": rec.get("device_name"),
        "timestamp": rec.get("timestamp"),
    }
    facts = rec.get("compile_facts") or {}
    derived = {**compile_facts.columns(facts), "regs_spills_occ": compile_facts.brief(facts)}
    for col in OUR_COLUMNS:
        if col in ("torch", "triton", "python"):
            row[col] = versions.get(col)
        elif col in ("params", "problem"):
            row[col] = json.dumps(rec.get(col) or {}, sort_keys=True)
        elif col in ("compile_facts", "counters"):
            row[col] = json.dumps(rec.get(col) or {}, sort_keys=True) if rec.get(col) else ""
        elif col in derived:
            row[col] = derived[col]
        else:
            row[col] = rec.get(col)
    return row


def write_csv(records: Iterable[Record | dict], path: str | os.PathLike) -> Path:
    import csv

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(COMMON_COLUMNS + OUR_COLUMNS))
        writer.writeheader()
        for r in records:
            writer.writerow(_csv_row(r.to_dict() if isinstance(r, Record) else dict(r)))
    return path


def write_json(records: Iterable[Record | dict], path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [r.to_dict() if isinstance(r, Record) else dict(r) for r in records]
    path.write_text(json.dumps(rows, indent=1, default=str))
    return path


# --- reading records back -------------------------------------------------------------------
# Committed reports keep their large files compressed: ``.xz`` (a third smaller than gzip's -9
# on records) or ``.gz`` (those committed so before); a tune or a sweep from before
# ``records.json`` was written kept only ``records.csv``. All of them read back here.
COMPRESSED = (".xz", ".gz")


def kept_names(name: str) -> tuple[str, ...]:
    """``name`` as a run folder may keep it: plain, or compressed (:data:`COMPRESSED`)."""
    return (name, *(name + suffix for suffix in COMPRESSED))


RECORD_FILES = kept_names("records.json") + kept_names("records.csv")
_CSV_NAMES = {
    "kernel_name": "kernel",
    "kernel_provider": "variant",
    "kernel_operation_mode": "mode",
    "x_name": "axis",
    "y_value_50": "ms_p50",
    "y_value_20": "ms_p20",
    "y_value_80": "ms_p80",
    "gpu_name": "device_name",
}
_CSV_JSON = ("params", "problem", "compile_facts", "counters")
# flat views of compile_facts that write_csv adds; the facts themselves come back from their JSON
_CSV_DERIVED = {"regs", "spills", "shared_bytes", "occupancy_pct", "occupancy_limit", "regs_spills_occ"}
_CSV_SKIPPED = {"metric_name", "metric_unit", "extra_benchmark_config_str"} | _CSV_DERIVED
_CSV_TEXT = ("timestamp", "commit", "error", "precision", "gpu_name", "launches_source", "same_size_copy_method")


def records_path(folder: str | os.PathLike, names: Iterable[str] = RECORD_FILES) -> Path | None:
    """The first of ``names`` that exists in ``folder`` (the JSON before the CSV), or None."""
    return next((Path(folder) / n for n in names if (Path(folder) / n).is_file()), None)


def open_text(path: str | os.PathLike):
    """``path`` opened for reading text, decompressed where its name ends in ``.xz`` or ``.gz``."""
    path = Path(path)
    if path.suffix == ".xz":
        return lzma.open(path, "rt", encoding="utf-8")
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def kept_path(folder: str | os.PathLike, name: str) -> Path | None:
    """``folder/name``, or compressed as a committed report keeps a large file (:func:`kept_names`);
    None where it is not there."""
    return records_path(folder, kept_names(name))


def read_json(path: str | os.PathLike):
    """A JSON file, plain or gzipped."""
    with open_text(path) as f:
        return json.load(f)


def read_records(path: str | os.PathLike) -> list[dict]:
    """The records of ``path``: what :func:`write_json` wrote (``.json``), or :func:`write_csv`
    (``.csv``: the columns read back to a record's fields, the nested ones from their JSON and
    numbers as numbers), either compressed (``.xz``, ``.gz``). ValueError where the file is not records."""
    path = Path(path)
    kind = (path.stem if path.suffix in COMPRESSED else path.name).rsplit(".", 1)[-1]
    try:
        with open_text(path) as f:
            if kind == "json":
                rows = json.load(f)
            elif kind == "csv":
                import csv

                rows = [_record_of_csv(row) for row in csv.DictReader(f)]
            else:
                raise ValueError("neither .json nor .csv")
    except (OSError, ValueError, EOFError, lzma.LZMAError) as exc:
        raise ValueError(f"{path} is not a records file ({exc}); regenerate it") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path} is not a list of records; regenerate it")
    return rows


def _csv_value(text: str):
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _record_of_csv(row: dict) -> dict:
    rec: dict = {}
    versions = {}
    for col, text in row.items():
        if col in _CSV_SKIPPED or col is None:
            continue
        if col in _CSV_JSON:
            rec[col] = json.loads(text) if text else ({} if col in ("params", "problem") else None)
        elif col in ("torch", "triton", "python"):
            versions[col] = text or None
        elif col in _CSV_TEXT:  # text, even where it reads as a number
            rec[_CSV_NAMES.get(col, col)] = text or None
        else:
            rec[_CSV_NAMES.get(col, col)] = _csv_value(text)
    rec["versions"] = versions
    return rec
