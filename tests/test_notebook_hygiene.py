"""What running a notebook leaves behind, and what a reader of its HTML sees.

- The committed notebooks are already in the form the nbstripout filter gives them, so saving
  one after a run changes nothing git keeps.
- After a save that changed only outputs, the post-save hook of ``workbench lab`` refreshes
  git's index entry (``git status`` clean); an edited cell stays visible as a change.
- LaTeX in Markdown becomes MathML outside code, so an offline page shows no raw ``$$``.
- A notebook run on the CPU picks its small sizes and says so.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import testkit

from workbench import notebook_git
from workbench.reports.mathml import markdown_with_mathml

ROOT = Path(__file__).resolve().parent.parent
needs_git = pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None, reason="needs git, make")


@pytest.fixture
def filtered_repo(tmp_path):
    """A git repository with this project's Makefile and .gitattributes and the notebook filter
    configured by ``make notebook-filter`` (this Python's nbstripout)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("Makefile", ".gitattributes"):
        shutil.copy(ROOT / name, repo / name)
    testkit.git(repo, "init", "-q")
    make = subprocess.run(["make", "-s", "notebook-filter", f"PY={sys.executable}"], cwd=repo, capture_output=True)
    assert make.returncode == 0, make.stderr
    return repo


def _notebook(sources, outputs=False) -> str:
    cells = []
    for i, src in enumerate(sources):
        cell = {
            "cell_type": "code",
            "execution_count": None,
            "id": f"c{i}",
            "metadata": {},
            "outputs": [],
            "source": src,
        }
        if outputs:
            cell["execution_count"] = i + 1
            cell["outputs"] = [{"name": "stdout", "output_type": "stream", "text": f"out {i} " * 50}]
        cells.append(cell)
    meta = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}}
    meta["language_info"] = {"name": "python"}
    if outputs:  # what a kernel and a save write
        meta["language_info"].update(version="3.11.7", mimetype="text/x-python", file_extension=".py")
        meta["widgets"] = {"state": {}}
    nb = {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


@needs_git
def test_committed_notebooks_are_already_what_the_filter_makes_them(filtered_repo):
    keys = testkit.git(filtered_repo, "config", "filter.nbstripout.extrakeys").strip()
    assert "metadata.language_info.version" in keys
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        committed = _committed_text(path)  # what git holds: a notebook run and saved here has outputs on disk
        code, out, err = _nbstripout(committed, "--keep-id", "--extra-keys", keys, "-t")
        assert code == 0, err
        assert out == committed, (
            f"{path.name} is not in its filtered form: run `make notebook-filter` and `git add --renormalize notebooks`"
        )


class _Kept(io.BytesIO):
    def close(self):  # nbstripout's text wrappers close their stream when collected: keep what was written
        pass


def _nbstripout(text: str, *args: str) -> tuple[int, str, str]:
    """``python -m nbstripout *args`` with ``text`` on its standard input, run in this process (its
    own main(), argument parsing and git config lookups included): (exit code, stdout, stderr).
    A process of its own costs 2-3 s of a core here, most of it importing nbformat's jsonschema."""
    import contextlib
    from unittest import mock

    from nbstripout._nbstripout import main

    stdin, stdout, stderr = _Kept(text.encode("utf-8")), _Kept(), io.StringIO()
    code = 0
    with (
        mock.patch.object(sys, "argv", ["nbstripout", *args]),
        mock.patch.object(sys, "stdin", io.TextIOWrapper(stdin, encoding="utf-8")),
        mock.patch.object(sys, "stdout", io.TextIOWrapper(stdout, encoding="utf-8")),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, stdout.getvalue().decode("utf-8"), stderr.getvalue()


def _committed_text(path: Path) -> str:
    """The notebook as committed (HEAD), or the file where this is no git checkout or it is new."""
    shown = subprocess.run(
        ["git", "show", f"HEAD:{path.relative_to(ROOT).as_posix()}"], cwd=ROOT, capture_output=True, text=True
    )
    return shown.stdout if shown.returncode == 0 else path.read_text(encoding="utf-8")


@needs_git
def test_a_save_that_changed_only_outputs_leaves_git_status_clean(filtered_repo):
    (nb,) = testkit.commit_notebooks(filtered_repo, {"n.ipynb": _notebook(["x = 1", "print(x)"])})
    nb.write_text(_notebook(["x = 1", "print(x)"], outputs=True))  # Run All, then Save
    assert testkit.git(filtered_repo, "diff", "--stat").strip() == ""  # the filter sees no change ...
    assert testkit.git(filtered_repo, "status", "--porcelain").strip() == "M notebooks/n.ipynb"  # ... but the size did
    notebook_git.refresh_index_after_save(model={"type": "notebook"}, os_path=str(nb))
    assert notebook_git.wait_for_refreshes(timeout=60)  # git runs off the save's path
    assert testkit.git(filtered_repo, "status", "--porcelain").strip() == ""
    assert testkit.git(filtered_repo, "diff", "--cached", "--stat").strip() == ""  # nothing was staged

    nb.write_text(_notebook(["x = 2", "print(x)"], outputs=True))  # an edited cell
    assert notebook_git.refresh_index(nb) is False
    assert testkit.git(filtered_repo, "status", "--porcelain").strip() == "M notebooks/n.ipynb"
    assert testkit.git(filtered_repo, "diff", "--cached", "--stat").strip() == ""  # the edit was not staged


def _tracked_notebooks(repo: Path, count: int) -> list[Path]:
    """``count`` committed notebooks, then each saved again with outputs (Run All, then Save)."""
    paths = testkit.commit_notebooks(repo, {f"n{i}.ipynb": _notebook([f"x = {i}", "print(x)"]) for i in range(count)})
    for i, nb in enumerate(paths):
        nb.write_text(_notebook([f"x = {i}", "print(x)"], outputs=True))
    return paths


@pytest.fixture
def slow_git(tmp_path, monkeypatch):
    """:func:`testkit.slow_git` (an ``add`` 1.5 s slower, the lock held that long) first on PATH."""
    monkeypatch.setenv("PATH", f"{testkit.slow_git(tmp_path / 'slow-git', 1.5)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(notebook_git, "SLOW_WRITE_S", 0.5)  # shorter than the add: the slow path runs
    return 1.5


class _ContentsManager:
    """What the hook reads of Jupyter's contents manager: its logger (the lab's log)."""

    log = logging.getLogger("test-lab")


@needs_git
def test_saves_return_at_once_and_a_slow_git_is_never_killed(filtered_repo, slow_git, caplog):
    """Several saves at once, with a git that holds its lock longer than the hook's slow-write
    mark: every save returns at once, git finishes each add, no lock is left, status is clean."""
    paths = _tracked_notebooks(filtered_repo, 2)
    assert len(testkit.git(filtered_repo, "status", "--porcelain").splitlines()) == 2
    returned = []

    def save(nb):
        started = time.perf_counter()
        notebook_git.refresh_index_after_save(
            model={"type": "notebook"}, os_path=str(nb), contents_manager=_ContentsManager()
        )
        returned.append(time.perf_counter() - started)

    with caplog.at_level(logging.INFO, logger="test-lab"):
        threads = [threading.Thread(target=save, args=(nb,)) for nb in paths * 2]  # each saved twice
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert max(returned) < 0.5, returned  # the adds take >= 1.5 s each
        assert notebook_git.wait_for_refreshes(timeout=120)
    assert testkit.git(filtered_repo, "status", "--porcelain").strip() == ""
    assert not (filtered_repo / ".git" / "index.lock").exists()
    assert "letting it finish" in caplog.text  # the slow add was waited for, not stopped
    assert "WARNING" not in caplog.text


@needs_git
def test_a_lock_held_by_another_git_is_waited_for_and_never_removed(filtered_repo, monkeypatch, caplog):
    (nb,) = _tracked_notebooks(filtered_repo, 1)
    lock = filtered_repo / ".git" / "index.lock"
    lock.write_text("another git's")
    monkeypatch.setattr(notebook_git, "LOCK_WAIT_S", 0.5)
    with caplog.at_level(logging.WARNING, logger="test-lab"):
        notebook_git.refresh_index_after_save(
            model={"type": "notebook"}, os_path=str(nb), contents_manager=_ContentsManager()
        )
        assert notebook_git.wait_for_refreshes(timeout=60)
    assert lock.read_text() == "another git's"  # skipped, and the other process's lock left alone
    assert len(caplog.records) == 1 and "index.lock" in caplog.records[0].getMessage()
    assert testkit.git(filtered_repo, "status", "--porcelain").strip() == "M notebooks/n0.ipynb"

    monkeypatch.setattr(notebook_git, "LOCK_WAIT_S", 30.0)
    threading.Timer(0.5, lock.unlink).start()  # the other git finishes while the refresh waits
    assert notebook_git.refresh_index(nb) is True
    assert testkit.git(filtered_repo, "status", "--porcelain").strip() == ""


@needs_git
def test_executed_notebooks_in_reports_keep_their_outputs(filtered_repo):
    """The filter covers notebooks/ only: an executed notebook committed as a report result keeps
    every output in git."""
    (filtered_repo / "reports").mkdir()
    nb = filtered_repo / "reports" / "run.ipynb"
    nb.write_text(_notebook(["x = 1"], outputs=True))
    testkit.git(filtered_repo, "add", "-A")
    assert '"output_type": "stream"' in testkit.git(filtered_repo, "show", ":reports/run.ipynb")


def test_the_save_hook_never_fails_a_save(tmp_path):
    outside = tmp_path / "loose.ipynb"  # not in a git checkout
    outside.write_text(_notebook(["x = 1"]))
    notebook_git.refresh_index_after_save(model={"type": "notebook"}, os_path=str(outside))
    notebook_git.refresh_index_after_save(model={"type": "file"}, os_path=str(tmp_path / "gone.txt"))
    notebook_git.refresh_index_after_save(model=None, os_path=None)


def test_latex_outside_code_becomes_mathml():
    text = "A `$x$` in code, $$s = x + r$$ shown, inline $y^2$; costs $5 and $6.\n```\n$$z$$\n```\n\\(q\\)"
    out = markdown_with_mathml(text)
    assert "`$x$`" in out and "```\n$$z$$\n```" in out  # code untouched
    assert out.count('display="block"') == 1 and out.count('display="inline"') == 2
    assert "costs $5 and $6" in out  # dollars that are not math stay dollars
    assert "$$s" not in out and "$y^2$" not in out and "\\(q\\)" not in out


def test_unreadable_latex_shows_as_code_not_raw_dollars():
    out = markdown_with_mathml("$$\\begin{nonsense}x$$")
    assert "$$" not in out and "<code>" in out


def test_a_cpu_session_picks_small_sizes_and_says_so(capsys):
    from widgets import Session, default_results_dir, quick_for

    assert quick_for("cpu", None) is True and quick_for("cpu", False) is False and quick_for("cpu", True) is True
    s = Session("rms_norm", device="cpu", quick=None, headless=True, store=False)
    assert s.quick and s.problem["hidden"] == s.spec.quick["hidden"]
    assert "CPU: the Triton interpreter at small sizes" in capsys.readouterr().out
    assert s.out_dir == default_results_dir() and s.out_dir != ROOT / "notebooks"  # records never beside the notebooks


def test_a_single_point_sweep_draws_its_value_not_a_range():
    from workbench.reports import figures as F

    rec = {
        "variant": "gpu_row",
        "backend": "gpu",
        "x_value": 16777216,
        "ms_p50": 1.0,
        "ms_p20": 0.9,
        "ms_p80": 1.1,
        "error": None,
    }
    fig = F.speed_figure([rec], "numel")
    assert fig.layout.xaxis.type == "category"
    assert [str(x) for x in fig.data[-1].x] == ["16777216"]
