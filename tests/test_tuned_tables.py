"""Tuned tile tables (kernels.tuned_tables): file names, nearest buckets, the library's lookup
and what records say about it, and bad files (a clear error for the tool, a fallback and one
warning for the library, the file left untouched)."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from kernels import tuned_tables
from kernels.rms_norm import gpu as rms_gpu
from kernels.rms_norm import rms_norm
from kernels.runtime import device_info
from workbench.measure import measure

CPU_KEY = tuned_tables.device_key(device_info("cpu"))


def table(family: str, key: str, buckets: list, **extra) -> dict:
    return {
        "schema": tuned_tables.SCHEMA,
        "family": family,
        "device_key": key,
        "knob": "hidden",
        "buckets": buckets,
        **extra,
    }


@pytest.fixture
def tables(tmp_path, monkeypatch):
    """A private table folder (KERNELS_TUNED_DIR) for the test, every cache forgotten around it."""
    monkeypatch.setenv("KERNELS_TUNED_DIR", str(tmp_path))
    tuned_tables.reload()
    yield tmp_path
    monkeypatch.delenv("KERNELS_TUNED_DIR")
    tuned_tables.reload()


def install(root, family: str, body) -> object:
    folder = root / family
    folder.mkdir(exist_ok=True)
    path = folder / tuned_tables.file_name(CPU_KEY)
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    tuned_tables.reload()
    return path


def test_file_names_are_safe_and_stable():
    assert tuned_tables.file_name("cuda:NVIDIA H100 80GB HBM3") == "cuda_NVIDIA_H100_80GB_HBM3.json"
    assert tuned_tables.file_name("npu:Ascend910B") == "npu_Ascend910B.json"
    assert tuned_tables.file_name("cuda:A/B (x)") == "cuda_A_B_x.json"


def test_nearest_bucket_on_a_log_scale_inside_the_table():
    sizes = (1, 4, 16, 64)
    assert [tuned_tables.nearest_bucket(sizes, s) for s in (1, 2, 3, 9, 40, 64)] == [1, 1, 4, 16, 64, 64]
    assert tuned_tables.nearest_bucket(sizes, 65) is None and tuned_tables.nearest_bucket((), 1) is None


def test_auto_reads_the_devices_table_and_records_say_so(tables):
    """impl="auto" on the interpreter takes the table's forward tiles for the nearest hidden
    size; the record names the table and bucket; explicit tiles switch the table off."""
    entry, wide = {"BLOCK_SIZE_M": 2, "num_warps": 1}, {"BLOCK_SIZE_M": 1, "num_warps": 8}
    buckets = [{"size": 256, "tiles": entry}, {"size": 1024, "tiles": wide}]
    install(tables, "rms_norm", table("rms_norm", CPU_KEY, buckets))
    x = torch.randn(16, 300)
    t = rms_gpu.tiles_for(x)
    assert (t.BLOCK_SIZE_M, t.num_warps, t.source) == (2, 1, f"tuned:{CPU_KEY}@256")
    heuristic = rms_gpu.resolve_tiles(16, 300, device_info("cpu").num_cores)
    assert (t.bwd_block_size_m, t.bwd_num_warps) == (heuristic.bwd_block_size_m, heuristic.bwd_num_warps)
    assert rms_gpu.tiles_for(x, BLOCK_SIZE_M=4).source == "explicit"
    w = torch.randn(300)
    torch.testing.assert_close(rms_norm(x, w), rms_norm(x, w, BLOCK_SIZE_M=1, num_warps=4))
    rec = measure("rms_norm", "gpu_multirow", device="cpu", dtype="fp32", problem={"rows": 16, "hidden": 300}, rep_ms=2)
    assert rec.passed and rec.tiles_source == f"tuned:{CPU_KEY}@256"
    row = measure("rms_norm", "gpu_row", device="cpu", dtype="fp32", problem={"rows": 16, "hidden": 300}, rep_ms=2)
    assert row.tiles_source == "explicit"  # gpu_row fixes BLOCK_SIZE_M = 1
    far = measure("rms_norm", "gpu_multirow", device="cpu", dtype="fp32", problem={"rows": 4, "hidden": 64}, rep_ms=2)
    assert far.tiles_source == f"heuristic (hidden=64 outside the table for {CPU_KEY})"


def test_unknown_device_falls_back_to_the_heuristics(tables):
    rec = measure("scalar_ops", "triton", device="cpu", dtype="fp32", quick=True, rep_ms=2)
    assert rec.passed and rec.tiles_source == f"heuristic (no table for {CPU_KEY})"
    found = tuned_tables.lookup("scalar_ops", "cuda:Some Future GPU", 4096)
    assert found.tiles is None and found.source == "heuristic (no table for cuda:Some Future GPU)"
    assert tuned_tables.lookup("scalar_ops", "cuda:Some Future GPU", 4096) is found  # cached: a dict lookup


@pytest.mark.parametrize(
    "body, why",
    [
        ("{not json", "not valid JSON"),
        (table("fused_add_rms_norm", CPU_KEY, []), "family 'fused_add_rms_norm', not 'rms_norm'"),
        ({**table("rms_norm", CPU_KEY, []), "schema": "other/2"}, "schema is 'other/2'"),
        (table("rms_norm", CPU_KEY, [{"size": 0, "tiles": {}}]), "bucket 0 has size 0"),
    ],
)
def test_a_bad_table_is_an_error_for_the_tool_and_a_fallback_for_the_library(tables, body, why):
    path = install(tables, "rms_norm", body)
    before = path.read_bytes()
    with pytest.raises(tuned_tables.TableError) as err:
        tuned_tables.read_table(path, "rms_norm")
    message = str(err.value)
    assert str(path) in message and why in message and "\n" not in message
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t = rms_gpu.tiles_for(torch.randn(4, 300))
        rms_gpu.tiles_for(torch.randn(4, 512))  # another size: the file is not read or warned about again
    assert t.source.startswith(f"heuristic (table {path.name} unusable") and why in t.source
    assert len([w for w in seen if issubclass(w.category, RuntimeWarning)]) == 1
    assert path.read_bytes() == before


def test_an_entry_that_does_not_fit_falls_back(tables):
    entry = {"BLOCK_SIZE_M": 64, "num_warps": 4}  # 64 rows x 2048 columns exceed the register tile
    install(tables, "rms_norm", table("rms_norm", CPU_KEY, [{"size": 2048, "tiles": entry}]))
    t = rms_gpu.tiles_for(torch.randn(4, 2048))
    assert t.BLOCK_SIZE_M != 64 and t.source.startswith("heuristic (tuned tiles") and "do not fit" in t.source


def test_every_committed_table_reads_cleanly():
    """Each table under kernels/<family>/tuned/ (and tuned/backward/) is that family's and that
    part's, filed under its own key."""
    import kernels

    found = 0
    for family in kernels.families():
        spec = kernels.get(family)
        for part in spec.tuned_parts or ("forward",):
            folder = tuned_tables.table_dir(family, part)
            for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
                body = tuned_tables.read_table(path, family, part)
                assert path.name == tuned_tables.file_name(body["device_key"])
                tuning = spec.tuning_of(part)
                assert (body["knob"], body.get("mode", tuning.mode)) == (tuning.knob, tuning.mode)
                found += 1
    assert found >= 9  # the forward tables of four families, the norms' backward ones


def test_disabled_answers_no_entry_inside_and_the_tables_again_after(tables, monkeypatch):
    """tuned_tables.disabled(): lookups, records and the families' remembered plans take the rule
    inside the block; after it (also when it raised) the table's entry again."""
    entry = {"BLOCK_SIZE_M": 1, "num_warps": 1}
    install(tables, "rms_norm", table("rms_norm", CPU_KEY, [{"size": 300, "tiles": entry}]))
    tuned = f"tuned:{CPU_KEY}@300"
    used = []  # the source of each tile resolution (a call with a remembered plan resolves none)
    tiles_for = rms_gpu.tiles_for

    def spy(x, **tiles):
        found = tiles_for(x, **tiles)
        used.append(found.source)
        return found

    monkeypatch.setattr(rms_gpu, "tiles_for", spy)
    x, w = torch.randn(4, 300), torch.randn(300)
    expected = rms_norm(x, w, BLOCK_SIZE_M=4, num_warps=2)

    def check(source):
        assert tuned_tables.lookup("rms_norm", CPU_KEY, 300).source == source
        used.clear()
        torch.testing.assert_close(rms_norm(x, w), expected)
        assert used == [source]  # the plan remembered on the other side of the switch was forgotten
        rec = measure(
            "rms_norm", "gpu_multirow", device="cpu", dtype="fp32", problem={"rows": 4, "hidden": 300}, rep_ms=2
        )
        assert rec.passed and rec.tiles_source == source

    check(tuned)
    assert tuned_tables.lookup("rms_norm", CPU_KEY, 300).tiles == entry
    with tuned_tables.disabled():
        check(tuned_tables.DISABLED)
        assert tuned_tables.lookup("rms_norm", CPU_KEY, 300).tiles is None
    check(tuned)
    with pytest.raises(RuntimeError, match="measured code failed"):
        with tuned_tables.disabled():
            check(tuned_tables.DISABLED)
            raise RuntimeError("measured code failed")
    check(tuned)
    assert tuned_tables.lookup("rms_norm", CPU_KEY, 300).tiles == entry
    with tuned_tables.disabled():  # explicit tiles stay explicit
        assert tuned_tables.choose("rms_norm", CPU_KEY, 300, {"num_warps": 4}, rms_gpu.TUNED_TILES).source == "explicit"
