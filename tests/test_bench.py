"""measure() and compare(): the correctness protocol itself."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.measure import compare, measure


def test_compare_flags_nan_and_inf_mismatches():
    want = torch.tensor([1.0, float("inf"), 3.0, float("nan")])
    same = compare("t", want.clone(), want, 1e-4, 1e-5)
    assert same.passed and same.nan_mismatch == 0
    got = torch.tensor([1.0, 2.0, float("nan"), float("nan")])
    bad = compare("t", got, want, 1e-4, 1e-5)
    assert not bad.passed and bad.nan_mismatch == 2


def test_compare_reports_abs_and_rel_error():
    want = torch.tensor([1.0, 2.0, 4.0])
    got = torch.tensor([1.0, 2.1, 4.0])
    c = compare("t", got, want, 1e-4, 1e-5)
    assert math.isclose(c.max_abs, 0.1, rel_tol=1e-5) and math.isclose(c.max_rel, 0.05, rel_tol=1e-5)
    assert not c.passed
    assert compare("t", got, want, 0.2, 0.0).passed


def test_shape_mismatch_is_an_error():
    with pytest.raises(AssertionError, match="shape"):
        compare("t", torch.zeros(2), torch.zeros(3), 1, 1)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"variant": "nope"}, "has no variant 'nope'"),
        ({"mode": "sideways"}, "mode='sideways' is not available"),
        ({"dtype": "int8"}, "dtype='int8' is not supported"),
        ({"problem": {"colour": 1}}, "has no problem knob colour"),
        ({"problem": {"hidden": 0}}, "hidden=0 is out of range"),
        ({"params": {"BLOCK_SIZE": 3}}, "BLOCK_SIZE=3 is not allowed"),
        ({"params": {"TILE_K": 4}}, "has no parameter TILE_K"),
        ({"variant": "torch_compile"}, "does not run on cpu"),
        ({"device": "tpu"}, "is not a device kind"),
    ],
)
def test_bad_configurations_raise_or_record(kwargs, match):
    kwargs = {"variant": "gpu_row", **kwargs}
    variant = kwargs.pop("variant")
    device = kwargs.pop("device", "cpu")
    with pytest.raises(ValueError, match=match):
        measure("rms_norm", variant, device=device, quick=True, rep_ms=1, **kwargs)
    rec = measure("rms_norm", variant, device=device, quick=True, rep_ms=1, on_error="record", **kwargs)
    assert rec.error and match.split("'")[0] in rec.error and rec.passed is False


def test_modes_check_outputs_and_gradients():
    fwd = measure("rms_norm", "npu", device="cpu", dtype="fp32", mode="forward", quick=True, rep_ms=1)
    bwd = measure("rms_norm", "npu", device="cpu", dtype="fp32", mode="backward", quick=True, rep_ms=1)
    assert [c["name"] for c in fwd.checks] == ["y"]
    assert [c["name"] for c in bwd.checks] == ["dx", "dweight"]
    assert fwd.passed and bwd.passed
    assert fwd.min_bytes < bwd.min_bytes
    assert fwd.compile_ms > 0 and fwd.wall_ms > 0
