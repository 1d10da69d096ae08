"""Facts of this host's devices that outlive a process: measured once, reused with their age.

A device's copy bandwidth (what every GB/s figure is compared with) is a fact of the device, not
of the process: a sweep's measuring actors, a notebook's kernel restarts and the suite's runs
each measured it again (a 512 MiB copy timed like a kernel; in a new process the first such
timing also pays the profiler's first session, which then moves to the first measurement). Here a measured value is kept in one small JSON file per host, keyed by
everything that could change it (the host, the device's name and index, the driver, torch's
version), and reused while it is younger than :data:`MAX_AGE_ENV` hours (24 by default; 0
measures every time). Every answer says where it came from and how old it is, so a record can
state it.

The file lives in ``$WORKBENCH_CACHE_DIR`` (default ``$XDG_CACHE_HOME/kernel-workbench`` or
``~/.cache/kernel-workbench``). Writes replace the file atomically; a file that cannot be read
or written only costs a measurement.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Callable

MAX_AGE_ENV = "WORKBENCH_COPY_BW_MAX_AGE_H"
DEFAULT_MAX_AGE_H = 24.0
FILE_NAME = "host-facts.json"


def cache_home() -> Path:
    """The workbench's folder of the user's cache (``$XDG_CACHE_HOME`` or ``~/.cache``), shared
    with the NPU check's environment (workbench/npu_check/env.py)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kernel-workbench"


def cache_dir() -> Path:
    """Where the host's facts are kept (``$WORKBENCH_CACHE_DIR``, else :func:`cache_home`)."""
    env = os.environ.get("WORKBENCH_CACHE_DIR")
    return Path(env) if env else cache_home()


def max_age_s() -> float:
    """How old a kept fact may be before it is measured again (``WORKBENCH_COPY_BW_MAX_AGE_H``)."""
    raw = os.environ.get(MAX_AGE_ENV, "").strip()
    try:
        hours = float(raw) if raw else DEFAULT_MAX_AGE_H
    except ValueError:
        raise ValueError(f"{MAX_AGE_ENV}={raw!r} is not a number of hours (0 measures every time)") from None
    return max(hours, 0.0) * 3600.0


def device_key(name: str, index: int, driver: str, torch_version: str) -> str:
    """The key of one device's facts on this host."""
    return f"{socket.gethostname()}|{name}|{index}|{driver}|torch {torch_version}"


def copy_bandwidth(key: str, measure: Callable[[], float], path: Path | None = None, now=time.time) -> dict:
    """The copy bandwidth of the device ``key`` names, in GB/s, kept for the host:
    ``{"gbps", "measured_at" (ISO time), "age_s", "source"}``, where ``source`` is
    ``"measured"`` (by ``measure()`` just now, then kept) or ``"host cache"``."""
    path = path or cache_dir() / FILE_NAME
    limit = max_age_s()
    if limit > 0:
        kept = _read(path).get(key, {}).get("copy_bandwidth")
        asked = now()
        if isinstance(kept, dict) and _usable(kept, asked, limit):
            return {**kept, "age_s": round(asked - kept["measured_unix"], 1), "source": "host cache"}
    gbps = float(measure())
    stamp = now()
    fact = {
        "gbps": gbps,
        "measured_unix": stamp,
        "measured_at": _dt.datetime.fromtimestamp(stamp, _dt.timezone.utc).isoformat(timespec="seconds"),
    }
    facts = _read(path)  # again: another process may have written meanwhile
    facts.setdefault(key, {})["copy_bandwidth"] = fact
    _write(path, facts)
    return {**fact, "age_s": 0.0, "source": "measured"}


def _usable(fact: dict, now: float, limit: float) -> bool:
    try:
        age = now - float(fact["measured_unix"])
        return 0 <= age <= limit and float(fact["gbps"]) > 0
    except (KeyError, TypeError, ValueError):
        return False


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, facts: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".host-facts-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(facts, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the next process measures again
