"""The base install (``pip install .``, no extras) is the library and the command line: the lab
(JupyterLab, papermill, the widgets, plotly and the rest of the ``lab`` extra) is an extra.

Checked two ways: the project file keeps the lab out of the base dependencies, and a process in
which every lab package fails to import still imports every family and runs ``workbench list``
and ``workbench bench`` (the lab's modules made unimportable, as where they are not installed).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import testkit

ROOT = Path(__file__).resolve().parent.parent
LAB = ("plotly", "ipywidgets", "anywidget", "jupyterlab", "ipykernel", "nbformat", "nbconvert", "papermill")

# A meta-path finder that refuses the lab's packages: what `import plotly` meets without the extra.
BLOCK = f"""
import sys
LAB = {LAB!r} + ("IPython", "jupyter_client", "nbclient", "nbstripout", "latex2mathml")
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in LAB:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not installed)", name=name)
        return None
sys.meta_path.insert(0, NotInstalled())
"""


def test_the_lab_is_an_extra_not_a_base_dependency():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {d.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower() for d in project["dependencies"]}
    assert not base & set(LAB), f"lab packages in the base dependencies: {sorted(base & set(LAB))}"
    lab = {d.split(">")[0].split("=")[0].strip().lower() for d in project["optional-dependencies"]["lab"]}
    assert set(LAB) <= lab


def _make_plan(target: str, venv: Path) -> list[str]:
    """The commands ``make TARGET`` would run for a virtualenv at ``venv`` (make -n: nothing runs)."""
    out = subprocess.run(
        ["make", "-n", target, f"VENV={venv}", "PYTHON=python3"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.splitlines() if "pip install" in line or line.startswith("touch")]


def test_make_lab_installs_the_lab_and_make_test_adds_dev(tmp_path):
    """From nothing, ``make lab`` installs the lab and distributed extras (not dev) and ``make test``
    installs them with dev in one go; after ``make lab``, ``make test`` adds dev (pip keeps what is
    there); after ``make test``, ``make lab`` has nothing to install."""
    venv = tmp_path / "venv"
    lab = _make_plan("env-lab", venv)
    assert any('-e ".[lab,distributed]"' in line for line in lab), lab
    assert not any(",dev" in line for line in lab), lab
    test = _make_plan("env", venv)
    assert any('-e ".[lab,dev,distributed]"' in line for line in test), test
    assert any(line.startswith("touch") and line.rstrip().endswith(".installed") for line in test), test
    for target in ("lab", "test"):  # the targets a person types use these installs
        recipe = subprocess.run(["make", "-n", target, f"VENV={venv}"], capture_output=True, text=True, cwd=ROOT)
        wanted = '.[lab,dev,distributed]"' if target == "test" else '.[lab,distributed]"'
        assert wanted in recipe.stdout, recipe.stdout[:2000]
    # `make lab` done: the lab's stamp is newer than pyproject.toml
    venv.mkdir()
    (venv / ".installed").touch()
    assert _make_plan("env-lab", venv) == []
    assert any('.[lab,dev,distributed]"' in line for line in _make_plan("env", venv))
    (venv / ".installed-dev").touch()
    assert _make_plan("env", venv) == [] and _make_plan("env-lab", venv) == []


def test_the_kernels_and_the_command_line_run_without_the_lab(tmp_path):
    code = BLOCK + (
        "import kernels\n"
        "for name in kernels.families():\n"
        "    kernels.get(name)\n"
        "from workbench.cli import main\n"
        "assert main(['list']) == 0\n"
        f"assert main(['bench', 'rms_norm', '--device', 'cpu', '--quick', '--variants', 'gpu_row', '--rep-ms', '1', "
        f"'--store', {str(tmp_path / 'r.sqlite')!r}]) == 0\n"
        "try:\n"
        "    import plotly\n"
        "except ModuleNotFoundError:\n"
        "    print('LAB-BLOCKED')\n"
    )
    out = testkit.python_in_repo(code, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "rms_norm" in out.stdout and "PASS" in out.stdout and "LAB-BLOCKED" in out.stdout


def test_a_lab_command_without_the_lab_says_what_to_install():
    code = (
        BLOCK + "from workbench.cli import main\nraise SystemExit(main(['report', '--device', 'cpu', '--out', 'x']))\n"
    )
    out = testkit.python_in_repo(code, timeout=300)
    assert out.returncode == 2, out.stderr
    assert "kernel-workbench[lab]" in out.stderr and "Traceback" not in out.stderr, out.stderr
