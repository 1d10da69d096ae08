"""Helpers the tests share (a module of its own: tests/ and tests/browser/ each have a conftest,
so ``import conftest`` would name either)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The device facts a compile-ahead compiles for (workbench.compiling.target.device_facts) of an
# H100, for tests that compile with Triton's own compiler and no GPU.
H100_FACTS = {
    "kind": "cuda",
    "backend": "cuda",
    "arch": 90,
    "warp_size": 32,
    "name": "NVIDIA H100 80GB HBM3",
    "num_cores": 132,
    "l2_bytes": 50 << 20,
    "shared_bytes_per_program": 232448,
}


def python_in_repo(code: str, timeout: float) -> subprocess.CompletedProcess:
    """``python -c code`` in a fresh process of this Python, run from the repository's root so
    that it imports this checkout; its stdout and stderr captured as text."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def git(root: Path, *args: str) -> str:
    """``git args`` in ``root`` as a committer named t (a test's own repository needs no user
    config); its stdout, and an assertion with its stderr where git fails."""
    out = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def commit_notebooks(repo: Path, notebooks: dict[str, str]) -> list[Path]:
    """``notebooks`` (file name -> text) written to a new ``notebooks`` folder of ``repo`` and
    committed with all else there, in one commit; their paths, in the order given."""
    (repo / "notebooks").mkdir()
    paths = []
    for name, text in notebooks.items():
        path = repo / "notebooks" / name
        path.write_text(text)
        paths.append(path)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "notebooks")
    return paths


def norm_task(variant: str, rows: int, hidden: int, params: dict, rep_ms: float = 1):
    """A sweep task of rms_norm's ``variant`` for the interpreter: fp32 forward, quick, no warm-up."""
    import kernels
    from workbench.sweep.tasks import make_task

    return make_task(
        kernels.get("rms_norm"),
        variant,
        device="cpu",
        dtype="fp32",
        mode="forward",
        problem={"rows": rows, "hidden": hidden},
        params=params,
        quick=True,
        rep_ms=rep_ms,
        warmup_ms=0,
    )


def rms_norm_record(variant: str, hidden: int, ms: float, *, backend: str = "gpu", passed: bool = True, **fields):
    """A synthetic suite record of RMSNorm's bf16 forward at ``hidden`` (4096 rows), kernel time
    ``ms``, checked ``passed``; ``fields`` add to it or replace its own."""
    return {
        "kernel": "rms_norm",
        "variant": variant,
        "backend": backend,
        "mode": "forward",
        "dtype": "bf16",
        "axis": "hidden",
        "x_value": hidden,
        "problem": {"rows": 4096, "hidden": hidden},
        "kernel_ms": ms,
        "ms_p50": ms,
        "passed": passed,
        "error": None,
        **fields,
    }


def _have_ptxas() -> bool:
    import triton

    return (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists() or bool(
        shutil.which("ptxas")
    )


# Triton's NVIDIA backend can compile here (its bundled ptxas, or one on the path): no GPU needed.
HAVE_PTXAS = _have_ptxas()


def interleave_long_tests(items: list) -> list:
    """The ``long_gpu`` tests at positions 0, 2, 4, ... with the others between and after them.

    pytest-xdist's load scheduling with ``--maxschedchunk 1`` (gpu_run.sh) first hands each worker
    two consecutive tests: so every long test starts at once on a worker of its own, and the
    GPU step's wall time is the longest test, not two long tests back to back (the default chunk
    of four gave one worker the PyJuice test and the next-longest: 211 s on the H100)."""
    long = [item for item in items if "long_gpu" in item.keywords]
    rest = [item for item in items if "long_gpu" not in item.keywords]
    out = []
    for i, item in enumerate(long):
        out.append(item)
        if i < len(rest):
            out.append(rest[i])
    return out + rest[len(long) :]


def slow_git(folder: Path, seconds: float) -> Path:
    """A folder holding a ``git`` whose ``add`` runs the notebook filter ``seconds`` slower, so the
    real git holds ``index.lock`` that long (a loaded machine's nbstripout). Put first on PATH, it
    shows that a save neither waits for git nor leaves its lock behind (the save hook,
    workbench/notebook_git.py)."""
    real = shutil.which("git")
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "git"
    shim.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = add ]; then\n'
        f'  clean="$({real} config filter.nbstripout.clean)"\n'
        f'  exec {real} -c "filter.nbstripout.clean=sleep {seconds}; $clean" "$@"\n'
        "fi\n"
        f'exec {real} "$@"\n'
    )
    shim.chmod(0o755)
    return folder
