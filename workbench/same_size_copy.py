"""The same-size copy: a cell's share of a device copy of its own bytes in as many launches.

Beside the share of the device's measured copy bandwidth (a 512 MiB copy), a record can carry
its share of a device copy of its ``min_bytes`` in as many launches as its call made, timed the
way its kernel time was right after it (:meth:`workbench.device.Device.same_size_copy`, kept per
device, bytes and launches in the process): the limit at the cell's own size, where launch and
tail costs weigh as they do on the kernel. :func:`workbench.measure.measure_many` calls
:func:`measure_same_size_copy` after the timings when asked (``same_size_copy=True``);
:func:`same_size_copy_fields` puts a copy's facts into a record, with the interval the two
medians' intervals imply.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from workbench import timing
from workbench.device import Device
from workbench.errors import short_error
from workbench.record import Record
from workbench.timing import DEFAULT_REL_WIDTH

# Why a record carries no same-size copy (Record.same_size_copy_method).
NO_COPY_ON_CPU = "n/a (CPU): interpreter wall times, which no device copy compares with"
NO_COPY_LAUNCHES = "not measured: the call's launches are unknown"


def measure_same_size_copy(
    record: Record, device: Device, *, budget_s: float, rel_width: float = DEFAULT_REL_WIDTH, l2: str = "cold"
) -> None:
    """Fill ``record``'s same-size copy fields: a device copy of its ``min_bytes`` in its
    ``launches`` (:meth:`Device.same_size_copy`, kept per device, bytes and launches in the
    process), or the reason it has none. A record that failed, was not timed, or declares no
    bytes is left as it is."""
    if record.error or record.kernel_ms is None or not record.min_bytes:
        return
    if device.kind == "cpu":
        record.same_size_copy_method = NO_COPY_ON_CPU
        return
    if not record.launches:
        record.same_size_copy_method = NO_COPY_LAUNCHES
        return
    try:
        facts = device.same_size_copy(record.min_bytes, record.launches, l2=l2, rel_width=rel_width, budget_s=budget_s)
    except Exception as exc:  # noqa: BLE001 - a copy that cannot run leaves the cell's own timing as it is
        record.same_size_copy_method = "not measured: " + short_error(exc)[:300]
        return
    same_size_copy_fields(record, facts)


def same_size_copy_fields(record: Record, facts: Mapping[str, Any]) -> None:
    """Put a same-size copy's facts (:meth:`Device.same_size_copy`) into ``record``: the copy's
    time, interval, GB/s and method, and the record's share of its GB/s with the interval the
    two medians' intervals imply (:func:`workbench.timing.ratio_interval`). The method says
    where the profiler counted other than ``launches`` operations per copy."""
    record.same_size_copy_ms, record.same_size_copy_n = facts["ms"], facts["n"]
    record.same_size_copy_lo_ms, record.same_size_copy_hi_ms = facts["lo_ms"], facts["hi_ms"]
    record.same_size_copy_gbps = facts["gbps"]
    record.same_size_copy_method = facts["method"]
    counted = facts.get("counted_launches")
    if counted is not None and counted != facts["launches"]:
        record.same_size_copy_method += f"; the profiler counted {counted} operations per copy"
    if not (record.kernel_ms and facts["ms"] and facts["ms"] > 0):
        return
    # (min bytes / kernel time) / (copy bytes / copy time): copy time over kernel time, scaled by
    # the bytes (equal but for an odd byte count).
    scale = 100.0 * record.min_bytes / facts["bytes"]
    copy = _open_estimate(facts["ms"], facts["lo_ms"], facts["hi_ms"])
    kernel = _open_estimate(record.kernel_ms, record.kernel_lo_ms, record.kernel_hi_ms)
    share, lo, hi = timing.ratio_interval(copy, kernel)
    record.pct_same_size_copy = scale * share
    record.pct_same_size_copy_lo = scale * lo if lo > 0 else None
    record.pct_same_size_copy_hi = scale * hi if math.isfinite(hi) else None


def _open_estimate(median: float, lo: float | None, hi: float | None) -> timing.Estimate:
    """A median with its interval (an open bound where None) as an Estimate, for ratio maths."""
    return timing.Estimate.of(median, -math.inf if lo is None else lo, math.inf if hi is None else hi)
