"""The documentation site as a reader opens it from disk: its reports index, then one rendered page
of each kind of run folder, with the network cut off.

The site is built as ``make docs`` builds it (``mkdocs build --strict`` and the reports hook's
render of every committed report from its records), into a temporary folder. Each page must draw
every figure (a ``.main-svg`` inside each plot), raise no page error and ask the network for
nothing; plotly.js comes from the one copy at the site's top.
"""

from __future__ import annotations

import labkit
import pytest

# one page of each kind of run folder (workbench/reports/render.py), under the site's reports/
PAGES = {
    "suite": "h100/report.html",
    "notebooks index": "h100-notebooks/index.html",
    "notebook": "h100-notebooks/rms_norm.html",
    "sweep": "block-sparse-small-batch/h100-sweep/report.html",
    "tune": "h100-tune/rms_norm/report.html",
    "why": "h100-why/report.html",
    "scaling": "sweep-h100x2-placement/warm/report.html",
}


@pytest.fixture(scope="module")
def site(browser_pieces, docs_site):
    """The site as ``make docs`` builds it (conftest's ``docs_site``, built once for every test that
    reads it)."""
    return docs_site[0]


def test_one_plotly_for_the_whole_site(site):
    copies = sorted(p.relative_to(site).as_posix() for p in site.rglob("plotly*.js"))
    assert copies == ["plotly.min.js"], copies
    pages = list((site / "reports").rglob("*.html"))
    assert pages
    embedded = [p for p in pages if "* plotly.js v" in p.read_text(encoding="utf-8")]  # its header comment
    assert not embedded, embedded[:3]


def test_reports_index_lists_every_report_with_device_and_commit(chromium, site):
    from workbench.reports.render import find_runs

    folders = sorted(d for d in (labkit.REPO / "reports").iterdir() if d.is_dir())
    reports = [d.name for d in folders]
    with_runs = {d.name for d in folders if find_runs(d)}
    page, errors, asked = labkit.open_offline(chromium, site / "reports" / "index.html")
    try:
        rows = page.evaluate(
            """() => [...document.querySelectorAll('article table tbody tr')].map(tr =>
                 [...tr.querySelectorAll('td')].map(td => td.textContent.trim()))"""
        )
        hrefs = page.evaluate(
            "() => [...document.querySelectorAll('article table a')].map(a => a.getAttribute('href'))"
        )
    finally:
        page.close()
    assert not errors and not asked, (errors, asked)
    assert [r[0] for r in rows] == reports
    assert all(r[3] for r in rows), rows
    unnamed = [r for r in rows if r[0] in with_runs and "-" in (r[1], r[2])]
    assert not unnamed, f"a report with runs whose device or commit the index does not name: {unnamed}"
    for href in hrefs:
        assert (site / "reports" / href).is_file(), href


@pytest.mark.parametrize("kind", list(PAGES))
def test_a_page_of_each_kind_draws_its_figures_offline(chromium, site, kind):
    page, errors, asked = labkit.open_offline(chromium, site / "reports" / PAGES[kind])
    try:
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
        plots = page.evaluate(
            """() => [...document.querySelectorAll('.js-plotly-plot')].map(p => !!p.querySelector('.main-svg'))"""
        )
        text = page.inner_text("body")
    finally:
        page.close()
    assert not errors, errors
    assert not asked, f"the page asked the network for {asked[:5]}"
    assert plots and all(plots), f"{sum(plots)} of {len(plots)} figures drew"
    assert "/work/" not in text and "/tmp/" not in text


def test_a_reports_page_links_its_runs(chromium, site):
    page, errors, asked = labkit.open_offline(chromium, site / "reports" / "h100-your-kernel.html")
    try:
        links = page.evaluate("() => [...document.querySelectorAll('article a')].map(a => a.getAttribute('href'))")
    finally:
        page.close()
    assert not errors and not asked
    for want in ("h100-your-kernel/index.html", "h100-your-kernel/suite-my_softmax/report.html"):
        assert want in links, links
        assert (site / "reports" / want).is_file()
