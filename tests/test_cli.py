"""The workbench command line."""

from __future__ import annotations

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
