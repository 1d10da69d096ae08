"""The CI gate on synthetic runs (CPU, no measuring): correctness, regressions beyond the noise
interval against a baseline, the commands' exit codes and their messages."""

from __future__ import annotations

import json

import pytest
from testkit import rms_norm_record

from workbench.cli import main
from workbench.phases import Phases
from workbench.reports import gate
from workbench.suites import RatioRow
from workbench.suites.context import SuiteRun

DEVICE = "NVIDIA H100 80GB HBM3"


def rec(variant="gpu_row", ms=0.010, rel=0.01, *, hidden=4096, backend="gpu", passed=True, device=DEVICE, **extra):
    """One synthetic record: kernel time ``ms`` with a +-``rel`` interval."""
    return rms_norm_record(
        variant,
        hidden,
        ms,
        backend=backend,
        passed=passed,
        device_kind="cuda",
        device_name=device,
        params={"BLOCK_SIZE": 1024},
        timing_method="cuda-graph",
        kernel_lo_ms=ms * (1 - rel),
        kernel_hi_ms=ms * (1 + rel),
        max_abs_err=0.01 if passed else 3.0,
        **extra,
    )


def write_run(folder, records, failures=(), suite=True):
    folder.mkdir(parents=True, exist_ok=True)
    if suite:
        (folder / "records.json").write_text(json.dumps(records))
        body = {"suite": "smoke", "title": "t", "device_kind": "cuda", "device_name": DEVICE, "targets": []}
        body.update({"rows": [], "missing": {}, "failures": list(failures)})
        (folder / "suite.json").write_text(json.dumps(body))
    else:
        (folder / "rms_norm_records.json").write_text(json.dumps(records))
    return folder


# --- the rule ------------------------------------------------------------------------------------------
def test_slower_beyond_noise_and_pct_regresses():
    result = gate.check([rec(ms=0.0112)], [rec(ms=0.010)], pct=5)  # +12%, intervals +-1%
    assert not result.ok and [c.cell for c in result.regressions] == ["rms_norm/gpu_row forward bf16 hidden=4096"]
    assert "REGRESSION (> 5% beyond noise): rms_norm/gpu_row forward bf16 hidden=4096" in result.message()


def test_slower_within_pct_or_within_noise_passes():
    assert gate.check([rec(ms=0.0104)], [rec(ms=0.010)], pct=5).ok  # +4% < 5%
    noisy = gate.check([rec(ms=0.0112, rel=0.08)], [rec(ms=0.010, rel=0.08)], pct=5)  # +12%, intervals +-8%
    assert noisy.ok and not noisy.changes[0].beyond_noise
    assert gate.check([rec(ms=0.008)], [rec(ms=0.010)], pct=0).ok  # faster


def test_without_pct_nothing_regresses_but_changes_are_listed():
    result = gate.check([rec(ms=0.02)], [rec(ms=0.010)], None)
    assert result.ok and result.changes[0].beyond_noise and "not gated" in result.message()


def test_peers_new_cells_and_other_devices_are_not_gated():
    current = [rec("liger", ms=0.05, backend="peer"), rec(ms=0.05, hidden=8192), rec(ms=0.05, hidden=2048)]
    baseline = [rec("liger", ms=0.01, backend="peer"), rec(ms=0.01, hidden=2048, device="NVIDIA A100")]
    result = gate.check(current, baseline, pct=5)
    assert result.ok and not result.changes
    assert result.new == ["rms_norm/gpu_row forward bf16 hidden=8192"]
    assert "NVIDIA A100" in result.not_compared[0]


def test_a_record_without_interval_is_a_point():
    now, base = rec(ms=0.0106), rec(ms=0.010)
    for r in (now, base):
        r["kernel_ms"] = r["kernel_lo_ms"] = r["kernel_hi_ms"] = None
    result = gate.check([now], [base], pct=5)
    assert result.changes[0].timing == "ms_p50" and not result.ok


def test_wrong_results_fail_even_without_baseline():
    result = gate.check([rec(passed=False), rec("torch_eager", backend="torch", passed=False)])
    assert not result.ok and result.wrong == [
        "rms_norm/gpu_row forward bf16 rows=4096, hidden=4096 (BLOCK_SIZE=1024): check failed (max abs err 3)"
    ]
    assert gate.check([rec()], failures=["rms_norm_forward: gpu_row ...: could not run"]).ok is False


# --- workbench report DIR --check ----------------------------------------------------------------------
@pytest.mark.parametrize("suite", [True, False], ids=["suite-folder", "notebook-folder"])
def test_report_check_passes_and_fails_as_it_should(tmp_path, capsys, suite):
    base = write_run(tmp_path / "base", [rec(ms=0.010), rec(hidden=8192, ms=0.020)], suite=suite)
    fast = write_run(tmp_path / "fast", [rec(ms=0.0101), rec(hidden=8192, ms=0.019)], suite=suite)
    slow = write_run(tmp_path / "slow", [rec(ms=0.0101), rec(hidden=8192, ms=0.030)], suite=suite)
    gated = ["--baseline", str(base), "--fail-on-regression", "5"]
    assert main(["report", str(fast), "--check", *gated]) == 0
    assert "gate: PASSED" in capsys.readouterr().out
    assert main(["report", str(slow), "--check", *gated]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION (> 5% beyond noise): rms_norm/gpu_row forward bf16 hidden=8192" in out
    assert "hidden=4096" not in out.split("gate: FAILED")[0].split("REGRESSION")[1]
    assert json.loads((slow / "baseline.json").read_text())["regressions"] == [
        "rms_norm/gpu_row forward bf16 hidden=8192"
    ]
    assert main(["report", str(slow), "--check", "--baseline", str(base), "--fail-on-regression", "60"]) == 0
    wrong = write_run(tmp_path / "wrong", [rec(passed=False)], suite=suite)
    assert main(["report", str(wrong), "--check"]) == 1
    assert "WRONG RESULT: rms_norm/gpu_row forward bf16 rows=4096, hidden=4096" in capsys.readouterr().out


def test_report_check_fails_on_a_suite_failure(tmp_path, capsys):
    run = write_run(
        tmp_path / "run", [rec()], failures=["fused_forward: gpu_row forward hidden=512: could not run: boom"]
    )
    assert main(["report", str(run), "--check"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: fused_forward: gpu_row forward hidden=512: could not run" in out
    assert "gate: FAILED: 0 wrong results, 1 other failures" in out


def test_the_gate_counts_every_wrong_record_and_names_its_shape_dtype_and_output(tmp_path, capsys):
    """Four wrong records, two of them at the same axis value (issue 59: the gate said "2")."""
    bad = {"name": "y", "passed": False, "err_ratio": 6.2, "worst": "scale", "k": 2.0, "within_tolerance": True}
    records = [
        rec(passed=False, checks=[bad], dtype=dtype, problem={"rows": rows, "hidden": 4096})
        for dtype in ("bf16", "fp16")
        for rows in (1, 4096)
    ]
    suite_line = (
        "norm: gpu_row forward hidden=4096: WRONG RESULT (max abs err 3.0)"  # the same records, named by the suite
    )
    run = write_run(tmp_path / "run", records, failures=[suite_line])
    assert main(["report", str(run), "--check"]) == 1
    out = capsys.readouterr().out
    assert "gate: FAILED: 4 wrong results" in out and "other failures" not in out, out
    for dtype in ("bf16", "fp16"):
        for rows in (1, 4096):
            line = f"WRONG RESULT: rms_norm/gpu_row forward {dtype} rows={rows}, hidden=4096 (BLOCK_SIZE=1024): y: 6.2x"
            assert line in out, out
    assert "mean error away from zero; k=2" in out


# --- workbench bench --suite NAME --baseline DIR --fail-on-regression PCT ---------------------------------
@pytest.fixture
def fake_suite(monkeypatch):
    """``run_suite`` replaced by one that 'measures' the records given (no kernel runs)."""
    from workbench import suites as S

    state = {"records": [rec()]}

    def run_suite(suite, *, device, store, rep_ms, only, on_record, on_target):
        run = SuiteRun(suite.name, "cuda", DEVICE)
        run.records = list(state["records"])
        target = suite.targets[0]
        run.target_records[target.name] = list(range(len(run.records)))
        row = RatioRow(target.name, target.kind, target.title, target.family, target.mode, "hidden", 4096, "gpu_row")
        run.rows = [row]
        run.failures = S.failures(target, run.records)
        run.target_wall[target.name] = Phases().split(0.5)  # as the real run_suite does before on_target
        on_target(target, run)
        return run

    monkeypatch.setattr(S, "run_suite", run_suite)
    return state


def test_bench_suite_gate(tmp_path, capsys, fake_suite):
    base = write_run(tmp_path / "base", [rec(ms=0.010)])
    args = ["bench", "--suite", "smoke", "--device", "cpu", "--no-html", "--store", str(tmp_path / "r.sqlite")]
    gated = ["--baseline", str(base), "--fail-on-regression", "5"]
    fake_suite["records"] = [rec(ms=0.0101)]
    assert main(args + ["--out", str(tmp_path / "ok"), *gated]) == 0
    assert "gate: PASSED" in capsys.readouterr().out
    assert (tmp_path / "ok" / "baseline.json").exists()
    fake_suite["records"] = [rec(ms=0.013)]
    assert main(args + ["--out", str(tmp_path / "slow"), *gated]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION (> 5% beyond noise): rms_norm/gpu_row forward bf16 hidden=4096: 10 -> 13 µs (+30.0%" in out
    fake_suite["records"] = [rec(ms=0.010, passed=False)]
    assert main(args + ["--out", str(tmp_path / "wrong"), *gated]) == 1
    assert "WRONG RESULT" in capsys.readouterr().out


# --- its user errors: one line, exit 2 --------------------------------------------------------------------
def test_gate_user_errors(tmp_path, capsys):
    run = write_run(tmp_path / "run", [rec()])
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "records.json").write_text("{not json")
    cases = [
        (["report", str(run), "--check", "--fail-on-regression", "5"], "--fail-on-regression needs --baseline"),
        (["report", str(run), "--check", "--baseline", str(tmp_path / "nope")], "no such folder"),
        (["report", str(run), "--check", "--baseline", str(empty)], "holds no records.json"),
        (["report", str(run), "--check", "--baseline", str(tmp_path / "bad")], "records.json is not a records file"),
        (
            ["report", str(run), "--check", "--baseline", str(run), "--fail-on-regression", "-1"],
            "percentage of 0 or more",
        ),
        (["report", str(run), "--check", "--baseline", str(run), "--fail-on-regression", "x"], "invalid float value"),
        (["report", str(tmp_path / "nope"), "--check"], "no such folder"),
        (["report", str(empty)], "holds no records.json"),
        (["report", str(run), "--out", str(tmp_path / "o")], "not both"),
        (["bench", "--suite", "smoke", "--fail-on-regression", "5"], "--fail-on-regression needs --baseline"),
        (["bench", "--suite", "smoke", "--baseline", str(empty)], "holds no records.json"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        lines = [line for line in captured.err.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], (argv, lines)
        assert "Traceback" not in captured.err + captured.out
