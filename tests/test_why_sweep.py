"""benchmarks/why_sweep.py (the tool behind reports/h100-why) runs end to end in the interpreter."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / "benchmarks" / "why_sweep.py"


def _tool():
    spec = importlib.util.spec_from_file_location("why_sweep", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


def test_why_sweep_runs_in_the_interpreter_and_reports_the_facts(tmp_path, capsys):
    tool = _tool()
    assert tool.main(["--device", "cpu", "--quick", "--only", "rms_norm", "--out", str(tmp_path)]) == 0
    (sweep,) = [s for s in tool.QUICK if s.family == "rms_norm"]
    records = json.loads((tmp_path / "records.json").read_text())
    assert len(records) == len(sweep.xs) * len(sweep.ys)
    for r in records:
        assert r["passed"] and r["compile_facts"]["available"] is False
        assert {(k["name"], k["regs"]) for k in r["compile_facts"]["kernels"]} == {("_rms_norm_forward_kernel", None)}
    page = (tmp_path / "report.html").read_text()
    assert page.count("plotly-graph-div") == 2  # the time and occupancy heatmaps
    # plotly writes "/" as \u002f inside its JSON
    assert "registers, spills, occupancy: n\\u002fa (interpreter)" in page  # the time heatmap's hover
    assert ">n/a (interpreter)</td>" in page  # the facts table
    summary = (tmp_path / "summary.md").read_text().splitlines()
    table = [line for line in summary if line.startswith("| BLOCK_SIZE=")]
    assert len(table) == len(records)
    assert all("n/a (interpreter)" in line for line in table)
    # --render writes the same page again from the records alone (what a committed report keeps)
    (tmp_path / "report.html").unlink()
    assert tool.main(["--quick", "--render", str(tmp_path)]) == 0
    again = (tmp_path / "report.html").read_text()
    assert again.count("plotly-graph-div") == 2 and ">n/a (interpreter)</td>" in again


def test_why_sweep_render_needs_records(tmp_path, capsys):
    assert _tool().main(["--render", str(tmp_path)]) == 2
    assert "records with a summary.md" in capsys.readouterr().err


def test_why_sweep_names_an_unknown_family(tmp_path, capsys):
    assert _tool().main(["--device", "cpu", "--quick", "--only", "nope", "--out", str(tmp_path)]) == 2
    assert "no sweep of that family" in capsys.readouterr().err
