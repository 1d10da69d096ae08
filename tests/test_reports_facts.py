"""The reports carry the compile facts: the sweep report's table of every configuration, the
suite report's ratio table column, and a roofline per family where records have device times."""

from __future__ import annotations

import pytest

import kernels
from workbench.measure import measure
from workbench.reports import sweep as sweep_report
from workbench.roofline import roofline_figure


@pytest.fixture(scope="module")
def cpu_records():
    recs = [
        measure("block_sparse", "gpu", device="cpu", dtype="fp32", quick=True, rep_ms=2, params={"TILE_K": k})
        for k in (8, 16)
    ]
    return [r.to_dict() for r in recs]


def _as_if_on_h100(rec: dict, kernel_ms: float) -> dict:
    """An interpreter record given the device fields a CUDA run fills (time, bandwidth), to check
    the roofline's arithmetic and roofs without a GPU."""
    gbps = rec["min_bytes"] / (kernel_ms * 1e-3) / 1e9
    return dict(
        rec,
        device_kind="cuda",
        device_name="NVIDIA H100 80GB HBM3",
        kernel_ms=kernel_ms,
        gbps=gbps,
        copy_bw_gbps=2900.0,
        pct_copy_bw=100 * gbps / 2900.0,
    )


def test_sweep_report_lists_every_configuration_with_its_facts(cpu_records):
    page = sweep_report.render(cpu_records, title="facts")
    assert "Every configuration, with its compile facts" in page
    assert "regs/spills/occ" in page and "n/a (interpreter)" in page
    rows = sweep_report.facts_rows(cpu_records)
    assert sorted("TILE_K=8" in r["configuration"] for r in rows) == [False, True]  # both tiles listed
    assert all(r["regs/spills/occ"] == "n/a (interpreter)" for r in rows)
    ms = [float(r["kernel ms"]) for r in rows]
    assert ms == sorted(ms)  # fastest first within the shape


def test_no_roofline_from_interpreter_records(cpu_records):
    assert roofline_figure(cpu_records, "block_sparse") is None
    assert "Roofline per family" not in sweep_report.render(cpu_records)


def test_compute_roofline_places_each_configuration_by_intensity_and_flops(cpu_records):
    spec = kernels.get("block_sparse")
    recs = [_as_if_on_h100(r, ms) for r, ms in zip(cpu_records, (0.02, 0.04))]
    fig = roofline_figure(recs, "block_sparse")
    points = [t for t in fig.data if t.mode == "markers"]
    xs = sorted(x for t in points for x in t.x)
    ys = sorted(y for t in points for y in t.y)
    flops = spec.flops(recs[0]["problem"], "forward")
    assert xs == pytest.approx([flops / recs[0]["min_bytes"]] * 2)
    assert ys == pytest.approx(sorted(flops / (ms * 1e-3) / 1e9 for ms in (0.02, 0.04)))
    roofs = [t.name for t in fig.data if t.mode == "lines"]
    assert roofs == ["measured copy 2900 GB/s roof", "DRAM peak 3352 GB/s roof"]
    assert "Roofline per family" in sweep_report.render(recs)


def test_bandwidth_roofline_for_a_family_that_moves_data():
    rec = measure("rms_norm", "gpu_row", device="cpu", dtype="fp32", quick=True, rep_ms=2).to_dict()
    fig = roofline_figure([_as_if_on_h100(rec, 0.01)], "rms_norm")
    (points,) = [t for t in fig.data if t.type == "scatter"]
    assert points.y[0] == pytest.approx(rec["min_bytes"] / 1e-5 / 1e9)
    assert points.name == "facts n/a"  # interpreter facts: no limit invented
    lines = [s.y0 for s in fig.layout.shapes]
    assert lines == [2900.0, 3352.0]


def test_rooflines_keep_each_device_to_its_own_roofs():
    """Records of two devices: one figure per device, each under its own copy bandwidth and
    datasheet peak; asking for one figure over both without naming a device is refused."""
    from workbench.roofline import figures

    rec = measure("rms_norm", "gpu_row", device="cpu", dtype="fp32", quick=True, rep_ms=2).to_dict()
    h100 = _as_if_on_h100(rec, 0.01)
    h200 = dict(h100, device_name="NVIDIA H200", copy_bw_gbps=4100.0)
    figs = figures([h100, h200])
    assert [[s.y0 for s in f.layout.shapes] for f in figs] == [[2900.0, 3352.0], [4100.0, 4800.0]]
    assert ["H100" in figs[0].layout.title.text, "H200" in figs[1].layout.title.text] == [True, True]
    with pytest.raises(ValueError, match="from 2 devices"):
        roofline_figure([h100, h200], "rms_norm")
    assert roofline_figure([h100, h200], "rms_norm", "NVIDIA H200").layout.shapes[0].y0 == 4100.0


def test_suite_ratio_table_has_the_facts_column():
    from workbench.reports.suite import ours_facts, ratio_table_html

    rec = measure("rms_norm", "gpu_row", device="cpu", dtype="fp32", quick=True, rep_ms=2).to_dict()
    run = {"targets": [{"name": "t", "ours": "gpu_row", "records": [0]}], "records": [rec]}
    facts = ours_facts(run)
    assert facts == {("t", str(rec["x_value"])): "n/a (interpreter)"}
    row = dict(
        target="t", title="T", family="rms_norm", mode="forward", x_name="hidden", x=rec["x_value"], ours="gpu_row"
    )
    row.update(status="not measured", ours_us=1.0)
    page = ratio_table_html([row], facts=facts)
    assert "<th" in page and "regs/spills/occ" in page and "n/a (interpreter)" in page


def test_the_report_finds_the_checkout_from_any_folder(tmp_path, monkeypatch):
    """workbench/reports/ sits two levels down: its notion of the checkout is the repository's
    root (notebooks/ and kernels/ beside workbench/), wherever the command runs."""
    from workbench.reports.notebooks import default_notebooks_dir, repo_root

    monkeypatch.chdir(tmp_path)
    assert (repo_root() / "kernels").is_dir() and (repo_root() / "workbench").is_dir()
    assert default_notebooks_dir() == repo_root() / "notebooks" and (repo_root() / "notebooks").is_dir()


def test_the_status_line_names_the_same_size_copy_only_where_measured():
    from workbench.reports.checks import status_text

    base = dict(variant="gpu_multirow", mode="full", dtype="bf16", device_kind="cuda", timing_method="profiler",
                ms_p50=0.02, gbps=2400.0, pct_copy_bw=80.0, passed=True)  # fmt: skip
    assert "% of a same-size copy" not in status_text(base)
    line = status_text(dict(base, pct_same_size_copy=91.25))
    assert "80.0% of copy BW" in line and "91.2% of a same-size copy" in line
