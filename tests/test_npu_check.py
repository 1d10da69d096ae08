"""workbench npu-check: verdict parsing, the UB models against the recorded compiler verdicts,
and a handful of real compiles with triton-ascend + BiShengIR.

The real-compile tests (marked ``npu_compile``) build or reuse the separate triton-ascend
virtualenv (``.npu-venv``; about 45 s the first time, offline from the wheel cache after) and are
skipped, with the reason, when it cannot be built (e.g. the package registry is unreachable).
Deselect them with ``-m "not npu_compile"``.
"""

from __future__ import annotations

import functools
import importlib
import json

import pytest

import kernels
from workbench.npu_check import EXIT_FAILED, EXIT_OK, classify
from workbench.npu_check.calibration import boundaries, load_calibration

HIVMC_ONLY = """[ERROR] Cannot find hivmc under $PATH
[ERROR] Failed to run `hivmc --version`.
[WARNING] Failed to detect hivmc version for backward compatibility
[ERROR] Cannot find hivmc under $PATH
loc("/tmp/x/_k.ttadapter":1:1): error: External hivmc run fails, returning module before running external compiler
[ERROR] Failed to run BiShengIR pipeline
"""
OVERFLOW = """[NOTE] Ub overflow detected; automatically set enable-auto-multi-buffer to false and retrying compilation.
loc("/tmp/x/_k.ttadapter":1:1): error: Failed to run BiShengHIR pipeline
loc("/tmp/x/_k.ttadapter":2:3): error: ub overflow, requires 10487808 bits while 1572864 bits available! (possible reason: ...)
[ERROR] Failed to run BiShengIR pipeline
"""
SINGLE_BUFFERED = (
    "[NOTE] Ub overflow detected; automatically set enable-code-motion to false and retrying compilation.\n"
    "[NOTE] Ub overflow detected; automatically set enable-auto-multi-buffer to false and retrying compilation.\n"
    + HIVMC_ONLY
)
OTHER_ERROR = """loc("/tmp/x/_k.ttadapter":7:5): error: 'hivm.hir.vcmp' op operand #0 must be ranked tensor of int8 values
loc("/tmp/x/_k.ttadapter":1:1): error: Failed to run BiShengHIR pipeline
[ERROR] Failed to run BiShengIR pipeline
"""


# --- verdicts from bishengir-compile's output -----------------------------------------------
def test_classify_stopped_only_at_hivmc_is_ok():
    v = classify.classify_bishengir(1, "", HIVMC_ONLY, used_bits=429056)
    assert v.verdict == classify.OK and v.used_bits == 429056 and not v.single_buffered
    assert v.available_bits == classify.UB_BITS_910B


def test_classify_ub_overflow_reads_the_bits():
    v = classify.classify_bishengir(1, "", OVERFLOW)
    assert v.verdict == classify.UB_OVERFLOW
    assert (v.required_bits, v.available_bits) == (10487808, 1572864)


def test_classify_single_buffered_fallback_is_ok_but_flagged():
    v = classify.classify_bishengir(1, "", SINGLE_BUFFERED)
    assert v.verdict == classify.OK and v.single_buffered


def test_classify_any_other_error_is_a_compile_error_with_its_message():
    v = classify.classify_bishengir(1, "", OTHER_ERROR)
    assert v.verdict == classify.COMPILE_ERROR
    assert "must be ranked tensor of int8" in v.message and "loc(" not in v.message
    assert classify.classify_bishengir(0, "", "").verdict == classify.OK  # with CANN it would link


def test_used_ub_bits_is_the_highest_buffer_end(tmp_path):
    record = {
        "status": "success",
        "scope": "ub",
        "memory_info_array": [
            {"extent": 65536, "offset": [4128, 12320]},  # offsets in bytes, extent in bits
            {"extent": 64, "offset": [0]},
        ],
    }
    (tmp_path / "memory_info_aiv.json").write_text(json.dumps({"Record": [record]}))
    assert classify.used_ub_bits(tmp_path) == 12320 * 8 + 65536
    assert classify.used_ub_bits(tmp_path / "none") is None


# --- UB models against the recorded compiler verdicts (no compiler needed) -----------------
def _calibrated_families():
    return [f for f in kernels.families() if load_calibration(f) is not None]


@pytest.mark.parametrize("family", _calibrated_families())
def test_ub_model_agrees_with_the_recorded_compiler_verdicts(family):
    """Every point of ``kernels/<family>/ub_calibration.json`` (compiled by
    ``workbench npu-check --calibrate``): the family's current UB model predicts overflow exactly
    where the Ascend compiler reported it."""
    data = load_calibration(family)
    npu = importlib.import_module(f"kernels.{family}.npu")
    cases = {c.name: c for c in npu.ub_calibration_cases()}
    limit = data["available_bits"] // 8
    checked, wrong = 0, []
    for point in data["points"]:
        if point["verdict"] not in (classify.OK, classify.UB_OVERFLOW):
            continue
        case = cases.get(point["case"])
        assert case is not None, f"{point['case']!r} is recorded but no longer in ub_calibration_cases(): re-record"
        predicted = case.ub_bytes > limit
        if predicted != (point["verdict"] == classify.UB_OVERFLOW):
            wrong.append(f"{point['case']}: model {case.ub_bytes} B, compiler {point['verdict']}")
        checked += 1
    assert checked >= 20 and any(p["verdict"] == classify.UB_OVERFLOW for p in data["points"])
    assert not wrong, f"{len(wrong)} of {checked} disagree: " + "; ".join(wrong[:8])


def test_rms_norm_recorded_boundary_is_where_the_model_puts_it():
    """The recorded boundary (largest BLOCK_SIZE_N that compiled, smallest that overflowed, per
    BLOCK_SIZE_M) brackets the model's UB limit for every kernel, strategy and dtype."""
    from kernels.rms_norm import npu

    data = load_calibration("rms_norm")
    assert boundaries(data["points"]) == data["boundary"]
    for group, rows in data["boundary"].items():
        kind, strategy, dtype = group.split()
        for rest, b in rows.items():
            m = int(rest.split("=")[1])
            args = (npu.DTYPE_BYTES[dtype], kind == "backward", strategy == "chunked")
            assert npu.ub_bytes(m, b["largest_ok"], *args) <= npu.UB_BYTES, (group, rest)
            assert npu.ub_bytes(m, b["smallest_overflow"], *args) > npu.UB_BYTES, (group, rest)


def test_rms_norm_resolve_tiles_overflow_error_follows_the_model():
    from kernels.rms_norm import npu

    for elem in (4, 2):
        for chunked in (False, True):
            for m in (1, 2, 4, 8, 16, 32, 64):
                for n in (256, 1024, 4096, 16384):
                    over = npu.ub_tile_bytes(m, n, elem, chunked) > npu.UB_BYTES
                    strategy = "chunked" if chunked else "untiled"
                    call = functools.partial(
                        npu.resolve_tiles,
                        64,
                        n,
                        40,
                        elem,
                        on_npu=True,
                        strategy=strategy,
                        BLOCK_SIZE_M=m,
                        BLOCK_SIZE_N=n,
                    )
                    if over:
                        with pytest.raises(ValueError, match="ub overflow predicted"):
                            call()
                    else:
                        call()
    for hidden in npu.CHECK_HIDDEN:  # the default tiles never trip it
        for elem in (4, 2):
            npu.resolve_tiles(4096, hidden, 40, elem, on_npu=True)


def test_rms_norm_spec_exposes_the_ub_estimate_for_the_explorer():
    from kernels.rms_norm import npu

    spec = kernels.get("rms_norm")
    assert spec.ub_estimate({"rows": 4096, "hidden": 4096}, {}, "bf16") == npu.ub_tile_bytes(1, 2048, 2, True)
    assert spec.ub_estimate({"rows": 64, "hidden": 1024}, {"BLOCK_SIZE_M": 64}, "fp32") > npu.UB_BYTES
    assert spec.ub_estimate({"rows": 64, "hidden": 1024}, {"BLOCK_SIZE_N": 100}, "fp32") is None


def test_rms_norm_compile_cases_cover_defaults_and_overflows():
    from kernels.rms_norm import npu

    cases = npu.npu_compile_cases()
    defaults = [c for c in cases if c.default]
    covered = set()
    for c in defaults:  # every default hidden size, forward and backward, every dtype
        kind, _, hidden, dtype = c.name.split()[:4]
        lo, _, hi = hidden.removeprefix("hidden=").partition("-")
        covered |= {(kind, dtype, h) for h in npu.CHECK_HIDDEN if int(lo) <= h <= int(hi or lo)}
    assert covered == {(k, d, h) for k in ("forward", "backward") for d in npu.DTYPE_BYTES for h in npu.CHECK_HIDDEN}
    assert all(c.ub_bytes <= npu.UB_BYTES for c in defaults)
    assert any(c.ub_bytes > npu.UB_BYTES for c in cases)
    assert len({c.name for c in cases}) == len(cases)


def test_table_and_csv_from_rows(tmp_path):
    from workbench.npu_check import _annotate, format_table, write_csv

    rows = [
        {"family": "f", "case": "a", "dtype": "bf16", "tiles": {"BLOCK_SIZE_M": 2}, "default": True, "verdict": "OK"},
        {"family": "f", "case": "b", "dtype": "fp32", "tiles": {}, "verdict": "UB overflow", "ub_model_bytes": 10},
    ]
    rows = [_annotate(dict(r, ub_model_bytes=r.get("ub_model_bytes")), classify.UB_BITS_910B) for r in rows]
    assert rows[1]["model_agrees"] is False and rows[0]["model_agrees"] is None
    assert "[D] a" in format_table(rows) and "ok!" in format_table(rows)
    write_csv(rows, tmp_path / "x.csv")
    assert (tmp_path / "x.csv").read_text().splitlines()[0].startswith("family,case,kernel,dtype,tiles")


# --- real compiles (triton-ascend + bishengir-compile) ---------------------------------------
@pytest.fixture(scope="module")
def npu_env():
    from workbench.npu_check import env

    try:
        return env.ensure_env(timeout=420)
    except env.EnvUnavailable as exc:
        pytest.skip(f"triton-ascend environment unavailable (registry unreachable?): {exc}")


def _check(tmp_path, *args):
    from workbench.cli.npu_check import main

    out = tmp_path / "out"
    code = main(["--out", str(out), "--jobs", "1", *args])
    return code, json.loads((out / "npu_check.json").read_text())


@pytest.mark.npu_compile
def test_oversize_tile_is_a_ub_overflow_and_the_boundary_matches_the_model(npu_env, tmp_path):
    """Real compiles on both sides of the fp32 untiled-forward boundary and one far beyond it."""
    from kernels.rms_norm import npu

    names = ["forward untiled fp32 M=1 N=16384", "forward untiled fp32 M=1 N=32768", "forward untiled fp32 M=64 N=1024"]
    code, data = _check(
        tmp_path,
        "--cases",
        "kernels.rms_norm.npu:ub_calibration_cases",
        "--family",
        "rms_norm",
        *[a for n in names for a in ("--match", n)],
    )
    assert code == EXIT_OK, data  # none of these is a default configuration
    verdicts = {r["case"]: r for r in data["cases"]}
    assert set(verdicts) == set(names)
    fits, over, far = (verdicts[n] for n in names)
    assert fits["verdict"] == classify.OK, fits
    assert over["verdict"] == classify.UB_OVERFLOW and over["required_bits"] > over["available_bits"], over
    assert far["verdict"] == classify.UB_OVERFLOW and far["required_bits"] > over["required_bits"], far
    for r in (fits, over, far):  # the model agrees with the compiler on each
        assert r["model_agrees"] is True, r
    # the compiler's requirement is what the model computes (to within alignment padding)
    assert abs(over["required_bits"] / 8 - npu.ub_bytes(1, 32768, 4)) < 512


@pytest.mark.npu_compile
def test_rms_norm_defaults_compile(npu_env, tmp_path):
    code, data = _check(
        tmp_path, "--family", "rms_norm", "--defaults-only", "--match", "hidden=1024 ", "--match", "hidden=4096-32768 "
    )
    rows = data["cases"]
    assert len(rows) == 12 and all(r["default"] for r in rows)
    bad = [(r["case"], r["dtype"], r["verdict"], r.get("message")) for r in rows if r["verdict"] != classify.OK]
    assert not bad and code == EXIT_OK, bad
    assert all(r["used_bits"] and r["used_bits"] <= r["available_bits"] for r in rows)


@pytest.mark.npu_compile
def test_a_failing_default_fails_the_check(npu_env, tmp_path):
    """A provider whose default case overflows makes npu-check exit non-zero."""
    code, data = _check(tmp_path, "--family", "rms_norm", "--cases", "workbench.npu_check.samples:oversize_default")
    assert [r["verdict"] for r in data["cases"]] == [classify.UB_OVERFLOW]
    assert code == EXIT_FAILED
