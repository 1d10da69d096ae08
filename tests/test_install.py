"""The base install (``pip install .``, no extras) is the library and the command line: the lab
(JupyterLab, papermill, the widgets, plotly and the rest of the ``lab`` extra) is an extra.

Checked two ways: the project file keeps the lab out of the base dependencies, and a process in
which every lab package fails to import still imports every family and runs ``workbench list``
and ``workbench bench`` (the lab's modules made unimportable, as where they are not installed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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
    assert ".[lab," in (ROOT / "Makefile").read_text()  # make lab / make test install it


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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "rms_norm" in out.stdout and "PASS" in out.stdout and "LAB-BLOCKED" in out.stdout


def test_a_lab_command_without_the_lab_says_what_to_install():
    code = (
        BLOCK + "from workbench.cli import main\nraise SystemExit(main(['report', '--device', 'cpu', '--out', 'x']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 2, out.stderr
    assert "kernel-workbench[lab]" in out.stderr and "Traceback" not in out.stderr, out.stderr
