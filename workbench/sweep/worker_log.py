"""Where a Ray worker's output goes: a log file, never the driver's console.

Ray forwards what its workers print to the driver's console. A compiler's messages are long (a
failing ``ptxas`` prints its whole PTX; a compile worker stopped mid-``ptxas`` at a sweep's end
printed about 6,400 lines), so a sweep's workers write theirs to files of their own instead
(:func:`redirect_output`: the process's file descriptors, so the compilers it runs write there
too), and what a failed configuration printed comes back with its record (:func:`log_since`).

- :func:`redirect_output`: this process's standard output and error to a file.
- :func:`log_to`: the same into a sweep's log folder, unless the process's output already goes
  to a file (Ray's preload did it, :mod:`workbench.sweep.preload`).
- :func:`log_size` / :func:`log_since`: where the log ends now, and what was written after that.
"""

from __future__ import annotations

import os
import sys
import tempfile

LOG_ENV = "WORKBENCH_WORKER_LOG"  # this process's log file, once redirected
FAILURE_LOG_BYTES = 4 << 20  # at most this much of a failed configuration's output comes back


def redirect_output(path: str) -> str | None:
    """Send this process's standard output and error (file descriptors 1 and 2, so a compiler it
    runs writes there too) to the file ``path``, appended; the path, or None where it cannot be
    opened (the output stays where it was)."""
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return None
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ[LOG_ENV] = path
    return path


def log_to(log_dir: str | None, kind: str) -> str | None:
    """Send this process's output to ``<log_dir>/<kind>-<pid>.log`` unless it already goes to a
    file (the preload did it); where ``log_dir`` cannot be written on this node (another host of
    a cluster), below the node's temporary folder. The log's path, or None."""
    current = os.environ.get(LOG_ENV)
    if current or not log_dir:
        return current
    name = f"{kind}-{os.getpid()}.log"
    return redirect_output(os.path.join(log_dir, name)) or redirect_output(
        os.path.join(tempfile.gettempdir(), "workbench-worker-logs", name)
    )


def log_size() -> int | None:
    path = os.environ.get(LOG_ENV)
    try:
        return os.path.getsize(path) if path else None
    except OSError:
        return None


def log_since(offset: int | None) -> str | None:
    """What this process wrote to its log since ``offset`` (the last :data:`FAILURE_LOG_BYTES`)."""
    path = os.environ.get(LOG_ENV)
    if offset is None or not path:
        return None
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            f.seek(max(offset, end - FAILURE_LOG_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None
