"""The norms' backward tables (issue 45): ``workbench tune --part backward`` tunes the backward
kernel's own tiles into ``tuned/backward/``, the families' ``"auto"`` tiles read them (the
forward's table untouched), records name both sources, and every way a table cannot apply falls
back to the rule and says why. On the CPU interpreter: odd sizes, fresh random inputs, every
gradient against the PyTorch reference."""

from __future__ import annotations

import json

import pytest
import torch

import kernels
from kernels import tuned_tables
from kernels.fused_add_rms_norm import fused_add_rms_norm
from kernels.fused_add_rms_norm import gpu as fused_gpu
from kernels.rms_norm import gpu as rms_gpu
from kernels.rms_norm import rms_norm
from kernels.rms_norm.reference import rms_norm_reference
from kernels.runtime import described_device, device_info
from workbench.cli import main
from workbench.measure import measure
from workbench.tune.space import Space

CPU_KEY = tuned_tables.device_key(device_info("cpu"))
ENTRY = {"BWD_ROWS": 2, "BWD_WARPS": 1, "BWD_STAGES": 3, "BWD_RELOAD_W": True}


def install(root, family: str, buckets: list, part: str | None = "backward", **extra):
    folder = root / family / part if part else root / family
    folder.mkdir(parents=True, exist_ok=True)
    body = {"schema": tuned_tables.SCHEMA, "family": family, "device_key": CPU_KEY, "knob": "hidden"}
    body |= {"part": part} if part else {}
    path = folder / tuned_tables.file_name(CPU_KEY)
    path.write_text(json.dumps({**body, "buckets": buckets, **extra}))
    tuned_tables.reload()
    return path


def test_sources_join_and_split():
    joined = tuned_tables.joined_sources("tuned:cuda:X@4096", backward="heuristic (no entry)")
    assert joined == "tuned:cuda:X@4096; backward: heuristic (no entry)"
    assert tuned_tables.source_of(joined) == "tuned:cuda:X@4096"
    assert tuned_tables.source_of(joined, "backward") == "heuristic (no entry)"
    assert tuned_tables.joined_sources("explicit", backward="") == "explicit"
    assert tuned_tables.source_of("explicit", "backward") == ""


def test_the_backward_table_sets_the_backward_and_leaves_the_forward(tables):
    install(tables, "rms_norm", [{"size": 256, "tiles": ENTRY}, {"size": 1024, "tiles": {}}])
    rule = rms_gpu.resolve_tiles(5, 300, device_info("cpu").num_cores)
    t = rms_gpu.tiles_for(torch.randn(5, 300))
    assert (t.bwd_block_size_m, t.bwd_num_warps, t.bwd_stages, t.bwd_reload_w) == (2, 1, 3, True)
    assert (t.BLOCK_SIZE_M, t.num_warps) == (rule.BLOCK_SIZE_M, rule.num_warps)  # no forward table
    assert t.GRID == min(rule.GRID, 3)  # the tuned rows re-count the row tiles (3 tiles of 2 rows)
    assert t.bwd_source == f"tuned:{CPU_KEY}@256" and t.source == f"heuristic (no table for {CPU_KEY})"
    # Every tile that keeps the backward off the table, one at a time.
    for given in ({"BWD_WARPS": 4}, {"BWD_PREFETCH": True}, {"BLOCK_SIZE_M": 2}, {"num_warps": 4}, {"BWD_CHUNK": 128}):
        off = rms_gpu.tiles_for(torch.randn(5, 300), **given)
        ruled = rms_gpu.resolve_tiles(5, 300, device_info("cpu").num_cores, **given)
        assert off.bwd_source == "explicit" and off.bwd_stages == ruled.bwd_stages, given
        assert (off.bwd_block_size_m, off.bwd_num_warps) == (ruled.bwd_block_size_m, ruled.bwd_num_warps), given
    with tuned_tables.disabled("backward"):
        assert rms_gpu.tiles_for(torch.randn(5, 300)).bwd_source == tuned_tables.DISABLED
    # The forward's switch leaves the backward's table on, and the other way round.
    with tuned_tables.disabled("forward"):
        assert rms_gpu.tiles_for(torch.randn(5, 300)).bwd_source == f"tuned:{CPU_KEY}@256"


@pytest.mark.parametrize("shape", [(1, 300), (5, 300), (7, 257)])
def test_tuned_backward_tiles_give_the_reference_gradients(tables, shape):
    install(tables, "rms_norm", [{"size": 256, "tiles": ENTRY}, {"size": 1024, "tiles": {}}])
    x = torch.randn(*shape, requires_grad=True)
    w = (1 + 0.1 * torch.randn(shape[1])).requires_grad_()
    dy = torch.randn(*shape)
    assert rms_gpu.tiles_for(x).bwd_source.startswith("tuned:")
    ours = torch.autograd.grad(rms_norm(x, w), (x, w), dy)
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    ref = torch.autograd.grad(rms_norm_reference(x64, w64, 1e-6, 0.0, "llama"), (x64, w64), dy.double())
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)


def test_the_fused_family_reads_its_own_backward_table(tables):
    install(tables, "fused_add_rms_norm", [{"size": 300, "tiles": {"BWD_ROWS": 4, "BWD_WARPS": 2}}])
    x = torch.randn(6, 300)
    assert rms_gpu.tiles_for(x).bwd_source == ""  # RMSNorm has no backward table here
    t = fused_gpu.tiles_for(x)
    assert (t.bwd_block_size_m, t.bwd_num_warps, t.bwd_source) == (4, 2, f"tuned:{CPU_KEY}@300")
    xs = [torch.randn(6, 300, requires_grad=True) for _ in range(2)]
    w = torch.randn(300, requires_grad=True)
    dy, ds = torch.randn(6, 300), torch.randn(6, 300)
    y, s = fused_add_rms_norm(*xs, w)
    ours = torch.autograd.grad((y, s), (*xs, w), (dy, ds))
    x64, r64, w64 = (t.detach().double().requires_grad_() for t in (*xs, w))
    s64 = x64 + r64
    y64 = rms_norm_reference(s64, w64, 1e-6, 0.0, "llama")
    ref = torch.autograd.grad((y64, s64), (x64, r64, w64), (dy.double(), ds.double()))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)


def test_an_entry_that_does_not_fit_and_a_wide_row_fall_back_to_the_rule(tables):
    install(tables, "rms_norm", [{"size": 2048, "tiles": {"BWD_ROWS": 64}}, {"size": 65536, "tiles": ENTRY}])
    t = rms_gpu.tiles_for(torch.randn(3, 2048))
    assert t.bwd_source.startswith("heuristic (tuned backward tiles") and "do not fit" in t.bwd_source
    assert t.bwd_block_size_m == rms_gpu.resolve_tiles(3, 2048, device_info("cpu").num_cores).bwd_block_size_m
    wide = rms_gpu.tiles_for(torch.randn(2, 65536))  # chunked rows: the table holds whole rows only
    assert wide.BWD_CHUNK and wide.bwd_stages == 1 and wide.bwd_source == f"tuned:{CPU_KEY}@65536"


def test_a_forward_table_in_the_backward_folder_is_refused(tables):
    path = install(tables, "rms_norm", [{"size": 300, "tiles": ENTRY}], part=None)
    backward = tables / "rms_norm" / "backward" / path.name
    backward.parent.mkdir()
    backward.write_text(path.read_text())
    tuned_tables.reload()
    with pytest.raises(tuned_tables.TableError, match="holds the 'forward' tiles, not the 'backward' tiles"):
        tuned_tables.read_table(backward, "rms_norm", "backward")
    with pytest.warns(RuntimeWarning, match="falls back to its heuristic tiles"):
        t = rms_gpu.tiles_for(torch.randn(4, 300))
    assert t.bwd_source.startswith("heuristic (table") and "unusable" in t.bwd_source


def test_tune_part_backward_installs_its_own_table_and_records_name_both(tables, tmp_path, capsys):
    code = main(["tune", "rms_norm", "--part", "backward", "--device", "cpu", "--sizes", "300", "--rep-ms", "2",
                 "--out", str(tmp_path / "run"), "--write"])  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0, out
    assert "tune rms_norm (backward, bf16)" in out
    table = tuned_tables.read_table(tables / "rms_norm" / "backward" / tuned_tables.file_name(CPU_KEY), "rms_norm")
    assert table["part"] == "backward" and table["mode"] == "full"
    (bucket,) = table["buckets"]
    assert bucket["size"] == 300 and bucket["evaluated"] >= 2
    assert set(bucket["tiles"]) <= set(rms_gpu.BACKWARD_TUNED_TILES)
    assert not (tables / "rms_norm" / tuned_tables.file_name(CPU_KEY)).exists()  # the forward's: not written
    problem = {"rows": 5, "hidden": 300}
    rec = measure("rms_norm", "gpu_multirow", device="cpu", dtype="fp32", mode="full", problem=problem, rep_ms=2)
    assert rec.passed
    assert rec.tiles_source == f"heuristic (no table for {CPU_KEY}); backward: tuned:{CPU_KEY}@300"


@pytest.mark.parametrize(
    "family, part, message",
    [
        ("rms_norm", "sideways", "rms_norm tunes no 'sideways' tiles; it tunes: forward, backward"),
        ("scalar_ops", "backward", "scalar_ops tunes no 'backward' tiles; it tunes: forward"),
    ],
)
def test_a_part_the_family_does_not_tune_is_one_line_exit_2(family, part, message, tmp_path, capsys):
    code = main(["tune", family, "--part", part, "--device", "cpu", "--out", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_the_backward_grid_drops_staged_tiles_over_the_shared_memory():
    """On an H100-sized program (227 KB of shared memory) the grid keeps only staged tiles that
    fit (kernels.rms_norm.gpu.staged_bytes), before anything is compiled or launched."""
    h100 = described_device("cuda", name="NVIDIA H100 80GB HBM3", num_cores=132, shared_bytes_per_program=232448)
    small = described_device("cuda", name="NVIDIA H100 80GB HBM3", num_cores=132, shared_bytes_per_program=49152)
    for family, residual in (("rms_norm", False), ("fused_add_rms_norm", True)):
        space = Space.of(kernels.get(family), quick=False, part="backward")
        assert space.tuning.mode == "full" and max(space.sizes) <= rms_gpu.BWD_WHOLE_ROW_MAX
        kept, fewer = space.candidates(4096, h100), space.candidates(4096, small)
        assert fewer and len(fewer) < len(kept)
        row = torch.empty(0, dtype=torch.bfloat16, device="meta")
        for params in fewer:
            t = rms_gpu.resolve_tiles(4096, 4096, 132, **params)
            assert rms_gpu.staged_bytes(t, row, row, row if residual else None, row) <= 49152


def test_a_notebook_session_tunes_the_backward_part(tables, tmp_path):
    from widgets import Session

    s = Session("rms_norm", device="cpu", dtype="fp32", quick=True, headless=True, out_dir=tmp_path / "out",
                store=False, rep_ms=1)  # fmt: skip
    tuned = s.tune(sizes=[300], part="backward", install=True)
    assert not tuned.wrong and tuned.part == "backward"
    assert (tmp_path / "out" / "tune-rms_norm-cpu-backward" / "report.html").exists()
    assert tuned.installed_path() == tables / "rms_norm" / "backward" / tuned_tables.file_name(CPU_KEY)
    assert tuned.installed_path().is_file() and not (tables / "rms_norm" / tuned_tables.file_name(CPU_KEY)).exists()
    with pytest.raises(ValueError, match="tunes no 'sideways' tiles"):
        s.tune(part="sideways")
