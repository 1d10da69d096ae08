"""The live RMSNorm Explorer in a real JupyterLab, driven through headless Chromium.

The notebook as Run All at its defaults left it serves the module (session fixture ``notebook``,
a 1280 px window): the tests run in file order and each sets the controls it needs, through the
page only (select, arrow keys on a slider's handle, typing, clicking), then reads what the page
shows.
"""

from __future__ import annotations

import re

import labkit
from labkit import NotebookPage

import kernels

SPEC = kernels.get("rms_norm")
QUICK = SPEC.quick  # the notebook's CPU sizes at its defaults: rows=37, hidden=300
WAIT = 45  # seconds for one relaunch or sweep to show (an interpreter run takes ~1-2 s)


def labels(variant: str, param: str) -> list[str]:
    return [str(v) for v in SPEC.variant(variant).param(param).values]


def names(text: str, *pairs: str) -> bool:
    """Every ``name=value`` of ``pairs`` appears in ``text`` as a whole item."""
    return all(re.search(rf"(?<![\w.]){re.escape(p)}(?![\w.])", text) for p in pairs)


def shown(nb: NotebookPage, variant: str, *pairs: str) -> dict | None:
    """The page's state once the correctness table's caption and the speed figure's title both
    name this configuration and nothing is being measured; None before. (The table, the
    figure and the status line are separate widgets: their updates arrive one after another.)"""
    checks = nb.checks()
    caption = checks["caption"]
    if not caption.startswith(f"correctness of {variant} ") or not names(caption, *pairs):
        return None
    speed = nb.plot(".wb-speed")
    # the line under the plot names the configuration drawn (the variant and its tiles)
    if not speed or not speed.get("drawn") or not names(speed["notes"], f"{variant} at", *pairs):
        return None
    status = nb.text_of(".wb-status")
    if not status or status.startswith("measuring"):
        return None
    error = nb.text_of(".wb-error")
    # The figure's layout (title) and its data arrive as separate updates: unless this
    # configuration failed (no trace to draw), wait for the variant's trace too.
    if not error and trace(speed, variant) is None:
        return None
    return {"checks": checks, "status": status, "error": error, "speed": speed}


def wait_shown(nb: NotebookPage, variant: str, *pairs: str) -> dict:
    return nb.wait_for(lambda: shown(nb, variant, *pairs), WAIT, f"the Explorer to show {variant} {pairs}")


def trace(plot: dict, name: str) -> dict | None:
    return next((t for t in plot["traces"] if t["name"] == name), None)


def own_rows(checks: dict, variant: str) -> list[list[str]]:
    return [r for r in checks["rows"] if r and r[0] == variant]


def use_variant(nb: NotebookPage, variant: str) -> None:
    if nb.dropdown("variant")["value"] != variant:
        nb.select("variant", variant)
    nb.wait_for(lambda: nb.checks()["caption"].startswith(f"correctness of {variant} "), WAIT, f"variant {variant}")


def test_notebook_runs_live_and_the_controls_render(notebook):
    nb = notebook
    assert all(p[1:-2].isdigit() for p in nb.prompts), f"Run All did not finish every cell: {nb.prompts}"
    assert not nb.tracebacks(), "a cell raised:\n" + "\n\n".join(nb.tracebacks())
    assert not nb.widget_errors(), f"widgets failed to render: {nb.widget_errors()}"
    assert nb.page.locator(".wb-explorer").count() == 1

    # device, dtype, variant: dropdowns with what can run here
    device = nb.dropdown("device")
    assert device == {"value": "cpu", "options": ["cpu"]}, device
    dtype = nb.dropdown("dtype")
    assert dtype["value"] == "bf16" and set(dtype["options"]) == set(SPEC.dtypes), dtype
    variant = nb.dropdown("variant")
    assert variant["value"] == "gpu_row", variant
    assert {"gpu_row", "gpu_multirow", "npu", "torch_eager"} <= set(variant["options"]), variant
    # batch (rows) and hidden: free integers at the quick sizes
    assert nb.input_value("rows") == str(QUICK["rows"])
    assert nb.input_value("hidden") == str(QUICK["hidden"])
    # the tile knobs of the variant: BLOCK_SIZE as a slider at its default
    assert nb.control("BLOCK_SIZE").locator(".noUi-handle").count() == 1
    assert nb.slider_value("BLOCK_SIZE") == "auto"
    assert nb.page.locator(".wb-explorer .wb-control-BLOCK_SIZE_M").count() == 0  # gpu_row has no row tile

    # the first launch drew both figures and a passing correctness table
    state = wait_shown(nb, "gpu_row", "BLOCK_SIZE=auto")
    assert state["speed"]["drawn"] and trace(state["speed"], "gpu_row"), state["speed"]
    memory = nb.plot(".wb-memory")
    assert memory["drawn"] and memory["traces"], memory
    assert own_rows(state["checks"], "gpu_row") and all(r[-1] == "pass" for r in state["checks"]["rows"])
    assert "pass" in state["status"] and "interpreter" in state["status"], state["status"]

    # a multi-row variant brings its TILE_M knob (BLOCK_SIZE_M) with it
    use_variant(nb, "gpu_multirow")
    assert nb.page.locator(".wb-explorer .wb-control-BLOCK_SIZE_M").count() == 1
    assert nb.slider_value("BLOCK_SIZE_M") == "auto"
    use_variant(nb, "gpu_row")
    assert nb.page.locator(".wb-explorer .wb-control-BLOCK_SIZE_M").count() == 0
    assert not nb.page_errors(), nb.page_errors()


def test_the_controls_offer_what_can_run(notebook):
    """At the CPU default (hidden=300) BLOCK_SIZE 16 to 256 are marked ✗ with the reason; forward
    mode shows no backward tile; the knobs say what a 0 or a size means."""
    nb = notebook
    use_variant(nb, "gpu_row")
    nb.wait_for(lambda: "smaller than hidden=300" in nb.text_of(".wb-refused"), WAIT, "the refused values' line")
    refused = nb.text_of(".wb-refused")
    assert "BLOCK_SIZE 16, 32, 64, 128, 256:" in refused, refused
    assert "rows (batch x sequence)" in nb.text_of(".wb-knob-help")
    backward = [p.name for p in SPEC.variant("gpu_row").params if not p.used_in("forward")]
    assert len(backward) >= 7 and all(name.startswith(("BWD_", "DW_", "GRID")) for name in backward), backward

    def shown_tiles():
        return [n for n in backward if nb.page.locator(f".wb-explorer .wb-control-{n}").count()]

    assert shown_tiles() == [], "forward mode shows backward tiles"
    nb.page.locator(".wb-explorer .wb-control-mode button", has_text="full").first.click()
    nb.wait_for(lambda: shown_tiles() == backward, WAIT, "the backward tiles in full mode")
    nb.page.locator(".wb-explorer .wb-control-mode button", has_text="forward").first.click()
    nb.wait_for(lambda: shown_tiles() == [], WAIT, "the backward tiles gone again in forward mode")
    wait_shown(nb, "gpu_row", "BLOCK_SIZE=" + nb.slider_value("BLOCK_SIZE"))
    assert not nb.page_errors(), nb.page_errors()


def _fits(nb: NotebookPage, css: str) -> dict:
    """Where an Explorer element sits against the notebook's visible area (scrolled into view).

    Found, scrolled and measured in one script: the Explorer redraws its status line when a
    measurement is refined, and an element found by one call could be replaced before the next."""
    nb.page.locator(f".wb-explorer {css}").first.wait_for(state="attached")
    return nb.page.evaluate(
        """selector => {
          const e = document.querySelector(selector);
          e.scrollIntoView({block: 'nearest', inline: 'nearest'});
          const r = e.getBoundingClientRect();
          const panel = (e.closest('.jp-WindowedPanel-outer') || e.closest('.jp-Notebook')).getBoundingClientRect();
          return {left: r.left, right: r.right, panel_left: panel.left, panel_right: panel.right,
                  scroll_width: e.scrollWidth, client_width: e.clientWidth, text: e.textContent};
        }""",
        f".wb-explorer {css}",
    )


def test_status_line_and_why_panel_are_fully_visible_at_1280_px(notebook):
    nb = notebook
    assert nb.page.viewport_size["width"] == 1280
    wait_shown(nb, nb.dropdown("variant")["value"], "BLOCK_SIZE=" + nb.slider_value("BLOCK_SIZE"))
    for css in (".wb-status", ".wb-why-panel"):
        box = _fits(nb, css)
        assert box["text"].strip(), f"{css} is empty"
        assert box["scroll_width"] <= box["client_width"] + 1, f"{css} overflows its box: {box}"
        assert box["panel_left"] - 1 <= box["left"] and box["right"] <= box["panel_right"] + 1, (
            f"{css} reaches past the notebook's edge: {box}"
        )


def test_block_size_change_relaunches_and_redraws(notebook):
    nb = notebook
    use_variant(nb, "gpu_row")
    options = labels("gpu_row", "BLOCK_SIZE")
    nb.slide_to("BLOCK_SIZE", "auto", options)
    before = wait_shown(nb, "gpu_row", "BLOCK_SIZE=auto")
    old = trace(before["speed"], "gpu_row")
    assert old is not None, before["speed"]

    # 8192 >= hidden: valid, and not measured by the notebook's own sweeps, so a real relaunch
    nb.slide_to("BLOCK_SIZE", "8192", options)
    after = wait_shown(nb, "gpu_row", "BLOCK_SIZE=8192")
    assert "cached" not in after["status"].split(" | "), f"expected a new measurement: {after['status']}"
    assert "compile+first call" in after["status"] and "pass" in after["status"].split(" | ")
    assert after["error"] == ""
    rows = own_rows(after["checks"], "gpu_row")
    assert rows and all(r[-1] == "pass" for r in rows), after["checks"]
    speed = after["speed"]
    assert names(speed["notes"], "BLOCK_SIZE=8192"), speed["notes"]
    new = trace(speed, "gpu_row")
    assert new is not None and new["x"] == [str(QUICK["hidden"])], speed
    assert new["y"] != old["y"], "the speed figure still shows the old measurement"

    # back to a setting seen before: served from the cache, figure drawn again
    nb.slide_to("BLOCK_SIZE", "auto", options)
    back = wait_shown(nb, "gpu_row", "BLOCK_SIZE=auto")
    assert "cached" in back["status"].split(" | "), back["status"]
    assert names(back["speed"]["notes"], "BLOCK_SIZE=auto")


def test_invalid_tile_shows_its_error_and_the_kernel_lives_on(notebook):
    nb = notebook
    use_variant(nb, "gpu_row")
    options = labels("gpu_row", "BLOCK_SIZE")
    kernel = nb.lab.kernel_pids()
    assert kernel == nb.kernel_pids_at_start and len(kernel) == 1, (kernel, nb.kernel_pids_at_start)

    # 128 < hidden=300: the untiled kernel cannot hold the row; the slider marks it before any
    # launch, and a person who moves there anyway gets the reason, not a dead kernel
    nb.slide_to("BLOCK_SIZE", "128", options)
    assert nb.slider_label("BLOCK_SIZE") == "128 ✗", nb.slider_label("BLOCK_SIZE")
    bad = wait_shown(nb, "gpu_row", "BLOCK_SIZE=128")
    assert "BLOCK_SIZE=128 is smaller than hidden=300" in bad["error"], bad["error"]
    assert nb.page.locator(".wb-explorer .wb-error").first.is_visible()
    assert "cannot run" in bad["status"], bad["status"]
    assert any("error" in " ".join(r) for r in own_rows(bad["checks"], "gpu_row")), bad["checks"]
    assert not nb.tracebacks(), nb.tracebacks()

    # the kernel is the same process, idle, and no dialog (dead / restarting kernel) came up
    assert nb.lab.kernel_pids() == kernel
    nb.wait_kernel_idle(30)
    assert nb.page.locator(".jp-Dialog").count() == 0

    # a valid setting afterwards runs again and clears the error
    nb.slide_to("BLOCK_SIZE", "4096", options)
    good = wait_shown(nb, "gpu_row", "BLOCK_SIZE=4096")
    assert good["error"] == "", good["error"]
    # The arrow keys step through every value on the way, and the worker may have measured 4096
    # on one of those passes (here or in the last test): then Re-measure launches it again.
    if "cached" in good["status"].split(" | "):
        nb.page.locator(".wb-explorer .wb-remeasure").first.click()

        def measured_again():
            state = shown(nb, "gpu_row", "BLOCK_SIZE=4096")
            return state if state and "cached" not in state["status"].split(" | ") else None

        good = nb.wait_for(measured_again, WAIT, "gpu_row BLOCK_SIZE=4096 measured again (Re-measure)")
        assert good["error"] == "", good["error"]
    assert "pass" in good["status"].split(" | ") and "cached" not in good["status"].split(" | "), good["status"]
    rows = own_rows(good["checks"], "gpu_row")
    assert rows and all(r[-1] == "pass" for r in rows), good["checks"]
    assert names(good["speed"]["notes"], "BLOCK_SIZE=4096") and trace(good["speed"], "gpu_row")
    assert nb.lab.kernel_pids() == kernel


def test_sweep_draws_its_heatmap_and_apply_best_sets_the_controls(notebook):
    nb = notebook
    use_variant(nb, "gpu_multirow")
    page = nb.page
    page.locator(".wb-explorer .wb-sweep-x select").select_option(label="BLOCK_SIZE")
    page.locator(".wb-explorer .wb-sweep-y select").select_option(label="BLOCK_SIZE_M")
    # 256 < hidden fails (marked cells); none of these was measured by the notebook's own sweep
    nb.type_into(".wb-sweep-x-values", "256, 1024")
    nb.type_into(".wb-sweep-y-values", "2, 8")
    # The notebook's own sweep2d may have drawn this heatmap (a Session's sweeps fill the Explorer's
    # heatmap as results arrive); it must show that finished grid, not a sweep stuck "running".
    before = nb.plot(".wb-heatmap")
    assert before is None or not before.get("drawn") or "sweep running" not in before.get("title", ""), before
    page.locator(".wb-explorer .wb-sweep-run").first.click()

    # The label may still read "done" from the notebook's own sweep (36/36) until the click's
    # "queued" reaches the page: this sweep is done when the bar counts its 4 cells too.
    nb.wait_for(
        lambda: "done" in nb.text_of(".wb-sweep-label") and nb.text_of(".wb-progress").strip() == "4/4",
        WAIT,
        "the sweep of 4 cells to finish (progress 4/4)",
    )

    def this_grid():
        """The heatmap once this sweep's grid is drawn: its figure is replaced in one update of
        the traces and one of the layout, which the page may show between the two."""
        plot = nb.plot(".wb-heatmap") or {}
        grid = next((t for t in plot.get("traces", []) if t["type"] == "heatmap"), None)
        done = grid is not None and len(grid["z"]) == 2 and "2 failed cell(s)" in plot.get("title", "")
        return plot if done else None

    heat = nb.wait_for(this_grid, WAIT, "this sweep's heatmap")
    cells = next(t for t in heat["traces"] if t["type"] == "heatmap")
    assert len(cells["z"]) == 2 and all(len(row) == 2 for row in cells["z"]), cells
    assert [row[0] for row in cells["z"]] == [None, None], "BLOCK_SIZE=256 cells should be failures"
    assert all(isinstance(row[1], float) and row[1] > 0 for row in cells["z"]), cells["z"]
    assert "2 failed cell(s)" in heat["title"], heat["title"]
    assert any(t["type"] == "scatter" and t["name"].startswith("failed") for t in heat["traces"])
    # The sweep's end fills the heatmap first, then the best cell's line, then the failures table:
    # once the table names the failed cells, all three are this sweep's.
    nb.wait_for(lambda: "smaller than hidden=300" in nb.text_of(".wb-failures"), WAIT, "the failed cells' table")

    best = nb.text_of(".wb-best")
    m = re.search(r"BLOCK_SIZE=(\d+), BLOCK_SIZE_M=(\d+)", best)
    assert m and m.group(1) == "1024" and m.group(2) in ("2", "8"), best
    button = page.locator(".wb-explorer .wb-apply-best").first
    assert button.is_enabled()
    button.click()
    state = wait_shown(nb, "gpu_multirow", "BLOCK_SIZE=1024", f"BLOCK_SIZE_M={m.group(2)}")
    assert nb.slider_value("BLOCK_SIZE") == "1024" and nb.slider_value("BLOCK_SIZE_M") == m.group(2)
    assert "cached" in state["status"].split(" | "), state["status"]  # the sweep measured it
    # applying a cell of the same variant keeps the sweep the person typed
    assert nb.input_value(".wb-sweep-x-values") == "256, 1024"
    assert nb.input_value(".wb-sweep-y-values") == "2, 8"
    assert all(r[-1] == "pass" for r in own_rows(state["checks"], "gpu_multirow"))
    assert not nb.page_errors(), nb.page_errors()


def test_the_picture_of_the_explorer(notebook):
    """The picture the README and the docs show, taken here so it shows the Explorer as it is:
    written to docs/images/explorer.png with WORKBENCH_UPDATE_PICTURES=1 (make pictures), else
    beside the browser artifacts."""
    import os

    from conftest import artifacts_root

    nb = notebook
    use_variant(nb, "gpu_multirow")
    wait_shown(nb, "gpu_multirow", "BLOCK_SIZE=" + nb.slider_value("BLOCK_SIZE"))
    folder = labkit.REPO / "docs" / "images" if os.environ.get("WORKBENCH_UPDATE_PICTURES") == "1" else artifacts_root()
    path = nb.picture(folder / "explorer.png")
    from PIL import Image

    with Image.open(path) as image:
        width, height = image.size
        colours = image.convert("RGB").resize((32, 32)).getcolors(32 * 32)
    assert width >= 700 and height >= 800, (width, height)
    assert colours is None or len(colours) > 8, "the picture is one flat colour"
