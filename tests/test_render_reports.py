"""Every committed report renders from its records (``workbench report --render``), and the pieces
that read a run folder back: records from JSON or CSV, plain or compressed, each folder's kind."""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

import pytest

from workbench.reports import render
from workbench.store import kept_path, read_records, write_csv, write_json

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"


def _record(i: int, **extra) -> dict:
    return {
        "kernel": "rms_norm",
        "variant": "gpu",
        "mode": "forward",
        "axis": "hidden",
        "x_value": 300 + i,
        "dtype": "fp32",
        "device_kind": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "ms_p50": 0.01 * (i + 1),
        "kernel_ms": 0.01 * (i + 1),
        "kernel_lo_ms": 0.0099 * (i + 1),
        "kernel_hi_ms": 0.0101 * (i + 1),
        "params": {"BLOCK_SIZE": 512 * (1 + i % 2), "num_warps": 1 + i % 3},
        "problem": {"hidden": 300 + i, "rows": 7},
        "passed": True,
        "error": None,
        "commit": "abc1234",
        "versions": {"torch": "2.13.0", "triton": "3.9.0", "python": "3.12"},
        **extra,
    }


@pytest.mark.slow
def test_every_committed_report_renders_into_a_temporary_folder(docs_site):
    """All of reports/ (about 45 s of a core on the 2-core CI machine), rendered as the docs site
    renders them (conftest's docs_site, built once for the tests that read the site): a page per
    run folder, each kind seen, one plotly.min.js, no path of this machine in any page."""
    out, done = docs_site
    runs = render.find_runs(REPORTS)
    assert [r.folder for r in done] == [folder for folder, _ in runs]
    assert {r.kind for r in done} == {k.name for k in render.KINDS}
    for r in done:
        assert r.page.is_file() and r.page.stat().st_size > 2000, r
        text = r.page.read_text(encoding="utf-8")
        assert str(ROOT) not in text and str(out) not in text, r.page
        assert 'src="' in text and "plotly.min.js" in text, r.page
    assert sorted(p.name for p in out.glob("*.js")) == ["plotly.min.js"]
    assert not list(out.rglob("*/plotly.min.js")), "a page loads a plotly.js of its own"


def test_committed_reports_keep_no_pages():
    """Pages are built, never committed: no HTML and no plotly.js under reports/ in git."""
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files", "reports"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    pages = [p for p in tracked if p.endswith((".html", ".js")) or "/figures/" in p]
    assert not pages, pages[:5]


@pytest.mark.parametrize(
    "name", ["records.json", "records.json.gz", "records.json.xz", "records.csv", "records.csv.xz"]
)
def test_records_read_back_from_json_or_csv_plain_or_compressed(tmp_path, name):
    records = [_record(i) for i in range(3)] + [_record(3, passed=False, error="ValueError: tile too large")]
    plain = tmp_path / "plain"
    (write_csv if ".csv" in name else write_json)(records, plain)
    data = plain.read_bytes()
    if name.endswith(".gz"):
        data = gzip.compress(data)
    elif name.endswith(".xz"):
        data = lzma.compress(data)
    (tmp_path / name).write_bytes(data)
    got = read_records(kept_path(tmp_path, "records.json") or kept_path(tmp_path, "records.csv"))
    assert len(got) == 4
    for want, back in zip(records, got):
        for key in ("kernel", "variant", "mode", "axis", "x_value", "dtype", "device_name", "params", "problem"):
            assert back[key] == want[key], key
        assert back["kernel_ms"] == pytest.approx(want["kernel_ms"])
        assert back["passed"] is want["passed"] and back["error"] == want["error"]
        assert back["versions"]["torch"] == "2.13.0" and back["commit"] == "abc1234"


def test_a_file_that_is_not_records_says_so(tmp_path):
    (tmp_path / "records.json.xz").write_bytes(b"not xz at all")
    with pytest.raises(ValueError, match="records.json.xz is not a records file"):
        read_records(tmp_path / "records.json.xz")
    (tmp_path / "records.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="not a list of records"):
        read_records(tmp_path / "records.json")


def _summary(folder: Path, title: str) -> None:
    (folder / "summary.md").write_text(f"# {title}\n\n- a line\n\n| a |\n|---|\n| 1 |\n")


def test_each_kind_is_told_by_its_files(tmp_path):
    def folder(name, *files):
        d = tmp_path / name
        d.mkdir()
        for f in files:
            (d / f).write_text("[]")
        return d

    assert render.kind_of(folder("suite", "suite.json")).name == "suite"
    assert render.kind_of(folder("plain", "records.json")) is None  # records alone: no kind
    tune = folder("tune", "records.json")
    _summary(tune, "Tune rms_norm")
    why = folder("why", "records.json")
    _summary(why, "Why a tile is fast or slow (cpu)")
    sweep = folder("sweep", "records.csv")
    _summary(sweep, "Sweep")
    assert [render.kind_of(d).name for d in (tune, why, sweep)] == ["tune", "why", "sweep"]
    scaling = folder("scaling")
    (scaling / "gpus1").mkdir()
    (scaling / "gpus1" / "run.json").write_text('{"runs": []}')
    (scaling / "gpus1" / "records.json").write_text("[]")
    assert render.kind_of(scaling).name == "scaling"
    assert [f.name for f, _ in render.find_runs(scaling)] == ["scaling"]  # its gpus<N> are its parts


def test_a_sweep_and_a_tune_render_with_their_figures(tmp_path):
    records = [_record(i) for i in range(6)] + [_record(6, params={"BLOCK_SIZE": "auto", "num_warps": "auto"})]
    for kind, title in (("sweep", "Sweep of rms_norm"), ("tune", "Tune rms_norm")):
        d = tmp_path / kind
        d.mkdir()
        write_json(records, d / "records.json")
        _summary(d, title)
        done = render.render_folder(d, tmp_path / "out" / kind)
        text = done.page.read_text()
        assert done.kind == kind and title in text and "plotly-graph-div" in text
        assert 'src="plotly.min.js"' in text and (tmp_path / "out" / kind / "plotly.min.js").is_file()


def test_the_why_sweeps_are_read_back_from_the_records():
    from workbench.reports.why_sweep import sweeps_of

    records = [
        _record(0, params={"BLOCK_SIZE": b, "num_warps": w, "GRID": "auto"}) for b in (512, 1024) for w in (1, 2, 4)
    ]
    (sweep,) = sweeps_of(records)
    assert (sweep.x, sweep.xs, sweep.y, sweep.ys) == ("num_warps", (1, 2, 4), "BLOCK_SIZE", (512, 1024))


def test_the_notebook_report_renders_from_its_executed_notebooks(tmp_path):
    """A notebook run's folder: the index rebuilt from papermill's metadata in each notebook (time,
    status, slowest cells) and the family's records."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1", outputs=[nbformat.v4.new_output("stream", text="hello\n")])]
    nb.cells[0].metadata["papermill"] = {"duration": 3.5}
    nb.metadata["papermill"] = {"duration": 4.25, "exception": None, "parameters": {"device": "cuda", "quick": None}}
    nb.metadata["workbench"] = {"family": "rms_norm"}
    (tmp_path / "run").mkdir()
    with lzma.open(tmp_path / "run" / "rms_norm.ipynb.xz", "wt", encoding="utf-8") as f:
        nbformat.write(nb, f)
    write_json([_record(0), _record(1, passed=False)], tmp_path / "run" / "rms_norm_records.json")
    (tmp_path / "run" / "environment.json").write_text(
        json.dumps({"device_name": "NVIDIA H100", "device_kind": "cuda"})
    )
    done = render.render_folder(tmp_path / "run", tmp_path / "out")
    index = done.page.read_text()
    assert done.kind == "notebooks" and done.page.name == "index.html"
    assert "4.2 s" in index and "1 passed, 1 wrong" in index and "#0 x = 1: 3.5 s" in index
    assert "hello" in (tmp_path / "out" / "rms_norm.html").read_text()


def test_render_cli_errors_are_one_line(tmp_path, capsys):
    from workbench.cli import main

    assert main(["report", "--render", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", "--render", str(tmp_path / "empty")]) == 2
    assert "no run folder under it" in capsys.readouterr().err
    assert main(["report", "--render", str(tmp_path / "empty"), "--check"]) == 2
    assert "give no other run folder" in capsys.readouterr().err


def test_a_report_page_points_its_readme_links_at_the_site(tmp_path):
    """A README links from ``reports/<name>/``; its page sits at ``reports/<name>.md`` of a site whose
    root is ``docs/``: a link to a doc page and one into the report are rewritten, others kept."""
    from workbench.reports.site import report_markdown

    report = tmp_path / "cold"
    report.mkdir()
    (report / "README.md").write_text(
        "# reports/cold: x\n\nSee [the docs](../../docs/compiling.md#pool), [a file](run/records.json), "
        "[the code](../../workbench/cli.py) and [the web](https://example.org/a).\n"
    )
    page = report_markdown(report)
    assert "[the docs](../compiling.md#pool)" in page
    assert "[a file](cold/run/records.json)" in page
    assert "[the code](../../workbench/cli.py)" in page and "[the web](https://example.org/a)" in page
