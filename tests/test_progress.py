"""Long commands say where they are: a line per step, and a heartbeat whenever a step runs long."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

from workbench.progress import Progress

ROOT = Path(__file__).resolve().parent.parent


def test_a_long_step_gets_heartbeat_lines_and_steps_are_numbered(capsys):
    with Progress(2, "demo", stream=io.StringIO(), quiet_s=0.3) as shown:
        shown.doing("the long step")
        time.sleep(1.2)
        shown.line("first done")
        shown.line("second done")
    out = capsys.readouterr().out.splitlines()
    beats = [line for line in out if line.startswith("… still running the long step")]
    assert len(beats) >= 2, out
    assert "[1/2] first done" in out and "[2/2] second done" in out


def test_workbench_report_is_never_silent_for_more_than_five_seconds(tmp_path):
    """A notebook runs for many seconds without a line of its own: the heartbeat fills the gaps."""
    cmd = [sys.executable, "-m", "workbench", "report", "--device", "cpu", "--quick", "--only", "scalar_ops"]
    cmd += ["--out", str(tmp_path / "r")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    stamps, lines = [], []
    for line in proc.stdout:
        stamps.append(time.monotonic())
        lines.append(line.rstrip())
    assert proc.wait(timeout=300) == 0, "\n".join(lines[-20:])
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert max(gaps) <= 6.5, f"{max(gaps):.1f} s without a line: {lines}"
    assert any(line.startswith("… still running scalar_ops.ipynb") for line in lines), lines
    assert any("scalar_ops.ipynb: ok in" in line for line in lines), lines


def test_a_sweep_says_cannot_run_apart_from_failures_with_one_line_per_failure(capsys):
    """The sweep engine's progress in a log: a configuration a family's check refuses is counted
    as "cannot run" and prints nothing of its own; one that truly failed prints one line naming
    it, its error's first line and its full log's file; the status line counts both apart."""
    from workbench.sweep.engine import Progress as SweepProgress

    refused = {"kernel": "rms_norm", "variant": "gpu_multirow", "params": {"BLOCK_SIZE_M": 16}, "problem": {},
               "error": "BLOCK_SIZE_M=16 x BLOCK_SIZE=16384 = 262144 elements exceeds the tile", "passed": False,
               "cannot_run": True}  # fmt: skip
    broken = {"kernel": "rms_norm", "variant": "gpu_multirow", "params": {"BLOCK_SIZE_M": 2, "num_warps": "auto"},
              "problem": {"rows": 8, "hidden": 100}, "error": "PTXASError: ptxas failed\nline 2 of the PTX\nline 3",
              "passed": False, "log": "OUT/logs/failed/0001-rms_norm-gpu_multirow.log"}  # fmt: skip
    fine = {"kernel": "rms_norm", "variant": "gpu_row", "params": {}, "problem": {}, "error": None, "passed": True}
    sweep = SweepProgress(total=3)
    with Progress(3, "sweep", stream=io.StringIO()) as shown:
        show = shown.sweep(every_s=3600)
        for record, failed, refusals in ((refused, 0, 1), (broken, 1, 1), (fine, 1, 1)):
            sweep.done += 1
            sweep.failed, sweep.cannot_run = failed, refusals
            show(sweep, record)
    out = capsys.readouterr().out.splitlines()
    failures = [line for line in out if line.startswith("failed:")]
    assert failures == [
        "failed: rms_norm/gpu_multirow BLOCK_SIZE_M=2 [rows=8 hidden=100]: PTXASError: ptxas failed "
        "(full log: OUT/logs/failed/0001-rms_norm-gpu_multirow.log)"
    ]
    assert not any("262144" in line for line in out)  # a refused tile prints no line of its own
    assert out[-1].startswith("3/3 done, 1 cannot run, 1 failed, 0 remaining")
