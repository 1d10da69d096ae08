"""``workbench cache``: Triton's disk cache seen (info), pruned, and carried to another machine
(export / import), an archive for another device or Triton version refused with the cache left
as it was.

The caches here are folders laid out as Triton lays them out (a kernel's stages, its metadata
with target and Triton version, a group file of absolute paths; a host module's folder), so the
tests need no GPU; one real compile for an H100 (Triton's bundled ptxas) checks the layout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton
from testkit import H100_FACTS, HAVE_PTXAS

from workbench.cli import main as workbench
from workbench.compiling import cache


def _kernel(root: Path, folder: str, name: str = "k", arch: int = 90, version: str | None = None) -> Path:
    path = root / folder
    path.mkdir(parents=True)
    files = {f"{name}.cubin": b"\x7fELF-cubin", f"{name}.ptx": b"// ptx"}
    meta = {"name": name, "target": {"backend": "cuda", "arch": arch, "warp_size": 32}}
    meta["triton_version"] = version or triton.__version__
    children = {}
    for fname, data in files.items():
        (path / fname).write_bytes(data)
        children[fname] = str(path / fname)
    (path / f"{name}.json").write_text(json.dumps(meta))
    children[f"{name}.json"] = str(path / f"{name}.json")
    (path / f"__grp__{name}.json").write_text(json.dumps({"child_paths": children}))
    return path


def _host_module(root: Path, folder: str) -> Path:
    path = root / folder
    path.mkdir(parents=True)
    (path / "cuda_utils.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF-so")
    return path


@pytest.fixture
def cache_dir(tmp_path):
    root = tmp_path / "cache"
    _kernel(root, "AAAA", "rms_fwd")
    _kernel(root, "BBBB", "rms_bwd")
    _kernel(root, "CCCC", "old", version="3.0.0")
    _kernel(root, "DDDD", "a100", arch=80)
    _host_module(root, "EEEE")
    return root


def test_info_counts_kernels_by_device_and_triton_version(cache_dir, capsys):
    facts = cache.info(cache_dir)
    assert facts["entries"] == 5 and facts["host_modules"]["entries"] == 1
    assert facts["kernels"]["cuda/sm90"][triton.__version__]["entries"] == 2
    assert facts["kernels"]["cuda/sm90"]["3.0.0"]["entries"] == 1
    assert facts["kernels"]["cuda/sm80"][triton.__version__]["entries"] == 1
    assert workbench(["cache", "info", "--dir", str(cache_dir)]) == 0
    out = capsys.readouterr().out
    assert f"kernels for cuda/sm90, Triton {triton.__version__}: 2" in out and "host modules" in out


def test_export_then_import_elsewhere_rewrites_the_group_paths(cache_dir, tmp_path, capsys):
    archive = tmp_path / "carry" / "triton-cache.tar.gz"
    argv = ["cache", "export", str(archive), "--dir", str(cache_dir), "--device", "cuda/sm90"]
    assert workbench(argv) == 0
    manifest = cache.read_manifest(archive)
    assert sorted(manifest["kernels"]) == ["AAAA", "BBBB"] and manifest["host_modules"] == ["EEEE"]
    other = tmp_path / "runner-cache"
    assert workbench(["cache", "import", str(archive), "--dir", str(other), "--device", "cuda/sm90"]) == 0
    assert "imported 2 kernels and 1 host modules" in capsys.readouterr().out
    assert sorted(p.name for p in other.iterdir()) == ["AAAA", "BBBB", "EEEE"]
    group = json.loads((other / "AAAA" / "__grp__rms_fwd.json").read_text())["child_paths"]
    assert all(Path(p).parent == other / "AAAA" and Path(p).exists() for p in group.values())
    assert cache.import_archive(archive, other, device="cuda/sm90")["already"] == 3  # a second import adds nothing


def test_an_archive_for_another_device_or_triton_is_refused_and_the_cache_untouched(cache_dir, tmp_path, capsys):
    archive = tmp_path / "a.tar.gz"
    cache.export(archive, cache_dir, device="cuda/sm90")
    other = tmp_path / "other"
    _kernel(other, "ZZZZ", "mine")
    before = sorted(p.name for p in other.iterdir())
    assert workbench(["cache", "import", str(archive), "--dir", str(other), "--device", "cuda/sm80"]) == 2
    err = capsys.readouterr().err
    assert "holds kernels for cuda/sm90; this device is cuda/sm80: refused, cache untouched" in err
    assert len(err.strip().splitlines()) == 1
    old = tmp_path / "old.tar.gz"
    cache.export(old, cache_dir, device="cuda/sm90", triton="3.0.0")
    with pytest.raises(ValueError, match="Triton 3.0.0; this Triton is .*refused, cache untouched"):
        cache.import_archive(old, other, device="cuda/sm90")
    assert sorted(p.name for p in other.iterdir()) == before
    not_an_archive = tmp_path / "x.tar.gz"
    not_an_archive.write_text("hello")
    with pytest.raises(ValueError, match="cannot read it as a cache archive"):
        cache.import_archive(not_an_archive, other, device="cuda/sm90")


def test_export_names_what_the_cache_has_when_the_device_has_nothing(cache_dir, tmp_path):
    with pytest.raises(ValueError, match="no kernel for cuda/sm100 .* it has: cuda/sm80"):
        cache.export(tmp_path / "x.tar.gz", cache_dir, device="cuda/sm100")


def test_prune_removes_what_it_is_asked_to_and_nothing_else(cache_dir, capsys):
    with pytest.raises(ValueError, match="say what to prune"):
        cache.prune(cache_dir)
    assert workbench(["cache", "prune", "--dir", str(cache_dir), "--other-tritons", "--dry-run"]) == 0
    assert "would remove 1 entries" in capsys.readouterr().out and (cache_dir / "CCCC").exists()
    assert cache.prune(cache_dir, other_tritons=True)["removed"] == 1
    assert sorted(p.name for p in cache_dir.iterdir()) == ["AAAA", "BBBB", "DDDD", "EEEE"]
    assert cache.prune(cache_dir, everything=True)["removed"] == 4 and not list(cache_dir.iterdir())


def test_export_and_import_need_a_file(capsys):
    assert workbench(["cache", "export"]) == 2
    assert "export needs the archive's path" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_PTXAS, reason="needs Triton's bundled ptxas")
def test_a_real_compile_is_seen_as_triton_lays_it_out(tmp_path):
    # In a process of its own: one that compiled the kernel before keeps it in memory and writes
    # nothing to a new cache folder (a test run where another test compiled it first failed so).
    script = "import json, sys; from workbench.compiling.first_compile import first_compile; first_compile(json.loads(sys.argv[1]))"
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "real")}
    subprocess.run([sys.executable, "-c", script, json.dumps(H100_FACTS)], env=env, check=True, timeout=300)
    facts = cache.info(tmp_path / "real")
    assert facts["kernels"]["cuda/sm90"][triton.__version__]["entries"] == 1
