"""Which code produced a measurement: the commit, and whether the tree that ran differs from it.

Every record, ``environment.json`` and report names :func:`code_version`:

- ``abc1234`` — a checkout at commit ``abc1234`` whose code matches it;
- ``abc1234-dirty+5e6f7a8b`` — the code differs from ``abc1234``; the suffix hashes the paths and
  contents of the differing files, so two runs of the same uncommitted tree share it and a
  reader can tell them from a run of other uncommitted code;
- ``""`` — not a git checkout (or git is missing).

"Code" is what can change a number: the three packages, the benchmark scripts, the notebooks
and the project file. Reports and results written into the tree while a suite runs do not
make it dirty. A notebook's code is its cells' sources (with each cell's type and tags): its
outputs, execution counts and metadata, which running and saving it rewrite, are not code, so a
notebook run and saved in JupyterLab leaves the version clean and an edited cell does not.
(``make notebook-filter`` makes git itself see notebooks the same way, through nbstripout.)

A copy of the tree without its history (the GPU machine's: its ``.git`` may be an older one)
can still name its commit, checked rather than trusted: ``WORKBENCH_CODE_CLAIM=<commit>:<hash>``,
printed by ``python -m workbench.provenance --claim`` at a clean checkout, names a commit and the
:func:`code_hash` of its code files. Where git sees the copy's code differ from its own HEAD but
the copy's code hashes to the claimed hash, the version is the claimed commit; where it does not,
the claim is ignored and the version is marked dirty as usual.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_PATHS = ("kernels", "workbench", "widgets", "benchmarks", "notebooks", "pyproject.toml")
DIRTY = "-dirty+"
CLAIM_ENV = "WORKBENCH_CODE_CLAIM"


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out if out.returncode == 0 else None


def changed_files(root: Path = ROOT) -> list[str]:
    """Code files (repository-relative) that differ from HEAD: modified, deleted, or untracked
    and not ignored."""
    # Without the notebook filter: git would start nbstripout once per notebook whose file changed
    # on disk (about a second each, in every measuring process); the cells are compared below.
    out = _git(
        root,
        "-c",
        "filter.nbstripout.clean=cat",
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--",
        *CODE_PATHS,
    )
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
        if status.strip() == "M" and path.endswith(".ipynb") and not _notebook_code_changed(root, path):
            continue  # outputs or metadata only: the notebook was run, not edited
        paths.append(path)
    return sorted(set(paths))


def notebook_code(data: bytes) -> bytes | None:
    """A notebook's code as bytes: each cell's type, tags and source, in order; None where
    ``data`` is not a notebook (it is then compared as it is)."""
    try:
        cells = json.loads(data.decode("utf-8"))["cells"]
        code = [
            [c.get("cell_type"), sorted((c.get("metadata") or {}).get("tags") or []), _source(c.get("source"))]
            for c in cells
        ]
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        return None
    return json.dumps(code, ensure_ascii=False).encode("utf-8")


def _source(source) -> str:
    return "".join(source) if isinstance(source, list) else str(source or "")


def _notebook_code_changed(root: Path, path: str) -> bool:
    """Whether the cells of a modified notebook differ from HEAD's (True when either side cannot
    be read as a notebook)."""
    head = _git(root, "show", f"HEAD:{path}")
    try:
        now = (Path(root) / path).read_bytes()
    except OSError:
        return True
    if head is None:
        return True
    before, after = notebook_code(head.stdout), notebook_code(now)
    return before is None or after is None or before != after


def _code_bytes(path: Path) -> bytes:
    """What of a file counts as code: a notebook's cells (:func:`notebook_code`), else its bytes."""
    data = path.read_bytes()
    if path.suffix == ".ipynb":
        code = notebook_code(data)
        if code is not None:
            return code
    return data


def tree_hash(paths: list[str], root: Path = ROOT, digits: int = 8) -> str:
    """``digits`` hex digits over the paths and code (:func:`_code_bytes`) of ``paths`` (a deleted
    file counts as such)."""
    digest = hashlib.sha256()
    for rel in sorted(paths):
        digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        try:
            digest.update(_code_bytes(Path(root) / rel))
        except OSError:
            digest.update(b"<deleted>")
        digest.update(b"\0")
    return digest.hexdigest()[:digits]


def code_files(root: Path = ROOT) -> list[str]:
    """Every code file present in the tree and not ignored, tracked or not: what ran. Read from
    git's view of the working tree, so it does not depend on which commit HEAD is."""
    out = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *CODE_PATHS)
    if out is None:
        return []
    names = {name for name in out.stdout.decode("utf-8", "surrogateescape").split("\0") if name}
    return sorted(name for name in names if (Path(root) / name).is_file())


def code_hash(root: Path = ROOT) -> str:
    """Sixteen hex digits over the paths and contents of every code file (:func:`code_files`):
    equal for two trees exactly when their code is."""
    return tree_hash(code_files(root), root, digits=16)


def claim(root: Path = ROOT) -> str:
    """``<commit>:<code hash>`` for a clean checkout (the value of ``WORKBENCH_CODE_CLAIM``);
    ValueError where the code differs from HEAD, as then no commit holds it."""
    version = version_of(root, claimed="")
    if not version or is_dirty(version):
        raise ValueError(f"the code at {root} is {version or 'not a git checkout'}: commit it before claiming it")
    return f"{version}:{code_hash(root)}"


def version_of(root: Path, claimed: str | None = None) -> str:
    """The commit of the checkout at ``root``, marked dirty with a hash of the differing code
    files (module docstring); "" outside a git checkout. ``claimed`` (default: the
    ``WORKBENCH_CODE_CLAIM`` variable) names the commit instead where the code hashes to it."""
    head = _git(root, "rev-parse", "--short", "HEAD")
    if head is None:
        return ""
    commit = head.stdout.decode().strip()
    changed = changed_files(root)
    if not changed:
        return commit
    claimed = os.environ.get(CLAIM_ENV, "") if claimed is None else claimed
    claimed_commit, _, claimed_hash = claimed.strip().partition(":")
    if claimed_commit and claimed_hash and claimed_hash == code_hash(root):
        return claimed_commit
    return f"{commit}{DIRTY}{tree_hash(changed, root)}"


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """:func:`version_of` this project's checkout, once per process: the code a process
    imported does not change under it."""
    return version_of(ROOT)


def is_dirty(version: str | None) -> bool:
    return bool(version) and DIRTY in str(version)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench.provenance", description=__doc__.splitlines()[0])
    ap.add_argument("--claim", action="store_true", help="print <commit>:<code hash> for WORKBENCH_CODE_CLAIM")
    args = ap.parse_args(argv)
    if args.claim:
        try:
            print(claim())
        except ValueError as error:
            print(f"provenance: {error}", file=sys.stderr)
            return 2
        return 0
    print(code_version())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
