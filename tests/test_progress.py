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
