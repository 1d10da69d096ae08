"""Child processes the workbench starts: a sweep configuration in a process of its own (the
``isolate`` executor) and ncu around one configuration (``workbench profile``).

Each child runs in a session of its own, so a timeout or an interrupt ends it together with what
it started (ncu's application, a compiler); and with this interpreter's import path, so it imports
the same workbench and families as the parent (a Ray worker is given the same path).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def import_path() -> list[str]:
    """This interpreter's sys.path entries outside its installation (the checkout, a test
    folder), absolute: what a child needs to import what the parent imports."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    out = []
    for p in sys.path:
        full = os.path.realpath(os.path.abspath(p or "."))
        if not os.path.isdir(full) or any(full == q or full.startswith(q + os.sep) for q in prefixes):
            continue
        if full not in out:
            out.append(full)
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        full = os.path.realpath(os.path.abspath(p)) if p else ""
        if full and full not in out:
            out.append(full)
    return out


def child_env() -> dict:
    """This process's environment with :func:`import_path` as PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(import_path())
    return env


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's session (it was started with ``start_new_session``), or the child
    alone where the group is gone or not ours to signal."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def run_bounded(cmd: list[str], timeout_s: float | None) -> tuple[str, str, int]:
    """(stdout, stderr, exit code) of ``cmd`` run in a session of its own with :func:`child_env`.
    Past ``timeout_s`` the session is killed and ``subprocess.TimeoutExpired`` raised; an
    interrupt (KeyboardInterrupt) kills it too before it propagates."""
    proc = subprocess.Popen(
        cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        kill_group(proc)
        proc.communicate()
        raise
    return out, err, proc.returncode
