"""The layering of the three packages and of workbench/, as import-linter checks it.

The contracts live in pyproject.toml ([tool.importlinter]); ``make test`` runs ``lint-imports``
before pytest. Here: they hold on this tree, and a copy of the tree with one new circle, or one
import running back up to the command line, breaks them (so a contract that could not fail
would show here).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
pytestmark = pytest.mark.skipif(not Path(LINT).exists(), reason="import-linter is not installed (the dev extra)")


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LINT, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(root)}
    )


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for package in ("kernels", "workbench", "widgets"):
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _add_import(path: Path, line: str) -> None:
    """A function-level import at the end of a module (import-linter counts those too)."""
    path.write_text(path.read_text() + f"\n\ndef _added_by_the_test():\n    {line}\n")


def test_the_contracts_hold():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_a_new_circle_breaks_them(tmp_path):
    root = _copy(tmp_path)
    _add_import(root / "workbench" / "sweep" / "tasks.py", "from workbench.sweep import compile_ahead")
    out = _lint(root)
    assert out.returncode != 0 and "BROKEN" in out.stdout, out.stdout[-3000:]
    assert "compile_ahead" in out.stdout


def test_an_import_back_up_to_the_command_line_breaks_them(tmp_path):
    root = _copy(tmp_path)
    _add_import(root / "workbench" / "measure.py", "from workbench.cli import args")
    out = _lint(root)
    assert out.returncode != 0 and "workbench.measure" in out.stdout and "workbench.cli" in out.stdout, out.stdout[
        -3000:
    ]
