"""The workbench command line."""

from __future__ import annotations

import pytest
import testkit

from workbench.cli import main
from workbench.store import Store


def test_bench_prints_a_table_and_stores_records(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    csv_path = tmp_path / "r.csv"
    rc = main(
        [
            "bench",
            "rms_norm",
            "--device",
            "cpu",
            "--dtype",
            "bf16",
            "--hidden",
            "7,123",
            "--rows",
            "3",
            "--mode",
            "forward,full",
            "--variants",
            "gpu_row,npu,torch_eager",
            "--rep-ms",
            "1",
            "--store",
            str(db),
            "--csv",
            str(csv_path),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "GB/s" in out and "%BW" in out and "peakMB" in out and "max_err" in out
    assert out.count("interpreter-wall") >= 8
    assert len(Store(db)) == 12 and csv_path.exists()


def test_bench_same_size_copy_on_the_cpu_says_it_is_not_measured(tmp_path, capsys):
    from workbench.store import Store

    db = tmp_path / "r.sqlite"
    argv = ["bench", "rms_norm", "--device", "cpu", "--quick", "--variants", "gpu_multirow", "--rep-ms", "1"]
    assert main(argv + ["--same-size-copy", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "%same" in out and "n/a (CPU)" in out
    (rec,) = Store(db).records()
    assert rec["launches"] == 1 and rec["same_size_copy_method"].startswith("n/a (CPU)")


def test_bench_bad_tile_is_reported_not_raised(tmp_path, capsys):
    rc = main(
        ["bench", "rms_norm", "--device", "cpu", "--quick", "--variants", "gpu_row", "--param", "BLOCK_SIZE=64"]
        + ["--store", str(tmp_path / "r.sqlite"), "--rep-ms", "1"]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "ERROR" in out and "smaller than hidden=300" in out


def test_unknown_family_and_device(capsys):
    assert main(["bench", "nope"]) == 2
    assert main(["bench", "rms_norm", "--device", "tpu"]) == 2
    assert "is not a device kind" in capsys.readouterr().err


def test_list(capsys):
    main(["list"])
    assert "rms_norm               RMSNorm: gpu_row" in capsys.readouterr().out


# --- user errors: one line that says what to change, exit 2, never a traceback ------------------
USER_ERRORS = [
    (["bench", "rms_norm", "--device", "cpu", "--hidden", "abc"], "hidden='abc' must be an integer"),
    (["bench", "rms_norm", "--device", "cpu", "--rows", "0"], "rows=0 is out of range"),
    (["bench", "rms_norm", "--device", "cpu", "--weight", "maybe"], "weight='maybe' must be true or false"),
    (["bench", "rms_norm", "--device", "cpu", "--param", "BLOCK_SIZE=abc"], "BLOCK_SIZE='abc' is not allowed"),
    (["bench", "rms_norm", "--device", "cpu", "--param", "NOPE=3"], "--param NOPE: no chosen variant has this tile"),
    (["bench", "rms_norm", "--device", "cpu", "--param", "=3"], "--param expects NAME=VALUE"),
    (["bench", "rms_norm", "--device", "cpu", "--variants", "nope"], "rms_norm has no variant 'nope'"),
    (["bench", "rms_norm", "--device", "cpu", "--mode", "sideways"], "--mode sideways is not a mode of rms_norm"),
    (["bench", "rms_norm", "--device", "cpu", "--dtype", "fp64"], "dtype='fp64' is not supported"),
    (["bench", "rms_norm", "--device", "cpu", "--rep-ms", "0"], "the timing budget must be a positive number"),
    (["bench", "rms_norm", "--device", "tpu"], "is not a device kind"),
    (["bench", "nope"], "unknown kernel family 'nope'"),
    (["bench", "--suite", "nope"], "unknown suite 'nope'"),
    (["bench", "--suite", "smoke", "--only", "nope"], "suite 'smoke' has no target 'nope'"),
    (["bench", "rms_norm", "--device", "cpu", "--rep-ms", "abc"], "argument --rep-ms: invalid float value: 'abc'"),
    (["bench", "rms_norm", "--device", "cpu", "--bogus"], "unrecognized arguments: --bogus"),
    (["bench", "rms_norm", "--device", "cpu", "--hidden", "1024,,abc"], "hidden='abc' must be an integer"),
    (["bench", "rms_norm", "--device", "cpu", "--hidden", ","], "--hidden needs at least one value"),
    (["bench", "rms_norm", "--device", "cuda"], "device='cuda' is not available"),
    (["bench", "rms_norm", "--device", "cpu", "--csv", "{file}/x.csv"], "is a file, not a folder"),
    (["bench", "rms_norm", "--device", "cpu", "--json", "{dir}"], "is a folder; give a file name"),
    (["bench", "--suite", "smoke", "--rep-ms", "abc"], "argument --rep-ms: invalid float value"),
    (["bench", "--suite", "smoke", "--rep-ms", "-1"], "the timing budget must be a positive number"),
    (["bench", "--suite", "smoke", "--device", "tpu"], "is not a device kind"),
    (["bench", "--suite", "smoke", "--device", "cpu", "--out", "{file}"], "is a file; give a folder"),
    (["bench", "--suite", "smoke", "--bogus"], "unrecognized arguments: --bogus"),
    (["report", "--device", "tpu"], "is not a device kind"),
    (["report", "--jobs", "0"], "--jobs 0: give 1 or more"),
    (["report", "--timeout", "abc"], "argument --timeout: invalid int value"),
    (["report", "--device", "cpu", "--only", "nope", "--out", "{dir}/r"], "no notebook nope"),
    (["report", "--device", "cpu", "--out", "{file}"], "is a file; give a folder"),
    (["lab", "--port", "abc"], "argument --port: invalid int value"),
    (["npu-check", "--jobs", "abc"], "argument --jobs: invalid int value"),
    (["npu-check", "--family", "nope"], "unknown family nope"),
    (["sweep", "rms_norm", "--rep-ms", "abc"], "argument --rep-ms: invalid float value: 'abc'"),
    (["sweep", "rms_norm", "--param", "X"], "--param expects NAME=V1,V2"),
    (["sweep"], "the following arguments are required: family"),
]


@pytest.mark.parametrize("argv,message", USER_ERRORS, ids=[" ".join(a[:4]) for a, _ in USER_ERRORS])
def test_user_errors_are_one_line_and_exit_2(argv, message, capsys, tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    argv = [a.format(file=tmp_path / "a_file", dir=tmp_path) for a in argv]
    rc = main(argv + (["--store", str(tmp_path / "r.sqlite")] if argv[0] == "bench" and argv[1] != "nope" else []))
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert rc == 2, captured
    assert "Traceback" not in captured.err + captured.out
    assert len(lines) == 1 and message in lines[0], lines
    assert lines[0].startswith(f"workbench {argv[0]}: ")
    assert (tmp_path / "a_file").read_text() == "not a folder"


@pytest.mark.parametrize("suite", [False, True], ids=["family", "suite"])
@pytest.mark.parametrize("content", [b"hello, not a database\n", b"SQLite format 3\x00" + b"\x00" * 200])
def test_a_store_that_is_not_ours_is_refused_and_left_untouched(tmp_path, capsys, content, suite):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    argv = ["bench", "rms_norm", "--device", "cpu", "--quick", "--variants", "gpu_row", "--store", str(path)]
    if suite:
        argv = ["bench", "--suite", "smoke", "--device", "cpu", "--out", str(tmp_path / "o"), "--store", str(path)]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and "cannot be used as a results store" in err and "left untouched" in err
    assert path.read_bytes() == content


def test_a_store_with_someone_elses_records_table_is_refused(tmp_path):
    import sqlite3

    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE records (name TEXT)")
        conn.execute("INSERT INTO records VALUES ('theirs')")
    before = path.read_bytes()
    with pytest.raises(ValueError, match="not a workbench store"):
        Store(path)
    assert path.read_bytes() == before


# --- help and argument errors answer before torch loads (issue 58) -------------------------------
def test_bench_help_lists_the_options_every_family_shares(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--device", "--dtype", "--mode", "--variants", "--param", "--quick", "--rep-ms", "--store"):
        assert option in out, f"workbench bench --help does not list {option}"
    assert "rms_norm" in out and "block_sparse" in out  # the families it can measure
    assert "workbench bench FAMILY --help" in out  # where the family's own knobs are


def test_bench_without_a_family_is_one_line_naming_the_families(capsys):
    assert main(["bench"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "give a family" in err[0] and "rms_norm" in err[0], err


def test_help_and_a_misspelt_family_do_not_import_torch():
    """What makes `workbench bench --help` and `workbench bench nosuchfamily` answer at once (the
    seconds are measured by benchmarks/diagnostics/cli_latency.py, not here)."""
    code = (
        "import contextlib, io, sys\n"
        "from workbench.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    codes = [main(a) for a in (['bench', '--help'], ['bench', 'nosuchfamily'], ['bench', '--suite', 'nope'],\n"
        "             ['sweep', 'nosuch'], ['tune', 'nosuch'], ['report', '/nonexistent'], ['list', '--bogus'])]\n"
        "print(codes, sorted(m for m in ('torch', 'triton', 'pandas', 'plotly') if m in sys.modules))\n"
    )
    out = testkit.python_in_repo(code, timeout=120)
    assert out.stdout.strip() == "[0, 2, 2, 2, 2, 2, 2] []", out.stdout + out.stderr[-2000:]


def test_defaults_are_shown_for_the_options_that_have_one():
    from workbench.cli import sweep, tune

    text = " ".join(tune.build_parser().format_help().split())
    assert "--seed SEED seed of the random and bayes strategies (default: 0)" in text
    assert "(default: one per CPU core" in text  # --num-cpus
    assert "configurations per size (default: 30% of the grid, at least 8)" in text  # --trials
    assert "after N s (default: no limit)" in text  # --budget-s
    assert "(default: 0)" in " ".join(sweep.build_parser().format_help().split())  # sweep's --seed


def test_problem_errors_show_a_problem_knob_not_a_tile(capsys):
    assert main(["sweep", "rms_norm", "--problem", "hidden"]) == 2
    err = capsys.readouterr().err
    assert "e.g. --problem hidden=" in err and "BLOCK_SIZE" not in err, err


def test_a_missing_report_folder_is_named_once(capsys):
    assert main(["report", "/nonexistent"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("workbench report: /nonexistent: no such folder"), err  # the prefix once


def test_the_bench_table_keeps_its_columns_where_a_cell_is_empty():
    from types import SimpleNamespace

    from workbench.cli.tables import format_table

    def rec(**kw):
        base = dict(mode="forward", dtype="bf16", x_value=300, variant="gpu_row", ms_p50=0.1234, gbps=12.5)
        base.update(pct_copy_bw=3.0, peak_mb=1.5, max_abs_err=1e-3, err_ratio=0.8, passed=True, error=None)
        base.update(timing_method="t")
        base.update(kw)
        return SimpleNamespace(**base)

    empty = dict(ms_p50=None, gbps=None, pct_copy_bw=None, peak_mb=None, max_abs_err=None, err_ratio=None)
    same = dict(pct_same_size_copy=88.25, pct_same_size_copy_lo=86.0, pct_same_size_copy_hi=90.0)
    cpu = dict(same_size_copy_method="n/a (CPU): interpreter wall times")
    records = [rec(**same), rec(variant="npu", **empty), rec(gbps=None, peak_mb=None, **cpu)]
    lines = format_table(records).splitlines()
    header, rows = lines[0], lines[2:]
    # each column's right edge (where the header's right-aligned names end) holds a value's last character
    for name in ("ms", "GB/s", "%BW", "%same", "peakMB", "max_err", "err×ref"):
        end = header.index(f" {name} ") + len(name)
        for row in rows:
            assert row[end] != " " and row[end + 1] == " ", (name, row)
    # both shares: of the large copy, and of the same-size copy ("-" for a record without one)
    end = header.index(" %same ") + len("%same") + 1
    assert [row[end - 9 : end].strip() for row in rows] == ["88.2", "-", "n/a (CPU)"]
    assert rows[0].split()[6] == "3.0"  # %BW stays the large copy's


def test_the_lab_starts_jupyterlab_without_the_news_pop_up(tmp_path, capsys):
    import json

    from workbench.cli.lab import LAB_SETTINGS, install_lab_settings

    assert main(["lab", "--dry-run", "--notebooks", str(tmp_path)]) == 0
    command = capsys.readouterr().out.splitlines()[0]
    assert "--LabApp.news_url=None" in command and "NeverCheckForUpdate" in command
    path = install_lab_settings(tmp_path / "app")
    assert path == tmp_path / "app" / "settings" / "overrides.d" / "kernel-workbench.json"
    assert json.loads(path.read_text()) == LAB_SETTINGS
    notification = LAB_SETTINGS["@jupyterlab/apputils-extension:notification"]
    assert notification["fetchNews"] == "false"  # JupyterLab asks only while this is "none"
    (tmp_path / "locked").write_text("a file where the folder would go")
    assert install_lab_settings(tmp_path / "locked") is None  # cannot write: the lab still starts


def test_a_process_that_outlives_its_command_names_what_holds_it():
    """The console script's exit watchdog (workbench.cli.entry): a thread still running after the
    command returned keeps the process alive, and its stack reaches stderr once EXIT_WATCH_S has
    passed; the command's exit code stands. A process that ends at once prints no stack."""

    def run(hold_s: float):
        code = (
            "import sys, threading, time\n"
            "import workbench.cli as cli\n"
            "cli.EXIT_WATCH_S = 1\n"
            "def holder_of_the_exit():\n"
            f"    time.sleep({hold_s})\n"
            "threading.Thread(target=holder_of_the_exit).start()\n"
            "sys.argv = ['workbench', 'bench', 'nosuchfamily']\n"
            "cli.entry()\n"
        )
        return testkit.python_in_repo(code, timeout=120)

    held = run(4)
    assert held.returncode == 2 and "unknown kernel family" in held.stderr, held.stderr[-2000:]
    assert "Timeout" in held.stderr and "holder_of_the_exit" in held.stderr, held.stderr[-2000:]
    prompt = run(0)
    assert prompt.returncode == 2 and "Timeout" not in prompt.stderr, prompt.stderr[-2000:]


def test_a_process_that_used_cuda_leaves_after_pythons_teardown_and_before_the_native_one():
    """workbench.cli.entry where CUDA was used: the non-daemon threads joined and the atexit
    functions run, then the process leaves with the command's code before the native libraries'
    exit handlers (here one that aborts: had it run, the exit would be SIGABRT's)."""
    code = (
        "import atexit, ctypes, sys, threading, time\n"
        "import workbench.cli as cli\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.__cxa_atexit.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]\n"
        "libc.__cxa_atexit(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), print('thread done', flush=True))).start()\n"
        "cli._used_cuda = lambda: {used}\n"
        "sys.argv = ['workbench', 'bench', 'nosuchfamily']\n"
        "cli.entry()\n"
    )
    used = testkit.python_in_repo(code.format(used=True), timeout=120)
    assert used.returncode == 2 and "unknown kernel family" in used.stderr, used.stderr[-2000:]
    assert used.stdout.splitlines()[-2:] == ["thread done", "atexit ran"], used.stdout
    plain = testkit.python_in_repo(code.format(used=False), timeout=120)
    assert plain.returncode == -6, (plain.returncode, plain.stderr[-2000:])  # the native handler ran: abort
