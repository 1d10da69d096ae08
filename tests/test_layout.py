"""What the layout promises beyond the import contracts (tests/test_layering.py): a model imports
``kernels`` without the tool (no store, suite, plotly or pandas comes with it), and a family is
one folder with its parts."""

from __future__ import annotations

from pathlib import Path

import testkit

import kernels

ROOT = Path(__file__).resolve().parent.parent


def test_importing_the_kernels_pulls_in_no_tool():
    families = kernels.families()
    code = (
        "import sys, kernels\n"
        + "".join(f"import kernels.{f}\nkernels.get({f!r})\n" for f in families)
        + "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('workbench', 'widgets', 'plotly', 'pandas', 'sqlite3', 'ipywidgets', 'papermill'))\n"
        "print(','.join(heavy))\n"
    )
    out = testkit.python_in_repo(code, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"importing the kernels loaded: {out.stdout.strip()}"


def test_every_family_folder_has_its_parts():
    """A family is one folder: API, reference, GPU and NPU kernels, and its spec."""
    for family in kernels.families():
        folder = ROOT / "kernels" / family
        missing = [f for f in ("__init__.py", "reference.py", "gpu.py", "npu.py") if not (folder / f).exists()]
        assert not missing, f"kernels/{family} lacks {missing}"
        assert kernels.get(family).name == family


def test_long_gpu_tests_start_each_on_a_worker_of_their_own(request):
    """gpu_run.sh's xdist (load scheduling, --maxschedchunk 1) hands each worker two consecutive
    tests first: the long GPU tests sit at every other place, the rest after them, none lost."""
    from types import SimpleNamespace

    from testkit import interleave_long_tests

    items = [SimpleNamespace(name=f"t{i}", keywords={"long_gpu"} if i in (3, 7, 8) else set()) for i in range(10)]
    order = [item.name for item in interleave_long_tests(items)]
    assert order[0:6:2] == ["t3", "t7", "t8"]
    assert sorted(order) == sorted(item.name for item in items) and len(order) == len(items)
    assert order[1:6:2] == ["t0", "t1", "t2"] and order[6:] == ["t4", "t5", "t6", "t9"]
    assert "--maxschedchunk 1" in (ROOT / "benchmarks" / "gpu_run.sh").read_text()
    # It must order what -m kept: run before the deselection, CPU tests stood between the long
    # ones and left them side by side (H100: the PyJuice test and a 30 s one on one worker).
    conftest = next(
        plugin
        for plugin in request.config.pluginmanager.get_plugins()
        if getattr(plugin, "__file__", None) == str(ROOT / "tests" / "conftest.py")
    )
    assert conftest.pytest_collection_modifyitems.pytest_impl.get("trylast") is True


def test_a_module_over_600_lines_says_why_it_is_one():
    """A module a reader cannot hold at once (over 600 lines) states in its docstring why it reads
    as one explanation ("Why one ..."); otherwise it is split."""
    import ast

    unexplained = []
    for package in ("kernels", "workbench", "widgets"):
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if text.count("\n") <= 600:
                continue
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "Why one" not in doc:
                unexplained.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not unexplained, unexplained
