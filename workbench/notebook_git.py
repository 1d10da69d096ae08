"""Keep ``git status`` clean when JupyterLab saves a notebook whose cells did not change, without
ever putting the user's repository at risk.

Notebooks are versioned by their cells' sources: ``.gitattributes`` sends every ``*.ipynb``
through the nbstripout filter (configured by ``make notebook-filter``), which drops outputs,
execution counts and run metadata before git compares or stores a notebook. One git habit is
left: when a file's size differs from the size recorded in the index, ``git status`` calls it
modified without running the filter to look (``git diff`` then shows nothing). A notebook
saved with its outputs always changes size, so after Run All and Save it would be listed.

:func:`refresh_index` asks git for the filtered blob of the notebook (``git hash-object``) and,
where that equals the blob in the index (only outputs or metadata changed), re-adds the file,
which records its new size and stages nothing new. A notebook whose cells were edited is left
alone, so the edit shows in ``git status`` as it should. Outside a git checkout, for an
untracked notebook, or without git, it does nothing.

:func:`refresh_index_after_save` is the Jupyter server's post-save hook under ``workbench lab``.
It only queues the path: one background thread (:class:`IndexRefresher`) runs git, so a Save
returns at once whatever git costs (the filter is a Python process per notebook). The rules
that keep the repository safe:

- git is never killed while it may hold ``index.lock``: the commands that write the index run
  to their end (a slow one is logged, not stopped), in a session of their own so that a Ctrl-C
  to the lab does not reach them. Only read-only commands, which take no lock, have a timeout.
- a lock held by another git process is waited for (:data:`LOCK_WAIT_S`), then the refresh is
  skipped; a lock this module did not make is never removed.
- several saves at once are queued, each notebook once, and refreshed one after another.
- a failure is one line in the lab's log (the contents manager's logger), never a failed save.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from pathlib import Path

HOOK = f"{__name__}.refresh_index_after_save"  # the import string Jupyter's config takes

LOCK_WAIT_S = 30.0  # how long a refresh waits for another git process's index.lock
READ_TIMEOUT_S = 60.0  # read-only git commands hold no lock, so stopping one is safe
SLOW_WRITE_S = 20.0  # a writing git still running after this is logged once (and left to finish)

_log = logging.getLogger(__name__)
# Read-only commands must not take git's optional index lock either (`git status` does by default).
_READ_ENV = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}


def _read(cwd: Path, *args: str) -> str | None:
    """stdout of a read-only git command, or None when it failed, timed out or git is missing."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=READ_TIMEOUT_S, env=_READ_ENV
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _write(top: Path, args: list[str], log: logging.Logger, what: str) -> tuple[int, str]:
    """Run a git command that writes the index, to its end: (return code, stderr). It starts in a
    session of its own (a terminal's Ctrl-C to the lab does not interrupt it) and is never killed;
    one still running after :data:`SLOW_WRITE_S` is logged once."""
    proc = subprocess.Popen(
        ["git", *args],
        cwd=top,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=SLOW_WRITE_S)
    except subprocess.TimeoutExpired:
        log.info(
            "workbench: git is still refreshing the index for %s after %.0f s; letting it finish", what, SLOW_WRITE_S
        )
        _, err = proc.communicate()
    return proc.returncode, err or ""


def _lock_path(top: Path) -> Path | None:
    path = _read(top, "rev-parse", "--git-path", "index.lock")
    return (top / path) if path else None


def _wait_for_lock(lock: Path | None, deadline: float) -> bool:
    """True once ``lock`` is absent, False when it is still there at ``deadline``."""
    while lock is not None and lock.exists():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def refresh_index(path: str | Path, log=None, lock_wait_s: float | None = None) -> bool:
    """Re-add the notebook at ``path`` to git's index when its filtered content equals the blob
    already there; True when it did. Runs git in this thread; waits up to ``lock_wait_s``
    (default :data:`LOCK_WAIT_S`) for another process's index lock, then skips with one log line."""
    log = log or _log
    path = Path(path).resolve()
    top = _read(path.parent, "rev-parse", "--show-toplevel")
    if not top:
        return False
    top_path = Path(top).resolve()
    rel = path.relative_to(top_path).as_posix()
    staged = _read(top_path, "ls-files", "--stage", "--", rel)  # "<mode> <blob> <stage>\t<path>"
    if not staged:
        return False  # untracked: nothing to keep clean
    blob = staged.split()[1]
    now = _read(top_path, "hash-object", f"--path={rel}", "--", rel)  # through the clean filter
    if now != blob:
        return False  # the cells changed (or the filter failed): leave the file for git status to show
    lock = _lock_path(top_path)
    wait_s = LOCK_WAIT_S if lock_wait_s is None else lock_wait_s
    deadline = time.monotonic() + wait_s
    while True:
        if not _wait_for_lock(lock, deadline):
            log.warning(
                "workbench: left git's index as it is for %s: another git held %s for %.0f s", rel, lock, wait_s
            )
            return False
        code, err = _write(top_path, ["add", "--", rel], log, rel)
        if code == 0:
            return True
        if lock is not None and "index.lock" in err and time.monotonic() < deadline:
            continue  # another git took the lock between our look and our add: wait again
        first = next((line for line in err.splitlines() if line.strip()), f"exit code {code}")
        log.warning("workbench: git could not refresh the index for %s: %s", rel, first.strip())
        return False


class IndexRefresher:
    """One background thread that refreshes the index entries of saved notebooks, one at a time.

    :meth:`submit` returns at once; a path submitted again while it waits is refreshed once.
    :meth:`wait_idle` waits until every submitted path has been handled (tests, shutdown)."""

    def __init__(self):
        self._pending: dict[Path, logging.Logger] = {}
        self._busy = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, path: str | Path, log: logging.Logger | None = None) -> None:
        with self._cond:
            self._pending[Path(path)] = log or _log
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="workbench-git-index", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """True once nothing is pending or running; False at ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._pending:
                    self._busy = False
                    self._cond.notify_all()
                    self._thread = None  # the next submit starts a fresh thread
                    return
                path = next(iter(self._pending))
                log = self._pending.pop(path)
                self._busy = True
            try:
                refresh_index(path, log)
            except Exception as exc:  # noqa: BLE001 - one line in the log, and the next save still works
                log.warning("workbench: could not refresh git's index for %s: %s", path.name, exc)


_refresher = IndexRefresher()


def wait_for_refreshes(timeout: float | None = None) -> bool:
    """Wait until the post-save hook's queued refreshes are done; True when they are."""
    return _refresher.wait_idle(timeout)


def refresh_index_after_save(model=None, os_path=None, contents_manager=None, **_) -> None:
    """Jupyter server post-save hook (``ContentsManager.post_save_hook``): queue :func:`refresh_index`
    for a saved notebook and return at once; never raises, since a raising hook turns a save into
    an error. Failures go to the contents manager's logger (the lab's log)."""
    if not os_path or (model or {}).get("type") != "notebook":
        return
    try:
        log = getattr(contents_manager, "log", None)  # the lab's logger (a Logger or a LoggerAdapter)
        _refresher.submit(os_path, log if hasattr(log, "warning") else None)
    except Exception:  # noqa: BLE001 - a save must succeed whatever happens here
        return
