"""Per-call plans (kernels/plans.py): a remembered plan never lets a bad call through and never
serves a call that needs a different one."""

from __future__ import annotations

import math

import pytest
import torch

from kernels.fused_add_rms_norm import fused_add_rms_norm
from kernels.plans import cached_plan
from kernels.rms_norm import rms_norm
from kernels.scalar_ops import scalar_op


def _randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_a_plan_is_made_once_per_signature_and_not_when_make_raises():
    plans, made = {}, []

    def make(value):
        made.append(value)
        if value < 0:
            raise ValueError("negative")
        return value

    x = torch.empty(3, 5)
    assert cached_plan(plans, lambda: make(1), (x, None), ("a",)) == 1
    assert cached_plan(plans, lambda: make(2), (torch.empty(3, 5), None), ("a",)) == 1  # same signature
    assert cached_plan(plans, lambda: make(3), (torch.empty(3, 6), None), ("a",)) == 3  # other shape
    assert cached_plan(plans, lambda: make(4), (x.double(), None), ("a",)) == 4  # other dtype
    with pytest.raises(ValueError):
        cached_plan(plans, lambda: make(-1), (x, None), ("b",))
    assert made == [1, 3, 4, -1] and len(plans) == 3
    # arguments that make no key (not tensors, unhashable settings): make() every time
    assert cached_plan(plans, lambda: make(5), ([1, 2], None), ("a",)) == 5
    assert cached_plan(plans, lambda: make(6), (x, None), ([1],)) == 6
    assert len(plans) == 3


def test_bad_calls_after_a_good_one_still_get_their_error():
    x, w = _randn(3, 37), _randn(37, seed=1)
    rms_norm(x, w, BLOCK_SIZE_M=2)
    with pytest.raises(ValueError, match="BLOCK_SIZE_M"):
        rms_norm(x, w, BLOCK_SIZE_M=2.0)  # equals 2, but is not the int the checks want
    with pytest.raises(ValueError, match="dtype"):
        rms_norm(x, w.double())
    with pytest.raises(ValueError, match="eps"):
        rms_norm(x, w, eps=float("nan"))
    r = _randn(3, 37, seed=2)
    fused_add_rms_norm(x, r, w)
    with pytest.raises(ValueError, match="residual"):
        fused_add_rms_norm(x, r.half(), w)
    scalar_op("sub", x, 1, strategy="triton")
    with pytest.raises(ValueError, match="Python number"):
        scalar_op("sub", x, True, strategy="triton")  # equals 1, but a bool is refused
    with pytest.raises(ValueError, match="autograd"):
        scalar_op("sub", x.clone().requires_grad_(), 1, strategy="triton")


def test_division_by_signed_zeros_takes_two_plans():
    x = _randn(2, 9)
    plus = scalar_op("div", x, 0.0, strategy="triton")
    minus = scalar_op("div", x, -0.0, strategy="triton")
    assert torch.equal(plus, x / 0.0) and torch.equal(minus, x / -0.0)
    assert math.copysign(1.0, float(minus[0, 0] / plus[0, 0])) < 0 or torch.isnan(minus[0, 0])


def test_remembered_plans_give_the_results_of_fresh_ones():
    for seed, shape in enumerate([(1, 64), (5, 37), (2, 3, 19)]):
        x, w = _randn(*shape, seed=seed), _randn(shape[-1], seed=seed + 10)
        first = rms_norm(x, w, eps=1e-5)
        again = rms_norm(x.clone(), w.clone(), eps=1e-5)
        other_eps = rms_norm(x, w, eps=1e-2)
        assert torch.equal(first, again) and not torch.equal(first, other_eps)
