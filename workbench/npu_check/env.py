"""The separate virtualenv npu-check compiles in: triton-ascend replaces ``triton``, so it cannot
share the main environment.

- Where: ``$WORKBENCH_NPU_VENV``, else ``.npu-venv`` in the repository root (git-ignored).
- What: :data:`REQUIREMENTS` — triton-ascend, ascendnpu-ir (ships ``bishengir-compile``),
  pybind11, and what the families' ``npu.py`` import (torch, CPU build, and numpy).
- Reuse: a marker file in the venv records the requirements it was built with; a matching venv
  is used as it is (no network). Otherwise it is rebuilt from a wheel directory
  (``$WORKBENCH_NPU_WHEELS``, else ``~/.cache/kernel-workbench/npu-wheels``) with
  ``pip install --no-index`` — offline; only when that fails are the wheels downloaded
  (``pip download``, bounded by ``--timeout``/``--retries`` and an overall time limit).
- A build or download failure raises :class:`EnvUnavailable`: "could not check", which the
  CLI reports with its own exit code, distinct from a failing kernel.
- Concurrent builds (the CLI and the tests at once) are serialised by a lock file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.host_facts import cache_home

TRITON_ASCEND = "triton-ascend==3.2.0"
ASCENDNPU_IR = "ascendnpu-ir==1.2.0"
PYBIND11 = "pybind11==3.1.0"
# ``torch==2.13.0`` resolves to a local CPU wheel on these machines; unpinned torch would pull
# several GB of CUDA packages. Override with $WORKBENCH_NPU_TORCH (e.g. a path to a wheel).
TORCH = os.environ.get("WORKBENCH_NPU_TORCH", "torch==2.13.0")
REQUIREMENTS = (TRITON_ASCEND, ASCENDNPU_IR, PYBIND11, TORCH, "numpy")
MARKER = ".npu-check-env.json"


class EnvUnavailable(RuntimeError):
    """The triton-ascend environment could not be built (registry unreachable, no wheel …)."""


@dataclass(frozen=True)
class NpuEnv:
    venv: Path
    python: Path
    built: bool  # True when this call (re)built it
    seconds: float


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def default_venv() -> Path:
    env = os.environ.get("WORKBENCH_NPU_VENV")
    if env:
        return Path(env).expanduser()
    root = repo_root()
    if (root / "pyproject.toml").exists():
        return root / ".npu-venv"
    return cache_home() / "npu-venv"


def default_wheels() -> Path:
    env = os.environ.get("WORKBENCH_NPU_WHEELS")
    return Path(env).expanduser() if env else cache_home() / "npu-wheels"


def _lock_path(venv: Path) -> Path:
    """Outside the repository (nothing to ignore), one per venv path."""
    digest = hashlib.sha1(str(venv.resolve()).encode()).hexdigest()[:12]
    return cache_home() / "locks" / f"npu-venv-{digest}.lock"


def _python_in(venv: Path) -> Path:
    return venv / "bin" / "python"


def _expected_marker() -> dict:
    return {"requirements": list(REQUIREMENTS), "python": "%d.%d" % sys.version_info[:2]}


def is_ready(venv: Path) -> bool:
    marker = venv / MARKER
    try:
        return json.loads(marker.read_text()) == _expected_marker() and _python_in(venv).exists()
    except (OSError, ValueError):
        return False


class _Lock:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "w")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def _run(cmd, log, timeout, what):
    """Run a build step; EnvUnavailable (with the output's tail) on failure or timeout."""
    log.write(f"$ {' '.join(map(str, cmd))}\n")
    log.flush()
    try:
        proc = subprocess.run(
            [str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        log.write(out)
        raise EnvUnavailable(f"{what} took longer than {timeout:.0f} s") from None
    log.write(proc.stdout)
    log.flush()
    if proc.returncode != 0:
        tail = " | ".join(line for line in proc.stdout.strip().splitlines()[-3:])
        raise EnvUnavailable(f"{what} failed (exit {proc.returncode}): {tail}")
    return proc.stdout


def ensure_env(
    venv: Path | None = None,
    wheels: Path | None = None,
    download: bool = True,
    timeout: float = 480.0,
    log=None,
) -> NpuEnv:
    """The triton-ascend virtualenv, built or reused (see the module docstring)."""
    venv = Path(venv) if venv else default_venv()
    wheels = Path(wheels) if wheels else default_wheels()
    log = log or sys.stderr
    t0 = time.perf_counter()
    if is_ready(venv):
        return NpuEnv(venv, _python_in(venv), False, 0.0)
    with _Lock(_lock_path(venv)):
        if is_ready(venv):  # another process built it while we waited
            return NpuEnv(venv, _python_in(venv), False, time.perf_counter() - t0)
        deadline = t0 + timeout

        def left():
            remaining = deadline - time.perf_counter()
            if remaining <= 5:
                raise EnvUnavailable(f"building the triton-ascend environment took longer than {timeout:.0f} s")
            return remaining

        if venv.exists():
            shutil.rmtree(venv)
        _run([sys.executable, "-m", "venv", venv], log, left(), "creating the virtualenv")
        py = _python_in(venv)
        pip = [py, "-m", "pip", "--disable-pip-version-check", "--no-input"]
        wheels.mkdir(parents=True, exist_ok=True)
        offline = [*pip, "install", "--no-index", "--find-links", wheels, *REQUIREMENTS]
        try:
            _run(offline, log, left(), "installing from the wheel cache")
        except EnvUnavailable as exc:
            if not download:
                raise EnvUnavailable(f"{exc}; downloading is switched off") from None
            log.write("wheel cache incomplete: downloading (bounded retries)\n")
            fetch = [*pip, "download", "--dest", wheels, "--timeout", "30", "--retries", "2", *REQUIREMENTS]
            _run(fetch, log, left(), "downloading triton-ascend / ascendnpu-ir wheels")
            _run(offline, log, left(), "installing the downloaded wheels")
        check = "import triton, ascendnpuir, torch; print(triton.__version__, torch.__version__)"
        versions = _run([py, "-c", check], log, left(), "checking the environment").strip()
        log.write(f"npu-check environment ready: triton / torch {versions}\n")
        (venv / MARKER).write_text(json.dumps(_expected_marker()))
    return NpuEnv(venv, py, True, time.perf_counter() - t0)
