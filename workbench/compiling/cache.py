"""Triton's disk cache: where it is, what it holds, and how to carry it (``workbench cache``).

Triton keeps every compiled kernel in a folder of its own below its cache folder
(``TRITON_CACHE_DIR``, else ``~/.triton/cache``), named by the kernel's hash (base32). The folder
holds the kernel's stages (``.ttir`` … ``.cubin``), its metadata (``<name>.json``: its target and
the Triton version that compiled it) and a group file (``__grp__<name>.json``) that lists the
files by absolute path. Other folders hold host modules Triton builds with the C compiler (its
CUDA utilities, a launcher per kernel signature in 3.6), built for this host's Python.

- :func:`entries` / :func:`info`: what the cache holds, by device target and Triton version.
- :func:`prune`: remove kernels of other Triton versions or older than some days, or all.
- :func:`export` / :func:`import_archive`: a tarball of one device's kernels for one Triton
  version (and the host modules), to restore the cache on a CI runner. An archive for another
  device or Triton version is refused before anything is written; the group files are rewritten
  for the folder the kernels land in (Triton only trusts a group whose paths exist).
"""

from __future__ import annotations

import base64
import io
import json
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "workbench-cache.json"
FORMAT = 1


def triton_cache_dir() -> str:
    """Triton's cache folder as this process sees it now (``TRITON_CACHE_DIR``, else Triton's
    default), from Triton's own setting."""
    from triton import knobs

    return knobs.cache.dir


def pin_triton_cache_dir() -> str:
    """Fix this process's Triton cache folder by setting ``TRITON_CACHE_DIR`` to the one Triton
    uses now (left as it is where the variable is set), and return it.

    Why: torch.compile's Inductor, on its first Triton kernel, sets ``TRITON_CACHE_DIR`` to a
    folder of its own where the variable is unset, and Triton reads the variable at every
    compile. Kernels compiled ahead into the default folder were then not found by a suite's
    first calls after its first torch.compile peer (the H100 suite at ebb9058: 0.3-0.6 s each,
    the same as compiling them; 3-6 ms with the folder fixed, benchmarks/diagnostics/first_call_cost.py)."""
    folder = os.environ.get("TRITON_CACHE_DIR") or triton_cache_dir()
    os.environ["TRITON_CACHE_DIR"] = folder
    return folder


def triton_ptxas_path() -> str | None:
    """The ``ptxas`` Triton assembles NVIDIA kernels with in this process now (``TRITON_PTXAS_PATH``,
    else the one Triton bundles); None where Triton has no NVIDIA backend here."""
    try:
        from triton import knobs

        return knobs.nvidia.ptxas.path
    except Exception:  # noqa: BLE001 - no NVIDIA backend, or no ptxas in it
        return None


def pin_triton_environment() -> dict[str, str]:
    """Fix the Triton settings that torch.compile's Inductor changes in this process's environment
    where they are unset, and return them (``{variable: value}``) for helper processes to set:
    the cache folder (:func:`pin_triton_cache_dir`) and ``TRITON_PTXAS_PATH``, set to the
    ``ptxas`` Triton uses now (left as it is where the variable is set).

    Why the ``ptxas``: Inductor, on the first Triton kernel it compiles in a process, points
    ``TRITON_PTXAS_PATH`` at torch's own ``ptxas`` where the variable is unset (torch 2.11's
    CUDA build ships one). Triton's cache key holds the ``ptxas`` version (Triton 3.6, below
    Blackwell), read once per process: a measuring process keeps the version it read first,
    while a compile process started after that reads torch's, and keys its kernels otherwise.
    In the H200 notebooks at 172ef03, none of the 56 kernels that replacement compile processes
    compiled for fused_add_rms_norm after its torch.compile peer's first call was found by the
    measuring process's first call; the 6 from processes started before it were. (Read from the
    records and Triton's and torch's code; not yet re-measured with the pin.)"""
    pinned = {"TRITON_CACHE_DIR": pin_triton_cache_dir()}
    if not os.environ.get("TRITON_PTXAS_PATH"):
        path = triton_ptxas_path()
        if path:
            os.environ["TRITON_PTXAS_PATH"] = path
    if os.environ.get("TRITON_PTXAS_PATH"):
        pinned["TRITON_PTXAS_PATH"] = os.environ["TRITON_PTXAS_PATH"]
    return pinned


def cache_folder(kernel_hash: str) -> str:
    """The Triton cache folder name of a compiled kernel's hash (its cache manager's: base32 of
    the hash's bytes, unpadded)."""
    return base64.b32encode(bytes.fromhex(kernel_hash)).decode().rstrip("=")


def device_key(backend: str, arch) -> str:
    """A device target as text: ``cuda/sm90`` (NVIDIA), ``<backend>/<arch>`` otherwise."""
    return f"{backend}/sm{arch}" if backend == "cuda" else f"{backend}/{arch}"


def host_key() -> str:
    """What a host module is built for: the Python and the machine (``cpython-312/x86_64``)."""
    return f"{sys.implementation.name}-{sys.version_info.major}{sys.version_info.minor}/{platform.machine()}"


@dataclass
class Entry:
    """One folder of the cache: a kernel (``device`` and ``triton`` from its metadata) or a host
    module (``device`` None)."""

    folder: Path
    name: str
    device: str | None
    triton: str | None
    bytes: int
    mtime: float

    @property
    def kind(self) -> str:
        return "kernel" if self.device is not None else "host module"


def _metadata(folder: Path) -> dict | None:
    for path in folder.glob("*.json"):
        if path.name.startswith("__grp__"):
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("target"), dict):
            return data
    return None


def entries(root: str | os.PathLike | None = None) -> list[Entry]:
    """Every folder of the cache at ``root`` (default :func:`triton_cache_dir`)."""
    root = Path(root or triton_cache_dir())
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = [p for p in folder.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        mtime = max((p.stat().st_mtime for p in files), default=folder.stat().st_mtime)
        meta = _metadata(folder)
        if meta is None:
            names = [p.name for p in files if not p.name.startswith("__grp__")]
            found.append(Entry(folder, names[0] if names else folder.name, None, None, size, mtime))
            continue
        target = meta["target"]
        found.append(
            Entry(
                folder,
                str(meta.get("name") or folder.name),
                device_key(target.get("backend", "?"), target.get("arch", "?")),
                meta.get("triton_version"),
                size,
                mtime,
            )
        )
    return found


def info(root: str | os.PathLike | None = None) -> dict:
    """``{"dir", "bytes", "entries", "kernels": {device: {triton version: {"entries", "bytes"}}},
    "host_modules": {"entries", "bytes"}}``."""
    root = Path(root or triton_cache_dir())
    found = entries(root)
    kernels: dict = {}
    host = {"entries": 0, "bytes": 0}
    for e in found:
        slot = (
            host
            if e.device is None
            else kernels.setdefault(e.device, {}).setdefault(e.triton or "?", {"entries": 0, "bytes": 0})
        )
        slot["entries"] += 1
        slot["bytes"] += e.bytes
    return {
        "dir": str(root),
        "bytes": sum(e.bytes for e in found),
        "entries": len(found),
        "kernels": kernels,
        "host_modules": host,
    }


def installed_triton() -> str:
    import triton

    return triton.__version__


def prune(
    root: str | os.PathLike | None = None,
    *,
    other_tritons: bool = False,
    older_than_days: float | None = None,
    everything: bool = False,
    dry_run: bool = False,
) -> dict:
    """Remove kernels compiled by another Triton version than the installed one
    (``other_tritons``), entries not used for ``older_than_days``, or ``everything``; ``{"removed",
    "bytes", "kept"}``. ValueError when no rule is given (nothing would be removed)."""
    if not (other_tritons or older_than_days is not None or everything):
        raise ValueError("say what to prune: --other-tritons, --older-than DAYS or --all")
    now, mine = time.time(), installed_triton()
    removed, freed, kept = 0, 0, 0
    for e in entries(root):
        stale = everything
        stale |= other_tritons and e.device is not None and e.triton != mine
        stale |= older_than_days is not None and now - e.mtime > older_than_days * 86400
        if not stale:
            kept += 1
            continue
        removed += 1
        freed += e.bytes
        if not dry_run:
            shutil.rmtree(e.folder, ignore_errors=True)
    return {"removed": removed, "bytes": freed, "kept": kept}


def local_device() -> str | None:
    """The device key of this host's GPUs (:func:`workbench.compiling.target.visible_device_facts`),
    or None without one."""
    from workbench.compiling.target import visible_device_facts

    facts = visible_device_facts("cuda")
    return None if facts is None else device_key(facts["backend"], facts["arch"])


def export(
    path: str | os.PathLike,
    root: str | os.PathLike | None = None,
    *,
    device: str | None = None,
    triton: str | None = None,
) -> dict:
    """Write the kernels compiled for ``device`` (default: this host's GPU) by ``triton`` (default:
    the installed version), with the host modules, to the tarball ``path``; its manifest.
    ValueError when there is no device to name or no such kernel."""
    device = device or local_device()
    if device is None:
        raise ValueError("no GPU here to name the kernels' device: give --device (e.g. cuda/sm90)")
    triton = triton or installed_triton()
    found = entries(root)
    chosen = [e for e in found if e.device == device and e.triton == triton]
    if not chosen:
        have = sorted({f"{e.device} (Triton {e.triton})" for e in found if e.device})
        raise ValueError(
            f"no kernel for {device} compiled by Triton {triton} in the cache; it has: {', '.join(have) or 'none'}"
        )
    host = [e for e in found if e.device is None]
    manifest = {
        "format": FORMAT,
        "device": device,
        "triton": triton,
        "host": host_key(),
        "kernels": [e.folder.name for e in chosen],
        "host_modules": [e.folder.name for e in host],
        "bytes": sum(e.bytes for e in chosen + host),
        "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        data = json.dumps(manifest, indent=1).encode()
        member = tarfile.TarInfo(MANIFEST)
        member.size = len(data)
        member.mtime = int(time.time())
        tar.addfile(member, io.BytesIO(data))  # first, so an import reads it before anything else
        for e in chosen + host:
            tar.add(e.folder, arcname=e.folder.name)
    os.replace(tmp, path)
    return manifest


def read_manifest(path: str | os.PathLike) -> dict:
    """The manifest of an archive :func:`export` wrote; ValueError for another file."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            member = tar.next()
            if member is None or member.name != MANIFEST:
                raise ValueError(f"{path} is not a workbench cache archive (no {MANIFEST} first)")
            return json.loads(tar.extractfile(member).read())
    except (OSError, tarfile.TarError) as exc:
        raise ValueError(f"{path}: cannot read it as a cache archive ({exc})") from None


def import_archive(
    path: str | os.PathLike, root: str | os.PathLike | None = None, *, device: str | None = None
) -> dict:
    """Add the kernels of an archive to the cache at ``root``. Refused (ValueError, nothing
    written) when the archive was made for another device than ``device`` (default: this host's
    GPU) or by another Triton version than the installed one. Host modules built for another
    Python or machine are left out. ``{"kernels", "host_modules", "skipped", "already"}``."""
    manifest = read_manifest(path)
    mine = installed_triton()
    if manifest.get("triton") != mine:
        raise ValueError(
            f"{path} holds kernels of Triton {manifest.get('triton')}; this Triton is {mine}: refused, cache untouched"
        )
    here = device or local_device()
    if here is None:
        raise ValueError(f"no GPU here to check {path}'s device ({manifest.get('device')}) against: give --device")
    if manifest.get("device") != here:
        raise ValueError(
            f"{path} holds kernels for {manifest.get('device')}; this device is {here}: refused, cache untouched"
        )
    root = Path(root or triton_cache_dir())
    root.mkdir(parents=True, exist_ok=True)
    wanted = set(manifest.get("kernels") or [])
    host_ok = manifest.get("host") == host_key()
    if host_ok:
        wanted |= set(manifest.get("host_modules") or [])
    counts = {
        "kernels": 0,
        "host_modules": 0,
        "skipped": 0 if host_ok else len(manifest.get("host_modules") or []),
        "already": 0,
    }
    with tempfile.TemporaryDirectory(prefix=".import-", dir=root) as staging:
        staging = Path(staging)
        with tarfile.open(path, "r:gz") as tar:
            members = [m for m in tar.getmembers() if m.name.split("/")[0] in wanted and (m.isfile() or m.isdir())]
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12
            tar.extractall(staging, members=members, **safe)
        for folder in sorted(p for p in staging.iterdir() if p.is_dir()):
            final = root / folder.name
            if final.exists():
                counts["already"] += 1
                continue
            _rewrite_groups(folder, final)
            os.replace(folder, final)  # one rename per folder: Triton never sees half a kernel
            counts["kernels" if folder.name in (manifest.get("kernels") or []) else "host_modules"] += 1
    return counts


def _rewrite_groups(folder: Path, final: Path) -> None:
    """Point the group files of ``folder`` at the files' paths once it is at ``final``."""
    for grp in folder.glob("__grp__*.json"):
        data = json.loads(grp.read_text())
        children = data.get("child_paths") or {}
        data["child_paths"] = {name: str(final / Path(p).name) for name, p in children.items()}
        grp.write_text(json.dumps(data))
