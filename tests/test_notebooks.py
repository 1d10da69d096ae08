"""Every notebook in notebooks/ through papermill (CPU, quick), the HTML report built from them,
and a notebook that must fail because a kernel is deliberately wrong."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

import kernels
from workbench.cli.lab import main as lab_main
from workbench.cli.report import main as report_main
from workbench.reports.notebook_report import build_report
from workbench.reports.notebooks import execute_notebook, find_notebooks, kernel_env

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
# The report's notebooks (suite.ipynb opts out: tests/test_suites.py runs it through the suite command).
NOTEBOOKS = sorted(p.name for p in find_notebooks(NOTEBOOKS_DIR))
REMOTE_SCRIPT = re.compile(r"<script[^>]*\bsrc\s*=\s*[\"']?\s*(https?:)?//", re.IGNORECASE)
REMOTE_LINK = re.compile(r"<link[^>]*\bhref\s*=\s*[\"']?\s*(https?:)?//", re.IGNORECASE)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One headless run of every notebook (the report runs them through papermill)."""
    out = tmp_path_factory.mktemp("report")
    return build_report(out, device="cpu", quick=True, notebooks_dir=NOTEBOOKS_DIR, jobs=2, log=lambda *a: None)


def _outputs(nb):
    for cell in nb.cells:
        yield from cell.get("outputs", [])


def test_notebooks_present():
    assert "rms_norm.ipynb" in NOTEBOOKS and "index.ipynb" in NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_headless_and_passes(report, name):
    result = {r["notebook"]: r for r in report["results"]}[name]
    assert result["ok"], f"{name} failed under papermill:\n{result['error']}"
    out = report["index"].parent
    nb = nbformat.read(str(out / name), as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and "headless = True" in injected[0].source and 'device = "cpu"' in injected[0].source
    errors = [o for o in _outputs(nb) if o.get("output_type") == "error"]
    assert not errors
    stem = name.removesuffix(".ipynb")
    if stem not in kernels.families():
        return  # the index: no records, no figures
    records = json.loads((out / f"{stem}_records.json").read_text())
    assert (out / f"{stem}_records.csv").exists()
    assert records, "a family notebook must measure something"
    assert all(r["device_kind"] == "cpu" for r in records)
    ran = [r for r in records if not r["error"]]
    assert ran and all(r["passed"] for r in ran), [
        (r["variant"], r["problem"], r["params"]) for r in ran if not r["passed"]
    ]
    figures = [
        o
        for o in _outputs(nb)
        if "application/vnd.plotly.v1+json" in o.get("data", {}) or "Plotly.newPlot" in str(o.get("data", {}))
    ]
    assert figures, f"{name} shows no plotly figure"


def test_rms_norm_notebook_content(report):
    out = report["index"].parent
    records = json.loads((out / "rms_norm_records.json").read_text())
    variants = {r["variant"] for r in records}
    assert {"gpu_row", "gpu_multirow", "npu", "torch_eager"} <= variants
    assert {r["mode"] for r in records} >= {"forward", "full"}
    # the tile sweep and the heatmap explored configurations that cannot run, with reasons
    assert any(r["error"] and "BLOCK_SIZE" in r["error"] for r in records)
    nb = nbformat.read(str(out / "rms_norm.ipynb"), as_version=4)
    plots = [o for o in _outputs(nb) if "application/vnd.plotly.v1+json" in o.get("data", {})]
    kinds = {t.get("type") for o in plots for t in o["data"]["application/vnd.plotly.v1+json"]["data"]}
    assert {"scatter", "heatmap", "bar"} <= kinds  # speed, heatmap, memory


def test_report_html_is_self_contained(report):
    out = report["index"].parent
    index = report["index"].read_text()
    for label in ("device", "driver", "torch", "triton", "python", "commit", "date"):
        assert f">{label}</th>" in index
    # Reader-first: the headline before the tables, the environment last, summary.md beside it.
    assert index.index("wb-headline") < index.index("wb-headline-chart") < index.index("<h2>Notebooks</h2>")
    assert index.index("<h2>Notebooks</h2>") < index.index("<h2>Environment</h2>")
    summary = (out / "summary.md").read_text()
    assert "| rms_norm.ipynb | ok |" in summary and "Correctness:" in summary
    assert 'href="all_records.csv"' in index and (out / "all_records.csv").exists()
    page_links = re.sub(r"<script.*?</script>", "", index, flags=re.S)  # not the embedded plotly.js's
    for target in re.findall(r'href="([^"#]+)"', page_links):
        assert (out / target).exists(), f"index.html links a missing file {target}"
    pages = sorted(out.glob("*.html"))
    assert len(pages) == len(NOTEBOOKS) + 1
    for page in pages:
        text = page.read_text()
        assert not REMOTE_SCRIPT.search(text), f"{page.name} loads a script from the network"
        assert not REMOTE_LINK.search(text), f"{page.name} loads a stylesheet from the network"
        assert "require.js" not in text and "MathJax.Hub" not in text
        assert str(out) not in text, f"{page.name} names the folder it was rendered in"
        if page.name == "index.html":
            continue
        assert 'class="jp-InputPrompt' not in text and '<div class="highlight' not in text, f"{page.name} shows code"
        # plotly.js once for the whole report, beside the pages, loaded before the first figure
        assert text.count('src="plotly.min.js"') == 1 and "embedded for offline use" not in text
        shown = re.sub(r"<script.*?</script>", "", text, flags=re.S)
        assert "$$" not in shown and "\\[" not in shown, f"{page.name} shows raw LaTeX"
        stem = page.stem
        if stem in kernels.families():
            first_plot = text.find("Plotly.newPlot(")
            assert first_plot > text.find('src="plotly.min.js"') > 0
            assert "CPU: the Triton interpreter at small sizes" in shown, f"{page.name} does not say its sizes"
    assert (out / "plotly.min.js").stat().st_size > 1_000_000
    fused = (out / "fused_add_rms_norm.html").read_text()
    assert re.search(r'<math[^>]*display="block"', fused), "the fused notebook's formula is not MathML"


def test_notebook_fails_when_a_kernel_is_wrong(tmp_path):
    """The RMSNorm notebook (setup, first sweep, finish) with the GPU forward kernel made wrong
    after the parameters cell: papermill must fail at finish() naming the wrong results."""
    import papermill

    nb = nbformat.read(str(NOTEBOOKS_DIR / "rms_norm.ipynb"), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    setup = [c for c in code if "Session(" in c.source]
    sweep = [c for c in code if 's.sweep("hidden"' in c.source and 'mode="forward"' in c.source][:1]
    finish = [c for c in code if "s.finish()" in c.source]
    assert params and setup and sweep and finish
    fault = nbformat.v4.new_code_cell(
        "import kernels.rms_norm.gpu as _gpu\n"
        "_forward = _gpu.rms_norm_forward\n"
        "def _wrong_forward(*args, **kwargs):\n"
        "    y, rstd = _forward(*args, **kwargs)\n"
        "    return y + 1.0, rstd  # deliberately wrong\n"
        "_gpu.rms_norm_forward = _wrong_forward\n"
    )
    nb.cells = params + [fault] + setup + sweep + finish
    src = tmp_path / "rms_norm_wrong.ipynb"
    nbformat.write(nb, str(src))
    with kernel_env(tmp_path / "store.sqlite", root=NOTEBOOKS_DIR.parent):
        with pytest.raises(papermill.PapermillExecutionError) as info:
            execute_notebook(
                src,
                tmp_path / "out.ipynb",
                {"device": "cpu", "quick": True, "headless": True, "out_dir": str(tmp_path)},
                cwd=NOTEBOOKS_DIR,
            )
    assert info.value.ename == "AssertionError"
    assert "WRONG RESULT gpu_row" in info.value.evalue and "WRONG RESULT gpu_multirow" in info.value.evalue
    assert "npu" not in info.value.evalue.replace("gpu", "")  # the untouched kernels still pass
    records = json.loads((tmp_path / "rms_norm_records.json").read_text())
    assert any(r["variant"] == "gpu_row" and r["passed"] is False for r in records)


def test_live_session_in_a_real_kernel(tmp_path):
    """headless=False inside an ipykernel: the Explorer is displayed as widgets, its worker
    thread measures, an invalid tile shows its error and the kernel carries on."""
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "from widgets import Session\n"
                's = Session("rms_norm", device="cpu", dtype="bf16", quick=True, headless=False, store=False)\n'
                "ex = s.explorer()"
            ),
            nbformat.v4.new_code_cell(
                "assert ex is not None and ex.wait(120)\n"
                "assert ex.record is not None and ex.record.ok, ex.error_text\n"
                "ex.set(BLOCK_SIZE=16)\n"
                'assert ex.wait(60) and "BLOCK_SIZE=16" in ex.error_text, ex.error_text\n'
                "ex.set(BLOCK_SIZE=512)\n"
                'assert ex.wait(120) and ex.record.ok and ex.record.params["BLOCK_SIZE"] == 512\n'
                'df = s.sweep("hidden", [300], variants=["torch_eager"])\n'
                'print("LIVE-OK", len(s.records), len(s.figures))'
            ),
        ]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src, dst = tmp_path / "live.ipynb", tmp_path / "live_out.ipynb"
    nbformat.write(nb, str(src))
    with kernel_env(tmp_path / "store.sqlite", root=NOTEBOOKS_DIR.parent):
        execute_notebook(src, dst, {}, cwd=tmp_path)
    out = nbformat.read(str(dst), as_version=4)
    views = [o for o in _outputs(out) if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert views, "the Explorer was not displayed as a widget"
    text = "".join(o.get("text", "") for o in _outputs(out) if o.get("output_type") == "stream")
    assert "LIVE-OK" in text


def test_report_and_lab_commands(capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        report_main(["--help"])
    assert info.value.code == 0
    assert "--quick" in capsys.readouterr().out
    from workbench.cli import main

    assert main(["report", "--out", str(tmp_path), "--only", "no_such_notebook"]) == 2
    assert "no notebook no_such_notebook" in capsys.readouterr().err
    assert lab_main(["--dry-run", "--notebooks", str(NOTEBOOKS_DIR)]) == 0
    printed = capsys.readouterr().out
    assert "jupyterlab" in printed and f"--notebook-dir={NOTEBOOKS_DIR}" in printed
