"""Benchmark suites: the ratio / threshold maths on synthetic records, the registry against the
specs, and ``workbench bench --suite smoke`` end to end on the CPU interpreter.

Why one long module: one test module per subject, as in the rest of tests/; the rules' tests
share the synthetic records that :func:`rec` builds.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

import kernels
from workbench import suites as S
from workbench.cli import main
from workbench.reports import reader
from workbench.reports.notebooks import find_notebooks
from workbench.suites import (
    MET,
    MISSED,
    NOT_COMPARABLE,
    NOT_MEASURED,
    WRONG,
    Chain,
    Defaults,
    Rule,
    Versus,
    chain_rows,
    defaults_rows,
    failures,
    peer_plan,
    required,
    versus_rows,
)

REMOTE_SCRIPT = re.compile(r"<script[^>]*\bsrc\s*=\s*[\"']?\s*(https?:)?//", re.IGNORECASE)
NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def rec(
    variant, x, us, *, backend="gpu", mode="forward", pct=None, passed=True, error=None, method="device-events", **kw
):
    """A synthetic record dict (times given in µs)."""
    return {
        "kernel": "rms_norm",
        "variant": variant,
        "backend": backend,
        "mode": mode,
        "axis": "hidden",
        "x_value": x,
        "ms_p50": None if us is None else us / 1e3,
        "pct_copy_bw": pct,
        "passed": passed,
        "error": error,
        "timing_method": method,
        **kw,
    }


NORM = Versus(
    "t",
    "T",
    "rms_norm",
    "forward",
    (1024, 4096),
    "gpu_multirow",
    min_ratio=(Rule(1.0), Rule(1.3, 4096)),
    min_pct_bw=(Rule(90.0, 4096),),
)


def by_x(rows):
    return {r.x: r for r in rows}


# --- thresholds --------------------------------------------------------------------------------
def test_rules_take_the_largest_that_applies():
    rules = (Rule(1.0), Rule(1.3, 4096))
    assert required(rules, 1024) == 1.0
    assert required(rules, 4096) == 1.3 and required(rules, 32768) == 1.3
    assert required((Rule(90.0, 2048),), 1024) is None
    assert required((), 1024) is None


# --- versus: ours against the best peer --------------------------------------------------------
def test_best_peer_ratio_met_and_missed():
    records = [
        rec("gpu_multirow", 1024, 10.0, pct=70.0),
        rec("torch_eager", 1024, 30.0, backend="torch"),
        rec("liger", 1024, 11.0, backend="peer"),
        rec("torch_compile", 1024, 9.0, backend="torch", passed=False),  # wrong: never the best
        rec("gpu_multirow", 4096, 10.0, pct=95.0),
        rec("torch_eager", 4096, 12.0, backend="torch"),
        rec("liger", 4096, 14.0, backend="peer"),
    ]
    rows = by_x(versus_rows(NORM, records))
    small, big = rows[1024], rows[4096]
    assert small.peer == "liger" and small.ratio == pytest.approx(1.1)
    assert small.status == MET and small.min_ratio == 1.0 and small.min_pct_bw is None  # %BW rule not at 1024
    assert big.peer == "torch_eager" and big.ratio == pytest.approx(1.2)
    assert big.status == MISSED and "ratio 1.20 < 1.3" in big.reason
    assert big.ours_us == pytest.approx(10.0) and big.peer_us == pytest.approx(12.0)


def test_copy_bandwidth_rule():
    fast = [rec("gpu_multirow", 4096, 10.0, pct=85.0), rec("liger", 4096, 20.0, backend="peer")]
    row = by_x(versus_rows(NORM, fast))[4096]
    assert row.ratio == pytest.approx(2.0) and row.status == MISSED and "85.0% of copy BW < 90%" in row.reason
    fast[0]["pct_copy_bw"] = 91.0
    assert by_x(versus_rows(NORM, fast))[4096].status == MET
    fast[0]["pct_copy_bw"] = None  # a device without a measured copy bandwidth
    row = by_x(versus_rows(NORM, fast))[4096]
    assert row.status == NOT_MEASURED and "copy bandwidth" in row.reason


def test_the_bandwidth_rule_uses_the_same_size_copy_where_the_record_has_one():
    """85% of the large copy misses 90%; the same cell at 95% [93, 97] of a copy of its own bytes
    in its own launches meets it; a share whose interval straddles the threshold is a tie."""
    same = dict(pct_same_size_copy=95.0, pct_same_size_copy_lo=93.0, pct_same_size_copy_hi=97.0, launches=2)
    cells = [rec("gpu_multirow", 4096, 10.0, pct=85.0, **same), rec("liger", 4096, 20.0, backend="peer")]
    row = by_x(versus_rows(NORM, cells))[4096]
    assert row.status == MET and row.pct_copy_bw == 85.0 and row.pct_same_size_copy == 95.0
    assert row.bw_basis == "same-size copy (2 launches)" and "large copy" not in row.note
    cells[0].update(pct_same_size_copy=80.0, pct_same_size_copy_lo=78.0, pct_same_size_copy_hi=82.0, pct=95.0)
    row = by_x(versus_rows(NORM, cells))[4096]  # the large copy's 95% would meet it: the same-size copy judges
    assert row.status == MISSED and "80.0% [76.5, 83.6] of a same-size copy (2 launches) < 90%" in row.reason
    cells[0].update(pct_same_size_copy=90.5, pct_same_size_copy_lo=88.0, pct_same_size_copy_hi=93.0)
    row = by_x(versus_rows(NORM, cells))[4096]
    assert row.status == "within noise" and "straddles 90%" in row.reason


def test_the_bandwidth_rule_falls_back_to_the_large_copy_and_says_why():
    old = [rec("gpu_multirow", 4096, 10.0, pct=91.0), rec("liger", 4096, 20.0, backend="peer")]  # before the copy
    row = by_x(versus_rows(NORM, old))[4096]
    assert row.status == MET and row.pct_same_size_copy is None
    assert row.bw_basis == "large copy (no same-size copy in the record)"
    assert "%BW judged against the large copy (no same-size copy in the record)" in row.note
    old[0].update(pct_copy_bw=85.0, same_size_copy_method="not measured: the call's launches are unknown")
    row = by_x(versus_rows(NORM, old, missing={"torch_compile": "not here"}))[4096]
    assert row.status == MISSED
    assert row.reason == "85.0% of copy BW < 90% (the large copy: not measured: the call's launches are unknown)"
    assert row.note.startswith("not here: torch_compile") and "judged against the large copy" in row.note


def test_the_suite_tables_show_both_bandwidth_shares_and_read_old_records():
    """The CLI table, the HTML table and summary.md show % of the large copy and % of the
    same-size copy side by side: a number (with its interval in the reports), "n/a (CPU)" where
    the record says no device copy compares, "-" for a record from before the copy."""
    from workbench.cli.suite import format_ratio_table
    from workbench.reports.suite import ratio_table_html

    target = Versus("t", "T", "rms_norm", "forward", (1024, 2048, 4096), "gpu_multirow",
                    min_ratio=(), min_pct_bw=(Rule(90.0),))  # fmt: skip
    same = dict(pct_same_size_copy=93.4, pct_same_size_copy_lo=92.0, pct_same_size_copy_hi=94.9, launches=1)
    records = [
        rec("gpu_multirow", 1024, 10.0, pct=71.6, **same),
        rec("gpu_multirow", 2048, 10.0, method="interpreter-wall", same_size_copy_method="n/a (CPU): no device"),
        rec("gpu_multirow", 4096, 10.0, pct=88.8),  # an old record: no same-size fields at all
    ]
    rows = versus_rows(target, records)
    assert [r.status for r in rows] == [MET, NOT_COMPARABLE, MISSED]
    lines = format_ratio_table(rows).splitlines()
    head = lines[0]
    assert "%BW" in head and "%same" in head
    cells = {line.split()[1]: line.split() for line in lines if line.startswith("t ")}
    assert cells["hidden=1024"][7:9] == ["71.6", "93.4"]
    assert cells["hidden=2048"][7:10] == ["-", "n/a", "(CPU)"]
    assert cells["hidden=4096"][7:9] == ["88.8", "-"]

    dicts = [r.to_dict() for r in rows]
    page = ratio_table_html(dicts)
    assert "<th" in page and ">%BW<" in page and ">%BW same-size<" in page
    assert ">93.4 [92.0, 94.9]<" in page and ">n/a (CPU)<" in page and ">71.6<" in page
    md = reader.ratio_md_rows(dicts)
    assert [(m["% copy BW"], m["% same-size copy"]) for m in md] == [
        ("72", "93 [92, 95]"),
        ("-", "n/a (CPU)"),
        ("89", "-"),
    ]
    assert "% same-size copy" in reader.md_table(md, reader.RATIO_MD_COLUMNS).splitlines()[0]
    assert md[0]["threshold"] == "≥ 90% a same-size copy" and md[2]["threshold"] == "≥ 90% copy BW"


def test_missing_peer_is_not_measured_never_met():
    target = Versus("bs", "BS", "block_sparse", "forward", (1, 16), "gpu", peers=("pyjuice",), dtype="fp32")
    records = [rec("gpu", 1, 5.0), rec("gpu", 16, 5.0)]
    rows = versus_rows(target, records, missing={"pyjuice": "PyJuice is not installed"})
    assert [r.status for r in rows] == [NOT_MEASURED, NOT_MEASURED]
    assert all("peer missing: pyjuice: PyJuice is not installed" in r.reason for r in rows)
    assert rows[0].ours_us == pytest.approx(5.0) and rows[0].ratio is None


def test_failed_peer_and_missing_note():
    records = [rec("gpu_multirow", 1024, 10.0), rec("liger", 1024, None, backend="peer", error="boom", passed=False)]
    row = by_x(versus_rows(NORM, records))[1024]
    assert row.status == NOT_MEASURED and "peer failed: liger: boom" in row.reason
    records.append(rec("torch_eager", 1024, 20.0, backend="torch"))
    row = by_x(versus_rows(NORM, records, missing={"torch_compile": "does not run on cpu"}))[1024]
    assert row.status == MET and row.peer == "torch_eager" and "torch_compile" in row.note


def test_wrong_ours_and_cpu_times():
    records = [rec("gpu_multirow", 1024, 10.0, passed=False), rec("liger", 1024, 20.0, backend="peer")]
    row = by_x(versus_rows(NORM, records))[1024]
    assert row.status == WRONG
    assert any("WRONG RESULT" in f for f in failures(NORM, records))
    cpu = [rec("gpu_multirow", 1024, 1e5, method="interpreter-wall"), rec("torch_eager", 1024, 30.0, method="cpu-wall")]
    row = by_x(versus_rows(NORM, cpu))[1024]
    assert row.status == NOT_COMPARABLE and row.ratio is not None  # computed, never judged


def test_failures_rule():
    ok = [rec("gpu_multirow", 1024, 10.0), rec("liger", 1024, None, backend="peer", error="x", passed=False)]
    assert failures(NORM, ok) == []  # a failing peer is reported in the table, not a failure
    ours_err = [rec("gpu_multirow", 1024, None, error="no", passed=False)]
    assert "could not run" in failures(NORM, ours_err)[0]
    wrong_peer = [rec("liger", 1024, 9.0, backend="peer", passed=False)]
    assert failures(NORM, wrong_peer) == []  # shown as "peer failed: wrong", never met, not our failure
    wrong_ours = [rec("gpu_multirow", 1024, 9.0, passed=False)]
    assert "WRONG RESULT" in failures(NORM, wrong_ours)[0]


def test_kernel_only_peer_time():
    """PyJuice's variant stages our inputs each call: its bare kernel is what ours is judged against."""
    target = Versus(
        "bs", "BS", "block_sparse", "forward", (1,), "gpu", peers=("pyjuice",), dtype="fp32", kernel_only=("pyjuice",)
    )
    records = [
        rec("gpu", 1, 10.0),
        rec("pyjuice", 1, 20.0, backend="peer"),
        rec("pyjuice_kernel", 1, 8.0, backend="peer"),
    ]
    row = versus_rows(target, records)[0]
    assert row.peer == "pyjuice_kernel" and row.ratio == pytest.approx(0.8) and row.status == MISSED
    assert row.alt_peer.startswith("pyjuice") and row.alt_ratio == pytest.approx(2.0)
    records[1]["passed"] = False  # the peer's result on our inputs is wrong: its kernel time is void
    row = versus_rows(target, records)[0]
    assert row.status == NOT_MEASURED and "peer failed" in row.reason


def test_a_peer_at_another_precision_is_shown_not_judged():
    """Like with like: PyJuice's TF32 products against our fp32 are "not comparable", with both
    precisions and the peer's error named; at matched precision the point is judged."""
    target = Versus(
        "bs", "BS", "block_sparse", "forward", (16,), "gpu", peers=("pyjuice",), dtype="fp32", kernel_only=("pyjuice",)
    )
    records = [
        rec("gpu", 16, 20.0, precision="ieee", max_abs_err=2e-6),
        rec("pyjuice", 16, 40.0, backend="peer", precision="tf32", max_abs_err=1e-3),
        rec("pyjuice_kernel", 16, 15.0, backend="peer", precision="tf32"),
    ]
    row = versus_rows(target, records)[0]
    assert row.status == NOT_COMPARABLE and row.ratio == pytest.approx(0.75)  # shown, not judged
    assert "precision: ours ieee, pyjuice_kernel computes tf32" in row.reason
    assert (row.ours_precision, row.ours_err) == ("ieee", 2e-6)
    assert (row.peer_precision, row.peer_err) == ("tf32", 1e-3)
    assert reader.precision_text(row.to_dict()) == "ieee 2e-06 / tf32 0.001"
    records[0]["precision"] = "tf32"  # ours at the peer's precision: judged
    row = versus_rows(target, records)[0]
    assert row.status == MISSED and row.ratio == pytest.approx(0.75) and row.peer == "pyjuice_kernel"
    assert row.peer_precision == "tf32" and row.peer_err == 1e-3  # the bare kernel's error is its variant's
    records[1].update(passed=False, max_abs_err=0.48)  # wrong even at TF32's tolerance: shown with its error
    row = versus_rows(target, records)[0]
    assert row.status == NOT_MEASURED and "peer failed" in row.reason
    assert (row.peer_precision, row.peer_err) == ("tf32", 0.48)
    # records from before precisions were kept are fp32 on both sides
    old = [rec("gpu", 16, 20.0), rec("pyjuice", 16, 40.0, backend="peer"), rec("pyjuice_kernel", 16, 30.0)]
    assert versus_rows(target, old)[0].status == MET


# --- the HMM chain -----------------------------------------------------------------------------# --- the HMM chain -----------------------------------------------------------------------------
def test_chain_ratio_prefers_graph_replay():
    target = Chain("hmm", "HMM", T=32, L=1024, batches=(1, 16))

    def c(variant, batch, us, backend="gpu"):
        return rec(variant, batch, us, backend=backend, mode="full", axis="batch", method="host-wall")

    records = [
        c("ours_eager", 1, 3000.0),
        c("ours_graph", 1, 400.0),
        c("pyjuice_eager", 1, 1000.0, "peer"),
        c("pyjuice_graph", 1, 500.0, "peer"),
        c("ours_eager", 16, 600.0),  # no graph replay (not CUDA): eager is ours
        c("pyjuice_eager", 16, 1000.0, "peer"),
    ]
    rows = by_x(chain_rows(target, records))
    assert rows[1].ours == "ours_graph" and rows[1].ratio == pytest.approx(2.5) and rows[1].status == MET
    assert rows[1].alt_ratio == pytest.approx(1.25)  # informative: against PyJuice's own graph replay
    assert rows[16].ours == "ours_eager" and rows[16].status == MISSED and rows[16].min_ratio == 2.0
    missing = chain_rows(target, [c("ours_eager", 1, 1.0)], missing={"pyjuice": "not installed"})
    assert missing[0].status == NOT_MEASURED and "peer missing" in missing[0].reason
    records[-1]["precision"] = "tf32"  # PyJuice's chain at batch 16 runs TF32 products: not ours' fp32
    row = by_x(chain_rows(target, records))[16]
    assert row.status == NOT_COMPARABLE and "ours ieee, pyjuice_eager computes tf32" in row.reason


# --- defaults against the best tiles -------------------------------------------------------------
def test_defaults_ratio():
    target = Defaults("d", "D", "rms_norm", "gpu_multirow", "forward", (1024, 4096))
    records = [
        rec("gpu_multirow", 1024, 10.0, label="default"),
        rec("gpu_multirow", 1024, 9.8, label="BLOCK_SIZE_M=2"),
        rec("gpu_multirow", 1024, 12.0, label="BLOCK_SIZE_M=4"),
        rec("gpu_multirow", 1024, None, label="BLOCK_SIZE=8192", error="out of resources", passed=False),
        rec("gpu_multirow", 4096, 10.0, label="default"),
        rec("gpu_multirow", 4096, 9.0, label="num_warps=8"),
    ]
    rows = by_x(defaults_rows(target, records))
    assert rows[1024].peer == "BLOCK_SIZE_M=2" and rows[1024].ratio == pytest.approx(0.98) and rows[1024].status == MET
    assert "3 configurations, 1 failed" in rows[1024].note
    assert rows[4096].ratio == pytest.approx(0.9) and rows[4096].status == MISSED
    assert failures(target, records) == []  # an explored tile that cannot run is data
    records[0].update(error="broken", passed=False)
    assert failures(target, records) and by_x(defaults_rows(target, records))[1024].status == NOT_MEASURED


# --- the registry -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(S.SUITES))
def test_registry_targets_exist_in_the_specs(name):
    suite = S.SUITES[name]
    assert suite.names() == S.SUITES["h100"].names()  # smoke: the same targets, tiny shapes
    for t in suite.targets:
        assert t.family in kernels.families()
        spec = kernels.get(t.family)
        assert t.mode in spec.modes
        if t.kind == "chain":
            assert t.T >= 1 and t.L >= 1 and t.batches
            continue
        if t.kind == "compiled":  # a whole compiled block, not a variant of the family
            assert t.timing == "call" and t.tokens >= 1 and all(h >= 1 for h in t.values)
            continue
        var = spec.variant(t.ours)
        assert var.backend not in S.PEER_BACKENDS
        assert t.dtype in spec.dtypes
        for x in t.values:
            spec.resolve_problem({**t.problem, spec.axis: x})
        if t.kind == "versus":
            assert t.ours == S.OURS[t.family]
            for p in t.peers or ():
                assert spec.variant(p).backend in S.PEER_BACKENDS
            for p in t.kernel_only:
                assert spec.variant(p).kernel is not None  # the peer names its bare kernel
        else:
            for p in t.params or [q.name for q in var.params]:
                var.param(p)


def test_h100_suite_is_the_issue():
    h = S.SUITES["h100"]
    assert h.target("rms_norm_forward").values == (1024, 2048, 4096, 8192, 16384, 32768)
    assert h.target("fused_forward").values == (512, 1024, 2048, 4096, 8192, 16384)
    assert required(h.target("rms_norm_full").min_ratio, 4096) == 1.3
    assert required(h.target("fused_forward").min_pct_bw, 2048) == 90.0
    assert required(h.target("fused_forward").min_pct_bw, 1024) is None
    bs = h.target("block_sparse_forward")
    assert bs.values == (1, 2, 4, 8, 16, 32, 64) and bs.peers == ("pyjuice",) and bs.problem["nodes"] == 1024
    assert required(h.target("hmm_chain").min_ratio, 16) == 2.0
    # issue 16: the layer backward vs PyJuice's layer backward kernel, and graph-vs-graph chain
    bwd = h.target("block_sparse_backward")
    assert bwd.mode == "backward" and bwd.values == bs.values and bwd.kernel_only == ("pyjuice",)
    assert bwd.timing == "kernel" and required(bwd.min_ratio, 1) == 1.0
    tf32 = h.target("block_sparse_forward_tf32")  # matched precision where PyJuice's products run TF32
    assert tf32.values == (16, 32, 64) and tf32.problem["precision"] == "tf32" and tf32.kernel_only == ("pyjuice",)
    graphed = h.target("hmm_chain_graphed")
    assert graphed.peers == ("pyjuice_graph",) and graphed.batches == (1, 4, 16, 64)  # issue 24's chain sizes
    assert required(graphed.min_ratio, 1) == 1.25 and (graphed.T, graphed.L) == (32, 1024)
    # issue 24, matched precision: the backward and the chain at TF32 where PyJuice's products are
    bwd32 = h.target("block_sparse_backward_tf32")
    assert bwd32.mode == "backward" and bwd32.values == (16, 32, 64) and bwd32.problem["precision"] == "tf32"
    chain32 = h.target("hmm_chain_graphed_tf32")
    assert chain32.precision == "tf32" and chain32.batches == (16, 64) and required(chain32.min_ratio, 16) == 1.25
    assert all(t.problem.get("rows", 4096) == 4096 for t in h.targets if t.kind != "chain")


def test_peer_plan_on_the_cpu():
    run, missing = peer_plan(S.SUITES["smoke"].target("rms_norm_forward"), "cpu")
    assert "torch_eager" in run and "liger" in missing and "torch_compile" in missing
    run, missing = peer_plan(S.SUITES["smoke"].target("block_sparse_forward"), "cpu")
    assert run == [] and "pyjuice" in missing


def test_suite_notebook_is_not_in_workbench_report():
    assert "suite" not in {p.stem for p in find_notebooks(NOTEBOOKS_DIR)}
    assert [p.stem for p in find_notebooks(NOTEBOOKS_DIR, only=["suite"])] == ["suite"]


# --- the command ---------------------------------------------------------------------------------
def test_bench_suite_smoke_end_to_end(tmp_path, capsys):
    out = tmp_path / "smoke"
    rc = main(
        ["bench", "--suite", "smoke", "--device", "cpu", "--out", str(out), "--store", str(tmp_path / "r.sqlite")]
    )
    printed = capsys.readouterr().out
    assert rc == 0, printed
    suite = S.SUITES["smoke"]
    table = printed[printed.index("best peer / config") :]
    for name in suite.names():
        assert name in table
    assert "not measured (peer missing: pyjuice" in table and "not comparable" in table
    assert " MET" not in table and "MISSED" not in table  # nothing is judged on the CPU
    for name in ("records.csv", "records.json", "ratios.csv", "environment.json", "suite.json", "report.html"):
        assert (out / name).exists(), name
    with (out / "records.csv").open() as f:
        records = list(csv.DictReader(f))
    assert records and all(r["device_kind"] == "cpu" for r in records)
    with (out / "ratios.csv").open() as f:
        ratios = list(csv.DictReader(f))
    assert {r["target"] for r in ratios} == set(suite.names())
    assert len(ratios) == sum(len(t.values) for t in suite.targets)
    env = json.loads((out / "environment.json").read_text())
    for key in ("device_name", "driver", "torch", "triton", "python", "git_commit", "date", "copy_bw_gbps"):
        assert key in env
    assert env["pyjuice"] and env["liger-kernel"] and env["suite"] == "smoke"
    page = (out / "report.html").read_text()
    assert not REMOTE_SCRIPT.search(page) and "require.js" not in page
    assert page.count("embedded for offline use") == 1 and "Plotly.newPlot(" in page
    assert "wb-ratios" in page and "rms_norm_forward" in page and "measured copy bandwidth" in page
    # A reader's page: the headline (title, sentences, chart) first, no code, no local path.
    assert 'class="jp-InputPrompt' not in page and '<div class="highlight' not in page and "In&nbsp;[" not in page
    assert "records_dir" not in page.split("About this")[0]
    assert page.index("wb-title") < page.index("wb-headline") < page.index("Plotly.newPlot(")
    assert "Ours against the best peer" in page[: page.index("wb-ratios")]
    assert str(tmp_path) not in page and str(Path.cwd()) not in page
    assert str(tmp_path) not in (out / "suite.ipynb").read_text()
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# The same targets at tiny sizes") and "| 1. RMSNorm forward | hidden=128 |" in summary
    assert "(figures/headline.svg)" in summary or "Figures: not exported (" in summary
    assert "not comparable" in summary and "[report.html](report.html)" in summary


def test_bench_suite_without_html_tools(tmp_path, capsys, monkeypatch):
    from workbench.reports import notebooks

    monkeypatch.setattr(notebooks, "html_unavailable_reason", lambda: "papermill not installed (pip install papermill)")
    out = tmp_path / "o"
    args = ["bench", "--suite", "smoke", "--device", "cpu", "--only", "block_sparse_forward", "--out", str(out)]
    rc = main(args + ["--store", str(tmp_path / "r.sqlite")])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "report.html: skipped (papermill not installed" in printed
    assert (out / "records.csv").exists() and (out / "ratios.csv").exists() and not (out / "report.html").exists()
    assert "block_sparse_forward" in printed and "rms_norm_forward" not in printed


def test_bench_suite_wrong_result_fails(tmp_path, capsys, monkeypatch):
    from workbench.suites import run as suite_run

    real = suite_run.measure_many

    def wrong(*args, **kwargs):
        records = real(*args, **kwargs)
        for r in records:
            r.passed = False
        return records

    monkeypatch.setattr(suite_run, "measure_many", wrong)
    args = ["bench", "--suite", "smoke", "--device", "cpu", "--only", "block_sparse_forward", "--no-html"]
    rc = main(args + ["--out", str(tmp_path / "o"), "--store", str(tmp_path / "r.sqlite")])
    printed = capsys.readouterr().out
    assert rc == 1 and "WRONG RESULT" in printed and "wrong result" in printed


def test_bench_suite_bad_arguments(capsys):
    assert main(["bench", "--suite", "nope"]) == 2
    assert "unknown suite 'nope'" in capsys.readouterr().err
    assert main(["bench", "--suite", "smoke", "--only", "nope"]) == 2
    assert "no target 'nope'" in capsys.readouterr().err
    assert main(["bench"]) == 2
    assert "--suite NAME" in capsys.readouterr().err  # the one line says how to run a suite


def test_bench_suite_in_parts_with_resume(tmp_path, capsys):
    """A suite run in parts into one folder: --resume keeps the earlier part's targets and rows."""
    out = tmp_path / "parts"
    args = ["bench", "--suite", "smoke", "--device", "cpu", "--out", str(out), "--no-html"]
    assert main(args + ["--only", "rms_norm_forward"]) == 0
    first = json.loads((out / "suite.json").read_text())
    assert main(args + ["--only", "fused_forward", "--resume"]) == 0
    assert "resume: keeping rms_norm_forward" in capsys.readouterr().out
    body = json.loads((out / "suite.json").read_text())
    assert [t["name"] for t in body["targets"]] == ["rms_norm_forward", "fused_forward"]
    kept = [r for r in body["rows"] if r["target"] == "rms_norm_forward"]
    assert kept == [r for r in first["rows"] if r["target"] == "rms_norm_forward"]
    records = json.loads((out / "records.json").read_text())
    for target in body["targets"]:  # every target's record indices point at its own family
        assert {records[i]["kernel"] for i in target["records"]} == {target["family"]}
    # Without --resume a part replaces the folder's contents.
    assert main(args + ["--only", "fused_forward"]) == 0
    assert [t["name"] for t in json.loads((out / "suite.json").read_text())["targets"]] == ["fused_forward"]


def test_a_second_chain_target_reuses_the_first_chains_records():
    """hmm_chain_eager judges other variants of the chain hmm_chain measured: no second run."""
    from workbench.suites.run import run_suite

    run = run_suite("smoke", device="cpu", only=["hmm_chain", "hmm_chain_eager"])
    first, second = (run.target_records[name] for name in ("hmm_chain", "hmm_chain_eager"))
    assert first and len(first) == len(second)
    assert all(run.records[i] is run.records[j] for i, j in zip(first, second))
    eager = [r for r in run.rows if r.target == "hmm_chain_eager"]
    assert [r.x for r in eager] == [1, 2] and all(r.ours == "ours_eager" for r in eager)


def test_a_chain_at_another_precision_is_measured_apart_and_says_its_precision():
    """The TF32 chain target runs its own HMM (records say tf32 and pass at TF32's tolerance),
    not the ieee target's records."""
    from workbench.suites.run import run_suite

    run = run_suite("smoke", device="cpu", only=["hmm_chain", "hmm_chain_graphed_tf32"])
    ieee, tf32 = (run.target_records[name] for name in ("hmm_chain", "hmm_chain_graphed_tf32"))
    assert tf32 and not set(ieee) & set(tf32)
    ours = [run.records[i] for i in tf32 if run.records[i].backend == "gpu"]
    assert ours and {r.precision for r in ours} == {"tf32"} and all(r.passed for r in ours)
    assert {r.problem["precision"] for r in ours} == {"tf32"} and {r.x_value for r in ours} == {2}
    assert {run.records[i].precision for i in ieee if run.records[i].backend == "gpu"} == {"ieee"}


def test_compiled_block_target_is_not_measured_off_cuda():
    from workbench.suites.run import run_suite

    run = run_suite("smoke", device="cpu", only=["compiled_block"])
    assert not run.records and not run.failures
    assert "needs a CUDA device" in run.missing["compiled_block"]["ours_compiled"]
    assert [r.status for r in run.rows] == [S.NOT_MEASURED]


def test_repeatability_counts_flips_kernel_agreement_and_ratio_moves(tmp_path):
    from workbench.suites.judge import RUN_SPREAD
    from workbench.suites.repeatability import compare, summary_lines
    from workbench.suites.targets import TIE

    def run(folder, ratio_a, status_b, kernel_us):
        folder.mkdir()
        rows = [
            {"target": "a", "x": 1, "status": MET, "ratio": ratio_a, "timing": "kernel (profiler)"},
            {"target": "b", "x": 1, "status": status_b, "ratio": 1.0, "timing": "call (device-events)"},
            {"target": "c", "x": 1, "status": "not measured", "ratio": None},
        ]
        records = [{"variant": "ours", "mode": "forward", "x_value": 1, "kernel_ms": kernel_us / 1e3}]
        targets = [{"name": "a", "records": [0]}]
        (folder / "suite.json").write_text(json.dumps({"rows": rows, "targets": targets}))
        (folder / "records.json").write_text(json.dumps(records))
        return folder

    first = run(tmp_path / "one", 1.20, MET, 20.0)
    second = run(tmp_path / "two", 1.26, TIE, 20.4)
    result = compare(first, second)
    assert (result["verdict_cells"], result["verdict_same"]) == (2, 1)  # "not measured" is not judged
    assert result["verdict_flips"][0]["target"] == "b"
    assert (result["kernel_cells"], result["kernel_within"]) == (1, 1)  # 2% apart
    moves = result["ratio_moves"]
    assert moves["kernel"]["max"] == pytest.approx(0.05) and moves["call"]["max"] == pytest.approx(0.0)
    assert moves["kernel"]["allowed"] == RUN_SPREAD["kernel"]
    assert any("kernel ratios moved by 5.0%" in line for line in summary_lines(result))


def test_a_target_with_a_budget_scale_gives_its_cells_that_much_more_time(monkeypatch):
    """rms_norm_full's records also serve the eager-call targets: its cells get budget_scale
    times the suite's per-configuration budget, the other targets the budget itself."""
    from workbench.suites import run as suite_run

    budgets = {}
    real = suite_run.measure_many

    def spy(spec, configs, **kw):
        budgets.setdefault(configs[0]["mode"], set()).add(kw["rep_ms"])
        return real(spec, configs, **kw)

    monkeypatch.setattr(suite_run, "measure_many", spy)
    smoke = S.get_suite("smoke")
    assert smoke.target("rms_norm_full").budget_scale == 4 and smoke.target("rms_norm_forward").budget_scale == 1
    suite_run.run_suite(smoke, device="cpu", rep_ms=1.0, only=["rms_norm_forward", "rms_norm_full"])
    assert budgets == {"forward": {1.0}, "full": {4.0}}


def test_the_warm_block_sparse_targets_are_kept_apart_from_the_cold_ones():
    """Same cells, L2 left warm: its records are its own (an earlier cold target's records at the
    same problem are not reused for it), in every suite."""
    from workbench.suites.run import _taken_key
    from workbench.suites.targets import SUITES

    pairs = (
        ("block_sparse_forward_warm", "block_sparse_forward"),
        ("block_sparse_forward_tf32_warm", "block_sparse_forward_tf32"),
        ("block_sparse_backward_warm", "block_sparse_backward"),
        ("block_sparse_backward_tf32_warm", "block_sparse_backward_tf32"),
    )
    for suite in SUITES.values():
        for warm_name, cold_name in pairs:
            warm, cold = suite.target(warm_name), suite.target(cold_name)
            assert warm.l2 == "warm" and cold.l2 == "cold" and set(warm.values) <= set(cold.values)
            assert (warm.mode, warm.problem) == (cold.mode, cold.problem)
            problem = {**cold.problem, "batch": warm.values[0]}
            assert _taken_key("block_sparse", "gpu", warm, problem) != _taken_key("block_sparse", "gpu", cold, problem)


def test_a_suite_report_names_the_card_that_ran_it_when_it_is_not_the_suites():
    """The h200 suite run on an H100 (a device call for an H200 can get one) says so in its title."""
    from workbench.reports.suite import display_title

    on_h100 = display_title({"suite": "h200", "device_name": "NVIDIA H100 80GB HBM3"})
    assert on_h100.endswith("— run on an NVIDIA H100 80GB HBM3, not an H200")
    assert "run on" not in display_title({"suite": "h200", "device_name": "NVIDIA H200"})
    assert "run on" not in display_title({"suite": "h100", "device_name": "NVIDIA H100 80GB HBM3"})
    assert "run on" not in display_title({"suite": "smoke", "device_name": "cpu"})


def test_a_bandwidth_target_plots_its_share_of_the_same_size_copy_where_measured():
    from workbench.reports.suite_figures import speed_figures

    target = dict(kind="versus", mode="forward", ours="gpu_multirow", title="T", axis="hidden", values=[1024, 2048],
                  min_pct_bw=90.0)  # fmt: skip
    same = dict(pct_same_size_copy=93.0, pct_same_size_copy_lo=92.0, pct_same_size_copy_hi=94.0, kernel_ms=0.01)
    old = [rec("gpu_multirow", x, 10.0, pct=80.0, dtype="bf16") for x in (1024, 2048)]
    assert [f.layout.title.text for f in speed_figures(target, old)] == ["T: time", "T: % of copy bandwidth"]
    new = [dict(r, **same) for r in old]
    figs = speed_figures(target, new)
    assert figs[-1].layout.title.text == "T: % of a copy of the same bytes in as many launches"
    ours = {tuple(t.y) for t in figs[-1].data}  # the medians, and the interval drawn around them
    assert {(93.0, 93.0), (92.0, 92.0), (94.0, 94.0)} <= ours


def test_the_norm_targets_measure_the_same_size_copy_and_judge_forward_backward_by_it():
    h100 = S.get_suite("h100")
    for name in ("rms_norm_forward", "rms_norm_full", "fused_forward", "fused_full"):
        assert h100.target(name).same_size_copy, name
    assert not h100.target("block_sparse_forward").same_size_copy
    for name in ("rms_norm_full", "fused_full"):  # issue 57: 85% up to 1024, 90% from 2048
        rules = h100.target(name).min_pct_bw
        assert [required(rules, x) for x in (512, 1024, 2048, 32768)] == [85.0, 85.0, 90.0, 90.0]


def test_a_suite_run_on_the_cpu_asks_for_the_copy_and_says_it_is_not_measured():
    from workbench.suites.run import run_suite

    run = run_suite("smoke", device="cpu", only=["rms_norm_forward"], rep_ms=1, warmup_ms=0)
    ours = [r for r in run.records if r.variant == "gpu_multirow"]
    assert ours and all(r.same_size_copy_method.startswith("n/a (CPU)") and r.launches == 1 for r in ours)
    assert all(r.pct_same_size_copy is None for r in run.records)
    assert {row.status for row in run.rows if row.min_pct_bw is not None} == {NOT_COMPARABLE}
