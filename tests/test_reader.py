"""The reader-first report's pieces on a synthetic suite run (no notebook, no device): the
headline chart, the bandwidth and kernel-vs-call charts, summary.md with and without a browser,
the environment as tables and the path scrubbing."""

from __future__ import annotations

import json
from pathlib import Path

from testkit import rms_norm_record

from workbench.reports import reader
from workbench.reports import suite as R

COPY_BW = 3000.0


def _rec(variant, x, ms, backend="gpu", **extra):
    return rms_norm_record(
        variant,
        x,
        ms,
        backend=backend,
        call_ms=ms * 3,
        host_ms=ms,
        gbps=1000.0 / ms / 100,
        copy_bw_gbps=COPY_BW,
        **extra,
    )


def _row(x, ratio, lo, hi, status, **extra):
    return {
        "target": "rms_norm_forward",
        "kind": "versus",
        "title": "1. RMSNorm forward",
        "family": "rms_norm",
        "mode": "forward",
        "x_name": "hidden",
        "x": x,
        "ours": "gpu_row",
        "ours_us": 10.0,
        "peer": "liger",
        "peer_us": 10.0 * ratio,
        "ratio": ratio,
        "ratio_lo": lo,
        "ratio_hi": hi,
        "pct_copy_bw": 80.0,
        "min_ratio": 1.0,
        "min_pct_bw": None,
        "status": status,
        "reason": "",
        **extra,
    }


def synthetic_run(tmp_path: Path) -> dict:
    records = [_rec("gpu_row", 1024, 0.010), _rec("liger", 1024, 0.012, backend="peer")]
    records += [_rec("gpu_row", 2048, 0.020), _rec("liger", 2048, 0.019, backend="peer")]
    records += [_rec("gpu_row", 4096, 0.040), _rec("liger", 4096, 0.040, backend="peer")]
    target = {
        "name": "rms_norm_forward",
        "title": "1. RMSNorm forward",
        "kind": "versus",
        "family": "rms_norm",
        "mode": "forward",
        "axis": "hidden",
        "values": [1024, 2048, 4096],
        "ours": "gpu_row",
        "peers": None,
        "min_ratio": [{"value": 1.0, "from_x": None}],
        "min_pct_bw": [],
        "records": list(range(len(records))),
    }
    rows = [
        _row(1024, 1.2, 1.15, 1.25, "MET"),
        _row(2048, 0.95, 0.9, 0.99, "MISSED"),
        _row(4096, 1.0, 0.97, 1.03, "within noise"),
    ]
    body = {
        "suite": "synthetic",
        "title": "RMSNorm forward against Liger",
        "device_kind": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "targets": [target],
        "missing": {},
        "rows": rows,
        "failures": [],
    }
    (tmp_path / "suite.json").write_text(json.dumps(body))
    (tmp_path / "records.json").write_text(json.dumps(records))
    env = {"device_name": "NVIDIA H100 80GB HBM3", "date": "2026-11-22", "parts": [{"round": "r7", "commit": "abc"}]}
    (tmp_path / "environment.json").write_text(json.dumps(env))
    return R.load(tmp_path)


def test_headline_chart_has_intervals_verdict_colours_and_thresholds(tmp_path):
    fig = R.headline_figure(synthetic_run(tmp_path))
    points = fig.data[0]
    assert list(points.y) == [1.2, 0.95, 1.0]
    assert [round(v, 3) for v in points.error_y.array] == [0.05, 0.04, 0.03]
    assert [round(v, 3) for v in points.error_y.arrayminus] == [0.05, 0.05, 0.03]
    assert list(points.marker.color) == [R.VERDICT_MARKERS[s] for s in ("MET", "MISSED", "within noise")]
    names = [t.name for t in fig.data]
    assert "threshold" in names and {"MET", "MISSED", "within noise"} <= set(names)
    assert fig.layout.yaxis.type == "log"


def test_bandwidth_and_kernel_call_charts(tmp_path):
    run = synthetic_run(tmp_path)
    bw = R.bandwidth_figure(run)
    assert [t.name for t in bw.data][:2] == ["ours", "best peer"] and list(bw.data[0].y) == [1000.0, 500.0, 250.0]
    assert any(f"measured copy bandwidth {COPY_BW:.0f} GB/s" == t.name for t in bw.data)
    kc = R.kernel_call_figure(run)
    assert [round(v, 6) for v in kc.data[0].y] == [10.0, 20.0, 40.0] and [round(v, 6) for v in kc.data[1].y] == [
        30.0,
        60.0,
        120.0,
    ]


def test_summary_without_a_browser_still_lists_the_numbers(tmp_path, monkeypatch):
    run = synthetic_run(tmp_path)

    def no_browser(figs, folder, formats=("svg", "png")):
        return {}, "no browser for kaleido's export (install chromium): ChromeNotFoundError"

    monkeypatch.setattr(R, "export_figures", no_browser)
    text = R.write_summary(run, tmp_path).read_text()
    assert text.startswith("# ")
    assert (
        "| 1. RMSNorm forward | hidden=1024 | 10.0 | liger | 12.0 | 1.2 [1.15, 1.25] | 80 | - | ratio ≥ 1 | - | **MET** |"
        in text
    )
    assert "within noise" in text and "**MISSED**" in text
    assert "Figures: not exported (no browser for kaleido's export" in text
    assert "Ours against the best peer: 1 MET, 1 within noise, 1 MISSED of 3 points." in text


def test_summary_links_the_exported_figures(tmp_path, monkeypatch):
    run = synthetic_run(tmp_path)
    monkeypatch.setattr(
        R, "export_figures", lambda figs, folder: ({"headline": ["figures/headline.svg", "figures/headline.png"]}, None)
    )
    text = R.write_summary(run, tmp_path).read_text()
    assert "headline: [SVG](figures/headline.svg), [PNG](figures/headline.png)" in text
    assert "![headline](figures/headline.svg)" in text


def test_environment_is_tables_not_raw_lists(tmp_path):
    page = reader.environment_html(
        {"device_name": "H100", "l2_bytes": 52428800, "parts": [{"round": "r7", "commit": "abc"}]}
    )
    assert "[{" not in page and "{'" not in page
    assert ">r7</td>" in page and ">commit</th>" in page and "50 MiB" in page


def test_local_paths_are_scrubbed(tmp_path):
    here = str(Path.cwd())
    text = f"read {tmp_path}/records.json, wrote {tmp_path}, from {here}/notebooks and {tmp_path}er"
    clean = reader.scrub_paths(text, [tmp_path])
    assert str(tmp_path) + "/" not in clean and here not in clean
    assert clean.startswith("read records.json, wrote ., from notebooks and ")


def test_the_report_shows_the_baseline_comparison(tmp_path):
    from workbench.reports import gate

    run = synthetic_run(tmp_path)
    slower = [dict(r, kernel_ms=r["kernel_ms"] * 1.5) for r in run["records"]]
    gate.write(gate.check(slower, run["records"], 5, baseline_name="main"), tmp_path)
    text = R.baseline_html(R.load(tmp_path))
    assert "Against main: 3 cells of ours compared" in text and text.count(">REGRESSED<") == 3 and "+50.0%" in text


def test_a_command_line_names_no_absolute_path(tmp_path):
    argv = ["--suite", "smoke", "--out", str(tmp_path / "o"), f"--store={tmp_path}/r.sqlite", "--rep-ms", "5"]
    assert reader.scrub_command(argv) == "--suite smoke --out …/o --store=…/r.sqlite --rep-ms 5"


def test_the_headline_gives_the_runs_wall_time_and_its_parts():
    wall_line = R.wall_line
    wall = {
        "measuring": 371.9,
        "from_process_start": 377.5,
        "targets": {
            "a": {"setup": 2.0, "compile": 20.5, "timing": 6.0, "wall": 28.5},
            "b": {"setup": 1.0, "compile": 10.0, "timing": 4.0, "wall": 15.0},
        },
    }
    assert wall_line(wall) == (
        "Wall time: 372 s measuring every target, 378 s from the process's start "
        "(setup 3 s, compile 30 s, timing 10 s)."
    )
    assert wall_line({"measuring": 10.0, "from_process_start": None, "targets": {}}) == (
        "Wall time: 10 s measuring every target."
    )
    assert wall_line(None) is None and wall_line({}) is None
