"""The three packages depend one way: widgets -> workbench -> kernels.

A model imports ``kernels`` without the tool: no store, suite, plotly or pandas comes with it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import kernels

ROOT = Path(__file__).resolve().parent.parent
# What each package may import of the others.
ALLOWED = {"kernels": set(), "workbench": {"kernels"}, "widgets": {"kernels", "workbench"}}


def _imported_packages(path: Path) -> set[str]:
    """Top-level names of everything a module imports (at any depth, lazy imports included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_downstream(package):
    ours = set(ALLOWED)
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = (_imported_packages(path) & ours) - ALLOWED[package] - {package}
        if bad:
            wrong.append(f"{path.relative_to(ROOT)} imports {', '.join(sorted(bad))}")
    assert not wrong, "dependencies must run widgets -> workbench -> kernels:\n" + "\n".join(wrong)


def test_importing_the_kernels_pulls_in_no_tool():
    families = kernels.families()
    code = (
        "import sys, kernels\n"
        + "".join(f"import kernels.{f}\nkernels.get({f!r})\n" for f in families)
        + "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('workbench', 'widgets', 'plotly', 'pandas', 'sqlite3', 'ipywidgets', 'papermill'))\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"importing the kernels loaded: {out.stdout.strip()}"


def test_every_family_folder_has_its_parts():
    """A family is one folder: API, reference, GPU and NPU kernels, and its spec."""
    for family in kernels.families():
        folder = ROOT / "kernels" / family
        missing = [f for f in ("__init__.py", "reference.py", "gpu.py", "npu.py") if not (folder / f).exists()]
        assert not missing, f"kernels/{family} lacks {missing}"
        assert kernels.get(family).name == family
