"""The committed suite report, rendered from its records, opened as a reader opens it: from disk,
with the network cut off.

It must draw (plotly.js from the file beside it), ask the network for nothing, show the headline
(title, sentences, then the ratio chart) before any table, within the first screen, and show no
code. ``workbench report --render reports/h100`` builds the page.
"""

from __future__ import annotations

import labkit
import pytest


@pytest.fixture(scope="module")
def report(browser_pieces, tmp_path_factory):
    from workbench.reports.render import render_folder

    return render_folder(labkit.REPO / "reports" / "h100", tmp_path_factory.mktemp("h100")).page


def test_report_page_opens_offline_headline_chart_first_and_no_code(chromium, report):
    page, errors, asked = labkit.open_offline(chromium, report, width=1400)
    try:
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
        first = page.evaluate(
            """() => {
              const plots = [...document.querySelectorAll('.js-plotly-plot')];
              const p = plots[0], title = document.querySelector('h1.wb-title');
              const table = document.querySelector('table.wb-ratios');
              const top = (el) => el.getBoundingClientRect().top + window.scrollY;
              return {
                plots: plots.length,
                chart: p.layout.title.text,
                drawn: p.querySelectorAll('.scatterlayer .point').length,
                title: title && title.textContent,
                titleTop: title ? top(title) : null,
                chartTop: top(p),
                tableTop: table ? top(table) : null,
              };
            }"""
        )
        code = page.locator(".jp-InputPrompt, .jp-CodeMirrorEditor, .highlight pre, .jp-InputArea-editor").count()
        text = page.inner_text("body")
    finally:
        page.close()
    assert not asked, f"the report asked the network for {asked[:5]}"
    assert not errors, errors
    assert first["chart"].startswith("Ours against the best peer"), first
    assert first["drawn"] > 0, "the headline chart drew no point"
    assert first["title"] and "Issue" not in first["title"]
    assert first["titleTop"] < first["chartTop"] < first["tableTop"]
    assert first["chartTop"] < 1000, "the headline chart is not on the first screen"
    assert code == 0, "code cells are visible"
    assert "records_dir =" not in text and "import " not in text and "In [" not in text


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_report_headline_labels_do_not_overlap_and_the_status_column_is_in_view(chromium, report):
    """At 1280 px: the headline chart's title and its facets' titles never cover one another (18
    facets side by side did), and the ratio table's status column is on the screen (the wide
    columns after it scroll inside the table's own box)."""
    page = chromium.new_page(viewport={"width": 1280, "height": 1000})
    try:
        page.goto(report.as_uri(), wait_until="load", timeout=60_000)
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
        seen = page.evaluate(
            """() => {
              const plot = document.querySelectorAll('.js-plotly-plot')[0];
              const labels = [...plot.querySelectorAll('.annotation-text, .gtitle')].map(e => {
                const r = e.getBoundingClientRect();
                return [r.left, r.top, r.right, r.bottom, e.textContent];
              });
              const status = [...document.querySelectorAll('table.wb-ratios th')].find(e => e.textContent === 'status');
              const box = document.querySelector('.wb-ratios-box');
              return {labels, status_right: status.getBoundingClientRect().right, width: window.innerWidth,
                      box_overflow: box ? getComputedStyle(box).overflowX : null};
            }"""
        )
    finally:
        page.close()
    labels = seen["labels"]
    assert len(labels) > 10, labels
    clashes = [(a[4], b[4]) for i, a in enumerate(labels) for b in labels[i + 1 :] if _overlap(a, b)]
    assert not clashes, f"chart labels overlap: {clashes[:5]}"
    assert seen["status_right"] <= seen["width"], seen
    assert seen["box_overflow"] == "auto", seen
