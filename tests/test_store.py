"""Results store: round trip, exports with the common columns, nothing lost on a crash."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from workbench.measure import measure
from workbench.store import COMMON_COLUMNS, Store, write_csv

REPO = Path(__file__).resolve().parents[1]


def _record(**problem):
    return measure("rms_norm", "torch_eager", device="cpu", dtype="fp32", problem=problem or {"rows": 3, "hidden": 8})


def test_round_trip_frame_csv_json(store, tmp_path):
    recs = [_record(rows=3, hidden=h) for h in (8, 16)]
    for r in recs:
        store.append(r)
    assert len(store) == 2
    frame = store.frame()
    assert list(frame["x_value"]) == [8, 16]
    assert frame["passed"].all()
    assert frame.loc[0, "problem"]["hidden"] == 8

    path = store.to_csv(tmp_path / "r.csv")
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0])[: len(COMMON_COLUMNS)] == list(COMMON_COLUMNS)
    assert rows[1]["kernel_name"] == "rms_norm" and rows[1]["kernel_provider"] == "torch_eager"
    assert rows[1]["x_name"] == "hidden" and rows[1]["x_value"] == "16"
    assert float(rows[1]["y_value_20"]) <= float(rows[1]["y_value_50"]) <= float(rows[1]["y_value_80"])
    assert json.loads(rows[1]["extra_benchmark_config_str"])["hidden"] == 16
    assert rows[1]["passed"] == "True" and rows[1]["device_kind"] == "cpu"

    data = json.loads(store.to_json(tmp_path / "r.json").read_text())
    assert data[0]["checks"][0]["name"] == "y"


def test_reopen_appends(tmp_path):
    path = tmp_path / "s.sqlite"
    s = Store(path)
    s.append(_record())
    s.close()
    s2 = Store(path)
    s2.append(_record())
    assert len(s2) == 2


def test_a_crash_mid_sweep_loses_nothing_already_measured(tmp_path):
    path = tmp_path / "crash.sqlite"
    script = textwrap.dedent(
        f"""
        import os
        from workbench.measure import measure
        from workbench.store import Store
        store = Store({str(path)!r})
        for i, hidden in enumerate([8, 16, 32, 64]):
            measure("rms_norm", "torch_eager", device="cpu", dtype="fp32",
                    problem={{"rows": 2, "hidden": hidden}}, store=store, rep_ms=1)
            if i == 2:
                os._exit(9)   # die like a killed kernel: no close, no flush, no atexit
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 9
    hidden = [r["problem"]["hidden"] for r in Store(path).records()]
    assert hidden == [8, 16, 32]


def test_error_records_export(tmp_path):
    bad = measure("rms_norm", "gpu_row", device="cpu", params={"BLOCK_SIZE": 16}, on_error="record")
    assert bad.error and "smaller than hidden" in bad.error and bad.passed is False
    rows = list(csv.DictReader(write_csv([bad], tmp_path / "e.csv").open()))
    assert "smaller than hidden" in rows[0]["error"]


def test_the_same_size_copy_columns_round_trip_through_csv(tmp_path):
    """A record's launches and same-size copy come back from the CSV as they went in (numbers as
    numbers, the method as text); a record from before them reads back with them empty."""
    from workbench.store import OUR_COLUMNS, read_records

    new = _record().to_dict()
    new.update(launches=3, launches_source="profiler", same_size_copy_ms=0.0125, same_size_copy_lo_ms=0.012,
               same_size_copy_hi_ms=0.013, same_size_copy_gbps=1342.2, same_size_copy_method="profiler, L2 flushed",
               pct_same_size_copy=88.5, pct_same_size_copy_lo=85.0, pct_same_size_copy_hi=91.0)  # fmt: skip
    old = {k: v for k, v in _record().to_dict().items() if "same_size" not in k and not k.startswith("launches")}
    for col in ("launches", "same_size_copy_gbps", "pct_same_size_copy", "pct_same_size_copy_lo"):
        assert col in OUR_COLUMNS
    back_new, back_old = read_records(write_csv([new, old], tmp_path / "records.csv"))
    assert back_new["launches"] == 3 and back_new["launches_source"] == "profiler"
    assert back_new["pct_same_size_copy"] == 88.5 and back_new["same_size_copy_lo_ms"] == 0.012
    assert back_new["same_size_copy_method"] == "profiler, L2 flushed"
    assert back_old["launches"] is None and back_old["pct_same_size_copy"] is None
