"""The eager call without gradients on CUDA: a plan per layout that replays the forward's launch
(kernels/rms_norm/__init__.py's ``_EAGER``, kernels/fast_launch.py's ``replay_of``).

Every case compares the planned call with the same call through Triton's own launch
(``WORKBENCH_FAST_LAUNCH=0``), bit for bit, and checks which path ran: a layout change must
take its own plan, a call with gradients the autograd path, a recorded or compiled launch the
long way. The CPU tests of the replay itself (a fake driver) are in tests/test_fast_launch.py.
"""

from __future__ import annotations

import gc
import sys

import pytest
import torch

from kernels import fast_launch
from kernels.rms_norm import _BACKWARD, _EAGER, rms_norm

pytestmark = pytest.mark.gpu


@pytest.fixture
def fresh_path(monkeypatch):
    monkeypatch.setenv(fast_launch.ENV_SWITCH, "1")
    fast_launch.reset()
    yield
    fast_launch.reset()


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _stock(monkeypatch, fn):
    """``fn()`` through Triton's own launch (the fast path and its replays off)."""
    monkeypatch.setenv(fast_launch.ENV_SWITCH, "0")
    fast_launch.reset()
    try:
        return fn()
    finally:
        monkeypatch.setenv(fast_launch.ENV_SWITCH, "1")
        fast_launch.reset()


def _offset(shape, dtype, offset, seed):
    gen = torch.Generator().manual_seed(seed)
    numel = torch.Size(shape).numel()
    buf = torch.randn(numel + 16, generator=gen).to("cuda", dtype)
    return buf[offset : offset + numel].view(shape)


def _captured(call):
    """``(graph, output)`` of ``call`` captured in a CUDA graph on a side stream."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            output = call()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, output


LAYOUTS = [
    # (shape, dtype, element offset, weight, casting mode, eps)
    ((4096, 1024), torch.bfloat16, 0, True, "llama", 1e-6),
    ((1, 64), torch.float32, 0, True, "llama", 1e-6),  # one row
    ((3, 1000), torch.float16, 1, True, "gemma", 1e-5),  # odd hidden, x 2 bytes past alignment
    ((2, 5, 4096), torch.bfloat16, 3, False, "none", 1e-6),  # 3-D, no weight, unaligned
    ((7, 4096), torch.float32, 4, True, "llama", 0.0),  # 16 bytes past: aligned again
]


def test_planned_calls_are_bit_identical_and_replayed(fresh_path, monkeypatch):
    inputs = []
    for seed, (shape, dtype, offset, weighted, casting, eps) in enumerate(LAYOUTS):
        x = _offset(shape, dtype, offset, seed)
        w = _offset(shape[-1:], dtype, 0, seed + 100) if weighted else None
        inputs.append((x, w, casting, eps))

    def run_all(rounds):
        return [rms_norm(x, w, eps=eps, casting_mode=casting) for _ in range(rounds) for x, w, casting, eps in inputs]

    with torch.no_grad():
        stock = _stock(monkeypatch, lambda: run_all(1))
        run_all(1)  # plans every layout
        before = fast_launch.status()["hits"]
        planned = run_all(3)
    torch.cuda.synchronize()
    assert fast_launch.status()["hits"] - before == 3 * len(LAYOUTS), "every later call replays"
    for i, got in enumerate(planned):
        want = stock[i % len(LAYOUTS)]
        assert got.shape == want.shape and got.dtype == want.dtype and got.grad_fn is None
        assert torch.equal(_bits(got), _bits(want)), f"layout {i % len(LAYOUTS)} differs"


def test_training_calls_replay_both_launches_and_match(fresh_path, monkeypatch):
    """With gradients the autograd node replays the forward's launch and keeps a backward plan
    of its own: dx bit for bit as Triton's launch gives it, dw within the atomic reduction's
    run-to-run rounding, the kept dw accumulator zero afterwards; in place too. A strided dy and
    chunked rows take the long way."""
    from kernels.rms_norm.gpu import dw_accumulator

    cases = []
    for seed, (shape, dtype, offset, weighted, casting, eps) in enumerate(LAYOUTS):
        x = _offset(shape, dtype, offset, seed).requires_grad_(True)
        w = _offset(shape[-1:], dtype, 0, seed + 100).requires_grad_(True) if weighted else None
        dys = [
            torch.randn(shape, generator=torch.Generator().manual_seed(seed + k)).to("cuda", dtype) for k in range(4)
        ]
        cases.append((x, w, casting, eps, dys, seed % 2 == 1))

    def step(case, k):
        x, w, casting, eps, dys, in_place = case
        y = rms_norm(x, w, eps=eps, casting_mode=casting, in_place=in_place)
        leaves = (x,) if w is None else (x, w)
        return (y, *torch.autograd.grad(y, leaves, dys[k].clone()))

    stock = _stock(monkeypatch, lambda: [step(case, k) for k in range(4) for case in cases])
    got = [step(case, 0) for case in cases]  # plans both launches of every layout
    before = fast_launch.status()["hits"]
    got += [step(case, k) for k in range(1, 4) for case in cases]
    torch.cuda.synchronize()
    assert fast_launch.status()["hits"] - before == 2 * 3 * len(cases), "later steps replay forward and backward"
    order = [(k, i) for k in range(4) for i in range(len(cases))]
    planned_order = [(0, i) for i in range(len(cases))] + [(k, i) for k in range(1, 4) for i in range(len(cases))]
    by_step = dict(zip(planned_order, got))
    for (k, i), ref in zip(order, stock):
        out = by_step[(k, i)]
        assert torch.equal(_bits(out[0]), _bits(ref[0])), f"y, layout {i}, step {k}"
        assert torch.equal(_bits(out[1]), _bits(ref[1])), f"dx, layout {i}, step {k}"
        if len(ref) == 3:
            torch.testing.assert_close(out[2].float(), ref[2].float(), atol=1e-2, rtol=1e-2)
            assert not dw_accumulator(cases[i][1], cases[i][1].shape[0]).any()

    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(1024, 64, device="cuda", dtype=torch.bfloat16).t()  # strided: the long way
    for _ in range(3):
        y = rms_norm(x, w)
        dx, dw = torch.autograd.grad(y, (x, w), dy)
        ref = torch.nn.functional.rms_norm(x.float(), (1024,), w.float(), 1e-6)
        dx_ref, dw_ref = torch.autograd.grad(ref, (x, w), dy.float())
        torch.testing.assert_close(dx.float(), dx_ref.float(), atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(dw.float(), dw_ref.float(), atol=0.5, rtol=2e-2)
    strided = [plan for key, plan in _BACKWARD.items() if key[1] == (64, 1024) and key[-1] is False]
    assert strided == [False], "a strided dy has no backward replay: Triton's launch path each time"


def test_each_change_of_layout_takes_its_own_path(fresh_path, monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    variants = {
        "planned": lambda: rms_norm(x, w),
        "another shape": lambda: rms_norm(x[:17], w),
        "strided rows": lambda: rms_norm(x[::2], w),  # not contiguous: copied, never replayed
        "transposed": lambda: rms_norm(x.t().contiguous().t()[:, :64], w[:64]),
        "another dtype": lambda: rms_norm(x.float(), w.float()),
        "unaligned": lambda: rms_norm(x.view(-1)[3 : 3 + 63 * 1024].view(63, 1024), w),
        "no weight": lambda: rms_norm(x, None),
        "another eps": lambda: rms_norm(x, w, eps=1e-3),
        "explicit tiles": lambda: rms_norm(x, w, BLOCK_SIZE_M=1),
    }
    stock = _stock(monkeypatch, lambda: {name: fn() for name, fn in variants.items()})
    for _ in range(3):  # the first round plans, the next ones replay; interleaved, each keeps its own
        for name, fn in variants.items():
            assert torch.equal(_bits(fn()), _bits(stock[name])), name
    # gradients: the autograd path, whatever the layout's plan
    xg = x.clone().requires_grad_(True)
    y = rms_norm(xg, w)
    assert y.grad_fn is not None
    (dx,) = torch.autograd.grad(y.float().sum(), (xg,))
    ref = torch.nn.functional.rms_norm(xg.float(), (1024,), w.float(), 1e-6)
    (dx_ref,) = torch.autograd.grad(ref.sum(), (xg,))
    torch.testing.assert_close(dx.float(), dx_ref.float(), atol=2e-2, rtol=2e-2)
    with torch.no_grad():
        assert rms_norm(xg, w).grad_fn is None
    assert rms_norm(x, w).grad_fn is None
    # a weight that requires grad takes the autograd path too
    assert rms_norm(x, w.clone().requires_grad_(True)).grad_fn is not None


def test_a_call_with_bad_inputs_still_says_what_to_change(fresh_path):
    x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
    rms_norm(x, torch.randn(256, device="cuda", dtype=torch.bfloat16))  # planned
    with pytest.raises(ValueError, match="cast weight to x.dtype"):
        rms_norm(x, torch.randn(256, device="cuda", dtype=torch.float32))
    with pytest.raises(ValueError, match="hidden size of x"):
        rms_norm(x, torch.randn(128, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="weight must be a tensor"):
        rms_norm(x, [1.0] * 256)
    with pytest.raises(ValueError, match="BLOCK_SIZE"):
        rms_norm(x, None, BLOCK_SIZE=100)


def _blocks_left_alive(fn, n: int = 2000) -> float:
    """Python memory blocks still allocated per call after ``n`` calls, outputs kept."""
    kept = [None] * n
    gc.collect()
    gc.disable()
    try:
        before = sys.getallocatedblocks()
        for i in range(n):
            kept[i] = fn()
        after = sys.getallocatedblocks()
    finally:
        gc.enable()
    return (after - before) / n


def test_a_steady_eager_call_leaves_nothing_alive_but_its_output(fresh_path):
    """Python memory blocks still allocated after a call, per call, its output kept: the Tensor
    object and nothing of the call's own (plans, keys, launch arguments). Objects that outlive
    a call are what drive the collector in a process with a large heap. The baseline, a bare
    ``torch.empty_like`` measured the same way in this process, is what the output alone
    costs here (a test runner's plugins may add to every call)."""
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(10):
            rms_norm(x, w)
        hits = fast_launch.status()["hits"]
        ours = _blocks_left_alive(lambda: rms_norm(x, w))
        assert fast_launch.status()["hits"] - hits == 2000
        output_alone = _blocks_left_alive(lambda: torch.empty_like(x))
    assert ours <= 3 or ours - output_alone <= 0.05, f"{ours:.2f} blocks per call, the output alone {output_alone:.2f}"
    assert rms_norm(x, w).grad_fn is None


def test_recorded_and_compile_only_launches_are_seen(fresh_path):
    from kernels.launch import recording

    x = torch.randn(32, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        rms_norm(x, w)  # planned and replayed
    with recording() as launches:
        rms_norm(x, w)
    assert [launch.name for launch in launches] == ["_rms_norm_forward_kernel"]
    assert launches[0].compiled is not None
    hits = fast_launch.status()["hits"]
    rms_norm(x, w)
    assert fast_launch.status()["hits"] >= hits + 1  # planned again after the recording
    # A layout whose first call is recorded (the measuring tool's first call) plans on its next.
    x2 = torch.randn(48, 512, device="cuda", dtype=torch.bfloat16)
    with recording():
        rms_norm(x2, w)
    rms_norm(x2, w)
    hits = fast_launch.status()["hits"]
    for _ in range(5):
        rms_norm(x2, w)
    assert fast_launch.status()["hits"] == hits + 5
    assert _EAGER.get((x2.shape, x2.stride(), x2.dtype, x2.get_device(), x2.data_ptr() & 15,
                       (w.shape, w.stride(), w.dtype, w.get_device()), 1e-6, 0.0, "llama", "auto", ()))  # fmt: skip


def test_the_off_switch_turns_the_replays_off(fresh_path, monkeypatch):
    x = torch.randn(16, 2048, device="cuda", dtype=torch.float16)
    w = torch.randn(2048, device="cuda", dtype=torch.float16)
    want = rms_norm(x, w)
    monkeypatch.setenv(fast_launch.ENV_SWITCH, "0")
    fast_launch.reset()  # retires the plan's replay
    for _ in range(3):
        assert torch.equal(rms_norm(x, w), want)
    status = fast_launch.status()
    assert status["enabled"] is False and status["hits"] == 0


def test_graph_capture_and_torch_compile_still_work(fresh_path):
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    want = torch.nn.functional.rms_norm(x.float(), (1024,), w.float(), 1e-6)
    for _ in range(3):
        rms_norm(x, w)  # planned before the capture
    graph, captured = _captured(lambda: rms_norm(x, w))
    x.copy_(x * 2)
    graph.replay()
    torch.cuda.synchronize()
    want2 = torch.nn.functional.rms_norm(x.float(), (1024,), w.float(), 1e-6)
    torch.testing.assert_close(captured.float(), want2, atol=2e-2, rtol=2e-2)
    compiled = torch.compile(lambda a, b: rms_norm(a, b) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(x, w).float(), 2 * want2, atol=4e-2, rtol=2e-2)
    assert not torch.equal(want, want2)


def test_fused_add_planned_calls_are_bit_identical_and_take_the_right_path(fresh_path, monkeypatch):
    from kernels.fused_add_rms_norm import fused_add_rms_norm

    layouts = [((4096, 1024), torch.bfloat16, 0, True), ((3, 1000), torch.float16, 1, True),
               ((2, 5, 4096), torch.float32, 0, False), ((1, 64), torch.bfloat16, 3, True)]  # fmt: skip
    inputs = []
    for seed, (shape, dtype, offset, weighted) in enumerate(layouts):
        x, r = _offset(shape, dtype, offset, seed), _offset(shape, dtype, 0, seed + 50)
        w = _offset(shape[-1:], dtype, 0, seed + 100) if weighted else None
        inputs.append((x, r, w))
    strided = (inputs[0][0][::2], inputs[0][1][::2], inputs[0][2])  # rows not contiguous: never replayed

    def run_all(rounds):
        return [fused_add_rms_norm(*args) for _ in range(rounds) for args in [*inputs, strided]]

    stock = _stock(monkeypatch, lambda: run_all(1))
    run_all(1)
    before = fast_launch.status()["hits"]
    planned = run_all(3)
    torch.cuda.synchronize()
    assert fast_launch.status()["hits"] - before >= 3 * len(layouts)
    for i, (y, s) in enumerate(planned):
        want_y, want_s = stock[i % (len(layouts) + 1)]
        assert y.grad_fn is None and s.grad_fn is None
        assert torch.equal(_bits(y), _bits(want_y)) and torch.equal(_bits(s), _bits(want_s)), i
    x, r, w = inputs[0]
    y, s = fused_add_rms_norm(x, r.clone().requires_grad_(True), w)
    assert y.grad_fn is not None and s.grad_fn is not None
    with pytest.raises(ValueError, match="no broadcasting"):
        fused_add_rms_norm(x, r[:1], w)


# --- the block-sparse sum layer's eager plan (kernels/block_sparse/__init__.py's _SUM_EAGER) ---
def _layer(nodes, batch, seed, block_size=0, index_dtype=torch.int32, K=0):
    from kernels.block_sparse import make_layer

    problem = {"layer": "sum", "nodes": nodes, "block_size": block_size, "K": K, "batch": batch, "tied": False}
    made = make_layer(problem, device="cuda", seed=seed)
    return {**made, "cids": made["cids"].to(index_dtype), "pids": made["pids"].to(index_dtype)}


SUM_LAYOUTS = [
    # (nodes, batch, block size (0: the largest power of two), index dtype, K, tiles)
    (1024, 1, 0, torch.int32, 0, {}),  # the HMM at batch 1: split-K, two launches
    (1024, 16, 0, torch.int64, 0, {}),  # tl.dot tiles
    (96, 3, 32, torch.int32, 0, {}),  # odd batch, three blocks
    (48, 1, 16, torch.int64, 5, {"EDGES": "gather"}),  # K not a power of two, edges loaded
    (256, 8, 0, torch.int32, 0, {"SPLITS": 4, "TILE_K": 32}),  # explicit split-K
]


def test_block_sparse_planned_calls_are_bit_identical_and_replayed(fresh_path, monkeypatch):
    from kernels.block_sparse import sum_layer

    layers = [(_layer(n, b, seed, bs, dt, k), bs, tiles) for seed, (n, b, bs, dt, k, tiles) in enumerate(SUM_LAYOUTS)]

    def run_all(rounds):
        calls = []
        for _ in range(rounds):
            for layer, bs, tiles in layers:
                block = bs or min(layer["element_mars"].shape[0] & -layer["element_mars"].shape[0], 1024)
                args = (layer["element_mars"], layer["params"], layer["cids"], layer["pids"], block)
                calls.append(sum_layer(*args, **tiles))
        return calls

    with torch.no_grad():
        stock = _stock(monkeypatch, lambda: run_all(1))
        run_all(1)  # plans every layout
        before = fast_launch.status()
        planned = run_all(3)
    torch.cuda.synchronize()
    after = fast_launch.status()
    assert after["misses"] == before["misses"] and after["fallbacks"] == before["fallbacks"]
    assert after["hits"] - before["hits"] >= 3 * len(SUM_LAYOUTS), "every later call replays"
    for i, got in enumerate(planned):
        want = stock[i % len(SUM_LAYOUTS)]
        assert got.shape == want.shape and got.grad_fn is None
        assert torch.equal(_bits(got), _bits(want)), f"layout {i % len(SUM_LAYOUTS)} differs"


def test_block_sparse_each_change_takes_its_own_path(fresh_path, monkeypatch):
    from kernels.block_sparse import _SUM_EAGER, _replayed_sum, sum_layer, sum_layer_reference

    layer = _layer(256, 4, 0)
    em, params, cids, pids = layer["element_mars"], layer["params"], layer["cids"], layer["pids"]
    bs = 256

    def ref(e=em, p=params, c=cids, q=pids):
        return sum_layer_reference(e.double(), p.double(), c.long(), q.long(), bs).float()

    for _ in range(3):
        torch.testing.assert_close(sum_layer(em, params, cids, pids, bs), ref(), atol=1e-5, rtol=1e-5)
    assert len(_SUM_EAGER) == 1
    # new index tensors with the same values: a plan of their own
    cids2, pids2 = cids.clone(), pids.clone()
    torch.testing.assert_close(sum_layer(em, params, cids2, pids2, bs), ref(), atol=1e-5, rtol=1e-5)
    # an in-place change of the indices: checked again, and an index out of range is refused
    cids2[0, 0] = em.shape[0]
    with pytest.raises(ValueError, match="cids out of range"):
        sum_layer(em, params, cids2, pids2, bs)
    cids2[0, 0] = 5
    torch.testing.assert_close(sum_layer(em, params, cids2, pids2, bs), ref(c=cids2), atol=1e-5, rtol=1e-5)
    # strided element_mars: copied, never replayed from the strided address
    wide = torch.randn(em.shape[0], 8, device="cuda") - 2
    for _ in range(2):
        torch.testing.assert_close(
            sum_layer(wide[:, ::2], params, cids, pids, bs), ref(e=wide[:, ::2]), atol=1e-5, rtol=1e-5
        )
    # another batch, and gradients: the autograd path, whatever the plans
    torch.testing.assert_close(sum_layer(em[:, :1], params, cids, pids, bs), ref(e=em[:, :1]), atol=1e-5, rtol=1e-5)
    emg = em.clone().requires_grad_(True)
    out = sum_layer(emg, params, cids, pids, bs)
    assert out.grad_fn is not None
    (g,) = torch.autograd.grad(out.sum(), (emg,))
    emr = em.double().requires_grad_(True)
    (g_ref,) = torch.autograd.grad(
        sum_layer_reference(emr, params.double(), cids.long(), pids.long(), bs).sum(), (emr,)
    )
    torch.testing.assert_close(g.double(), g_ref, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        assert sum_layer(emg, params, cids, pids, bs).grad_fn is None
    # a plan never answers for another index tensor that took a freed one's id: identity is
    # checked (the other tensor stands in for one at the same id, version and address)
    key = next(k for k in _SUM_EAGER if k[10] == id(cids))
    assert _replayed_sum(key, em, params, cids.clone(), pids) is None
    assert key not in _SUM_EAGER


def test_block_sparse_steady_call_leaves_nothing_alive_but_its_output(fresh_path):
    from kernels.block_sparse import sum_layer

    layer = _layer(1024, 1, 0)
    args = (layer["element_mars"], layer["params"], layer["cids"], layer["pids"], 1024)
    with torch.no_grad():
        for _ in range(10):
            sum_layer(*args)
        hits = fast_launch.status()["hits"]
        ours = _blocks_left_alive(lambda: sum_layer(*args))
        assert fast_launch.status()["hits"] - hits >= 2000
        output_alone = _blocks_left_alive(lambda: torch.empty_like(args[0]))
    assert ours <= 3 or ours - output_alone <= 0.05, f"{ours:.2f} blocks per call, the output alone {output_alone:.2f}"


def test_block_sparse_plans_survive_graph_capture_and_the_off_switch(fresh_path, monkeypatch):
    from kernels.block_sparse import sum_layer

    layer = _layer(1024, 2, 3)
    em, params, cids, pids = layer["element_mars"], layer["params"], layer["cids"], layer["pids"]
    want = sum_layer(em, params, cids, pids, 1024)
    for _ in range(2):
        sum_layer(em, params, cids, pids, 1024)
    graph, captured = _captured(lambda: sum_layer(em, params, cids, pids, 1024))
    em.add_(1.0)  # log-space: every output moves by one
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, want + 1.0, atol=1e-5, rtol=1e-5)
    monkeypatch.setenv(fast_launch.ENV_SWITCH, "0")
    fast_launch.reset()
    for _ in range(3):
        torch.testing.assert_close(sum_layer(em, params, cids, pids, 1024), want + 1.0, atol=1e-5, rtol=1e-5)
    assert fast_launch.status()["hits"] == 0


def test_a_planned_call_without_gradients_allocates_its_outputs_alone(fresh_path):
    """rstd of a forward no backward reads goes to a kept discard buffer (kernels.plans.discard_rows):
    a planned call makes one device allocation (RMSNorm: y) or two (fused: y and s), not one more
    for rstd; with gradients rstd is allocated (the backward reads it) and still correct."""
    from kernels.fused_add_rms_norm import fused_add_rms_norm

    x = torch.randn(300, 1024, device="cuda", dtype=torch.bfloat16)
    r = torch.randn_like(x)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)

    def allocations(fn, n=20):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        hits = fast_launch.status()["hits"]
        for _ in range(n):
            fn()
        assert fast_launch.status()["hits"] - hits == n
        return (torch.cuda.memory_stats()["allocation.all.allocated"] - before) / n

    with torch.no_grad():
        assert allocations(lambda: rms_norm(x, w)) == 1
        assert allocations(lambda: fused_add_rms_norm(x, r, w)) == 2
    want = torch.nn.functional.rms_norm(x.float(), (1024,), w.float(), 1e-6)
    torch.testing.assert_close(rms_norm(x, w).float(), want, atol=2e-2, rtol=2e-2)
    # with gradients the planned forward allocates rstd for its backward, which stays right
    xg = x.clone().requires_grad_(True)
    for _ in range(3):
        (dx,) = torch.autograd.grad(rms_norm(xg, w).float().sum(), (xg,))
    xr = x.float().requires_grad_(True)
    (dx_ref,) = torch.autograd.grad(torch.nn.functional.rms_norm(xr, (1024,), w.float(), 1e-6).sum(), (xr,))
    torch.testing.assert_close(dx.float(), dx_ref, atol=2e-2, rtol=2e-2)
    # a graph captured with the discard buffer's address stays valid when the plans go
    graph, captured = _captured(lambda: rms_norm(x, w))
    fast_launch.reset()  # retires the replays and empties the plans
    x.mul_(2)
    graph.replay()
    torch.cuda.synchronize()
    want = torch.nn.functional.rms_norm(x.float(), (1024,), w.float(), 1e-6)
    torch.testing.assert_close(captured.float(), want, atol=2e-2, rtol=2e-2)


# --- the HMM chain's replays (kernels/block_sparse/chain_replay.py) -------------------------------
CHAINS = [
    # (T, L, batch, HMM options)
    (6, 1024, 1, {}),  # the suite's chain shape, shorter: split-K forward, one block
    (5, 1024, 16, {"precision": "tf32"}),  # tl.dot tiles
    (4, 96, 3, {}),  # three blocks of 32: atomic element flows, odd batch
    (4, 6, 1, {}),  # 24-byte steps: half the steps' addresses in another alignment class
    (4, 48, 2, {"EDGES": "gather"}),  # edges loaded from cids / pids
]


def _chain_run(hmm, x):
    ll, flows = hmm.forward_backward(x)
    return ll, flows["trans"], flows["prior"], flows["emit"]


@pytest.mark.parametrize("T,L,batch,options", CHAINS)
def test_hmm_eager_chain_replays_match_the_long_way(fresh_path, monkeypatch, T, L, batch, options):
    """After one chain call at a batch size, later calls replay the transition and product
    layers from addresses: the log-likelihood bit for bit as Triton's own launch gives it, the
    flows as close as their atomic adds allow, and the replays counted as hits."""
    from kernels.block_sparse.hmm import HMM

    hmm = HMM(T=T, L=L, V=7, device="cuda", seed=T + L, **options)
    x = hmm.sample(batch, seed=batch)
    stock = _stock(monkeypatch, lambda: _chain_run(hmm, x))
    _chain_run(hmm, x)  # plans this batch size
    before = fast_launch.status()
    runs = [_chain_run(hmm, x) for _ in range(3)]
    torch.cuda.synchronize()
    after = fast_launch.status()
    assert after["misses"] == before["misses"]
    replayed = after["hits"] - before["hits"]
    steps = 5 * (T - 1)  # transition + product forward, product + two transition kernels backward
    if L * batch % 4 == 0:  # every step's addresses in the planned alignment class
        assert replayed >= 3 * steps, f"{replayed} replays for {3 * steps} step launches"
    else:  # the steps of the other class run the long way
        assert replayed > 0
    want = hmm.reference_loglik(x)
    for ll, trans, prior, emit in runs:
        assert torch.equal(_bits(ll), _bits(stock[0])), "log-likelihood differs from the long way"
        for got, ref in zip((trans, prior, emit), stock[1:]):
            torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(ll.double(), want, atol=1e-3, rtol=1e-5)


def test_hmm_eager_chain_replans_after_a_reset_and_is_seen_when_recorded(fresh_path, monkeypatch):
    """A reset of the fast path retires the chain's replays (the next call runs the long way and
    plans again); a recorded chain call launches every kernel through kernels.launch, so the
    measuring tool sees each one; HMM(replays=False) always runs the long way."""
    from kernels.block_sparse.hmm import HMM
    from kernels.launch import recording

    T = 4
    hmm = HMM(T=T, L=64, V=5, device="cuda", seed=1)
    long_way = []  # the transition layers run through the layer functions, per call
    layer = hmm.trans_forward
    monkeypatch.setattr(hmm, "trans_forward", lambda *a, **k: long_way.append(1) or layer(*a, **k))

    def run():
        long_way.clear()
        out = _chain_run(hmm, x)
        return out, len(long_way)

    x = hmm.sample(2)
    want, n = run()
    assert n == T - 1  # the first call at this batch: the long way, then the plan
    assert run()[1] == 0
    fast_launch.reset()
    assert run()[1] == T - 1
    assert run()[1] == 0
    with recording() as launches:
        got, n = run()
    assert n == T - 1
    names = [launch.name for launch in launches]
    assert names.count("_product_forward_kernel") == T - 1 and names.count("_product_backward_kernel") == T - 1
    assert names.count("_sum_param_flows_kernel") == T  # T - 1 transitions and the root
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    monkeypatch.setenv(fast_launch.ENV_SWITCH, "0")
    fast_launch.reset()
    for _ in range(2):
        got, n = run()
        assert n == T - 1
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert fast_launch.status()["hits"] == 0
    fixed = HMM(T=T, L=64, V=5, device="cuda", seed=1, replays=False)
    monkeypatch.setenv(fast_launch.ENV_SWITCH, "1")
    fast_launch.reset()
    for _ in range(3):
        for a, b in zip(_chain_run(fixed, x), want):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
