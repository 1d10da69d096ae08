"""RMSNorm family: every variant against the reference, forward and both gradients."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels.rms_norm import rms_norm, rms_norm_reference
from kernels.rms_norm.spec import spec
from workbench.measure import measure

TRITON_VARIANTS = ("gpu_row", "gpu_multirow", "npu")
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-2, 1e-2), torch.bfloat16: (1.5e-1, 2e-2)}


def _inputs(rows, hidden, dtype, device, seed=0, weight=True, gemma=False):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, hidden, generator=gen).to(device, dtype)
    w = (0.1 * torch.randn(hidden, generator=gen) + (0.0 if gemma else 1.0)).to(device, dtype) if weight else None
    return x, w


def _check_against_reference(x, w, dy, eps, offset, casting_mode, impl, **tiles):
    xr = x.detach().double().requires_grad_()
    wr = w.detach().double().requires_grad_() if w is not None else None
    ref = rms_norm_reference(xr, wr, eps, offset, casting_mode)
    ref.backward(dy.double())

    xk = x.detach().clone().requires_grad_()
    wk = w.detach().clone().requires_grad_() if w is not None else None
    y = rms_norm(xk, wk, eps=eps, offset=offset, casting_mode=casting_mode, impl=impl, **tiles)
    assert y.dtype == x.dtype and y.shape == x.shape
    y.backward(dy)
    atol, rtol = TOL[x.dtype]
    torch.testing.assert_close(y.double(), ref.detach(), atol=atol, rtol=rtol)
    # dw sums over rows: allow its error to grow with the reduction length.
    torch.testing.assert_close(xk.grad.double(), xr.grad, atol=atol, rtol=rtol)
    if w is not None:
        scale = max(1.0, float(wr.grad.abs().max()))
        torch.testing.assert_close(wk.grad.double(), wr.grad, atol=atol * scale, rtol=rtol)


@pytest.mark.parametrize(
    "impl_tiles", [("gpu", {"BLOCK_SIZE_M": 1}), ("gpu", {}), ("npu", {})], ids=["row", "multi", "npu"]
)
@pytest.mark.parametrize("casting_mode", ["llama", "gemma", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_casting_modes_and_dtypes(device, impl_tiles, casting_mode, dtype):
    impl, tiles = impl_tiles
    offset = 1.0 if casting_mode == "gemma" else 0.0
    x, w = _inputs(5, 123, dtype, device, seed=1, gemma=casting_mode == "gemma")
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(2)).to(device, dtype)
    _check_against_reference(x, w, dy, 1e-6, offset, casting_mode, impl, **tiles)


@pytest.mark.parametrize(
    "rows,hidden,impl,tiles",
    [
        (1, 7, "gpu", {"BLOCK_SIZE_M": 1}),
        (1, 7, "npu", {}),
        (3, 7, "gpu", {"BLOCK_SIZE_M": 4}),
        (9, 123, "gpu", {"BLOCK_SIZE_M": 4, "GRID": 2}),
        (9, 123, "npu", {"BLOCK_SIZE_M": 4, "GRID": 3}),
        (3, 2600, "gpu", {}),
        (3, 2600, "npu", {}),  # auto -> chunked two-pass (hidden > 2048)
        (5, 300, "npu", {"strategy": "chunked", "BLOCK_SIZE_N": 64, "BLOCK_SIZE_M": 2}),
        (5, 300, "npu", {"USE_WHERE": True}),
        (6, 300, "npu", {"strategy": "chunked", "BLOCK_SIZE_N": 128, "USE_WHERE": True}),
    ],
)
def test_odd_shapes_and_tiles(device, rows, hidden, impl, tiles):
    x, w = _inputs(rows, hidden, torch.float32, device, seed=rows * hidden)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(3)).to(device)
    _check_against_reference(x, w, dy, 1e-6, 0.5, "llama", impl, **tiles)


@pytest.mark.parametrize("impl", ["gpu", "npu"])
def test_weight_none_and_offset(device, impl):
    x, _ = _inputs(4, 300, torch.float32, device, weight=False)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(4)).to(device)
    _check_against_reference(x, None, dy, 1e-5, 0.0, "llama", impl)
    x, w = _inputs(4, 300, torch.float32, device, seed=5)
    _check_against_reference(x, w, dy, 1e-5, 1.0, "gemma", impl)


@pytest.mark.parametrize("dw_reduce", ["atomic", "partials"])
@pytest.mark.parametrize(
    "rows,hidden,tiles",
    [
        (1, 300, {"BWD_CHUNK": 64}),  # one row: 5 column chunks, the last masked
        (1, 300, {"BWD_CHUNK": 64, "BWD_WIDE": "reread"}),  # a single program walks all 5
        (9, 300, {"BWD_CHUNK": 128, "BLOCK_SIZE_M": 2, "GRID": 3}),  # several programs, odd row tail
        (9, 300, {"BWD_CHUNK": 128, "BLOCK_SIZE_M": 2, "GRID": 3, "BWD_WIDE": "reread"}),
        (13, 257, {"BWD_CHUNK": 32, "BLOCK_SIZE_M": 4}),
        (13, 257, {"BWD_CHUNK": 32, "BLOCK_SIZE_M": 4, "BWD_WIDE": "reread"}),
        (6, 300, {}),  # whole rows in registers
        (7, 123, {"BLOCK_SIZE_M": 2, "GRID": 2}),
        # One tile ahead (the last prefetch is masked off), w loaded per tile, the backward's own rows
        (1, 300, {"BWD_PREFETCH": True}),
        (13, 257, {"BWD_ROWS": 2, "BWD_WARPS": 2, "GRID": 3, "BWD_PREFETCH": True, "BWD_RELOAD_W": True}),
        (9, 300, {"BWD_CHUNK": 128, "BWD_ROWS": 2, "GRID": 2, "BWD_PREFETCH": True, "BWD_RELOAD_W": True}),
        # Tiles staged ahead in shared memory: whole rows and column chunks, a grid-stride tail
        (13, 257, {"BWD_ROWS": 2, "GRID": 3, "BWD_STAGES": 3, "BWD_RELOAD_W": True}),
        (9, 300, {"BWD_CHUNK": 128, "BWD_ROWS": 2, "GRID": 2, "BWD_STAGES": 2}),
        # The forward in column chunks (two walks), beside either backward
        (1, 300, {"FWD_CHUNK": 64}),  # one row: 5 chunks, the last masked
        (9, 300, {"FWD_CHUNK": 128, "BLOCK_SIZE_M": 2, "BWD_CHUNK": 128}),  # an odd row tail
        # The whole row read twice (FWD_WALKS=2): one masked chunk as wide as the row
        (1, 300, {"FWD_WALKS": 2}),
        (7, 123, {"FWD_WALKS": 2, "BLOCK_SIZE_M": 2}),
    ],
)
@pytest.mark.parametrize("casting_mode", ["llama", "gemma", "none"])
def test_backward_chunks_and_dw_reductions(device, rows, hidden, tiles, dw_reduce, casting_mode):
    """The chunked backward (rows wider than BWD_CHUNK) and both dw reductions match the reference."""
    offset = 1.0 if casting_mode == "gemma" else 0.25
    x, w = _inputs(rows, hidden, torch.bfloat16, device, seed=rows + hidden, gemma=casting_mode == "gemma")
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(11)).to(device, torch.bfloat16)
    _check_against_reference(x, w, dy, 1e-6, offset, casting_mode, "gpu", DW_REDUCE=dw_reduce, **tiles)


@pytest.mark.parametrize("dw_reduce", ["atomic", "partials"])
def test_chunked_backward_without_weight(device, dw_reduce):
    x, _ = _inputs(5, 200, torch.float32, device, weight=False, seed=12)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(13)).to(device)
    _check_against_reference(x, None, dy, 1e-5, 0.0, "llama", "gpu", BWD_CHUNK=64, DW_REDUCE=dw_reduce)


@pytest.mark.parametrize(
    "tiles", [{}, {"BWD_CHUNK": 32}, {"BWD_CHUNK": 32, "BWD_WIDE": "reread"}], ids=["whole", "columns", "reread"]
)
def test_kept_dw_accumulator_is_left_zero_between_backwards(device, tiles):
    """The atomic dw reduction reuses one fp32 accumulator per stream: each backward's last
    program must leave it zero, whatever the width (the counter sits right after the row, so a
    narrower call finds its counter where a wider one kept dw)."""
    from kernels.rms_norm.gpu import dw_accumulator

    for call, (rows, hidden) in enumerate([(9, 70), (5, 33), (1, 70), (9, 70)]):
        x, w = _inputs(rows, hidden, torch.float32, device, seed=20 + call)
        dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(30 + call)).to(device)
        _check_against_reference(x, w, dy, 1e-6, 0.0, "llama", "gpu", GRID=3, **tiles)
        kept = dw_accumulator(w, hidden)
        assert kept.numel() >= 71 and not kept.any(), f"call {call}: the accumulator was left dirty"


def test_chunked_backward_equals_whole_rows_and_partials_are_deterministic(device):
    x, w = _inputs(11, 500, torch.float32, device, seed=14)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(15)).to(device)
    grads = {}
    for name, tiles in {
        "whole": {"DW_REDUCE": "partials"},
        "chunked": {"BWD_CHUNK": 128, "DW_REDUCE": "partials"},
        "chunked_again": {"BWD_CHUNK": 128, "DW_REDUCE": "partials"},
        "atomic": {"BWD_CHUNK": 128},
        "reread": {"BWD_CHUNK": 128, "BWD_WIDE": "reread", "DW_REDUCE": "partials"},
    }.items():
        xk, wk = x.clone().requires_grad_(), w.clone().requires_grad_()
        rms_norm(xk, wk, impl="gpu", **tiles).backward(dy)
        grads[name] = (xk.grad, wk.grad)
    torch.testing.assert_close(grads["chunked"][0], grads["whole"][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads["chunked"][1], grads["whole"][1], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(grads["atomic"][1], grads["chunked"][1], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(grads["reread"][0], grads["whole"][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads["reread"][1], grads["whole"][1], atol=1e-4, rtol=1e-5)
    assert torch.equal(grads["chunked"][1], grads["chunked_again"][1])


def test_no_autograd_node_without_gradients(device):
    x, w = _inputs(3, 40, torch.float32, device, seed=16)
    assert rms_norm(x, w).grad_fn is None
    with torch.no_grad():
        assert rms_norm(x.requires_grad_(), w).grad_fn is None
    assert rms_norm(x, w).grad_fn is not None  # x now requires grad


def test_chunked_equals_untiled(device):
    x, w = _inputs(7, 1000, torch.float32, device, seed=6)
    untiled = rms_norm(x, w, impl="npu", strategy="untiled")
    chunked = rms_norm(x, w, impl="npu", strategy="chunked", BLOCK_SIZE_N=256)
    torch.testing.assert_close(untiled, chunked, atol=1e-5, rtol=1e-5)


def test_three_d_and_non_contiguous_input(device):
    gen = torch.Generator().manual_seed(7)
    base = torch.randn(2, 300, 5, generator=gen).to(device)
    x = base.transpose(1, 2)  # (2, 5, 300), last axis strided
    assert not x.is_contiguous()
    w = torch.randn(300, generator=gen).to(device)
    y = rms_norm(x, w)
    torch.testing.assert_close(y, rms_norm_reference(x, w), atol=1e-5, rtol=1e-5)
    assert y.shape == x.shape


def test_in_place_backward_reuses_the_incoming_gradient(device):
    x, w = _inputs(4, 64, torch.float32, device, seed=8)
    xr = x.clone().requires_grad_()
    rms_norm_reference(xr, w).backward(torch.ones_like(x))
    xk = x.clone().requires_grad_()
    dy = torch.ones_like(x)
    rms_norm(xk, w, in_place=True).backward(dy)
    torch.testing.assert_close(xk.grad, xr.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"BLOCK_SIZE": 128, "impl": "gpu"}, r"BLOCK_SIZE=128 is smaller than hidden=300"),
        ({"BLOCK_SIZE": 500, "impl": "gpu"}, r"BLOCK_SIZE=500 must be a power of two"),
        ({"BLOCK_SIZE_M": 3, "impl": "gpu"}, r"BLOCK_SIZE_M=3 must be a power of two"),
        ({"BLOCK_SIZE_M": 512, "impl": "gpu"}, r"exceeds the 65536-element tile"),
        ({"num_warps": 3, "impl": "gpu"}, r"num_warps=3 is not allowed"),
        ({"GRID": 0, "impl": "gpu"}, r"GRID=0 must be a positive integer"),
        ({"BWD_CHUNK": 100, "impl": "gpu"}, r"BWD_CHUNK=100 must be a power of two"),
        ({"FWD_CHUNK": 8, "impl": "gpu"}, r"FWD_CHUNK=8 must be a power of two from 16"),
        ({"FWD_WALKS": 3, "impl": "gpu"}, r"FWD_WALKS=3 is not allowed; use 'auto', 1 or 2"),
        ({"FWD_WALKS": 1, "FWD_CHUNK": 64, "impl": "gpu"}, r"FWD_WALKS=1 reads each row once, but FWD_CHUNK=64"),
        ({"DW_REDUCE": "tree", "impl": "gpu"}, r"DW_REDUCE='tree' is not allowed"),
        ({"BWD_WIDE": "rows", "impl": "gpu"}, r"BWD_WIDE='rows' is not allowed"),
        ({"BWD_ROWS": 3, "impl": "gpu"}, r"BWD_ROWS=3 must be a power of two"),
        ({"BWD_ROWS": 512, "impl": "gpu"}, r"BWD_ROWS=512 must be a power of two with BWD_ROWS x 512"),
        ({"BWD_WARPS": 64, "impl": "gpu"}, r"BWD_WARPS=64 is not allowed"),
        ({"BWD_PREFETCH": "yes", "impl": "gpu"}, r"BWD_PREFETCH='yes' must be True, False or 'auto'"),
        ({"BWD_RELOAD_W": 1.5, "impl": "gpu"}, r"BWD_RELOAD_W=1.5 must be True, False or 'auto'"),
        ({"BWD_STAGES": 8, "impl": "gpu"}, r"BWD_STAGES=8 is not allowed; use one of 1, 2, 3, 4"),
        ({"BWD_STAGES": True, "impl": "gpu"}, r"BWD_STAGES=True is not allowed"),
        ({"BWD_STAGES": 2, "BWD_PREFETCH": True, "impl": "gpu"}, r"set BWD_PREFETCH=False or BWD_STAGES=1"),
        ({"TILE_K": 4, "impl": "gpu"}, r"unknown tile parameter TILE_K"),
        ({"strategy": "fast", "impl": "npu"}, r"strategy='fast' is not allowed"),
        ({"strategy": "untiled", "BLOCK_SIZE_N": 128, "impl": "npu"}, r"BLOCK_SIZE_N=128 is smaller than hidden=300"),
        ({"impl": "tpu"}, r"impl='tpu' is not allowed"),
        ({"casting_mode": "fp8"}, r"casting_mode='fp8' is not allowed"),
    ],
)
def test_bad_tiles_and_options_are_clear_errors(kwargs, match):
    x, w = _inputs(4, 300, torch.float32, "cpu")
    with pytest.raises(ValueError, match=match):
        rms_norm(x, w, **kwargs)


def test_backward_defaults_follow_the_row_width_and_the_family():
    """The whole-row backward's automatic loop comes from the H100 sweep's table; the fused
    family keeps w in registers where its extra ds load would make reloading it spill; tiles the
    caller gives for the forward take the plain loop."""
    from kernels.fused_add_rms_norm import gpu as fused_gpu
    from kernels.rms_norm import gpu
    from kernels.runtime import DeviceInfo

    t = gpu.resolve_tiles(4096, 8192, 132)
    assert (t.bwd_block_size_m, t.bwd_num_warps, t.bwd_stages, t.bwd_prefetch, t.GRID) == (1, 32, 3, False, 132)
    short = gpu.resolve_tiles(8192, 512, 132, residual=True)  # short rows: four stages deep on 2 warps
    assert (short.bwd_block_size_m, short.bwd_num_warps, short.bwd_stages, short.GRID) == (4, 2, 4, 132)
    assert gpu.resolve_tiles(4096, 16384, 132).bwd_reload_w
    assert gpu.resolve_tiles(4096, 16384, 132).bwd_stages == 1
    # Staged tiles asked for turn the automatic prefetch off; a prefetch asked for, the stages.
    assert not gpu.resolve_tiles(4096, 16384, 132, BWD_STAGES=2).bwd_prefetch
    assert gpu.resolve_tiles(4096, 2048, 132, BWD_PREFETCH=True).bwd_stages == 1
    assert not gpu.resolve_tiles(4096, 16384, 132, residual=True).bwd_reload_w
    cpu = DeviceInfo("cpu")
    assert gpu.tiles_for_rows(64, 16384, cpu).bwd_reload_w and not fused_gpu.tiles_for_rows(64, 16384, cpu).bwd_reload_w
    plain = gpu.resolve_tiles(4096, 8192, 132, BLOCK_SIZE_M=2)
    assert (plain.bwd_block_size_m, plain.bwd_prefetch, plain.bwd_reload_w, plain.bwd_stages, plain.GRID) == (
        2,
        False,
        False,
        1,
        132,
    )


def test_bad_inputs_are_clear_errors():
    x, w = _inputs(4, 300, torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"weight has shape \(299,\); it must be \(300,\)"):
        rms_norm(x, w[:299])
    with pytest.raises(ValueError, match=r"weight has dtype torch.float16 but x has torch.float32"):
        rms_norm(x, w.half())
    with pytest.raises(ValueError, match=r"x has dtype torch.int64"):
        rms_norm(x.long(), None)
    with pytest.raises(ValueError, match=r"non-empty last"):
        rms_norm(torch.randn(4, 0), None)
    with pytest.raises(ValueError, match=r"does not fit the untiled GPU kernel"):
        rms_norm(torch.randn(1, 70000), None, impl="gpu")
    # The NPU kernels' chunked path takes any hidden size, also on the CPU / a GPU.
    big = torch.randn(1, 70000)
    torch.testing.assert_close(rms_norm(big, None, impl="npu"), rms_norm_reference(big), atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
def test_mixed_devices_are_rejected():
    x, w = _inputs(4, 300, torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"weight is on cpu but x is on cuda"):
        rms_norm(x.cuda(), w)


def test_spec_is_registered():
    assert "rms_norm" in kernels.families()
    assert kernels.get("rms_norm") is spec
    names = [v.name for v in spec.variants]
    assert {"gpu_row", "gpu_multirow", "npu", "torch_eager", "torch_functional", "torch_compile", "liger"} <= set(names)
    for v in spec.variants:
        for p in v.params:
            assert p.default in p.values


@pytest.mark.parametrize("variant", ["gpu_row", "gpu_multirow", "npu", "torch_eager", "torch_functional"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_measure_every_cpu_variant_passes(variant, dtype):
    rec = measure(
        "rms_norm", variant, device="cpu", dtype=dtype, mode="full", problem={"rows": 3, "hidden": 123}, rep_ms=1
    )
    assert rec.error is None
    assert rec.passed, rec.checks
    assert {c["name"] for c in rec.checks} == {"y", "dx", "dweight"}
    assert rec.timing_method in ("interpreter-wall", "cpu-wall")
    assert rec.gbps is None and rec.peak_mb is None  # never invented on the CPU


def test_measure_catches_a_wrong_kernel(monkeypatch):
    """A kernel that is subtly wrong must fail the check (the check can fail)."""
    from kernels.rms_norm import gpu

    real = gpu.rms_norm_forward

    def off_by_a_bit(*args, **kwargs):
        y, rstd = real(*args, **kwargs)
        return y * 1.01, rstd

    monkeypatch.setattr(gpu, "rms_norm_forward", off_by_a_bit)
    rec = measure("rms_norm", "gpu_row", device="cpu", dtype="fp32", problem={"rows": 2, "hidden": 64}, rep_ms=1)
    assert rec.passed is False
    assert not [c for c in rec.checks if c["name"] == "y"][0]["passed"]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "tiles",
    [{"BWD_WIDE": "columns"}, {"BWD_WIDE": "reread"}, {"BWD_WIDE": "onchip"}, {"BWD_CHUNK": 65536}],
    ids=["columns", "reread", "onchip", "whole"],
)
def test_gpu_repeated_backwards_at_a_chunked_width(tiles):
    """One backward after another at hidden 32768, each against the reference, the kept dw
    accumulator zero after each: an H100 suite run once found the columns backward's dw wrong
    from its second call on (max error 235), when the accumulator was cleared without barriers."""
    from kernels.rms_norm.gpu import dw_accumulator

    x, w = _inputs(4096, 32768, torch.bfloat16, "cuda", seed=40)
    for call in range(3):
        dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(41 + call)).to("cuda", torch.bfloat16)
        _check_against_reference(x, w, dy, 1e-6, 0.0, "llama", "gpu", **tiles)
        assert not dw_accumulator(w, 32768).any(), f"call {call}: the accumulator was left dirty"


@pytest.mark.gpu
@pytest.mark.parametrize(
    "rows, hidden, casting_mode, tiles",
    [
        (257, 1000, "llama", {"BWD_STAGES": 2}),
        (1000, 4096, "gemma", {"BWD_STAGES": 3, "BWD_ROWS": 2, "BWD_RELOAD_W": True}),
        (33, 8192, "none", {"BWD_STAGES": 2, "BWD_ROWS": 1, "BWD_WARPS": 16}),
        (129, 32768, "llama", {"BWD_STAGES": 3, "BWD_CHUNK": 4096}),  # the columns form
    ],
)
def test_gpu_staged_backward(rows, hidden, casting_mode, tiles):
    """Tiles staged ahead in shared memory by Triton's pipeline (cp.async on the GPU, which the
    interpreter does not model) against the reference, odd row counts leaving the last tiles
    partly masked."""
    x, w = _inputs(rows, hidden, torch.bfloat16, "cuda", seed=rows, gemma=casting_mode == "gemma")
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(5)).to("cuda", torch.bfloat16)
    offset = 1.0 if casting_mode == "gemma" else 0.0
    _check_against_reference(x, w, dy, 1e-6, offset, casting_mode, "gpu", **tiles)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "rows, hidden, casting_mode, tiles",
    [
        (129, 32768, "llama", {"BWD_CHUNK": 4096}),
        (257, 30000, "gemma", {"BWD_CHUNK": 8192, "BWD_WARPS": 32, "BWD_PREFETCH": True}),  # the last chunk masked
        (1, 16384, "none", {"BWD_CHUNK": 4096, "DW_REDUCE": "partials"}),  # one row, one program
        (77, 5000, "llama", {"BWD_CHUNK": 64, "GRID": 5, "BWD_PREFETCH": True}),  # a chunk narrower than the warps
    ],
)
def test_gpu_onchip_backward(rows, hidden, casting_mode, tiles):
    """The Gluon backward with the partial dw in shared memory (kernels/rms_norm/onchip.py)
    against the reference, forward and every gradient, odd widths leaving the last chunk masked."""
    x, w = _inputs(rows, hidden, torch.bfloat16, "cuda", seed=rows, gemma=casting_mode == "gemma")
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(6)).to("cuda", torch.bfloat16)
    offset = 1.0 if casting_mode == "gemma" else 0.0
    _check_against_reference(x, w, dy, 1e-6, offset, casting_mode, "gpu", BWD_WIDE="onchip", **tiles)


def test_the_onchip_backward_is_refused_in_the_interpreter_with_what_to_use():
    x, w = _inputs(3, 300, torch.float32, "cpu", seed=2)
    y = rms_norm(x.requires_grad_(True), w, impl="gpu", BWD_CHUNK=64, BWD_WIDE="onchip")
    with pytest.raises(ValueError, match=r"BWD_WIDE='onchip' is a Gluon kernel .* use BWD_WIDE='reread'"):
        y.sum().backward()


def test_warps_too_few_for_the_tile_are_refused_naming_the_warps_that_fit():
    """The declaration refuses explicit warps that leave a thread over 128 elements of the
    forward's or the backward's tile (it would spill); the automatic tiles and warps that fit
    pass, and the edge shapes' smallest warps become the smallest that fit."""
    from workbench.device import get_device
    from workbench.edges import edge_cases

    cpu = get_device("cpu")
    row, multirow = spec.variant("gpu_row"), spec.variant("gpu_multirow")
    problem = spec.resolve_problem({"rows": 4097, "hidden": 4097})
    check = lambda var, **tiles: var.check(problem, var.resolve_params(tiles), "bf16", cpu)  # noqa: E731
    with pytest.raises(
        ValueError, match=r"num_warps=1 leaves 256 elements of the forward's 1 x 8192 tile .* num_warps >= 2"
    ):
        check(row, num_warps=1)
    with pytest.raises(ValueError, match=r"BWD_WARPS=1 leaves 256 elements of the backward's .* BWD_WARPS >= 2"):
        check(row, BWD_WARPS=1)
    with pytest.raises(ValueError, match=r"num_warps=4 leaves 256 .* 4 x 8192 tile .* or fewer rows per program"):
        check(multirow, BLOCK_SIZE_M=4, num_warps=4)
    check(row)  # the automatic tiles
    check(row, num_warps=2, BWD_WARPS=2)
    edges = {c["edge"]: c for c in edge_cases(spec, row, {**problem, "hidden": 4096}, "bf16", cpu)}  # odd: 4097
    assert edges["smallest num_warps"]["params"] == {"num_warps": 2}
    assert edges["smallest BWD_WARPS"]["params"] == {"BWD_WARPS": 2}


@pytest.mark.gpu
def test_gpu_staged_tiles_over_shared_memory_are_a_clear_error():
    x, w = _inputs(64, 4096, torch.bfloat16, "cuda", seed=3)
    x.requires_grad_(True)
    y = rms_norm(x, w, impl="gpu", BWD_STAGES=4, BWD_ROWS=16)
    with pytest.raises(ValueError, match=r"BWD_STAGES=4 keeps 3 copies .* lower BWD_STAGES or BWD_ROWS"):
        y.sum().backward()


@pytest.mark.gpu
@pytest.mark.parametrize(
    "variant", ["gpu_row", "gpu_multirow", "npu", "torch_eager", "torch_functional", "torch_compile"]
)
@pytest.mark.parametrize("hidden", [7, 1000, 4096, 10000, 32768])
def test_gpu_measure(measured_on_gpu, variant, hidden):
    rec = measured_on_gpu("rms_norm", variant, {"rows": 257, "hidden": hidden})
    assert rec.ms_p50 > 0 and rec.gbps > 0 and rec.peak_mb is not None


def test_an_interpreted_launch_patches_triton_language_once_and_leaves_it_as_it_was(monkeypatch):
    """The kernels call ``@triton.jit`` helpers (tile_math, tl.sum) many times per launch; the
    interpreter patches triton.language when a launch starts and, unless kernels/launch.py stops
    it, again at every helper call (40% of an interpreted sweep). A launch patches a module at
    most twice; after it every attribute of triton.language and its core is what it was."""
    import triton.language as tl
    from triton.runtime import interpreter

    from kernels import launch

    x, w = _inputs(5, 123, torch.float32, "cpu", seed=3)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(4))
    _check_against_reference(x, w, dy, 1e-6, 0.0, "llama", "gpu")  # warm: helpers imported, twins made
    before = [dict(vars(m)) for m in (tl, tl.core, tl.tensor)]
    wrapped = interpreter._patch_lang
    assert getattr(wrapped, "_workbench_wrapped", False)
    calls = {"launches": 0, "helper": 0, "module_patches": 0}
    patch_lang_core = interpreter._patch_lang_core

    def counting_patch_lang_core(lang, scope):  # once per module each time the interpreter patches
        calls["module_patches"] += 1
        return patch_lang_core(lang, scope)

    def counting_patch_lang(fn):
        calls["launches" if not launch._PATCHED_LANGS[0] else "helper"] += 1
        return wrapped(fn)

    monkeypatch.setattr(interpreter, "_patch_lang_core", counting_patch_lang_core)
    monkeypatch.setattr(interpreter, "_patch_lang", counting_patch_lang)
    _check_against_reference(x, w, dy, 1e-6, 0.0, "llama", "gpu")
    monkeypatch.undo()
    # Many helper calls, few patches: the kernel's modules at its start, then once more for the
    # first helper that sees triton.language.core as well (at most two modules each time).
    assert calls["launches"] >= 2 and calls["helper"] > 10 * calls["launches"], calls
    assert calls["module_patches"] <= 2 * 2 * calls["launches"], calls
    assert [dict(vars(m)) for m in (tl, tl.core, tl.tensor)] == before
    assert launch._PATCHED_LANGS[0] is None


def test_a_tuned_entry_that_would_spill_at_a_wider_row_falls_back_to_the_rule(tables):
    """A table entry of one warp, tuned at hidden 4096 (a tile of 4096: 128 a thread), fits 4096;
    at 4097 the tile is 8192 wide, so the rule's tiles are taken instead, the source says why,
    and the declaration accepts the automatic tiles."""
    import json

    from kernels import tuned_tables
    from kernels.rms_norm import gpu
    from kernels.runtime import device_info

    cpu = device_info("cpu")
    key = tuned_tables.device_key(cpu)
    (tables / "rms_norm").mkdir(parents=True)
    body = {"schema": tuned_tables.SCHEMA, "family": "rms_norm", "device_key": key, "knob": "hidden"}
    body["buckets"] = [
        {"size": 4096, "tiles": {"BLOCK_SIZE_M": 1, "num_warps": 1}},
        {"size": 8192, "tiles": {"BLOCK_SIZE_M": 1, "num_warps": 8}},
    ]
    (tables / "rms_norm" / tuned_tables.file_name(key)).write_text(json.dumps(body))
    tuned_tables.reload()
    at_its_size = gpu.tiles_for_rows(257, 4096, cpu)
    assert (at_its_size.num_warps, at_its_size.source) == (1, f"tuned:{key}@4096")
    wider = gpu.tiles_for_rows(257, 4097, cpu)
    assert wider.num_warps == gpu.resolve_tiles(257, 4097, 132).num_warps > 1
    assert "do not fit: num_warps=1 leaves 256 elements" in wider.source
    problem = spec.resolve_problem({"rows": 257, "hidden": 4097})
    var = spec.variant("gpu_multirow")
    var.check(problem, var.resolve_params({}), "bf16", cpu)


def test_rows_from_32768_walk_the_forward_in_chunks_and_the_fused_rows_stay_whole(tables):
    """FWD_CHUNK "auto": RMSNorm rows of 32768 or more in chunks of 8192 on 16 warps, one row a
    program; narrower rows and the fused family's whole; a chunk given at or above the row keeps
    it whole. A chunked forward skips the tuned table's whole-row tiles, and says so; a row the
    table holds whole takes them."""
    import json

    from kernels import tuned_tables
    from kernels.rms_norm import gpu
    from kernels.runtime import device_info

    wide = gpu.resolve_tiles(4096, 32768, 132)
    assert (wide.fwd_chunk, wide.BLOCK_SIZE_M, wide.num_warps) == (8192, 1, 16)
    assert gpu.resolve_tiles(4096, 16384, 132).fwd_chunk == 0
    assert gpu.resolve_tiles(4096, 32768, 132, residual=True).fwd_chunk == 0
    assert gpu.resolve_tiles(4096, 32768, 132, FWD_CHUNK=32768).fwd_chunk == 0
    assert gpu.resolve_tiles(4096, 32768, 132, FWD_CHUNK=4096, BLOCK_SIZE_M=16).BLOCK_SIZE_M == 16
    # FWD_WALKS: 1 keeps even the widest rows whole and read once; 2 reads a whole row twice
    once = gpu.resolve_tiles(4096, 32768, 132, FWD_WALKS=1)
    assert (once.fwd_chunk, once.num_warps) == (0, 32)
    twice = gpu.resolve_tiles(4096, 8192, 132, FWD_WALKS=2)
    assert (twice.fwd_chunk, twice.BLOCK_SIZE, twice.num_warps) == (8192, 8192, 16)
    assert gpu.resolve_tiles(4096, 32768, 132, FWD_WALKS=2).fwd_chunk == 8192  # the auto chunk stays
    cpu = device_info("cpu")
    key = tuned_tables.device_key(cpu)
    (tables / "rms_norm").mkdir(parents=True)
    body = {"schema": tuned_tables.SCHEMA, "family": "rms_norm", "device_key": key, "knob": "hidden"}
    whole_rows = {"BLOCK_SIZE_M": 1, "num_warps": 32}
    body["buckets"] = [{"size": 16384, "tiles": whole_rows}, {"size": 32768, "tiles": whole_rows}]
    (tables / "rms_norm" / tuned_tables.file_name(key)).write_text(json.dumps(body))
    tuned_tables.reload()
    chunked = gpu.tiles_for_rows(4096, 32768, cpu)
    assert (chunked.fwd_chunk, chunked.num_warps) == (8192, 16)
    assert chunked.source.startswith("heuristic (forward in chunks")
    whole = gpu.tiles_for_rows(4096, 16384, cpu)
    assert (whole.fwd_chunk, whole.num_warps) == (0, 32) and whole.source == f"tuned:{key}@16384"
    twice = gpu.tiles_for_rows(4096, 16384, cpu, FWD_WALKS=2)
    assert twice.fwd_chunk == 16384 and twice.source.startswith("heuristic (forward reading rows twice")
