"""The families' ``torch.library.triton_op`` registrations (``torch.ops.kwb.*``).

CPU (Triton interpreter): ``opcheck``'s schema, autograd-registration and fake-tensor tests on
every op, and ``torch.compile(fullgraph=True)`` of a module calling the public functions (Dynamo
with the eager backend: the ops then run in the interpreter). ``opcheck``'s AOT-dispatch test
and Inductor need a GPU: traced, the launches become ``wrap_triton`` nodes, which run Triton's
JIT launch, and that has no CPU driver. Those, ``mode="reduce-overhead"`` and CUDA-graph
capture are the GPU tests (``@pytest.mark.gpu``).
"""

from __future__ import annotations

import pytest
import testkit
import torch

import kernels.fused_add_rms_norm.ops
import kernels.rms_norm.ops
import kernels.scalar_ops.ops  # noqa: F401  (registers torch.ops.kwb.*)
from kernels.fused_add_rms_norm import fused_add_rms_norm, fused_add_rms_norm_reference
from kernels.rms_norm import rms_norm, rms_norm_reference
from kernels.scalar_ops import scalar_op, scalar_op_reference
from kernels.torch_ops import decode_tiles, encode_tiles

ops = torch.ops.kwb
CPU_OPCHECKS = ("test_schema", "test_autograd_registration", "test_faketensor")


def _randn(*shape, device="cpu", dtype=torch.float32, seed=0, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(device, dtype).requires_grad_(requires_grad)


def test_tiles_travel_as_one_string_and_come_back():
    tiles = {"BLOCK_SIZE_M": 2, "DW_REDUCE": "partials", "BLOCK_SIZE": "auto", "USE_WHERE": False, "GRID": 7}
    text = encode_tiles(tiles)
    assert text == "BLOCK_SIZE=auto;BLOCK_SIZE_M=2;DW_REDUCE=partials;GRID=7;USE_WHERE=False"
    assert dict(decode_tiles(text)) == tiles
    assert decode_tiles(encode_tiles({})) == ()


# --- every op, and its samples (odd sizes, one row, 3-D inputs, no weight) -----------------------
def _norm_samples(device, requires_grad):
    samples = []
    for seed, (shape, weight, tiles) in enumerate(
        [((5, 37), True, ""), ((1, 64), False, ""), ((2, 3, 19), True, "BLOCK_SIZE_M=2"), ((7, 33), True, "")]
    ):
        x = _randn(*shape, device=device, seed=seed, requires_grad=requires_grad)
        w = _randn(shape[-1], device=device, seed=seed + 1, requires_grad=requires_grad) if weight else None
        samples.append((x, w, tiles))
    return samples


def _rms_forward_args(device, requires_grad=True):
    return [(x, w, 1e-6, 0.0, "llama", "auto", tiles) for x, w, tiles in _norm_samples(device, requires_grad)]


def _rms_backward_args(device):
    args = []
    for x, w, tiles in _norm_samples(device, False):
        _, rstd = ops.rms_norm_forward(x, w, 1e-6, 0.0, "gemma", "auto", tiles)
        dy = _randn(*x.shape, device=device, seed=99)
        args.append((dy, x, w, rstd, 0.0, "gemma", "auto", tiles))
    return args


def _fused_forward_args(device, requires_grad=True):
    args = []
    for x, w, tiles in _norm_samples(device, requires_grad):
        r = _randn(*x.shape, device=device, seed=7, requires_grad=requires_grad)
        args.append((x, r, w, 1e-5, 0.0, "llama", "auto", tiles))
    return args


def _fused_backward_args(device):
    args = []
    for i, (x, r, w, *settings) in enumerate(_fused_forward_args(device, requires_grad=False)):
        _, s, rstd = ops.fused_add_rms_norm_forward(x, r, w, *settings)
        dy = _randn(*x.shape, device=device, seed=98)
        ds = _randn(*x.shape, device=device, seed=97) if i % 2 else None
        args.append((dy, ds, s, w, rstd, *settings[1:]))
    return args


def _scalar_args(device):
    x = _randn(3, 41, device=device, seed=3).abs() + 0.5
    return [(x, "div", 3.0, "auto", ""), (x, "sub", -1.5, "auto", "BLOCK_SIZE=256"), (x, "pow", 1.7, "auto", "")]


OPS = {
    "rms_norm_forward": _rms_forward_args,
    "rms_norm_backward": _rms_backward_args,
    "fused_add_rms_norm_forward": _fused_forward_args,
    "fused_add_rms_norm_backward": _fused_backward_args,
    "scalar_op": _scalar_args,
}


@pytest.mark.parametrize("name", list(OPS))
def test_opcheck_on_cpu(name):
    op = getattr(ops, name).default
    for args in OPS[name]("cpu"):
        torch.library.opcheck(op, args, test_utils=CPU_OPCHECKS)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(OPS))
def test_opcheck_on_gpu(name):
    op = getattr(ops, name).default
    for args in OPS[name]("cuda"):
        torch.library.opcheck(op, args)


def test_the_ops_compute_what_the_public_functions_do():
    x, w = _randn(6, 45, seed=1), _randn(45, seed=2)
    y, rstd = ops.rms_norm_forward(x, w, 1e-6, 1.0, "gemma", "gpu", "BLOCK_SIZE_M=1")
    assert torch.equal(y, rms_norm(x, w, offset=1.0, casting_mode="gemma", impl="gpu", BLOCK_SIZE_M=1))
    assert rstd.shape == (6,) and rstd.dtype == torch.float32
    r = _randn(6, 45, seed=3)
    y, s, _ = ops.fused_add_rms_norm_forward(x, r, w, 1e-6, 0.0, "llama", "npu", "")
    want_y, want_s = fused_add_rms_norm(x, r, w, impl="npu")
    assert torch.equal(y, want_y) and torch.equal(s, want_s)
    with torch.no_grad():
        assert torch.equal(ops.scalar_op(x, "sub", 0.25, "gpu", ""), scalar_op("sub", x, 0.25, strategy="triton"))


def test_a_bad_tile_through_the_op_is_the_public_functions_error():
    x = _randn(4, 40)
    with pytest.raises(ValueError, match="BLOCK_SIZE_M"):
        ops.rms_norm_forward(x, None, 1e-6, 0.0, "llama", "gpu", "BLOCK_SIZE_M=3")


# --- torch.compile of a module calling the public functions ------------------------------------
def test_the_ops_register_on_first_compile_not_on_import():
    """Registering a triton_op imports torch._inductor (seconds): an eager-only model skips it,
    and a compiled call imports it inside Dynamo's trace without a graph break."""
    code = (
        "import sys, torch\n"
        "from kernels.rms_norm import rms_norm\n"
        "assert 'kernels.rms_norm.ops' not in sys.modules and 'torch._inductor' not in sys.modules\n"
        "x = torch.randn(3, 21)\n"
        "y = torch.compile(lambda x: rms_norm(x, None), backend='eager', fullgraph=True)(x)\n"
        "assert torch.equal(y, rms_norm(x, None)) and 'kernels.rms_norm.ops' in sys.modules\n"
    )
    out = testkit.python_in_repo(code, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


class _Block(torch.nn.Module):
    """A decoder-like step: a scalar op, fused add + RMSNorm, RMSNorm, all three families."""

    def __init__(self, hidden, device="cpu", dtype=torch.float32, **tiles):
        super().__init__()
        self.w1 = torch.nn.Parameter(_randn(hidden, device=device, dtype=dtype, seed=11) * 0.1 + 1)
        self.w2 = torch.nn.Parameter(_randn(hidden, device=device, dtype=dtype, seed=12) * 0.1 + 1)
        self.tiles = tiles

    def forward(self, x, residual):
        y, s = fused_add_rms_norm(x, residual, self.w1, eps=1e-5, **self.tiles)
        z = rms_norm(y * 2.0, self.w2, casting_mode="gemma", offset=1.0, **self.tiles)
        with torch.no_grad():
            scale = scalar_op("div", s.detach(), 4.0, strategy="triton")
        return z + s + scale


def _graph_ops(gm) -> str:
    return gm.code


def test_compile_fullgraph_traces_our_ops_without_a_graph_break():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    block = _Block(37)
    x = _randn(2, 3, 37, seed=5, requires_grad=True)
    r = _randn(2, 3, 37, seed=6, requires_grad=True)
    compiled = torch.compile(block, backend=backend, fullgraph=True)
    out = compiled(x, r)
    want = block(x, r)
    assert len(graphs) == 1
    code = _graph_ops(graphs[0])
    for name in ("kwb.fused_add_rms_norm_forward", "kwb.rms_norm_forward", "kwb.scalar_op"):
        assert name in code, code
    torch.testing.assert_close(out, want, atol=0, rtol=0)
    grads = torch.autograd.grad(out.square().sum(), (x, r, block.w1, block.w2))
    want_grads = torch.autograd.grad(want.square().sum(), (x, r, block.w1, block.w2))
    for got, expected in zip(grads, want_grads):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_compiled_norms_match_the_reference():
    x = _randn(5, 29, seed=8, requires_grad=True)
    w = _randn(29, seed=9, requires_grad=True)
    fn = torch.compile(lambda x, w: rms_norm(x, w, eps=1e-5), backend="eager", fullgraph=True)
    y = fn(x, w)
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = rms_norm_reference(xr, wr, 1e-5, 0.0, "llama")
    torch.testing.assert_close(y.double(), ref, atol=1e-5, rtol=1e-5)
    dy = _randn(5, 29, seed=10)
    y.backward(dy)
    ref.backward(dy.double())
    torch.testing.assert_close(x.grad.double(), xr.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(w.grad.double(), wr.grad, atol=1e-4, rtol=1e-4)
    r = _randn(5, 29, seed=11)
    fused = torch.compile(lambda x, r: fused_add_rms_norm(x, r, None), backend="eager", fullgraph=True)
    got_y, got_s = fused(x.detach(), r)
    want_y, want_s = fused_add_rms_norm_reference(x.detach().double(), r.double(), None, 1e-6, 0.0, "llama")
    torch.testing.assert_close(got_y.double(), want_y, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_s.double(), want_s, atol=1e-6, rtol=1e-6)
    scalar = torch.compile(lambda x: scalar_op("pow", x, 2.5, strategy="triton"), backend="eager", fullgraph=True)
    xs = x.detach().abs() + 0.5
    torch.testing.assert_close(scalar(xs).double(), scalar_op_reference("pow", xs.double(), 2.5), atol=1e-5, rtol=1e-5)


# --- GPU: Inductor, reduce-overhead, CUDA graphs ----------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_inductor_compiles_our_ops_and_matches_eager(mode):
    # fp32: Inductor fuses the pointwise ops around ours and rounds once where eager rounds each
    # bf16 intermediate, so bf16 gradients differ by rounding alone; a kernel bug shows in fp32.
    torch._dynamo.reset()
    block = _Block(1000, device="cuda", dtype=torch.float32)
    x = _randn(64, 1000, device="cuda", dtype=torch.float32, seed=1, requires_grad=True)
    r = _randn(64, 1000, device="cuda", dtype=torch.float32, seed=2, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead records its CUDA graph on a later call
        out = compiled(x, r)
        grads = torch.autograd.grad(out.float().square().sum(), (x, r, block.w1, block.w2))
    want = block(x, r)
    want_grads = torch.autograd.grad(want.float().square().sum(), (x, r, block.w1, block.w2))
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    for got, expected in zip(grads, want_grads):
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)


def _bits(t):
    return t.contiguous().view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _capture_and_compare(step, inputs):
    """Run ``step(*inputs)`` eagerly, then capture it in a CUDA graph, replay it on the same
    inputs and compare every output bit for bit."""
    # Detached: a clone keeps the eager autograd graph, and with it AccumulateGrad nodes made on
    # the default stream, alive into the capture, where the backward's sync with their stream
    # breaks it ("operation would make the legacy stream depend on a capturing blocking stream").
    want = [t.detach().clone() for t in step(*inputs)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up outside the capture: compiles and fills the launch cache
            step(*inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step(*inputs)
    graph.replay()
    torch.cuda.synchronize()
    assert len(captured) == len(want)
    for i, (got, expected) in enumerate(zip(captured, want)):
        assert torch.equal(_bits(got), _bits(expected)), f"output {i} differs after graph replay"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hidden", [1000, 4096])
def test_each_family_forward_backward_replays_bit_identical_in_a_cuda_graph(dtype, hidden):
    x = _randn(257, hidden, device="cuda", dtype=dtype, seed=1, requires_grad=True)
    r = _randn(257, hidden, device="cuda", dtype=dtype, seed=2, requires_grad=True)
    w = _randn(hidden, device="cuda", dtype=dtype, seed=3, requires_grad=True)
    dy = _randn(257, hidden, device="cuda", dtype=dtype, seed=4)
    # dw reduced through partials: the atomic reduction's fp32 sum order varies run to run.
    tiles = {"DW_REDUCE": "partials"}

    def rms_step(x, w, dy):
        y = rms_norm(x, w, **tiles)
        return (y, *torch.autograd.grad(y, (x, w), dy))

    def fused_step(x, r, w, dy):
        y, s = fused_add_rms_norm(x, r, w, **tiles)
        return (y, s, *torch.autograd.grad((y, s), (x, r, w), (dy, dy)))

    def scalar_step(x):
        with torch.no_grad():
            return (scalar_op("pow", x, 1.5, strategy="triton"), scalar_op("div", x, -3.0, strategy="triton"))

    _capture_and_compare(rms_step, (x, w, dy))
    _capture_and_compare(fused_step, (x, r, w, dy))
    _capture_and_compare(scalar_step, (x.detach().abs() + 0.5,))
