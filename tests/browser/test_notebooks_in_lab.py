"""Every notebook as a user meets it: opened in JupyterLab at its defaults, Run All, Save.

The ``run_all`` fixture (conftest.py) runs each notebook of a throwaway checkout's notebooks/ in
headless Chromium at 1280 px, one after another, and saves it. Here: every cell ran and no cell
raised; nothing failed to render; the saves went through; and afterwards the checkout is clean
(no untracked or modified file) and names its code without ``-dirty``.
"""

from __future__ import annotations

import labkit
import pytest

pytestmark = pytest.mark.notebooks  # make test-notebooks (CI, after make test); make test leaves them out
NAMES = [p.name for p in labkit.notebooks_of(labkit.REPO)]


def test_every_notebook_is_covered():
    assert {"index.ipynb", "rms_norm.ipynb", "fused_add_rms_norm.ipynb", "scalar_ops.ipynb"} <= set(NAMES)
    assert {"block_sparse.ipynb", "suite.ipynb"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_run_all_at_the_defaults_finishes_without_a_traceback(run_all, name):
    run = run_all["runs"][name]
    assert run.prompts and all(p[1:-2].strip().isdigit() for p in run.prompts), f"cells not run: {run.prompts}"
    assert not run.tracebacks, "a cell raised:\n" + "\n\n".join(run.tracebacks)
    assert not run.widget_errors, run.widget_errors
    assert not run.page_errors, run.page_errors
    assert run.saved, "File > Save did not finish (the tab still shows unsaved changes)"


def test_running_and_saving_every_notebook_leaves_the_checkout_clean(run_all):
    assert run_all["git_status"] == [], f"files left behind or modified: {run_all['git_status']}"
    version = run_all["version"]
    assert version and "-dirty" not in version, f"the code version after the runs: {version!r}"
