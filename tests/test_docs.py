"""What the README and the docs promise: the docs build offline with warnings as errors, every
link stays inside the repository, the README fits on two screens, and every command block
marked ``<!-- runnable -->`` runs (at the small sizes it names) and exits 0.

A runnable block runs line by line in bash, in a scratch folder that links the checkout's
``notebooks/``, ``benchmarks/`` and each of ``reports/``' folders, with this environment's ``bin`` first on PATH and
``.venv/bin/`` read as that folder, so ``.venv/bin/workbench …`` means this environment's command.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = re.compile(r"<!-- runnable -->\s*\n\s*```bash\n(.*?)\n\s*```", re.S)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")  # `f[grid](...)` is code, not a link


def _blocks():
    for page in PAGES:
        for i, match in enumerate(RUNNABLE.finditer(page.read_text())):
            lines = [line.strip() for line in match.group(1).splitlines()]
            yield f"{page.relative_to(ROOT)}#{i + 1}", [line for line in lines if line and not line.startswith("#")]


def _distinct(blocks):
    """Each block once: one shown on two pages (the README's first steps are also the docs
    site's home page) runs once, named by both; ``.venv/bin/`` is this environment's bin either way."""
    seen: dict[tuple, list[str]] = {}
    for name, lines in blocks:
        seen.setdefault(tuple(line.replace(".venv/bin/", "") for line in lines), []).append(name)
    return [(" = ".join(names), list(lines)) for lines, names in seen.items()]


BLOCKS = list(_blocks())
RUNS = _distinct(BLOCKS)


def test_the_readme_fits_on_two_screens_and_shows_the_explorer():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "(docs/images/explorer.png)" in text and (ROOT / "docs" / "images" / "explorer.png").exists()
    assert "make lab" in text and "make test" in text


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_stay_inside_the_repository(page):
    text = page.read_text()
    assert "../shared" not in text and "DESIGN.md" not in text
    for target in LINK.findall(CODE_SPAN.sub("", text)):
        assert not re.match(r"[a-z]+://", target), f"{page.name} links outside the repository: {target}"
        assert (page.parent / target).exists(), f"{page.name} links a missing file: {target}"


def test_every_page_has_runnable_commands_where_it_promises_them():
    assert len(BLOCKS) >= 6, [name for name, _ in BLOCKS]
    names = {name.split("#")[0] for name, _ in BLOCKS}
    assert {"README.md", "docs/index.md", "docs/reports.md", "docs/sweeps.md"} <= names


def test_the_docs_build_offline_with_warnings_as_errors(docs_site):
    # `mkdocs build --strict` (conftest's docs_site, built once for the tests that read the site)
    site, _ = docs_site
    assert (site / "reports" / "index.html").is_file(), "the reports index is not on the site"
    reference = (site / "cli.html").read_text()
    for command in ("workbench sweep", "workbench tune", "workbench npu-check", "--fail-on-regression"):
        assert command in reference, f"the command reference lacks {command}"
    assert not list(site.rglob("*.py")), "the build's Python code was copied into the site"
    pages = "".join(p.read_text() for p in site.glob("*.html"))
    assert not re.search(r"<(script|link)[^>]+(src|href)=\"https?://", pages), "a page loads something from the network"


@pytest.mark.slow
@pytest.mark.parametrize("name,lines", RUNS, ids=[name for name, _ in RUNS])
def test_a_runnable_block_runs(name, lines, tmp_path):
    for folder in ("notebooks", "benchmarks"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    # each committed report linked into a folder of the scratch's own: a block that writes a report
    # (--out reports/first) writes it here, never into the checkout
    (tmp_path / "reports").mkdir()
    for report in (ROOT / "reports").iterdir():
        (tmp_path / "reports" / report.name).symlink_to(report)
    bindir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "WORKBENCH_STORE": str(tmp_path / "store.sqlite"),
        "PYTHONPATH": str(ROOT),
    }
    for line in lines:
        command = line.replace(".venv/bin/", f"{bindir}/")
        out = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env
        )
        assert out.returncode == 0, (
            f"{name}: `{line}` exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )


def test_every_runnable_example_writes_where_git_ignores():
    """Following the docs leaves `git status` clean: each folder a runnable block writes (--out,
    mkdir -p) is one git ignores (results/, or a scratch folder outside the checkout)."""
    written = []
    for name, lines in BLOCKS:
        for line in lines:
            written += [(name, m) for m in re.findall(r"(?:--out|mkdir -p)\s+(\S+)", line)]
    assert len(written) >= 8, written
    for name, path in written:
        if path.startswith("/"):
            continue
        check = subprocess.run(["git", "check-ignore", "-q", "--no-index", f"{path}/records.json"], cwd=ROOT)
        assert check.returncode == 0, f"{name} writes into {path}, which git does not ignore"


def test_the_your_kernel_declaration_runs_as_written(tmp_path):
    """docs/your-kernel.md's declaration is self-contained: its kernel, host function and family
    run from the page's code alone (as a script: Triton reads a kernel's source from its file)."""
    text = (ROOT / "docs" / "your-kernel.md").read_text()
    section = text[text.index("## Declare it") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "declare.py"
    script.write_text(code + "\nprint(spec.name, [v.name for v in spec.variants])\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "my_softmax ['ours', 'torch']" in out.stdout, out.stdout
