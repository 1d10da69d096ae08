"""Nsight Compute on one configuration: find ``ncu``, run it on a child process, read its CSV.

:func:`profile` runs ``ncu --profile-from-start off --csv --page raw --metrics ...`` on
``python -m workbench.profile_child`` (which warms the configuration up, so compiles happen
outside, then makes one call between ``cudaProfilerStart`` and ``cudaProfilerStop``) with a time
limit, and returns the counters of every kernel that call launched (:func:`parse`).

Every way this can fail is a :class:`ProfileError` with one line that says what to change: no
``ncu`` found, the profiler not allowed to read the GPU's counters (``ERR_NVGPUCTRPERM``), the
time limit, the child failing, no kernel profiled.

Counters kept per kernel (:data:`COUNTERS`), in base units: duration, DRAM throughput (% of peak)
and the bytes read and written, L2 hit rate, achieved occupancy, SM throughput, the theoretical
occupancy and its per-resource limits as Nsight Compute computes them, and the warp-stall
reasons, largest first. Nsight Compute locks the SM clocks to base while profiling (1.59 GHz on
the lent H100), so its duration is longer than the workbench's kernel time: compare its
percentages, not its times. It also replays each kernel with the caches flushed, and counts as
written only what reached DRAM while the kernel ran: writes still in the L2 at its end are not
counted (a 4096 x 1024 bf16 RMSNorm forward on the H100 wrote 0.0 of its 8.4 MB), so the bytes
read are the figure to hold against a kernel's minimum.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from workbench.children import run_bounded
from workbench.profile_child import ERROR_MARK

# Where ncu lives when it is not on PATH (the CUDA toolkit's and the standalone installer's).
NCU_PLACES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda-*/bin/ncu")
ENV_NCU = "WORKBENCH_NCU"

_STALL_PREFIX = "smsp__average_warps_issue_stalled_"
_STALL_SUFFIX = "_per_issue_active.ratio"

# counter name in the record -> Nsight Compute metric
COUNTERS = {
    "duration_ns": "gpu__time_duration.sum",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    # the bytes DRAM moved while the kernel ran (reads: to hold against the fewest it must read)
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "registers": "launch__registers_per_thread",
    "grid_size": "launch__grid_size",
    "block_size": "launch__block_size",
    "shared_static_bytes": "launch__shared_mem_per_block_static",
    "shared_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "limit_registers": "launch__occupancy_limit_registers",
    "limit_shared_mem": "launch__occupancy_limit_shared_mem",
    "limit_warps": "launch__occupancy_limit_warps",
    "limit_blocks": "launch__occupancy_limit_blocks",
    # the shared-memory carveout the driver chose (its shared-memory limit is against this)
    "shared_config_bytes": "launch__shared_mem_config_size",
    "waves": "launch__waves_per_multiprocessor",
}
METRICS = ",".join(COUNTERS.values()) + r",regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
TOP_STALLS = 3


class ProfileError(ValueError):
    """Profiling could not run or gave nothing; the message is one line saying what to change."""


def find_ncu(explicit: str | None = None) -> str | None:
    """The ncu to run: ``explicit`` (an option), else ``$WORKBENCH_NCU``, else ``ncu`` on PATH,
    else the usual install places; None when there is none."""
    for candidate in (explicit, os.environ.get(ENV_NCU)):
        if candidate:
            found = shutil.which(candidate) or (candidate if os.access(candidate, os.X_OK) else None)
            return found
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_PLACES:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


def require_ncu(explicit: str | None = None) -> str:
    """:func:`find_ncu`, or a :class:`ProfileError` saying where it looked."""
    exe = find_ncu(explicit)
    if exe is None:
        where = f"{explicit!r} is not an executable" if explicit else f"not on PATH nor in {', '.join(NCU_PLACES)}"
        raise ProfileError(
            f"Nsight Compute (ncu) not found: {where}; install Nsight Compute or give its path with --ncu "
            f"(or ${ENV_NCU})"
        )
    return exe


def command(ncu: str, child: list[str]) -> list[str]:
    """The ncu command line around ``child`` (a command: the configuration's process)."""
    # base units: ncu otherwise scales each column to its own (ns or us, byte or Mbyte) per run
    return [ncu, "--profile-from-start", "off", "--csv", "--page", "raw", "--print-units", "base", "--metrics", METRICS,
            *child]  # fmt: skip


def profile(config: dict, *, ncu: str | None = None, timeout_s: float = 120.0, python: str | None = None) -> list[dict]:
    """Counters of every kernel one call of ``config`` launches (:func:`parse`'s rows).

    ``config``: ``family``, ``variant``, ``device``, ``dtype``, ``mode``, ``problem``, ``params``,
    ``seed`` (what :mod:`workbench.profile_child` builds). Raises :class:`ProfileError`."""
    exe = require_ncu(ncu)
    child = [python or sys.executable, "-m", "workbench.profile_child", json.dumps(config, sort_keys=True)]
    try:
        out, err, code = run_bounded(command(exe, child), timeout_s)
    except subprocess.TimeoutExpired:
        raise ProfileError(
            f"ncu did not finish within {timeout_s:g} s (it replays every kernel several times); "
            "raise --timeout-s or profile a smaller problem"
        ) from None
    both = out + "\n" + err
    if "ERR_NVGPUCTRPERM" in both:
        raise ProfileError(
            "the profiler is not allowed to read this GPU's counters (ERR_NVGPUCTRPERM): run as root, or "
            "load the driver with NVreg_RestrictProfilingToAdminUsers=0"
        )
    failed = _child_failure(both)
    if failed:
        raise ProfileError(f"the configuration failed under ncu: {failed}")
    kernels = parse(out)
    if not kernels:
        last = _last_line(err) or _last_line(out) or f"exit code {code}"
        raise ProfileError(f"ncu profiled no kernel (exit code {code}): {last}")
    return kernels


def _child_failure(text: str) -> str | None:
    """The child's own one-line error (it prints it after a mark), if it failed."""
    for line in text.splitlines():
        if line.startswith(ERROR_MARK):
            return line[len(ERROR_MARK) :].strip()
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# --- the CSV ---------------------------------------------------------------------------------
def parse(text: str) -> list[dict]:
    """Per-kernel counters from ``ncu --csv --page raw`` output, in launch order.

    The CSV's first row names the columns, the second gives units, then one row per kernel.
    Lines that are not CSV (ncu's ``==PROF==`` messages, the child's own output) are skipped;
    numbers carry thousands separators (``"89,024"``). Each row: ``kernel``, ``grid`` and
    ``block`` as ncu writes them, every :data:`COUNTERS` entry as a float (None where absent),
    ``stalls`` (every stall reason's warps per issued instruction, largest first) and
    ``top_stalls`` (the largest :data:`TOP_STALLS`)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    rows = list(csv.reader(lines))
    if len(rows) < 3:
        return []
    header, body = rows[0], rows[2:]
    out = []
    for row in body:
        cells = dict(zip(header, row))
        kernel = {
            "kernel": cells.get("Kernel Name", ""),
            "grid": cells.get("Grid Size", ""),
            "block": cells.get("Block Size", ""),
        }
        for name, metric in COUNTERS.items():
            kernel[name] = _number(cells.get(metric))
        stalls = {}
        for column, value in cells.items():
            if column.startswith(_STALL_PREFIX) and column.endswith(_STALL_SUFFIX):
                reason = column[len(_STALL_PREFIX) : -len(_STALL_SUFFIX)]
                number = _number(value)
                # "selected" is the warp issuing, not waiting: not a stall reason.
                if number is not None and reason != "selected":
                    stalls[reason] = number
        kernel["stalls"] = dict(sorted(stalls.items(), key=lambda kv: -kv[1]))
        kernel["top_stalls"] = list(kernel["stalls"].items())[:TOP_STALLS]
        out.append(kernel)
    return out


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    text = text.replace(",", "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def as_record_counters(kernels: list[dict], ncu_path: str | None = None) -> dict:
    """The record's ``counters``: per kernel, with how they were taken."""
    return {
        "tool": "Nsight Compute",
        "ncu": Path(ncu_path).name if ncu_path else "ncu",
        "note": "SM clocks locked to base while profiling: compare percentages, not durations",
        "kernels": kernels,
    }


def summary_line(kernel: dict) -> str:
    """``sum_forward: DRAM 7% (1.2 MB read, 0.3 MB written) | L2 hit 43% | occupancy 24% achieved
    (25% theoretical) | SM 27% | stalls: long_scoreboard 3.77, short_scoreboard 2.97, mio_throttle 1.2``
    (the bytes where the counters have them)."""

    def pct(v):
        return "n/a" if v is None else f"{v:.0f}%"

    stalls = ", ".join(f"{r} {v:.3g}" for r, v in kernel.get("top_stalls") or [])
    read, written = kernel.get("dram_read_bytes"), kernel.get("dram_write_bytes")
    moved = (
        f" ({read / 1e6:.1f} MB read, {written / 1e6:.1f} MB written)"
        if read is not None and written is not None
        else ""
    )
    return (
        f"{kernel.get('kernel')}: DRAM {pct(kernel.get('dram_pct'))}{moved} | L2 hit {pct(kernel.get('l2_hit_pct'))} | "
        f"occupancy {pct(kernel.get('achieved_occupancy_pct'))} achieved "
        f"({pct(kernel.get('theoretical_occupancy_pct'))} theoretical) | SM {pct(kernel.get('sm_throughput_pct'))}"
        + (f" | stalls: {stalls}" if stalls else "")
    )
