"""What the Explorer and the heatmaps show about why a configuration is fast or slow: the why
panel for a CPU (interpreter) configuration, the profile button's background run and its one-line
error, heatmap hover text with the facts, failed cells naming the limit they went over."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from widgets import Explorer, Session
from workbench.measure import measure
from workbench.reports import figures as F
from workbench.reports import why

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"


def _fake_ncu(tmp_path, body: str) -> str:
    path = tmp_path / "ncu"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def explorer():
    s = Session("rms_norm", device="cpu", dtype="fp32", quick=True, headless=False, store=False)
    ex = Explorer(s, variant="gpu_row", debounce_s=0.01, peers=False)
    assert ex.wait(120)
    yield ex
    ex.close()


def test_why_panel_renders_for_a_cpu_configuration(explorer):
    assert explorer.record.ok
    text = explorer.why_text
    assert text.startswith("why — gpu_row")
    assert "rms_norm_forward" in text  # the kernel that ran, in the kernels' table
    assert "Triton interpreter: nothing is compiled" in text
    assert "table class='wb-why-kernels'" in explorer.w_why.value
    # facts unavailable here: no guessed numbers, and no warning built on them
    assert "wb-why-warning" not in explorer.w_why.value
    assert explorer.w_profile.layout.display == "none"  # no ncu on a CPU configuration


def test_profile_button_runs_in_the_background_and_shows_counters(explorer, tmp_path):
    explorer._ncu = _fake_ncu(tmp_path, f'cat "{FIXTURES / "h100_rms_norm_forward_raw.csv"}"')
    explorer.profile(wait=True)
    assert explorer.record.counters["kernels"][0]["kernel"] == "_rms_norm_forward_kernel"
    assert "Nsight Compute" in explorer.why_text and "long_scoreboard" in explorer.why_text
    assert "profiled: 1 kernel" in explorer.w_profile_status.value
    assert explorer.w_profile.disabled is False


def test_profile_errors_are_one_line_beside_the_button(explorer, tmp_path):
    explorer._ncu = _fake_ncu(tmp_path, 'echo "==ERROR== ERR_NVGPUCTRPERM - no permission"; exit 1')
    explorer.profile(wait=True)
    status = explorer.w_profile_status.value
    assert "ERR_NVGPUCTRPERM" in status and status.count("\n") == 0
    assert not explorer.record.counters


def test_why_panel_warns_on_spills_and_occupancy(monkeypatch):
    """A record whose facts came from a compiled kernel (the dict compile_facts.collect makes on
    CUDA, from the stand-in of tests/test_compile_facts.py) gets warning lines and no n/a."""
    from types import SimpleNamespace

    from kernels.launch import Launch
    from workbench import compile_facts
    from workbench.device_limits import h100

    monkeypatch.setattr(compile_facts, "cuda_limits", lambda index: h100())
    compiled = SimpleNamespace(
        n_regs=128, n_spills=24, metadata=SimpleNamespace(shared=6144, num_warps=4, num_stages=3, num_ctas=1)
    )
    facts = compile_facts.collect(
        [Launch("_sum_forward_kernel", (64, 1, 8), "cuda", compiled)], SimpleNamespace(kind="cuda", index=0)
    )
    rec = measure("rms_norm", "gpu_row", device="cpu", dtype="fp32", quick=True, rep_ms=2)
    rec.compile_facts = facts
    page = why.why_html(rec)
    assert page.count("wb-why-warning") == 3  # spills, registers limit, grid under one wave
    assert "24 registers spilled" in page and "limited by registers" in page
    assert why.hover_text(rec) == "regs 128, spills 24, occupancy 25% (grid)"


def test_heatmap_hover_carries_facts_and_failed_cells_name_their_limit():
    from triton.runtime.errors import OutOfResources

    ok = [
        measure("rms_norm", "gpu_row", device="cpu", dtype="fp32", quick=True, rep_ms=2, params={"num_warps": w})
        for w in (1, 2)
    ]
    failed = measure("rms_norm", "gpu_row", device="cpu", dtype="fp32", quick=True, rep_ms=2, params={"num_warps": 4})
    failed.error = f"OutOfResources: {OutOfResources(262144, 232448, 'shared memory')}"  # Triton's own words
    fig, best = F.heatmap_figure(ok + [failed], "num_warps", [1, 2, 4], "BLOCK_SIZE", ["auto"], metric="ms")
    heat = fig.data[0]
    assert "%{customdata}" in heat.hovertemplate
    assert heat.customdata[0][0] == "registers, spills, occupancy: n/a (interpreter)"
    (cross,) = [t for t in fig.data if t.type == "scatter"]
    assert "shared memory over the device limit (256.0 KB needed, 227.0 KB allowed)" in cross.hovertext[0]
    assert best is not None
