"""An executed notebook as an HTML page that opens offline, in the reader's form.

nbconvert's lab template with every block that would load a script from a CDN replaced:
plotly.js goes inline (once per page), or for a report of several pages into one file beside
them (:func:`write_plotly_js`); require.js, MathJax, mermaid and the widget manager are left
out, and the Markdown cells' LaTeX is converted to MathML (:mod:`workbench.reports.mathml`),
which the browser draws itself.
"""

from __future__ import annotations

from pathlib import Path

from workbench.reports.mathml import markdown_with_mathml
from workbench.reports.reader import scrub_paths
from workbench.store import open_text

TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}
{%- if resources.plotly_src -%}
<script type="text/javascript" src="{{ resources.plotly_src }}"></script><!-- plotly.js {{ resources.plotly_version }}, one copy beside the pages for offline use -->
{%- else -%}
<script type="text/javascript">/* plotly.js {{ resources.plotly_version }}, embedded for offline use */
{{ resources.plotly_js }}
</script>
{%- endif -%}
{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


PLOTLY_FILE = "plotly.min.js"  # a report of several pages keeps one copy of plotly.js beside them


def write_plotly_js(folder: Path) -> str:
    """Write plotly.js into ``folder`` (:data:`PLOTLY_FILE`) for pages that load it from there; returns its name."""
    from plotly.offline import get_plotlyjs

    (Path(folder) / PLOTLY_FILE).write_text(get_plotlyjs(), encoding="utf-8")
    return PLOTLY_FILE


def notebook_to_html(
    nb_path: Path,
    html_path: Path,
    *,
    show_code: bool = False,
    title: str | None = None,
    plotly_src: str | None = None,
) -> Path:
    """Executed notebook -> HTML that opens offline (no CDN scripts): plotly.js embedded in the
    page, or, with ``plotly_src``, loaded from that file beside it (:func:`write_plotly_js`:
    a report of six pages then holds one 4.6 MB copy instead of six).

    A reader's page by default: no code cells, no ``In [ ]`` prompts, the parameters cells left out
    (``show_code=True`` keeps the code), and no path of this machine in the text (:func:`scrub_paths`)."""
    import nbformat
    import plotly
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    from plotly.offline import get_plotlyjs

    with open_text(nb_path) as f:  # an executed notebook a committed report keeps gzipped reads the same
        nb = nbformat.read(f, as_version=4)
    nb.metadata.pop("widgets", None)  # widget state would pull the widget manager from a CDN
    nb.metadata.pop("papermill", None)  # its parameters name this machine's paths
    if title:
        nb.metadata["title"] = title  # the page's <title>
    if not show_code:
        hidden = {"parameters", "injected-parameters"}
        nb.cells = [c for c in nb.cells if not hidden & set(c.get("metadata", {}).get("tags", []))]
    for cell in nb.cells:  # MathJax is left out (a CDN script): formulas go as MathML instead
        if cell.cell_type == "markdown":
            cell.source = markdown_with_mathml(cell.source)
    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"workbench.html.j2": TEMPLATE})],
        exclude_input=not show_code,
        exclude_input_prompt=not show_code,
        exclude_output_prompt=not show_code,
    )
    exporter.template_file = "workbench.html.j2"
    body, _ = exporter.from_notebook_node(
        nb,
        resources={
            "plotly_src": plotly_src,
            "plotly_js": "" if plotly_src else get_plotlyjs(),
            "plotly_version": plotly.__version__,
            "metadata": {"name": title or Path(nb_path).name.split(".")[0]},
        },
    )
    body = scrub_paths(body, [Path(html_path).parent])
    html_path.write_text(body, encoding="utf-8")
    return html_path
