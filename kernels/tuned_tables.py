"""Tuned tile tables: measured per-device defaults that ``impl="auto"`` reads, as plain JSON data.

A family keeps its tables in ``kernels/<family>/tuned/<file>.json``, one file per device, named
after the device's stable key (:func:`device_key`: ``"cuda:NVIDIA H100 80GB HBM3"``,
``"npu:Ascend910B"``) made safe for a file name (:func:`file_name`:
``cuda_NVIDIA_H100_80GB_HBM3.json``). ``KERNELS_TUNED_DIR``, when set, replaces the package
folders with ``$KERNELS_TUNED_DIR/<family>/`` (a user's own tables, or a test's).

A family may tune more than one *part* of its kernels, each with its own tiles and table: the
norms' forward (rows per program, warps) and their backward (the backward kernel's rows, warps
and loop), timed forward+backward. The forward's tables are the files above; another part's live
in a folder of its name, ``kernels/<family>/tuned/<part>/<file>.json``, with ``"part"`` in the
table. Records carry one source per part in ``tiles_source`` (:func:`joined_sources`:
``"tuned:cuda:NVIDIA H200@4096; backward: heuristic (...)"``; :func:`source_of` reads one back).

A table (schema :data:`SCHEMA`)::

    {"schema": "kernel-workbench/tuned-table/1", "family": "block_sparse",
     "device_key": "cuda:NVIDIA H100 80GB HBM3", "knob": "batch", "variant": "gpu",
     "mode": "forward", "dtype": "fp32", "problem": {"nodes": 1024, ...},   # what was measured
     "measured": true,                                                    # false: untimed defaults
     "provenance": {"date": ..., "commit": ..., "torch": ..., "triton": ..., "command": ..., "note": ...},
     "buckets": [{"size": 16, "tiles": {"SPLITS": 8, "TILE_M": 16, "num_warps": 4},
                  "kernel_ms": ..., "kernel_lo_ms": ..., "kernel_hi_ms": ..., "default": {...}}, ...]}

:func:`lookup` answers ``(family, device key, size)`` with the bucket nearest to ``size`` on a
log2 scale (a tie takes the smaller bucket); a size outside the table's smallest..largest bucket
gets no entry, so shapes the table never measured keep the rule-based heuristics. Answers are
cached per (family, device key, size): a call pays one dict lookup after the first.

Two ways to read a file, two ways to fail:

- :func:`read_table` (the tool: ``workbench tune``) raises :class:`TableError`, one line naming
  the file and what is wrong with it (unparsable, another family's, another schema);
- :func:`lookup` (the library's hot path) never raises for a bad file: it warns once and answers
  "no entry", with the reason in :attr:`Lookup.source`, which records carry as ``tiles_source``.

Inside ``with disabled():`` every lookup answers "no entry" (source :data:`DISABLED`): calls run
the families' rules as if no table were installed (``workbench tune`` measures the rule beside an
installed entry this way). The switch is process-wide, and it clears the answers and the
registered tile caches (:func:`on_reload`) on the way in and out, so no tiles resolved on one side
are used on the other.

Nothing of the measuring tool is imported here: a model reads its tables without the workbench.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

SCHEMA = "kernel-workbench/tuned-table/1"
FORWARD = "forward"  # the part a table without "part" holds
EXPLICIT = "explicit"
DISABLED = "heuristic (tuned tables disabled)"
_PACKAGE_ROOT = Path(__file__).resolve().parent


class TableError(ValueError):
    """A table file that cannot be used; the message names the file and says what is wrong."""


@dataclass(frozen=True)
class Lookup:
    """A table's answer for one size: ``tiles`` (None: use the heuristics) and where they came
    from, as records say it (``tiles_source``)."""

    tiles: dict | None
    source: str
    bucket: int | None = None


def device_key(device) -> str:
    """``"<kind>:<name>"`` of a :class:`kernels.runtime.DeviceInfo` (or anything with ``kind``
    and ``name``): the key a table is filed under. Cached per device object."""
    key = _KEYS.get(device)
    if key is None:
        key = _KEYS[device] = f"{device.kind}:{device.name}"
    return key


_KEYS: dict[Any, str] = {}


def file_name(key: str) -> str:
    """The table's file name for a device key: every run of characters other than letters,
    digits, ``.``, ``_`` and ``-`` becomes one ``_`` (``cuda:NVIDIA H100 80GB HBM3`` ->
    ``cuda_NVIDIA_H100_80GB_HBM3.json``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("_") + ".json"


_PLACED: dict[str, Path] = {}  # family -> its tables' folder, for a family declared outside kernels/


def place(family: str, folder: str | os.PathLike) -> None:
    """Keep ``family``'s tables in ``folder`` (a family declared in a user's code keeps them beside
    that code: :func:`kernels.custom.family`)."""
    _PLACED[family] = Path(folder)
    for cache in (_TABLES, _LOOKUPS):  # answers read from another folder no longer hold
        for key in [k for k in cache if k[0] == family]:
            del cache[key]


def table_dir(family: str, part: str = FORWARD) -> Path:
    """Where ``family``'s tables of ``part`` live: ``$KERNELS_TUNED_DIR/<family>`` when that is
    set, else the folder :func:`place` gave it, else the family's package folder
    ``kernels/<family>/tuned``; a part other than the forward in a folder of its name there."""
    root = os.environ.get("KERNELS_TUNED_DIR")
    if root:
        folder = Path(root) / family
    else:
        folder = _PLACED.get(family) or _PACKAGE_ROOT / family / "tuned"
    return part_dir(folder, part)


def part_dir(folder: str | os.PathLike, part: str = FORWARD) -> Path:
    """Where ``part``'s tables sit in a folder of a family's tables: the folder itself for the
    forward, a subfolder of the part's name for any other (a tune's out folder files its
    candidate the same way)."""
    return Path(folder) if part == FORWARD else Path(folder) / part


def table_path(family: str, key: str, part: str = FORWARD) -> Path:
    return table_dir(family, part) / file_name(key)


def joined_sources(forward: str, **parts: str) -> str:
    """One ``tiles_source`` for a configuration whose parts take tiles from different places:
    the forward's, then ``"; <part>: <source>"`` for each other part that has one (``""``: the
    part has no table on this device, and its record says nothing of it)."""
    return forward + "".join(f"; {part}: {source}" for part, source in parts.items() if source)


def source_of(tiles_source: str, part: str = FORWARD) -> str:
    """``part``'s source in a ``tiles_source`` written by :func:`joined_sources` (the forward's:
    what comes before the first ``"; "``); ``""`` where the record names no such part."""
    head, *rest = str(tiles_source or "").split("; ")
    if part == FORWARD:
        return head
    prefix = f"{part}: "
    return next((r[len(prefix) :] for r in rest if r.startswith(prefix)), "")


# --- reading and checking ------------------------------------------------------------------
def check_table(table: Any, family: str | None = None, part: str | None = None) -> dict:
    """``table`` when it is a tuned table (of ``family`` and ``part``, when given); TableError
    says what is not."""
    if not isinstance(table, dict):
        raise TableError(f"it holds a JSON {type(table).__name__}, not a tuned table (an object)")
    if table.get("schema") != SCHEMA:
        raise TableError(f"its schema is {table.get('schema')!r}, not {SCHEMA!r}")
    if family is not None and table.get("family") != family:
        raise TableError(f"it is a table of family {table.get('family')!r}, not {family!r}")
    if part is not None and table.get("part", FORWARD) != part:
        raise TableError(f"it holds the {table.get('part', FORWARD)!r} tiles, not the {part!r} tiles")
    for name in ("device_key", "knob"):
        if not isinstance(table.get(name), str) or not table[name]:
            raise TableError(f"its {name!r} is missing or not a string")
    buckets = table.get("buckets")
    if not isinstance(buckets, list):
        raise TableError("its 'buckets' is missing or not a list")
    sizes = []
    for i, b in enumerate(buckets):
        if not isinstance(b, dict) or not isinstance(b.get("tiles"), dict):
            raise TableError(f"bucket {i} has no 'tiles' object")
        size = b.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise TableError(f"bucket {i} has size {size!r}; sizes are positive integers")
        sizes.append(size)
    if len(set(sizes)) != len(sizes):
        raise TableError("two buckets have the same size")
    return table


def read_table(path: str | os.PathLike, family: str | None = None, part: str | None = None) -> dict:
    """The table in ``path``, checked (:func:`check_table`); TableError names the file. The file
    is only read, never changed."""
    path = Path(path)
    try:
        table = json.loads(path.read_text())
    except OSError as exc:
        raise TableError(f"tuned table {path}: cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TableError(f"tuned table {path}: not valid JSON ({exc}); it was left untouched") from None
    try:
        return check_table(table, family, part)
    except TableError as exc:
        raise TableError(f"tuned table {path}: {exc}; it was left untouched") from None


def nearest_bucket(sizes, size: int) -> int | None:
    """The bucket nearest to ``size`` on a log2 scale (a tie takes the smaller); None outside
    [smallest, largest]."""
    sizes = sorted(sizes)
    if not sizes or size < sizes[0] or size > sizes[-1]:
        return None
    target = math.log2(max(size, 1))
    return min(sizes, key=lambda s: (abs(math.log2(s) - target), s))


# --- the library's lookup ------------------------------------------------------------------
_TABLES: dict[tuple[str, str, str], dict | str] = {}  # (family, part, key) -> table, or why it is unusable
_LOOKUPS: dict[tuple[str, str, str, int], Lookup] = {}
_WARNED: set[str] = set()
_DEPENDENTS: list[Callable[[], None]] = []
_DISABLED: dict[str | None, int] = {}  # open disabled() blocks per part (None: every part)


class _NoFile(str):
    """The reason a lookup has no table when the device has no table file at all (a ``str``)."""


def _table(family: str, part: str, key: str) -> dict | str:
    """The family's table of ``part`` for ``key`` read once (:func:`_load`), or why there is none."""
    table = _TABLES.get((family, part, key))
    if table is None:
        table = _TABLES[(family, part, key)] = _load(family, key, part)
    return table


def _load(family: str, key: str, part: str) -> dict | str:
    """The family's table of ``part`` for ``key``, or the reason there is none (a string;
    :class:`_NoFile` where there is no file)."""
    path = table_path(family, key, part)
    if not path.is_file():
        return _NoFile(f"heuristic (no table for {key})")
    try:
        table = read_table(path, family, part)
    except TableError as exc:
        reason = f"heuristic (table {path.name} unusable: {exc})"
        if str(path) not in _WARNED:
            _WARNED.add(str(path))
            warnings.warn(f"{exc}; {family} falls back to its heuristic tiles", RuntimeWarning, stacklevel=4)
        return reason
    if table["device_key"] != key:
        return f"heuristic (table {path.name} is for {table['device_key']!r}, not {key!r})"
    return table


def lookup(family: str, key: str, size: int, part: str = FORWARD) -> Lookup:
    """The tuned tiles of ``family``'s ``part`` on device ``key`` for a problem of ``size`` (the
    table's ``knob``), or no tiles and why (module docstring); none inside :func:`disabled`.
    Cached per (family, part, key, size)."""
    if _DISABLED and (_DISABLED.get(None) or _DISABLED.get(part)):
        return _DISABLED_LOOKUP
    hit = _LOOKUPS.get((family, part, key, size))
    if hit is not None:
        return hit
    table = _table(family, part, key)
    if isinstance(table, str):
        answer = Lookup(None, str(table))
    else:
        by_size = {b["size"]: b for b in table["buckets"]}
        bucket = nearest_bucket(by_size, size)
        if bucket is None:
            answer = Lookup(None, f"heuristic ({table['knob']}={size} outside the table for {key})")
        else:
            untimed = "" if table.get("measured", True) else " (untimed)"
            answer = Lookup(dict(by_size[bucket]["tiles"]), f"tuned:{key}@{bucket}{untimed}", bucket)
    if len(_LOOKUPS) >= 16384:  # many sizes: start over rather than grow without bound
        _LOOKUPS.clear()
    _LOOKUPS[(family, part, key, size)] = answer
    return answer


def has_table(family: str, key: str | None, part: str = FORWARD) -> bool:
    """Whether a table file of ``family``'s ``part`` exists for device ``key`` (usable or not);
    read once, as :func:`lookup` reads it."""
    return key is not None and not isinstance(_table(family, part, key), _NoFile)


def on_reload(clear: Callable[[], None]) -> None:
    """Register a cache that holds resolved tiles (a family's ``lru_cache``), cleared by :func:`reload`."""
    _DEPENDENTS.append(clear)


def reload() -> None:
    """Forget every table and answer read so far (and the registered tile caches): the next
    lookup reads the files again. A table installed while a process runs is seen after this."""
    _TABLES.clear()
    _WARNED.clear()
    _forget_answers()


def _forget_answers() -> None:
    _LOOKUPS.clear()
    for clear in _DEPENDENTS:
        clear()


@contextlib.contextmanager
def disabled(part: str | None = None):
    """Within the block, every :func:`lookup` (of ``part``; None: of every part) answers "no
    entry" with source :data:`DISABLED`: the families' rules run as if no such table were
    installed. Process-wide (every thread); blocks nest. The cached answers and the registered
    tile caches are cleared on entering and on leaving, also when the block raises, so lookups
    after it answer from the tables again."""
    _DISABLED[part] = _DISABLED.get(part, 0) + 1
    try:
        _forget_answers()
        yield
    finally:
        _DISABLED[part] -= 1
        if not _DISABLED[part]:
            del _DISABLED[part]
        _forget_answers()


def disabled_parts() -> frozenset:
    """The parts whose tables are off now (:func:`disabled`; None in the set: every part)."""
    return frozenset(_DISABLED)


def choose(family: str, key: str | None, size: int, given, names, part: str = FORWARD) -> Lookup:
    """The table's tiles for a call that passed ``given`` tile arguments: none, with source
    ``"explicit"``, when the call set any of ``names`` (the tiles the family tunes; a table's
    tiles were measured together, so they apply together or not at all); none, with source
    ``"heuristic"``, without a device ``key``; else :func:`lookup`."""
    if any(given.get(n, "auto") != "auto" for n in names):
        return _EXPLICIT_LOOKUP
    if key is None:
        return _NO_DEVICE_LOOKUP
    return lookup(family, key, size, part)


_EXPLICIT_LOOKUP = Lookup(None, EXPLICIT)
_NO_DEVICE_LOOKUP = Lookup(None, "heuristic")
_DISABLED_LOOKUP = Lookup(None, DISABLED)
