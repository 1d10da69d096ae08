"""``workbench profile`` and its Nsight Compute parser: counters read from the committed H100
fixtures; every failure one line with exit code 2 (no ncu, no permission, a child that outlives
its time limit, a configuration that fails under ncu)."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest
import torch

from workbench import ncu
from workbench.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
RMS = FIXTURES / "h100_rms_norm_forward_raw.csv"
BLOCK_SPARSE = FIXTURES / "h100_block_sparse_forward_raw.csv"


# --- the parser --------------------------------------------------------------------------------
def test_parser_reads_one_kernel_with_thousands_separators():
    (k,) = ncu.parse(RMS.read_text())
    assert k["kernel"] == "_rms_norm_forward_kernel"
    assert (k["grid"], k["block"]) == ("(4096, 1, 1)", "(512, 1, 1)")
    assert k["duration_ns"] == 89024.0 and k["grid_size"] == 4096.0
    assert (k["dram_pct"], k["l2_hit_pct"], k["sm_throughput_pct"]) == (82.79, 49.93, 39.57)
    assert (k["achieved_occupancy_pct"], k["theoretical_occupancy_pct"]) == (45.58, 50.0)
    assert k["registers"] == 64 and k["limit_registers"] == 2


def test_parser_skips_non_csv_lines_and_keeps_launch_order():
    text = BLOCK_SPARSE.read_text()
    assert text.startswith("==PROF==")  # the fixture is ncu's stdout as it came, with its messages
    kernels = ncu.parse(text)
    assert [k["kernel"] for k in kernels] == ["_sum_forward_kernel", "_sum_combine_kernel"]
    assert kernels[0]["shared_dynamic_bytes"] == 6144.0 and kernels[1]["grid_size"] == 16.0


def test_stall_reasons_are_sorted_and_selected_is_not_a_stall():
    for k in ncu.parse(RMS.read_text()) + ncu.parse(BLOCK_SPARSE.read_text()):
        values = list(k["stalls"].values())
        assert values == sorted(values, reverse=True) and len(values) > 10
        assert "selected" not in k["stalls"]
        assert k["top_stalls"] == list(k["stalls"].items())[: ncu.TOP_STALLS]
    (rms,) = ncu.parse(RMS.read_text())
    assert rms["top_stalls"][0] == ("long_scoreboard", 7.34)
    line = ncu.summary_line(rms)
    assert "DRAM 83%" in line and "L2 hit 50%" in line and "long_scoreboard 7.34" in line


def test_parser_gives_nothing_for_output_without_rows():
    assert ncu.parse("==PROF== Disconnected from process 1\n") == []
    header_and_units = "\n".join(RMS.read_text().splitlines()[:2])
    assert ncu.parse(header_and_units) == []


def test_command_asks_for_the_counters_it_reads():
    cmd = ncu.command("/x/ncu", ["python", "-m", "workbench.profile_child", "{}"])
    head = ["/x/ncu", "--profile-from-start", "off", "--csv", "--page", "raw", "--print-units", "base", "--metrics"]
    assert cmd[:9] == head  # base units: durations in ns and bytes in bytes, however large
    for metric in ncu.COUNTERS.values():
        assert metric in cmd[9]
    assert cmd[10:] == ["python", "-m", "workbench.profile_child", "{}"]


def test_summary_says_the_dram_bytes_where_the_counters_have_them():
    (rms,) = ncu.parse(RMS.read_text())  # taken before the bytes were asked for
    assert "MB read" not in ncu.summary_line(rms)
    line = ncu.summary_line(dict(rms, dram_read_bytes=16.8e6, dram_write_bytes=8.4e6))
    assert "DRAM 83% (16.8 MB read, 8.4 MB written)" in line


# --- the command's errors ----------------------------------------------------------------------
def _fake_ncu(tmp_path, body: str) -> str:
    path = tmp_path / "ncu"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _one_line_error(capsys, argv) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_no_ncu_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without ncu
    monkeypatch.delenv(ncu.ENV_NCU, raising=False)
    monkeypatch.setattr(ncu, "NCU_PLACES", ())
    line = _one_line_error(capsys, ["profile", "rms_norm", "--variant", "gpu_row"])
    assert "Nsight Compute (ncu) not found" in line and "--ncu" in line
    line = _one_line_error(capsys, ["profile", "rms_norm", "--ncu", str(tmp_path / "missing")])
    assert "is not an executable" in line


def test_profiler_not_allowed_is_one_line(capsys, tmp_path):
    fake = _fake_ncu(
        tmp_path,
        'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU '
        'Performance Counters on the target device 0."; exit 1',
    )
    line = _one_line_error(capsys, ["profile", "rms_norm", "--ncu", fake, "--no-record"])
    assert "ERR_NVGPUCTRPERM" in line and "NVreg_RestrictProfilingToAdminUsers=0" in line


def test_a_child_that_outlives_the_limit_is_killed_and_one_line(capsys, tmp_path):
    fake = _fake_ncu(tmp_path, "sleep 60")
    started = time.perf_counter()
    line = _one_line_error(capsys, ["profile", "rms_norm", "--ncu", fake, "--timeout-s", "1", "--no-record"])
    assert time.perf_counter() - started < 20
    assert "did not finish within 1 s" in line and "--timeout-s" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="the child needs to fail for want of CUDA")
def test_a_configuration_failing_under_ncu_is_its_own_one_line(capsys, tmp_path):
    # The fake ncu drops ncu's own nine arguments and runs the real child, which cannot get CUDA
    # on this machine and says so after its mark.
    fake = _fake_ncu(tmp_path, 'shift 9; exec "$@"')
    line = _one_line_error(capsys, ["profile", "scalar_ops", "--variant", "triton", "--ncu", fake, "--no-record"])
    assert line.startswith("workbench profile: the configuration failed under ncu:")
    assert "cuda" in line


def test_bad_input_is_one_line_before_ncu_runs(capsys, tmp_path):
    fake = _fake_ncu(tmp_path, "echo should-not-run; exit 3")
    assert "no such tile" in _one_line_error(capsys, ["profile", "rms_norm", "--param", "NOPE=1", "--ncu", fake])
    assert "CUDA kernels only" in _one_line_error(capsys, ["profile", "rms_norm", "--device", "cpu"])
    assert "runs no kernel of ours" in _one_line_error(capsys, ["profile", "rms_norm", "--variant", "torch_eager"])
    assert "one value" in _one_line_error(capsys, ["profile", "rms_norm", "--param", "BLOCK_SIZE=64,128"])
    assert "--problem hidden: give one value" in _one_line_error(
        capsys, ["profile", "rms_norm", "--problem", "hidden=64,128", "--ncu", fake]
    )
    assert "--dtype: give one value" in _one_line_error(capsys, ["profile", "rms_norm", "--dtype", "bf16,fp32"])
    assert "no such knob" in _one_line_error(capsys, ["profile", "rms_norm", "--problem", "width=64"])
    assert "is not supported" in _one_line_error(capsys, ["profile", "rms_norm", "--dtype", "int8"])


def test_counters_from_ncu_output_are_printed_per_kernel(capsys, tmp_path):
    fake = _fake_ncu(tmp_path, f'cat "{BLOCK_SPARSE}"')
    code = main(["profile", "block_sparse", "--variant", "gpu", "--ncu", fake, "--no-record"])
    out = capsys.readouterr().out
    assert code == 0
    assert "_sum_forward_kernel: DRAM 7%" in out and "_sum_combine_kernel:" in out


def test_output_without_kernels_is_one_line(capsys, tmp_path):
    fake = _fake_ncu(tmp_path, 'echo "==PROF== No kernels were profiled."')
    line = _one_line_error(capsys, ["profile", "rms_norm", "--ncu", fake, "--no-record"])
    assert "ncu profiled no kernel" in line and "No kernels were profiled" in line


@pytest.mark.gpu
@pytest.mark.exclusive
def test_gpu_profile_records_counters_beside_the_facts(tmp_path):
    """On the H100 with ncu installed: one configuration profiled and stored with its counters."""
    from workbench.store import Store

    if ncu.find_ncu() is None:
        pytest.skip("ncu is not installed here")
    store = tmp_path / "records.sqlite"
    code = main(
        ["profile", "rms_norm", "--variant", "gpu_row", "--problem", "rows=4096,hidden=16384", "--device", "cuda"]
        + ["--dtype", "bf16", "--store", str(store), "--rep-ms", "20"]
    )
    assert code == 0
    (rec,) = Store(store).records()
    (k,) = rec["counters"]["kernels"]
    assert k["kernel"] == "_rms_norm_forward_kernel" and 0 < k["dram_pct"] <= 100
    assert k["theoretical_occupancy_pct"] == pytest.approx(
        rec["compile_facts"]["kernels"][0]["occupancy"]["occupancy_pct"]
    )


def test_a_bounded_child_past_its_timeout_is_killed_with_what_it_started(tmp_path):
    """``run_bounded`` (ncu's runner): past the timeout the child's whole session goes, a
    grandchild included, and TimeoutExpired is raised; within it, output and exit code come back."""
    import os
    import subprocess
    import sys

    from workbench.children import run_bounded

    assert run_bounded([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"], 30) == ("out\n", "", 3)
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen(['sleep', '60']); open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    started = time.perf_counter()
    with pytest.raises(subprocess.TimeoutExpired):
        run_bounded([sys.executable, "-c", script], 2)
    assert time.perf_counter() - started < 20
    grandchild = int(pid_file.read_text())
    for _ in range(100):  # SIGKILL is asynchronous; a killed orphan may linger unreaped (a zombie)
        try:
            os.kill(grandchild, 0)
            stat = open(f"/proc/{grandchild}/stat").read()
        except (ProcessLookupError, FileNotFoundError):
            break
        if stat.rpartition(")")[2].split()[0] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the grandchild {grandchild} outlived its killed session")
