"""Every notebook as a user meets it: opened in JupyterLab at its defaults, Run All, Save twice.

The ``run_all`` fixture (conftest.py) runs each notebook of a throwaway checkout's notebooks/ in
headless Chromium at 1280 px, one after another, and saves it. Here: every cell ran and no cell
raised; nothing failed to render; each save went through within two seconds although the lab's
git is slow (conftest.SLOW_GIT_S); and afterwards the checkout is clean (no untracked or modified
file, no index.lock left) and names its code without ``-dirty``.
"""

from __future__ import annotations

import labkit
import pytest

NAMES = [p.name for p in labkit.notebooks_of(labkit.REPO)]
SAVE_LIMIT_S = 2.0


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
    # git runs off the save's path: a save is a second or less although the lab's git takes
    # SLOW_GIT_S per add (the bound leaves room for a loaded 2-core machine)
    assert len(run.save_seconds) == 2 and max(run.save_seconds) <= SAVE_LIMIT_S, run.save_seconds


def test_running_and_saving_every_notebook_leaves_the_checkout_clean(run_all):
    assert run_all["git_status"] == [], f"files left behind or modified: {run_all['git_status']}"
    assert not run_all["index_lock_left"], "the save hook left .git/index.lock behind"
    version = run_all["version"]
    assert version and "-dirty" not in version, f"the code version after the runs: {version!r}"
