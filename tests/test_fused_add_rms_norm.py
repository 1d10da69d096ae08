"""Fused add + RMSNorm family: every variant against the reference, both outputs and all three
gradients (including the residual stream's incoming gradient), both NPU strategies, bad input."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels.fused_add_rms_norm import fused_add_rms_norm, fused_add_rms_norm_reference, npu
from kernels.fused_add_rms_norm.spec import spec
from kernels.spec import NpuCompileCase
from workbench.measure import measure

TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-2, 1e-2), torch.bfloat16: (1.5e-1, 2e-2)}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]


def _inputs(rows, hidden, dtype, device, seed=0, weight=True, gemma=False):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, hidden, generator=gen).to(device, dtype)
    r = torch.randn(rows, hidden, generator=gen).to(device, dtype)
    w = (0.1 * torch.randn(hidden, generator=gen) + (0.0 if gemma else 1.0)).to(device, dtype) if weight else None
    return x, r, w


def _grads_out(shape, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).to(device, dtype), torch.randn(shape, generator=gen).to(device, dtype)


def _check_against_reference(x, r, w, eps, offset, casting_mode, impl, use_y=True, use_s=True, **tiles):
    """Outputs y, s and gradients dx, dr, dw against the fp64 reference, for the incoming
    gradients of the outputs that are used (dy for y, ds for s)."""
    dy, ds = _grads_out(x.shape, x.dtype, x.device, seed=x.shape[-1])
    xr, rr = (t.detach().double().requires_grad_() for t in (x, r))
    wr = w.detach().double().requires_grad_() if w is not None else None
    yr, sr = fused_add_rms_norm_reference(xr, rr, wr, eps, offset, casting_mode)

    xk, rk = (t.detach().clone().requires_grad_() for t in (x, r))
    wk = w.detach().clone().requires_grad_() if w is not None else None
    y, s = fused_add_rms_norm(xk, rk, wk, eps=eps, offset=offset, casting_mode=casting_mode, impl=impl, **tiles)
    assert y.dtype == x.dtype and s.dtype == x.dtype and y.shape == x.shape and s.shape == x.shape

    outs, grads = [], []
    if use_y:
        outs, grads = [y], [dy]
    if use_s:
        outs, grads = outs + [s], grads + [ds]
    ref_outs = ([yr] if use_y else []) + ([sr] if use_s else [])
    torch.autograd.backward(outs, grads)
    torch.autograd.backward(ref_outs, [g.double() for g in grads])

    atol, rtol = TOL[x.dtype]
    torch.testing.assert_close(y.double(), yr.detach(), atol=atol, rtol=rtol)
    torch.testing.assert_close(s.double(), sr.detach(), atol=atol, rtol=rtol)
    torch.testing.assert_close(xk.grad.double(), xr.grad, atol=atol, rtol=rtol)
    torch.testing.assert_close(rk.grad.double(), rr.grad, atol=atol, rtol=rtol)
    if w is not None:
        if use_y:
            # dw sums over rows: allow its error to grow with the reduction's magnitude.
            scale = max(1.0, float(wr.grad.abs().max()))
            torch.testing.assert_close(wk.grad.double(), wr.grad, atol=atol * scale, rtol=rtol)
        else:
            assert wk.grad is None or float(wk.grad.abs().max()) == 0.0


IMPLS = [("gpu", {"BLOCK_SIZE_M": 1}), ("gpu", {}), ("npu", {})]
IMPL_IDS = ["row", "multi", "npu"]


@pytest.mark.parametrize("impl_tiles", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("casting_mode", ["llama", "gemma", "none"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_casting_modes_and_dtypes(device, impl_tiles, casting_mode, dtype):
    impl, tiles = impl_tiles
    offset = 1.0 if casting_mode == "gemma" else 0.0
    x, r, w = _inputs(5, 123, dtype, device, seed=1, gemma=casting_mode == "gemma")
    _check_against_reference(x, r, w, 1e-6, offset, casting_mode, impl, **tiles)


@pytest.mark.parametrize(
    "rows,hidden,impl,tiles",
    [
        (1, 7, "gpu", {"BLOCK_SIZE_M": 1}),
        (1, 7, "npu", {}),
        (3, 7, "gpu", {"BLOCK_SIZE_M": 4}),
        (9, 123, "gpu", {"BLOCK_SIZE_M": 4, "GRID": 2}),
        (9, 123, "gpu", {"BLOCK_SIZE_M": 2, "GRID": 3, "DW_REDUCE": "partials"}),
        # the backward a tile ahead with w loaded per tile, and its own rows and warps
        (9, 123, "gpu", {"BWD_ROWS": 2, "BWD_WARPS": 2, "GRID": 3, "BWD_PREFETCH": True, "BWD_RELOAD_W": True}),
        # ... or tiles (ds's too) staged ahead in shared memory
        (9, 123, "gpu", {"BWD_ROWS": 2, "GRID": 2, "BWD_STAGES": 2}),
        (1, 300, "gpu", {"DW_REDUCE": "partials"}),
        (9, 123, "npu", {"BLOCK_SIZE_M": 4, "GRID": 3}),
        (1, 300, "npu", {"strategy": "chunked", "BLOCK_SIZE_N": 128}),
        (3, 2600, "gpu", {}),
        (3, 2600, "npu", {}),  # auto -> chunked two-pass (hidden > CHUNK_THRESHOLD=2048)
        (5, 300, "npu", {"strategy": "chunked", "BLOCK_SIZE_N": 64, "BLOCK_SIZE_M": 2, "GRID": 2}),
        (5, 300, "npu", {"USE_WHERE": True}),
        (6, 300, "npu", {"strategy": "chunked", "BLOCK_SIZE_N": 128, "USE_WHERE": True}),
        (4, 300, "npu", {"CHUNK_THRESHOLD": 256, "BLOCK_SIZE_N": 64}),  # threshold moves the choice
    ],
)
def test_odd_shapes_and_tiles(device, rows, hidden, impl, tiles):
    x, r, w = _inputs(rows, hidden, torch.float32, device, seed=rows * hidden)
    _check_against_reference(x, r, w, 1e-6, 0.5, "llama", impl, **tiles)


@pytest.mark.parametrize("impl_tiles", [("gpu", {}), ("npu", {}), ("npu", {"strategy": "chunked"})])
def test_weight_none_and_offset(device, impl_tiles):
    impl, tiles = impl_tiles
    x, r, _ = _inputs(4, 300, torch.float32, device, weight=False)
    _check_against_reference(x, r, None, 1e-5, 0.0, "llama", impl, **tiles)
    x, r, w = _inputs(4, 300, torch.float32, device, seed=5, gemma=True)
    _check_against_reference(x, r, w, 1e-5, 1.0, "gemma", impl, **tiles)


@pytest.mark.parametrize("impl_tiles", [("gpu", {}), ("npu", {}), ("npu", {"strategy": "chunked", "BLOCK_SIZE_N": 64})])
@pytest.mark.parametrize("used", ["y_only", "s_only"])
def test_only_one_output_used(device, impl_tiles, used):
    """Without a gradient through s (or through y) the backward must still be right."""
    impl, tiles = impl_tiles
    x, r, w = _inputs(5, 200, torch.float32, device, seed=9)
    _check_against_reference(x, r, w, 1e-6, 0.0, "llama", impl, use_y=used == "y_only", use_s=used == "s_only", **tiles)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("hidden", [300, 1000])
def test_chunked_equals_untiled(device, dtype, hidden):
    x, r, w = _inputs(7, hidden, dtype, device, seed=6)
    dy, ds = _grads_out(x.shape, dtype, device, seed=11)
    results = []
    for tiles in ({"strategy": "untiled"}, {"strategy": "chunked", "BLOCK_SIZE_N": 256}):
        xk, rk, wk = (t.clone().requires_grad_() for t in (x, r, w))
        y, s = fused_add_rms_norm(xk, rk, wk, impl="npu", **tiles)
        torch.autograd.backward([y, s], [dy, ds])
        results.append((y, s, xk.grad, rk.grad, wk.grad))
    atol, rtol = (1e-5, 1e-5) if dtype == torch.float32 else (2e-2, 1e-2)
    for name, a, b in zip(("y", "s", "dx", "dr", "dw"), *results):
        scale = max(1.0, float(a.abs().max())) if name == "dw" else 1.0
        torch.testing.assert_close(a, b, atol=atol * scale, rtol=rtol, msg=f"{name} differs between strategies")


def test_gpu_and_npu_kernels_agree(device):
    x, r, w = _inputs(6, 777, torch.bfloat16, device, seed=12)
    yg, sg = fused_add_rms_norm(x, r, w, impl="gpu")
    yn, sn = fused_add_rms_norm(x, r, w, impl="npu", strategy="chunked", BLOCK_SIZE_N=128)
    assert torch.equal(sg, sn)  # s = x + r rounded once: bit-identical
    torch.testing.assert_close(yg, yn, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_s_is_rounded_before_the_norm_like_the_unfused_chain(device, dtype):
    """The fused kernel normalises the stored (rounded) s: bit for bit `s = x + r; rms_norm(s)`.

    The Triton interpreter converts fp32 to bf16 by truncation rather than round-to-nearest, so
    on the CPU bf16 is only checked to within one bf16 step; fp16 (numpy-native) is exact.
    """
    from kernels.rms_norm import rms_norm

    x, r, w = _inputs(4, 300, dtype, device, seed=13)
    y, s = fused_add_rms_norm(x, r, w)
    if dtype == torch.bfloat16 and device == "cpu":
        torch.testing.assert_close(s, x + r, atol=0, rtol=2**-7)
        return
    assert torch.equal(s, x + r)
    torch.testing.assert_close(y, rms_norm(x + r, w), atol=0, rtol=0)


def test_three_d_and_non_contiguous_input(device):
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(2, 300, 5, generator=gen).to(device).transpose(1, 2)  # (2, 5, 300), last axis strided
    r = torch.randn(2, 5, 600, generator=gen).to(device)[..., ::2]  # strided too
    assert not x.is_contiguous() and not r.is_contiguous()
    w = torch.randn(300, generator=gen).to(device)
    for impl in ("gpu", "npu"):
        y, s = fused_add_rms_norm(x, r, w, impl=impl)
        yr, sr = fused_add_rms_norm_reference(x, r, w)
        assert y.shape == x.shape and s.shape == x.shape
        torch.testing.assert_close(y, yr, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(s, sr, atol=1e-6, rtol=1e-6)


def test_dx_and_dr_are_equal_but_not_aliased(device):
    x, r, w = _inputs(3, 64, torch.float32, device, seed=14)
    x.requires_grad_()
    r.requires_grad_()
    y, s = fused_add_rms_norm(x, r, w)
    (y.sum() + (s * s).sum()).backward()
    assert torch.equal(x.grad, r.grad)
    x.grad.zero_()  # a user editing one gradient must not change the other
    assert float(r.grad.abs().max()) > 0


def test_empty_input():
    x = torch.randn(0, 16)
    y, s = fused_add_rms_norm(x, x, None)
    assert y.shape == (0, 16) and s.shape == (0, 16)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"BLOCK_SIZE": 128, "impl": "gpu"}, r"BLOCK_SIZE=128 is smaller than hidden=300"),
        ({"BLOCK_SIZE": 500, "impl": "gpu"}, r"BLOCK_SIZE=500 must be a power of two"),
        ({"BLOCK_SIZE_M": 3, "impl": "gpu"}, r"BLOCK_SIZE_M=3 must be a power of two"),
        ({"BLOCK_SIZE_M": 512, "impl": "gpu"}, r"exceeds the 65536-element tile"),
        ({"num_warps": 3, "impl": "gpu"}, r"num_warps=3 is not allowed"),
        ({"GRID": 0, "impl": "gpu"}, r"GRID=0 must be a positive integer"),
        ({"TILE_K": 4, "impl": "gpu"}, r"unknown tile parameter TILE_K"),
        ({"strategy": "untiled", "impl": "gpu"}, r"unknown tile parameter strategy"),
        ({"strategy": "fast", "impl": "npu"}, r"strategy='fast' is not allowed"),
        ({"strategy": "untiled", "BLOCK_SIZE_N": 128, "impl": "npu"}, r"BLOCK_SIZE_N=128 is smaller than hidden=300"),
        ({"BLOCK_SIZE_N": 100, "impl": "npu"}, r"BLOCK_SIZE_N=100 must be a power of two"),
        ({"BLOCK_SIZE_M": 6, "impl": "npu"}, r"BLOCK_SIZE_M=6 must be a power of two"),
        ({"BLOCK_SIZE_M": 256, "impl": "npu"}, r"exceeds the 65536-element tile"),
        ({"CHUNK_THRESHOLD": 0, "impl": "npu"}, r"CHUNK_THRESHOLD=0 must be a positive integer"),
        ({"USE_WHERE": "yes", "impl": "npu"}, r"USE_WHERE='yes' must be True or False"),
        ({"BLOCK_SIZE": 512, "impl": "npu"}, r"unknown tile parameter BLOCK_SIZE .*allowed: strategy"),
        ({"impl": "tpu"}, r"impl='tpu' is not allowed"),
        ({"casting_mode": "fp8"}, r"casting_mode='fp8' is not allowed"),
        ({"eps": -1.0}, r"eps=-1.0 must be >= 0"),
    ],
)
def test_bad_tiles_and_options_are_clear_errors(kwargs, match):
    x, r, w = _inputs(4, 300, torch.float32, "cpu")
    with pytest.raises(ValueError, match=match):
        fused_add_rms_norm(x, r, w, **kwargs)


def test_bad_inputs_are_clear_errors():
    x, r, w = _inputs(4, 300, torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"residual has shape \(4, 299\); it must equal x's shape \(4, 300\)"):
        fused_add_rms_norm(x, r[:, :299], w)
    with pytest.raises(ValueError, match=r"residual has shape \(300,\); it must equal x's shape"):
        fused_add_rms_norm(x, r[0], w)  # no broadcasting
    with pytest.raises(ValueError, match=r"residual has dtype torch.float16 but x has torch.float32"):
        fused_add_rms_norm(x, r.half(), w)
    with pytest.raises(ValueError, match=r"weight has shape \(299,\); it must be \(300,\)"):
        fused_add_rms_norm(x, r, w[:299])
    with pytest.raises(ValueError, match=r"weight has dtype torch.float16 but x has torch.float32"):
        fused_add_rms_norm(x, r, w.half())
    with pytest.raises(ValueError, match=r"x has dtype torch.int64"):
        fused_add_rms_norm(x.long(), r.long(), None)
    with pytest.raises(ValueError, match=r"residual must be a torch.Tensor, got list"):
        fused_add_rms_norm(x, [1.0], None)
    with pytest.raises(ValueError, match=r"non-empty last"):
        fused_add_rms_norm(torch.randn(4, 0), torch.randn(4, 0), None)
    with pytest.raises(ValueError, match=r"does not fit the untiled GPU kernel"):
        fused_add_rms_norm(torch.randn(1, 70000), torch.randn(1, 70000), None, impl="gpu")
    # The NPU kernels' chunked path takes any hidden size, also on the CPU / a GPU.
    big, big_r = torch.randn(1, 70000), torch.randn(1, 70000)
    y, s = fused_add_rms_norm(big, big_r, None, impl="npu")
    torch.testing.assert_close(y, fused_add_rms_norm_reference(big, big_r)[0], atol=1e-5, rtol=1e-5)


def test_npu_tile_limits():
    # On an NPU the UB model refuses tiles predicted to overflow, naming the tiles.
    with pytest.raises(ValueError, match=r"BLOCK_SIZE_M=1 x BLOCK_SIZE_N=8192 needs about \d+ KB .*ub overflow"):
        npu.resolve_tiles(4096, 8192, 48, 2, on_npu=True, strategy="untiled")
    with pytest.raises(ValueError, match=r"BLOCK_SIZE_M=8 x BLOCK_SIZE_N=2048 .*ub overflow"):
        npu.resolve_tiles(4096, 8192, 48, 4, on_npu=True, strategy="chunked", BLOCK_SIZE_M=8)
    # The defaults fit for every hidden size and dtype.
    for hidden in (7, 128, 300, 2048, 2049, 4096, 32768, 100000):
        for elem in (2, 4):
            t = npu.resolve_tiles(4096, hidden, 48, elem, on_npu=True)
            assert t.chunked == (hidden > npu.CHUNK_THRESHOLD)
            assert npu.ub_bytes(t.BLOCK_SIZE_M, t.BLOCK_SIZE_N, elem, True, t.chunked) <= npu.UB_BYTES
            assert (
                t.GRID == min(48, -(-4096 // t.BLOCK_SIZE_M)) and t.BLOCK_SIZE_M * t.BLOCK_SIZE_N <= npu.TILE_ELEMENTS
            )
    # int32 offsets: tensors of 2**31 elements or more are refused, not overflowed.
    with pytest.raises(ValueError, match=r"int32 offsets"):
        npu.resolve_tiles(2**20, 2**11, 48, 2)


@pytest.mark.gpu
def test_mixed_devices_are_rejected():
    x, r, w = _inputs(4, 300, torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"residual is on cpu but x is on cuda"):
        fused_add_rms_norm(x.cuda(), r, w.cuda())
    with pytest.raises(ValueError, match=r"weight is on cpu but x is on cuda"):
        fused_add_rms_norm(x.cuda(), r.cuda(), w)


# --- spec and harness ----------------------------------------------------------------------
def test_spec_is_registered():
    assert "fused_add_rms_norm" in kernels.families()
    assert kernels.get("fused_add_rms_norm") is spec
    names = {v.name for v in spec.variants}
    assert {"gpu_row", "gpu_multirow", "npu", "torch_eager", "torch_compile", "rms_norm_after_add", "liger"} <= names
    assert spec.output_names == ("y", "s")
    for v in spec.variants:
        for p in v.params:
            assert p.default in p.values
    assert spec.variant("npu").param("CHUNK_THRESHOLD").default == npu.CHUNK_THRESHOLD
    inputs = spec.make_inputs(spec.resolve_problem(quick=True), torch.float32, "cpu", 0)
    assert set(inputs) == {"x", "residual", "weight"}
    assert all(float((t.detach() != 0).float().mean()) > 0.99 for t in inputs.values())  # random, never zeros
    assert not torch.equal(inputs["x"], inputs["residual"])


def test_min_bytes():
    p = {"rows": 10, "hidden": 100, "weight": True}
    assert spec.min_bytes(p, "forward", "bf16") == (4 * 1000 + 100) * 2
    assert spec.min_bytes(p, "backward", "fp32") == (4 * 1000 + 200) * 4
    assert spec.min_bytes(p, "full", "bf16") == (8 * 1000 + 300) * 2


def test_ub_estimate_for_the_explorer():
    problem = spec.resolve_problem({"hidden": 1024})
    assert spec.ub_estimate(problem, {}, "bf16") == max(npu.ub_bytes(2, 1024, 2, backward=b) for b in (False, True))
    chunked = spec.ub_estimate(problem, {"strategy": "chunked", "BLOCK_SIZE_N": 256}, "bf16")
    assert chunked == max(npu.ub_bytes(1, 256, 2, backward=b, chunked=True) for b in (False, True))
    assert spec.ub_estimate(problem, {"BLOCK_SIZE_N": 100}, "bf16") is None  # not resolvable
    big = spec.resolve_problem({"hidden": 8192})
    assert spec.ub_estimate(big, {"strategy": "untiled"}, "fp32") > npu.UB_BYTES


@pytest.mark.parametrize("variant", ["gpu_row", "gpu_multirow", "npu", "torch_eager", "rms_norm_after_add"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_measure_every_cpu_variant_passes(variant, dtype):
    rec = measure(
        "fused_add_rms_norm",
        variant,
        device="cpu",
        dtype=dtype,
        mode="full",
        problem={"rows": 3, "hidden": 123},
        time_it=False,
    )
    assert rec.error is None, rec.error
    assert rec.passed, rec.checks
    assert {c["name"] for c in rec.checks} == {"y", "s", "dx", "dresidual", "dweight"}


def test_measure_npu_chunked_and_timing_labels():
    rec = measure(
        "fused_add_rms_norm",
        "npu",
        device="cpu",
        dtype="bf16",
        mode="full",
        problem={"rows": 2, "hidden": 2600},
        params={"BLOCK_SIZE_M": 2},
        rep_ms=1,
    )
    assert rec.error is None and rec.passed, (rec.error, rec.checks)
    assert rec.timing_method == "interpreter-wall"
    assert rec.gbps is None and rec.peak_mb is None  # never invented on the CPU
    assert rec.min_bytes == spec.min_bytes(rec.problem, "full", "bf16")


def test_measure_reports_bad_tiles_and_missing_peers():
    rec = measure(
        "fused_add_rms_norm",
        "npu",
        device="cpu",
        problem={"rows": 2, "hidden": 300},
        params={"strategy": "untiled", "BLOCK_SIZE_N": 128},
        on_error="record",
    )
    assert rec.passed is False and "BLOCK_SIZE_N=128 is smaller than hidden=300" in rec.error
    rec = measure("fused_add_rms_norm", "torch_compile", device="cpu", quick=True, on_error="record")
    assert "does not run on cpu" in rec.error
    rec = measure("fused_add_rms_norm", "liger", device="cpu", quick=True, on_error="record")
    assert rec.error


@pytest.mark.parametrize("broken", ["forward_s", "backward_ds"])
def test_measure_catches_a_wrong_kernel(monkeypatch, broken):
    """A kernel that is subtly wrong must fail the check (the check can fail)."""
    from kernels.fused_add_rms_norm import gpu

    if broken == "forward_s":
        real = gpu.fused_add_rms_norm_forward

        def wrong(*args, **kwargs):
            y, s, rstd = real(*args, **kwargs)
            return y, s * 1.01, rstd

        monkeypatch.setattr(gpu, "fused_add_rms_norm_forward", wrong)
    else:
        real = gpu.fused_add_rms_norm_backward

        def wrong(dy, ds, *args, **kwargs):
            return real(dy, None, *args, **kwargs)  # forgets the residual stream's gradient

        monkeypatch.setattr(gpu, "fused_add_rms_norm_backward", wrong)
    mode = "forward" if broken == "forward_s" else "full"
    rec = measure(
        "fused_add_rms_norm",
        "gpu_row",
        device="cpu",
        dtype="fp32",
        mode=mode,
        problem={"rows": 2, "hidden": 64},
        time_it=False,
    )
    assert rec.passed is False
    failed = {c["name"] for c in rec.checks if not c["passed"]}
    assert failed == ({"s"} if broken == "forward_s" else {"dx", "dresidual"})


def test_cli_bench_runs_on_cpu(tmp_path, capsys):
    from workbench.cli import main

    rc = main(
        ["bench", "fused_add_rms_norm", "--device", "cpu", "--quick", "--dtype", "bf16", "--hidden", "64"]
        + ["--rows", "3", "--mode", "forward,full", "--variants", "gpu_row,npu,torch_eager,rms_norm_after_add"]
        + ["--rep-ms", "1", "--store", str(tmp_path / "r.sqlite")]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count(" yes ") == 8


# --- what npu-check compiles ---------------------------------------------------------------
def test_npu_compile_cases():
    cases = npu.npu_compile_cases()
    assert all(isinstance(c, NpuCompileCase) and c.family == "fused_add_rms_norm" for c in cases)
    defaults = [c for c in cases if c.default]
    # forward and backward x hidden 128 … 32768 x fp32/fp16/bf16, each once
    assert len(defaults) == 2 * len(npu.NPU_CHECK_HIDDEN) * 3
    assert len({c.name for c in cases}) == len(cases)
    assert npu.npu_compile_cases(defaults_only=True) == defaults
    for c in cases:
        runtime = [a for a in c.kernel.arg_names if a not in c.constants]
        assert list(c.signature) == runtime, c.name
        assert set(c.constants) | set(c.signature) == set(c.kernel.arg_names)
        if c.default:
            assert c.ub_bytes <= npu.UB_BYTES, c.name
    # Both strategies and every BLOCK_SIZE_M choice appear; the UB boundary has cases on both sides.
    assert {c.constants["CHUNKED"] for c in cases} == {True, False}
    assert {c.constants["BLOCK_SIZE_M"] for c in cases} >= set(npu.NPU_CHECK_BLOCK_SIZE_M)
    assert any(c.ub_bytes > npu.UB_BYTES for c in cases)


def test_ub_model_agrees_with_the_recorded_compiler_verdicts():
    """Every point of the calibration sweep compiled by triton-ascend + BiShengIR for Ascend910B
    (kernels/fused_add_rms_norm/ub_calibration.json): the model predicts overflow exactly where
    the compiler reported one."""
    import json
    from pathlib import Path

    path = Path(npu.__file__).with_name("ub_calibration.json")
    data = json.loads(path.read_text())
    assert data["available_bits"] == npu.UB_BYTES * 8
    points = [p for p in data["points"] if p["verdict"] in ("OK", "UB overflow")]
    assert len(points) >= 150 and {p["verdict"] for p in points} == {"OK", "UB overflow"}
    wrong = []
    for p in points:
        tiles = p["tiles"]
        model = npu.ub_bytes(
            tiles["BLOCK_SIZE_M"],
            tiles["BLOCK_SIZE_N"],
            4 if p["dtype"] == "fp32" else 2,
            backward=p["case"].startswith("backward"),
            chunked=tiles["CHUNKED"],
        )
        if (model > npu.UB_BYTES) != (p["verdict"] == "UB overflow"):
            wrong.append(f"{p['case']}: model {model} B, compiler {p['verdict']}")
    assert not wrong, "\n".join(wrong)
    # The calibration cases carry the same model.
    cases = {c.name: c for c in npu.ub_calibration_cases()}
    for p in points:
        assert (cases[p["case"]].ub_bytes > npu.UB_BYTES) == (p["verdict"] == "UB overflow"), p["case"]


# --- on a GPU (run by the lead on the device machine) ---------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize(
    "variant", ["gpu_row", "gpu_multirow", "npu", "torch_eager", "torch_compile", "rms_norm_after_add"]
)
@pytest.mark.parametrize("hidden", [7, 1000, 4096, 16384])
def test_gpu_measure(measured_on_gpu, variant, hidden):
    rec = measured_on_gpu("fused_add_rms_norm", variant, {"rows": 257, "hidden": hidden})
    assert rec.ms_p50 > 0 and rec.gbps > 0 and rec.peak_mb is not None


# Each strategy with each rows-per-program, the hidden size rotating through narrow, medium and
# wide (each case is its own compile: the full product cost most of the GPU test step); the
# untiled kernel at 32768 with 4 rows is the tile that must be refused.
_NPU_CASES = [
    (strategy, block_m, (512, 2048, 32768)[i % 3])
    for i, (strategy, block_m) in enumerate((s, m) for s in ("untiled", "chunked") for m in (1, 2, 4, 8))
] + [("untiled", 4, 32768), ("chunked", 8, 32768)]


@pytest.mark.gpu
@pytest.mark.parametrize("strategy, block_m, hidden", sorted(set(_NPU_CASES)))
def test_gpu_npu_strategies(strategy, block_m, hidden):
    rec = measure(
        "fused_add_rms_norm",
        "npu",
        device="cuda",
        dtype="bf16",
        mode="full",
        problem={"rows": 1000, "hidden": hidden},
        params={"strategy": strategy, "BLOCK_SIZE_M": block_m},
        time_it=False,  # the strategies' results against the reference; their speed is the tuner's
        on_error="record",
    )
    if strategy == "untiled" and block_m * 32768 > npu.MAX_TILE_ELEMENTS and hidden == 32768:
        assert "exceeds the 65536-element tile" in rec.error
        return
    assert rec.error is None, rec.error
    assert rec.passed, rec.checks


@pytest.mark.gpu
def test_gpu_liger_peer(measured_on_gpu):
    pytest.importorskip("liger_kernel")
    measured_on_gpu("fused_add_rms_norm", "liger", {"rows": 257, "hidden": 4096})
