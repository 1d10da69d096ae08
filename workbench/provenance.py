"""Which code produced a measurement: the commit, and whether the tree that ran differs from it.

Every record, ``environment.json`` and report names :func:`code_version`:

- ``abc1234`` — a checkout at commit ``abc1234`` whose code matches it;
- ``abc1234-dirty+5e6f7a8b`` — the code differs from ``abc1234``; the suffix hashes the paths and
  contents of the differing files, so two runs of the same uncommitted tree share it and a
  reader can tell them from a run of other uncommitted code;
- ``""`` — not a git checkout (or git is missing).

"Code" is what can change a number: the three packages, the benchmark scripts, the notebooks
and the project file. Reports and results written into the tree while a suite runs do not
make it dirty.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_PATHS = ("kernels", "workbench", "widgets", "benchmarks", "notebooks", "pyproject.toml")
DIRTY = "-dirty+"


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out if out.returncode == 0 else None


def changed_files(root: Path = ROOT) -> list[str]:
    """Code files (repository-relative) that differ from HEAD: modified, deleted, or untracked
    and not ignored."""
    out = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *CODE_PATHS)
    if out is None:
        return []
    paths = []
    entries = out.stdout.decode("utf-8", "surrogateescape").split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        status, path = entry[:2], entry[3:]
        if "R" in status or "C" in status:
            i += 1  # a rename's source path follows; the new path is the one that runs
        paths.append(path)
    return sorted(set(paths))


def tree_hash(paths: list[str], root: Path = ROOT) -> str:
    """Eight hex digits over the paths and contents of ``paths`` (a deleted file counts as such)."""
    digest = hashlib.sha256()
    for rel in sorted(paths):
        digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        try:
            digest.update((Path(root) / rel).read_bytes())
        except OSError:
            digest.update(b"<deleted>")
        digest.update(b"\0")
    return digest.hexdigest()[:8]


def version_of(root: Path) -> str:
    """The commit of the checkout at ``root``, marked dirty with a hash of the differing code
    files (module docstring); "" outside a git checkout."""
    head = _git(root, "rev-parse", "--short", "HEAD")
    if head is None:
        return ""
    commit = head.stdout.decode().strip()
    changed = changed_files(root)
    return f"{commit}{DIRTY}{tree_hash(changed, root)}" if changed else commit


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """:func:`version_of` this project's checkout, once per process: the code a process
    imported does not change under it."""
    return version_of(ROOT)


def is_dirty(version: str | None) -> bool:
    return bool(version) and DIRTY in str(version)
