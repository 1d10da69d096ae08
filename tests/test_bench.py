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


def test_shape_mismatch_is_a_failed_check_that_says_why():
    check = compare("t", torch.zeros(2), torch.zeros(3), 1, 1)
    assert not check.passed and check.max_abs == math.inf
    assert "shape (2,) differs from the reference's (3,)" in check.note


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


def test_seeded_inputs_are_made_once_per_process_and_each_configuration_gets_a_copy():
    """Two measure calls on one problem (two configurations of a sweep, a slider moved) make
    its seeded inputs once; both pass their checks. Another seed makes them again."""
    import dataclasses

    import kernels
    from workbench import measure as measuring

    real = kernels.get("rms_norm")
    made = []

    def counted(prob, dtype, device, seed):
        made.append(seed)
        return real.make_inputs(prob, dtype, device, seed)

    spec = dataclasses.replace(real, make_inputs=counted)
    measuring.forget_inputs()
    problem = {"rows": 3, "hidden": 37}
    for block_m in (1, 2):
        rec = measure(spec, "gpu_multirow", device="cpu", dtype="fp32", problem=problem,
                      params={"BLOCK_SIZE_M": block_m}, quick=True, rep_ms=1, mode="full")  # fmt: skip
        assert rec.passed and not rec.error
    assert made == [0]
    measure(spec, "gpu_multirow", device="cpu", dtype="fp32", problem=problem, seed=5, quick=True, rep_ms=1)
    assert made == [0, 5]


def test_a_configuration_writing_into_its_inputs_leaves_the_next_ones_as_made():
    """Each configuration gets its own copy: writing into one changes neither the kept values nor
    the next configuration's, which equal a fresh make."""
    import kernels
    from workbench import measure as measuring
    from workbench.device import get_device
    from workbench.phases import Phases
    from workbench.prepare import Shared

    spec = kernels.get("rms_norm")
    shared = Shared("cpu", True, True, "record", Phases())
    dev = get_device("cpu")
    problem = spec.resolve_problem({"rows": 2, "hidden": 5}, quick=True)
    measuring.forget_inputs()
    first = shared.inputs(spec, problem, torch.float32, dev, 0)
    with torch.no_grad():
        first["x"].fill_(7.0)
    second = shared.inputs(spec, problem, torch.float32, dev, 0)
    fresh = spec.make_inputs(problem, torch.float32, torch.device("cpu"), 0)
    assert torch.equal(second["x"], fresh["x"]) and second["x"].requires_grad
    assert second["x"].data_ptr() != first["x"].data_ptr()


def test_kept_inputs_beyond_the_limit_are_dropped_oldest_first(monkeypatch):
    """Past ``kept_inputs.LIMIT_BYTES`` the least recently used values go (the newest always stays);
    one used again counts as recent."""
    from workbench import kept_inputs

    kept_inputs.forget_inputs()
    monkeypatch.setattr(kept_inputs, "LIMIT_BYTES", 2 * 400)
    made = []

    def make(name, n=100):
        def build():
            made.append(name)
            return {"x": torch.zeros(n)}  # 400 bytes

        return build

    kept_inputs.kept(("a",), make("a"))
    kept_inputs.kept(("b",), make("b"))
    kept_inputs.kept(("a",), make("a"))  # kept: a is now the most recent
    kept_inputs.kept(("c",), make("c"))  # over the limit: b, the oldest, goes
    assert made == ["a", "b", "c"]
    kept_inputs.kept(("a",), make("a"))
    kept_inputs.kept(("b",), make("b"))
    assert made == ["a", "b", "c", "b"]
    kept_inputs.kept(("huge",), make("huge", 10_000))  # alone over the limit: kept, the rest go
    kept_inputs.kept(("huge",), make("huge", 10_000))
    assert made[-1] == "huge" and made.count("huge") == 1
    kept_inputs.forget_inputs()


@pytest.mark.parametrize("family", ["rms_norm", "fused_add_rms_norm", "block_sparse"])
def test_the_timed_call_is_the_variant_s_own_call_with_its_arguments_looked_up_once(family):
    """Host and call times count the variant, not the plumbing from a problem to its arguments:
    the measuring tool times ``Variant.call``, which for our kernels and the call-time peers is
    the family's function with its arguments bound (a tile or option at its default left out,
    as a user leaves it out), and which computes what ``run`` computes."""
    import functools

    from kernels import get
    from kernels.block_sparse import sum_layer
    from kernels.fused_add_rms_norm import fused_add_rms_norm
    from kernels.rms_norm import rms_norm

    api = {"rms_norm": rms_norm, "fused_add_rms_norm": fused_add_rms_norm, "block_sparse": sum_layer}[family]
    spec = get(family)
    prob = spec.resolve_problem(spec.quick)
    bound = 0
    for var in spec.variants:
        if var.unavailable_reason("cpu") or var.bind is None:
            continue
        params = var.resolve_params({})
        inputs = spec.make_inputs(prob, torch.float32, "cpu", 0)
        with torch.no_grad():
            call = var.call(inputs, prob, params)
            got, want = call(), var.run(inputs, prob, **params)
        got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
        assert all(torch.equal(g, w) for g, w in zip(got, want)), var.name
        if not var.is_peer:
            assert isinstance(call, functools.partial) and call.func is api, var.name
            assert not {"DW_REDUCE", "BWD_WIDE", "CHUNK_THRESHOLD"} & set(call.keywords), call.keywords
            bound += 1
    assert bound >= 3
    if family != "block_sparse":  # the norms: eps by position, other options only off their defaults
        multirow = spec.variant("gpu_multirow")
        inputs = spec.make_inputs(prob, torch.float32, "cpu", 0)
        call = multirow.call(inputs, prob, multirow.resolve_params({}))
        assert call.keywords == {} and call.args[-1] == prob["eps"], (call.args, call.keywords)
        other = spec.resolve_problem({**spec.quick, "offset": 1.0, "casting_mode": "gemma"})
        inputs = spec.make_inputs(other, torch.float32, "cpu", 0)
        call = multirow.call(inputs, other, multirow.resolve_params({}))
        assert call.keywords == {"offset": 1.0, "casting_mode": "gemma"}, call.keywords
        with torch.no_grad():
            got, want = call(), multirow.run(inputs, other, **multirow.resolve_params({}))
        got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
        assert all(torch.equal(g, w) for g, w in zip(got, want))
    plain = [v for v in spec.variants if v.bind is None and not v.unavailable_reason("cpu")]
    for var in plain:  # without a bind: run itself, with these arguments
        call = var.call({"a": 1}, prob, {})
        assert call.func is var.run and call.args == ({"a": 1}, prob)


def test_measure_times_the_bound_call(monkeypatch):
    from kernels.spec import Variant

    made, calls = [], []
    real = Variant.call

    def spy(self, inputs, problem, params):
        call = real(self, inputs, problem, params)
        made.append(self.name)

        def counted():
            calls.append(1)
            return call()

        return counted

    monkeypatch.setattr(Variant, "call", spy)
    rec = measure("rms_norm", "npu", device="cpu", dtype="fp32", mode="forward", quick=True, rep_ms=1)
    assert rec.passed and made == ["npu"] and len(calls) >= 2  # the first (checked) call and the timed ones
