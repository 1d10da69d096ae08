"""Keep ``git status`` clean when JupyterLab saves a notebook whose cells did not change.

Notebooks are versioned by their cells' sources: ``.gitattributes`` sends every ``*.ipynb``
through the nbstripout filter (configured by ``make notebook-filter``), which drops outputs,
execution counts and run metadata before git compares or stores a notebook. One git habit is
left: when a file's size differs from the size recorded in the index, ``git status`` calls it
modified without running the filter to look (``git diff`` then shows nothing). A notebook
saved with its outputs always changes size, so after Run All and Save it would be listed.

:func:`refresh_index_after_save` is the Jupyter server's post-save hook under ``workbench lab``:
after a save it asks git for the filtered blob of the notebook (``git hash-object --path``),
and where that equals the blob in the index (only outputs or metadata changed) it re-adds the
file, which records its new size and stages nothing new. A notebook whose cells were edited is
left alone, so the edit shows in ``git status`` as it should. Outside a git checkout, for an
untracked notebook, or without git, the hook does nothing; it never fails a save.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

HOOK = f"{__name__}.refresh_index_after_save"  # the import string Jupyter's config takes


def _git(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def refresh_index(path: str | Path) -> bool:
    """Re-add the notebook at ``path`` to git's index when its filtered content equals the blob
    already there; True when it did."""
    path = Path(path).resolve()
    top = _git(path.parent, "rev-parse", "--show-toplevel")
    if not top:
        return False
    rel = path.relative_to(Path(top).resolve()).as_posix()
    staged = _git(Path(top), "ls-files", "--stage", "--", rel)  # "<mode> <blob> <stage>\t<path>"
    if not staged:
        return False  # untracked: nothing to keep clean
    blob = staged.split()[1]
    now = _git(Path(top), "hash-object", f"--path={rel}", "--", rel)  # through the clean filter
    if now != blob:
        return False  # the cells changed: leave the edit for git status to show
    return _git(Path(top), "add", "--", rel) is not None


def refresh_index_after_save(model=None, os_path=None, contents_manager=None, **_) -> None:
    """Jupyter server post-save hook (``ContentsManager.post_save_hook``): :func:`refresh_index`
    for a saved notebook; never raises, since a raising hook turns a save into an error."""
    if not os_path or (model or {}).get("type") != "notebook":
        return
    try:
        refresh_index(os_path)
    except Exception:  # noqa: BLE001 - a save must succeed whatever git says
        return
