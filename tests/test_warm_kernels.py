"""The report's kernels started ahead (workbench/reports/warm_kernels.py): what a warm kernel
imports, that a notebook then runs in it with those modules already loaded, and that a kernel
which cannot start leaves the notebook to start its own."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat

import kernels
from workbench.reports.notebook_report import build_report
from workbench.reports.notebooks import KERNEL_NAME, kernel_env
from workbench.reports.warm_kernels import WarmKernel, notebook_modules, warm_up_modules


def _notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


def _kernel_children() -> list[int]:
    """This process's child processes that are Jupyter kernels (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"ipykernel_launcher" in cmdline:
            found.append(int(stat.parent.name))
    return found


def test_notebook_modules_reads_top_level_imports_only(tmp_path):
    path = _notebook(
        tmp_path / "n.ipynb",
        "import os.path, json\nfrom collections import abc, OrderedDict\n",
        "try:\n    from liger_kernel.ops.softmax import LigerSoftmaxFunction\nexcept ImportError:\n    pass\n",
        "def f():\n    import fractions\n",  # inside a function: runs only if called
        "from . import sibling\nfrom email import *\n",
        "%matplotlib inline\nimport decimal\n",  # a magic: not Python, skipped whole
        "import json\n",
    )
    assert notebook_modules(path) == [
        "os.path",
        "json",
        "collections",
        "collections.abc",
        "collections.OrderedDict",
        "liger_kernel.ops.softmax",
        "liger_kernel.ops.softmax.LigerSoftmaxFunction",
        "email",
    ]


def test_first_call_imports_follow_the_variants_that_run_there(tmp_path):
    spec = kernels.get("rms_norm")
    on_cuda = spec.first_call_imports("cuda")
    assert "torch._inductor.compile_fx" in on_cuda  # torch_compile runs on cuda
    assert spec.first_call_imports("cpu") == []  # torch.compile and Liger do not run on the CPU
    liger_here = spec.variant("liger").unavailable_reason("cuda") is None
    assert ("liger_kernel.ops.rms_norm" in on_cuda) == liger_here
    path = _notebook(tmp_path / "rms.ipynb", "from widgets import Session\n")
    assert warm_up_modules(path, "rms_norm", "cuda") == ["widgets", "widgets.Session", *on_cuda]
    assert warm_up_modules(path, "not-a-family", "cuda") == ["widgets", "widgets.Session"]


def test_a_notebook_runs_in_its_warm_kernel_with_the_imports_made(tmp_path):
    """Two notebooks asking, before their own import, whether ``colorsys`` (a module nothing
    else here loads) is already in ``sys.modules``: yes in a warm kernel, no without one."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    probe = (
        "import sys, json\n"
        "print(json.dumps({'warm': 'colorsys' in sys.modules, 'helper_gone': '_workbench_warm_up' not in dir()}))\n"
    )
    for name in ("a", "b"):
        _notebook(folder / f"{name}.ipynb", probe, "import colorsys\n")

    def seen(out: Path, name: str) -> dict:
        cell = nbformat.read(str(out / f"{name}.ipynb"), as_version=4).cells
        text = next(c for c in cell if c.source.startswith("import sys")).outputs[0]["text"]
        return json.loads(text)

    warm = build_report(
        tmp_path / "warm", device="cpu", quick=True, notebooks_dir=folder, warm_ahead=True, log=lambda *a: None
    )
    cold = build_report(
        tmp_path / "cold", device="cpu", quick=True, notebooks_dir=folder, warm_ahead=False, log=lambda *a: None
    )
    assert warm["ok"] and cold["ok"]
    for name in ("a", "b"):
        assert seen(tmp_path / "warm", name) == {"warm": True, "helper_gone": True}
        assert seen(tmp_path / "cold", name) == {"warm": False, "helper_gone": True}
    assert _kernel_children() == [], "every warm kernel is shut down before the report returns"
    ahead = [r["kernel_ahead"] for r in warm["results"]]
    assert all(a["error"] is None and a["modules"] == 3 and a["seconds"] > 0 for a in ahead)
    assert all(r["kernel_ahead"] is None for r in cold["results"])


def test_a_kernel_that_cannot_start_hands_over_nothing(tmp_path):
    with kernel_env():
        warm = WarmKernel(["json"], tmp_path, "no-such-kernel")
        assert warm.take() is None
    assert warm.error and "no-such-kernel" in warm.error
    assert warm.facts()["error"] == warm.error


def test_a_released_kernel_is_shut_down_in_the_background(tmp_path):
    with kernel_env():
        warm = WarmKernel(["colorsys"], tmp_path, KERNEL_NAME)
        km = warm.take()
        assert km is not None and km.is_alive() and warm.facts()["error"] is None
        warm.release(km)
        warm.wait_released()
        assert not km.is_alive()
