"""LaTeX in Markdown turned into MathML, so an offline HTML page shows formulas without MathJax.

The exported reports leave MathJax out (it loads from a CDN), which left ``$$ … $$`` as raw text
on the page. Browsers draw MathML themselves (Chromium since version 109, Firefox and Safari for
longer), so the LaTeX of a notebook's Markdown cells is converted at export by ``latex2mathml``:

- ``$$ … $$`` and ``\\[ … \\]`` become display math, ``$ … $`` and ``\\( … \\)`` inline math;
- code (fenced blocks and backtick spans) is left alone, so a ``$`` inside code stays a dollar;
- a formula ``latex2mathml`` cannot read is shown as its LaTeX in a code span, never as raw ``$$``.
"""

from __future__ import annotations

import html
import re

# Code first, so that what it holds is never read as math: fenced blocks, then backtick spans.
_CODE = re.compile(r"(```.*?```|~~~.*?~~~|(`+).*?\2)", re.DOTALL)
_DISPLAY = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]", re.DOTALL)
# Inline: $x$ with no space just inside the dollars and no digit after the closing one (so
# "costs $5 and $6" stays text), or \( x \).
_INLINE = re.compile(r"(?<![\\$\w])\$(?=\S)([^$\n]+?)(?<=\S)\$(?![\w$])|\\\((.+?)\\\)")


def to_mathml(latex: str, display: bool) -> str:
    """One formula as a ``<math>`` element; its LaTeX in a ``<code>`` span where it cannot be read."""
    from latex2mathml.converter import convert

    try:
        return convert(latex.strip(), display="block" if display else "inline")
    except Exception:  # noqa: BLE001 - latex2mathml raises several kinds for what it does not know
        return f"<code>{html.escape(latex.strip())}</code>"


def _math_in_text(text: str) -> str:
    text = _DISPLAY.sub(lambda m: to_mathml(m.group(1) or m.group(2), True), text)
    return _INLINE.sub(lambda m: to_mathml(m.group(1) or m.group(2), False), text)


def markdown_with_mathml(markdown: str) -> str:
    """``markdown`` with every formula outside code replaced by MathML (module docstring)."""
    out, last = [], 0
    for m in _CODE.finditer(markdown):
        out.append(_math_in_text(markdown[last : m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(_math_in_text(markdown[last:]))
    return "".join(out)
