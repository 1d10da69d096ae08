"""Every notebook as a user meets it: opened in JupyterLab at its defaults, Run All, Save twice.

The ``run_all`` fixture (conftest.py) runs each notebook of a throwaway checkout's notebooks/ in
headless Chromium at 1280 px, one after another, and saves it. Here: every cell ran and no cell
raised; nothing failed to render; each save went through within two seconds although the lab's
git is slow (conftest.SLOW_GIT_S); every figure, button and table fits its cell
(``labkit._FIT_JS``: a title or subtitle never on a plot area, a tick label or past the figure's
edge, a legend never on an axis title, no button label cut, no table past the cell unless it
scrolls there); and afterwards the checkout is clean (no untracked or modified file, no
index.lock left) and names its code without ``-dirty``.
"""

from __future__ import annotations

import labkit
import pytest

pytestmark = pytest.mark.notebooks  # make test-notebooks (CI, after make test); make test leaves them out
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


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_fits_and_no_button_label_is_cut(run_all, name):
    layout = run_all["runs"][name].layout
    assert layout, "the layout was not measured"
    if name != "index.ipynb":  # the index is a table of the families; every other notebook draws
        assert layout["figures"] > 0, f"no figure was measured in {name}: {layout}"
    assert not layout["problems"], f"{name}:\n" + "\n".join(layout["problems"])


def test_the_layout_check_sees_what_it_looks_for(chromium):
    """The check is not blind: a figure whose five-line title sits in a 30 px margin, a button
    narrower than its label and a table wider than its cell are all reported."""
    from pathlib import Path

    import plotly

    page = chromium.new_page(viewport={"width": 1280, "height": 1000})
    try:
        page.set_content(
            '<div class="jp-Cell" style="width:700px"><div class="jp-OutputArea" style="width:700px">'
            '<div id="fig"></div>'
            '<button class="jupyter-button" style="width:44px;overflow:hidden;white-space:nowrap">Apply best</button>'
            '<table style="width:1200px"><tr><td>wide</td></tr></table></div></div>'
        )
        page.add_script_tag(path=str(Path(plotly.__file__).parent / "package_data" / "plotly.min.js"))
        title = "<br>".join(
            ["a long title that runs on and on and on, well past where any figure of six hundred pixels ends"] * 5
        )
        page.evaluate(
            "t => Plotly.newPlot('fig', [{x: [1, 2, 3], y: [3, 1, 2]}], "
            "{title: {text: t}, width: 600, height: 400, margin: {t: 30}})",
            title,
        )
        found = page.locator(".jp-Cell").first.evaluate(labkit._FIT_JS)
    finally:
        page.close()
    text = "\n".join(found["problems"])
    assert found["figures"] == 1 and found["buttons"] == 1, found
    assert "the title overlaps the plot area" in text, text
    assert "the title is cut at the figure's edge" in text, text
    assert 'button "Apply best" is truncated' in text, text
    assert "a table reaches" in text, text
