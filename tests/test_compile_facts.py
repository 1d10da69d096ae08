"""Compile facts: the launch recorder, the occupancy arithmetic (checked against Nsight Compute's
own numbers in the committed H100 fixtures), facts in interpreter records, and, on a GPU, facts
of every family's default tiles against the CUDA driver's occupancy API."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import kernels
from kernels.launch import _recordings, recording
from workbench import compile_facts, ncu
from workbench.device_limits import GPU_ARCH, gpu_limits, h100
from workbench.occupancy import RESOURCES, limit_of_error, occupancy

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"


def _ncu_kernels():
    out = []
    for name in ("h100_rms_norm_forward_raw.csv", "h100_block_sparse_forward_raw.csv"):
        out += ncu.parse((FIXTURES / name).read_text())
    return out


NCU_KERNELS = _ncu_kernels()


def _ours(k: dict, limits=None) -> dict:
    """Our occupancy for a kernel Nsight Compute profiled, from the launch facts it reports."""
    shared = int(k["shared_static_bytes"] + k["shared_dynamic_bytes"])
    warps = int(k["block_size"]) // 32
    return occupancy(int(k["registers"]), shared, warps, int(k["grid_size"]), limits or h100())


# --- occupancy against Nsight Compute ----------------------------------------------------------
@pytest.mark.parametrize("k", NCU_KERNELS, ids=[k["kernel"] for k in NCU_KERNELS])
def test_occupancy_matches_ncu_limits_and_theoretical_occupancy(k):
    occ = _ours(k)
    assert occ["limits"]["registers"] == k["limit_registers"]
    assert occ["limits"]["warps"] == k["limit_warps"]
    assert occ["limits"]["blocks"] == k["limit_blocks"]
    assert occ["occupancy_pct"] == pytest.approx(k["theoretical_occupancy_pct"])
    assert occ["waves"] == pytest.approx(k["waves"], abs=0.006)  # ncu rounds to two decimals


@pytest.mark.parametrize("k", NCU_KERNELS, ids=[k["kernel"] for k in NCU_KERNELS])
def test_shared_memory_limit_matches_ncu_at_the_carveout_the_driver_chose(k):
    limits = replace(h100(), shared_per_sm=int(k["shared_config_bytes"]))
    assert _ours(k, limits)["limits"]["shared memory"] == k["limit_shared_mem"]


def test_binding_limit_names_registers_or_the_grid():
    by_name = {k["kernel"]: _ours(k) for k in NCU_KERNELS}
    rms = by_name["_rms_norm_forward_kernel"]
    assert (rms["limit"], rms["resource_limit"], rms["blocks_per_sm"], rms["warps_per_sm"]) == (
        "registers",
        "registers",
        2,
        32,
    )
    # 512 programs on 132 SMs x 4 resident: under one wave, so the grid binds; registers bind the tile
    fwd = by_name["_sum_forward_kernel"]
    assert (fwd["limit"], fwd["resource_limit"]) == ("grid", "registers")
    assert fwd["waves"] < 1


def test_a_tile_over_a_device_limit_cannot_launch_and_says_which():
    limits = h100()
    over_shared = occupancy(32, limits.shared_per_block_optin + 1, 4, 100, limits)
    assert over_shared["blocks_per_sm"] == 0 and over_shared["limit"] == "shared memory"
    assert "227.0 KB" in over_shared["error"]
    over_threads = occupancy(32, 0, 64, 100, limits)  # 2048 threads per program
    assert over_threads["limit"] == "warps" and "1024" in over_threads["error"]
    over_regs = occupancy(255, 0, 32, 100, limits)  # 255 x 1024 registers > 65536
    assert over_regs["limit"] == "registers"


def test_every_resource_can_bind():
    limits = h100()
    seen = {
        occupancy(128, 0, 8, None, limits)["limit"],  # registers
        occupancy(16, 100_000, 1, None, limits)["limit"],  # shared memory
        occupancy(16, 0, 32, None, limits)["limit"],  # warps
        occupancy(16, 0, 1, None, limits)["limit"],  # the 32-program cap
    }
    assert seen == set(RESOURCES)


def test_limits_come_from_the_architecture_row_and_the_device_properties():
    props = {"multi_processor_count": 114, "shared_memory_per_multiprocessor": 233472}
    pcie = gpu_limits(9, 0, props)
    assert pcie.sm_count == 114 and pcie.max_blocks_per_sm == GPU_ARCH[(9, 0)].max_blocks_per_sm
    newer = gpu_limits(8, 7, {"multi_processor_count": 16})  # no 8.7 row: 8.6's, named 8.7
    assert newer.arch == "sm_87" and newer.max_threads_per_sm == GPU_ARCH[(8, 6)].max_threads_per_sm
    with pytest.raises(ValueError, match="no occupancy limits for compute capability 7.5"):
        gpu_limits(7, 5, {})


def test_triton_out_of_resources_names_the_limit():
    from triton.runtime.errors import OutOfResources

    resource, line = limit_of_error(f"OutOfResources: {OutOfResources(262144, 232448, 'shared memory')}")
    assert resource == "shared memory"
    assert line == "shared memory over the device limit (256.0 KB needed, 227.0 KB allowed)"
    assert limit_of_error("BLOCK_SIZE=16 is below hidden") is None
    assert limit_of_error(None) is None


# --- the recorder ------------------------------------------------------------------------------
def test_recording_sees_each_launch_once_and_closes():
    from kernels.rms_norm import rms_norm

    x, w = torch.randn(5, 64), torch.randn(64)
    with recording() as outer:
        with recording() as inner:
            rms_norm(x, w)
        rms_norm(x, w)
    assert not _recordings
    assert [launch.name for launch in inner] == ["_rms_norm_forward_kernel"]
    assert len(outer) == 2
    assert outer[0].device_kind == "cpu" and outer[0].compiled is None
    assert len(outer[0].grid) == 3 and outer[0].grid[0] >= 1
    rms_norm(x, w)
    assert len(outer) == 2  # nothing recorded after the block


def test_recording_closes_on_error_and_sees_other_threads():
    from kernels.rms_norm import rms_norm

    with pytest.raises(RuntimeError):
        with recording():
            raise RuntimeError("boom")
    assert not _recordings
    with recording() as launches:
        t = threading.Thread(target=rms_norm, args=(torch.randn(3, 32), torch.randn(32)))
        t.start()
        t.join()
    # process-wide on purpose: autograd runs a CUDA backward on its own thread
    assert [launch.name for launch in launches] == ["_rms_norm_forward_kernel"]


# --- facts in records --------------------------------------------------------------------------
def test_interpreter_records_carry_every_field_marked_unavailable():
    from workbench.measure import measure

    rec = measure("rms_norm", "gpu_row", device="cpu", dtype="fp32", mode="full", quick=True, rep_ms=2)
    facts = rec.compile_facts
    assert facts["available"] is False and "interpreter" in facts["reason"]
    names = [k["name"] for k in facts["kernels"]]
    assert "_rms_norm_forward_kernel" in names and any("backward" in n for n in names)
    for k in facts["kernels"]:
        assert k["programs"] == k["grid"][0] * k["grid"][1] * k["grid"][2] >= 1
        for field in compile_facts.KERNEL_FIELDS:
            assert field in k and k[field] is None, field
    assert compile_facts.brief(facts) == "n/a (interpreter)"
    assert compile_facts.warnings(facts) == []


def test_npu_variant_records_carry_the_unified_buffer_model():
    from workbench.measure import measure

    spec = kernels.get("rms_norm")
    rec = measure("rms_norm", "npu", device="cpu", dtype="fp32", quick=True, rep_ms=2)
    facts = rec.compile_facts
    assert facts["ub_bytes"] == spec.ub_estimate(rec.problem, rec.params, rec.dtype)
    assert facts["ub_capacity_bytes"] == 192 * 1024
    assert compile_facts.brief(facts).startswith("UB ")


def test_unified_buffer_use_reads_alike_in_the_brief_the_warning_and_the_hover():
    from workbench.reports.why import hover_text

    facts = {"kernels": [], "ub_bytes": 200 * 1024 + 512, "ub_capacity_bytes": 192 * 1024}
    assert compile_facts.brief(facts) == "UB 200.5 / 192 KB"
    assert compile_facts.warnings(facts) == ["UB 200.5 / 192 KB per core: over the Unified Buffer (ub overflow)"]
    assert hover_text({"compile_facts": facts}) == "UB 200.5 / 192 KB"
    assert compile_facts.warnings({**facts, "ub_bytes": 100 * 1024}) == []


def test_a_torch_variant_launches_nothing_of_ours():
    from workbench.measure import measure

    rec = measure("rms_norm", "torch_eager", device="cpu", dtype="fp32", quick=True, rep_ms=2)
    assert rec.compile_facts["kernels"] == [] and rec.compile_facts["available"] is False
    assert "no kernel of ours" in rec.compile_facts["reason"]


def test_facts_of_a_compiled_kernel(monkeypatch):
    """The CUDA reading path on a stand-in for Triton's CompiledKernel (what the GPU test below
    checks on real kernels): fields read, occupancy computed, brief and warnings from them."""
    from kernels.launch import Launch

    monkeypatch.setattr(compile_facts, "cuda_limits", lambda index: h100())
    compiled = SimpleNamespace(
        n_regs=128, n_spills=12, metadata=SimpleNamespace(shared=6144, num_warps=4, num_stages=3, num_ctas=1)
    )
    device = SimpleNamespace(kind="cuda", index=0, num_cores=132)
    facts = compile_facts.collect([Launch("_sum_forward_kernel", (64, 1, 8), "cuda", compiled)] * 2, device)
    assert facts["available"] is True and len(facts["kernels"]) == 1  # the same launch twice: once
    k = facts["kernels"][0]
    assert (k["regs"], k["spills"], k["shared_bytes"], k["num_warps"], k["num_stages"]) == (128, 12, 6144, 4, 3)
    assert k["occupancy"] == occupancy(128, 6144, 4, 512, h100())
    assert compile_facts.brief(facts) == "128/12/25% grid"
    text = " | ".join(compile_facts.warnings(facts))
    assert "12 registers spilled" in text and "limited by registers" in text and "grid of 512 programs" in text
    assert compile_facts.columns(facts)["spills"] == 12


def test_warnings_count_one_program_and_one_warp_in_the_singular(monkeypatch):
    from kernels.launch import Launch

    monkeypatch.setattr(compile_facts, "cuda_limits", lambda index: h100())
    compiled = SimpleNamespace(
        n_regs=255, n_spills=0, metadata=SimpleNamespace(shared=0, num_warps=1, num_stages=1, num_ctas=1)
    )
    device = SimpleNamespace(kind="cuda", index=0, num_cores=132)
    facts = compile_facts.collect([Launch("_one_kernel", (1, 1, 1), "cuda", compiled)], device)
    text = " | ".join(compile_facts.warnings(facts))
    assert "grid of 1 program fills" in text and "x 1 warp per SM" in text
    assert "1 programs" not in text and "1 warps" not in text


def test_csv_carries_the_facts_columns(tmp_path):
    import csv

    from workbench.measure import measure
    from workbench.store import write_csv

    rec = measure("scalar_ops", "triton", device="cpu", dtype="fp32", quick=True, rep_ms=2)
    path = write_csv([rec], tmp_path / "r.csv")
    row = next(csv.DictReader(path.open()))
    assert row["regs_spills_occ"] == "n/a (interpreter)"
    assert '"available": false' in row["compile_facts"]
    assert row["regs"] == "" and row["counters"] == ""


# --- on the GPU (run by the lead on the H100) ----------------------------------------------------
def _default_gpu_configs():
    for family in kernels.families():
        spec = kernels.get(family)
        for var in spec.variants:
            if var.backend == "gpu" and var.unavailable_reason("cuda") is None:
                yield family, var.name


@pytest.mark.gpu
@pytest.mark.parametrize("family,variant", list(_default_gpu_configs()))
def test_gpu_facts_are_present_and_plausible_at_default_tiles(family, variant):
    from workbench.measure import measure

    rec = measure(family, variant, device="cuda", dtype="fp32", mode="forward", rep_ms=2, warmup_ms=1)
    assert rec.error is None, rec.error
    facts = rec.compile_facts
    assert facts["available"] is True, facts.get("reason")
    assert facts["kernels"] and facts["device"]["sm_count"] == torch.cuda.get_device_properties(0).multi_processor_count
    for k in facts["kernels"]:
        assert 0 < k["regs"] <= 255 and k["spills"] >= 0 and k["shared_bytes"] >= 0
        assert k["num_warps"] in (1, 2, 4, 8, 16, 32) and k["num_stages"] >= 1
        occ = k["occupancy"]
        assert 0 < occ["occupancy_pct"] <= 100 and occ["limit"] in RESOURCES + ("grid",)
    assert compile_facts.brief(facts) not in ("", "n/a")


@pytest.mark.gpu
@pytest.mark.parametrize("family,variant", list(_default_gpu_configs()))
def test_gpu_occupancy_equals_the_cuda_occupancy_api(family, variant):
    """Our resident programs per SM equal cuOccupancyMaxActiveBlocksPerMultiprocessor's for every
    kernel a default configuration launches (forward and backward)."""
    from workbench.prepare import prepared_call

    spec = kernels.get(family)
    mode = "full" if "full" in (spec.variant(variant).modes or spec.modes) else "forward"
    _, step = prepared_call(family, {"variant": variant, "dtype": "fp32", "mode": mode}, device="cuda")
    with recording() as launches:
        step()
    torch.cuda.synchronize()
    assert launches
    driver = ctypes.CDLL("libcuda.so.1")
    limits = compile_facts.cuda_limits(torch.cuda.current_device())
    for launch in launches:
        ck = launch.compiled
        md = ck.metadata
        blocks = ctypes.c_int(0)
        rc = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(blocks), ctypes.c_void_p(ck.function), md.num_warps * 32, ctypes.c_size_t(md.shared)
        )
        assert rc == 0, f"cuOccupancyMaxActiveBlocksPerMultiprocessor returned {rc}"
        ours = occupancy(ck.n_regs, md.shared, md.num_warps, None, limits)
        assert ours["blocks_per_sm"] == blocks.value, (launch.name, ck.n_regs, md.shared, md.num_warps)


def test_reading_the_facts_is_timed_and_can_be_turned_off(monkeypatch):
    from workbench.measure import measure

    rec = measure("scalar_ops", "triton", device="cpu", dtype="fp32", quick=True, rep_ms=2)
    assert 0 <= rec.compile_facts["collect_ms"] < 1000
    monkeypatch.setenv(compile_facts.ENV_SWITCH, "0")
    rec = measure("scalar_ops", "triton", device="cpu", dtype="fp32", quick=True, rep_ms=2)
    assert rec.compile_facts == {"available": False, "reason": "not read (WORKBENCH_COMPILE_FACTS=0)", "kernels": []}


def test_launches_traced_by_torch_compile_are_not_facts(monkeypatch):
    from kernels.launch import Launch

    monkeypatch.setattr(compile_facts, "cuda_limits", lambda index: h100())
    device = SimpleNamespace(kind="cuda", index=0, num_cores=132)
    facts = compile_facts.collect([Launch("_rms_norm_forward_kernel", (4, 1, 1), "traced", None)], device)
    assert facts["kernels"] == [] and facts["reason"] == compile_facts.NO_KERNEL_REASON
