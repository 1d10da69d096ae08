"""A tune's result as a tuned table (the data ``kernels.tuned_tables`` reads), merged with the
installed table's other sizes, its diff against the installed table, and installing it.

The table is plain JSON (schema and lookup: :mod:`kernels.tuned_tables`): the device key, the
knob and problem the sizes were measured on, provenance (date, commit, torch / triton versions,
the command, strategy and budget), and per size the chosen tiles with their kernel time and
interval, why they were chosen, the fastest configuration, the default's time and, where the
installed table had an entry, the rule's (the same call with the tables off).

An installed table that cannot be read (not JSON, another family's, another schema) stops the
tune with :class:`kernels.tuned_tables.TableError`, one line naming the file; the file is left
exactly as it was.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Sequence

from kernels import tuned_tables
from workbench.tune.pick import Choice, interval, kernel_ms


def tiles_of(record: dict, names) -> dict:
    """The tuned tiles (``names``: the tune grid's) a record set; "auto" ones left out."""
    return {k: v for k, v in (record.get("params") or {}).items() if k in names and v != "auto"}


def _timing(record: dict | None) -> dict:
    if record is None:
        return {}
    lo, hi = interval(record)
    return {"kernel_ms": kernel_ms(record), "kernel_lo_ms": lo, "kernel_hi_ms": hi}


def entry_tiles(choice: Choice, family: str, key: str, names, part: str = tuned_tables.FORWARD) -> dict:
    """What the table stores for a choice: ``{}`` for the rule (an empty entry keeps the family's
    rule and says the tune confirmed it); for the default, the tiles it ran with — the installed
    table's entry when the default came from one (where the rule was measured, it was not within
    noise of the fastest), else ``{}`` (the default was the rule); else the chosen tiles."""
    chosen = choice.chosen
    if choice.rule is not None and chosen is choice.rule:
        return {}
    if chosen is not choice.default:
        return tiles_of(chosen, names)
    if tuned_tables.source_of(chosen.get("tiles_source", ""), part).startswith("tuned:"):
        return dict(tuned_tables.lookup(family, key, choice.size, part).tiles or {})
    return {}


def build_table(space, key: str, choices: Sequence[Choice], provenance: dict) -> dict:
    """The table for ``key`` from one choice per size (sizes where nothing passed are left out)."""
    t = space.tuning
    names = space.grid
    problem = {k: v for k, v in space.problem(0).items() if k != t.knob}
    buckets = []
    for c in choices:
        if c.chosen is None:
            continue
        tiles = entry_tiles(c, space.spec.name, key, names, space.part)
        bucket = {"size": c.size, "tiles": tiles, **_timing(c.chosen)}
        bucket["why"] = c.why
        bucket["evaluated"] = c.evaluated
        bucket["within_noise"] = len(c.within_noise)
        bucket["best"] = {"tiles": tiles_of(c.best, names), **_timing(c.best)}
        if c.default is not None:
            bucket["default"] = {"tiles_source": c.default.get("tiles_source", ""), **_timing(c.default)}
        if c.rule is not None:
            bucket["rule"] = {"tiles_source": c.rule.get("tiles_source", ""), **_timing(c.rule)}
        buckets.append(bucket)
    # A forward table says no part (tables written before parts read the same).
    part = {} if space.part == tuned_tables.FORWARD else {"part": space.part}
    return {
        "schema": tuned_tables.SCHEMA,
        "family": space.spec.name,
        **part,
        "device_key": key,
        "knob": t.knob,
        "variant": t.variant,
        "mode": t.mode,
        "dtype": t.dtype,
        "problem": problem,
        "measured": True,
        "provenance": {"date": dt.date.today().isoformat(), **provenance, "sizes": list(space.sizes)},
        "buckets": buckets,
    }


MERGE_KEYS = ("schema", "family", "part", "device_key", "knob", "variant", "mode", "dtype", "problem")


def merge(installed: dict | None, tuned: dict) -> dict:
    """The table a tune of some sizes installs: its own buckets, and the installed table's
    buckets of every size it did not measure, kept as they were (``provenance["kept"]``: which
    sizes, and the provenance they came with). A table measured on another problem, knob or
    variant is not merged: the tune's table replaces it, as a tune of every size would."""
    if installed is None or any(installed.get(k) != tuned.get(k) for k in MERGE_KEYS):
        return tuned
    measured = {b["size"] for b in tuned["buckets"]}
    kept = [b for b in installed["buckets"] if b["size"] not in measured]
    if not kept:
        return tuned
    provenance = dict(tuned["provenance"])
    provenance["kept"] = {"sizes": [b["size"] for b in kept], "from": installed.get("provenance", {})}
    buckets = sorted(tuned["buckets"] + kept, key=lambda b: b["size"])
    return {**tuned, "provenance": provenance, "buckets": buckets}


def installed_path(family: str, key: str, part: str = tuned_tables.FORWARD) -> Path:
    return tuned_tables.table_path(family, key, part)


def read_installed(family: str, key: str, part: str = tuned_tables.FORWARD) -> dict | None:
    """The installed table of ``part`` for ``key``, None where there is none; TableError for a
    bad file."""
    path = installed_path(family, key, part)
    return tuned_tables.read_table(path, family, part) if path.exists() else None


def _tiles_text(tiles: dict | None) -> str:
    if tiles is None:
        return "-"
    return ", ".join(f"{k}={v}" for k, v in sorted(tiles.items())) or "(the rule)"


def _us(ms) -> str:
    return "-" if ms is None else f"{ms * 1e3:.1f} us"


def diff_lines(old: dict | None, new: dict) -> list[str]:
    """Per size: the installed tiles and time against the candidate's (changed sizes marked)."""
    if old is None:
        return [f"no table installed for {new['device_key']}: every size is new"] + [
            f"  + {new['knob']}={b['size']}: {_tiles_text(b['tiles'])} ({_us(b.get('kernel_ms'))})"
            for b in new["buckets"]
        ]
    before = {b["size"]: b for b in old["buckets"]}
    after = {b["size"]: b for b in new["buckets"]}
    lines = []
    for size in sorted(set(before) | set(after)):
        a, b = before.get(size), after.get(size)
        mark = " " if a is not None and b is not None and a["tiles"] == b["tiles"] else "*"
        lines.append(
            f"  {mark} {new['knob']}={size}: {_tiles_text(a and a['tiles'])} ({_us(a and a.get('kernel_ms'))}) -> "
            f"{_tiles_text(b and b['tiles'])} ({_us(b and b.get('kernel_ms'))})"
        )
    changed = sum(1 for ln in lines if ln.startswith("  *"))
    return [f"{changed} of {len(lines)} sizes change against the installed table"] + lines


def write_table(table: dict, path: str | os.PathLike) -> Path:
    """Write atomically (a temporary file renamed over the target)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(table, indent=1, default=str) + "\n")
    os.replace(tmp, path)
    return path


def install(table: dict) -> Path:
    """Install ``table`` for its device; a bad installed file is a TableError and stays as it is."""
    part = table.get("part", tuned_tables.FORWARD)
    read_installed(table["family"], table["device_key"], part)
    path = write_table(table, installed_path(table["family"], table["device_key"], part))
    tuned_tables.reload()
    return path
