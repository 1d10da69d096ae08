"""Block-sparse PC layers: every kernel against the PyTorch reference (autograd as the backward
oracle), the tilings against each other, -inf and zero-weight edge cases, tied parameters, bad
input, the HMM chain against the classical recursion, and the spec through the harness.

CPU runs use the Triton interpreter, so layers are tiny (tens of nodes); ``device`` also runs
them on CUDA where present, and ``@pytest.mark.gpu`` tests take the issue's real shapes.

Why one long module: one test module per family, as for the other families; the kernels, the
tilings and the edge cases are checked against the same reference.
"""

from __future__ import annotations

import json

import pytest
import torch

from kernels import tuned_tables
from kernels.block_sparse import (
    _single_writers,
    gpu,
    largest_block_size,
    layer_edges,
    make_layer,
    npu,
    product_layer,
    product_layer_reference,
    spec,
    sum_layer,
    sum_layer_backward,
    sum_layer_backward_reference,
    sum_layer_reference,
)
from kernels.block_sparse.edges import GATHER, edge_layout
from kernels.block_sparse.hmm import HMM

BATCHES = (1, 2, 3, 8, 16, 17)
# (name, impl, tiles): the two GPU tilings and the NPU kernels.
IMPLS = (
    ("large", "gpu", {"heuristic": "large"}),
    ("small", "gpu", {"heuristic": "small"}),
    # batch split into one-column programs: a tiling the small-batch sweep tries
    ("narrow", "gpu", {"heuristic": "small", "TILE_M": 4, "BLOCK_B": 1}),
    # broadcast tiles with one shift per column (the tl.dot form's math, broadcast products)
    ("column", "gpu", {"heuristic": "small", "SHIFT": "column"}),
    ("npu", "npu", {}),
    ("npu_column", "npu", {"SHIFT": "column"}),
)
IMPL_IDS = [name for name, _, _ in IMPLS]


def product_tiles(tiles: dict) -> dict:
    """The tiles a product layer takes: SHIFT is the sum layer's alone (its forward and, with
    SHIFT="column", its factored flows; a product has no log-sum-exp)."""
    return {name: value for name, value in tiles.items() if name != "SHIFT"}


def layer(nodes, block_size, batch, device, K=0, tied=False, seed=0):
    problem = {"layer": "sum", "nodes": nodes, "block_size": block_size, "K": K, "batch": batch, "tied": tied}
    return make_layer(problem, device, seed)


def assert_close(got, want, atol=1e-4, scale_by_max=False, what=""):
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    assert torch.equal(torch.isnan(got), torch.isnan(want)), f"{what}: NaN pattern differs"
    assert torch.equal(torch.isinf(got), torch.isinf(want)), f"{what}: inf pattern differs"
    finite = torch.isfinite(want)
    assert torch.equal(got[~finite], want[~finite]), f"{what}: infinities differ"
    if scale_by_max and finite.any():
        atol = atol * max(1.0, float(want[finite].abs().max()))
    err = (got[finite] - want[finite]).abs().max().item() if finite.any() else 0.0
    assert err <= atol, f"{what}: max abs error {err:.3g} > {atol:.3g}"


def ref64(t):
    return t.detach().double().cpu()


# --- sum layer forward -----------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name,impl,tiles", IMPLS, ids=IMPL_IDS)
def test_sum_forward_matches_reference(device, batch, name, impl, tiles):
    nodes, bs = (32, 16) if batch % 2 else (24, 8)  # two shapes: G = 2 and G = 3 blocks
    x = layer(nodes, bs, batch, device)
    out = sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], bs, impl=impl, **tiles)
    want = sum_layer_reference(ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), bs)
    assert_close(out, want, what=f"{name} forward")


@pytest.mark.parametrize("bs,nodes,K", [(1, 5, 7), (2, 6, 3), (4, 12, 12), (6, 18, 18), (32, 32, 40)])
@pytest.mark.parametrize("name,impl,tiles", IMPLS, ids=IMPL_IDS)
def test_sum_forward_block_sizes(device, bs, nodes, K, name, impl, tiles):
    """Block sizes 1, 2, 4, a non-power-of-two 6, and 32; K below, equal to and above nodes."""
    x = layer(nodes, bs, 5, device, K=K)
    out = sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], bs, impl=impl, **tiles)
    want = sum_layer_reference(ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), bs)
    assert_close(out, want, what=f"{name} forward bs={bs}")


TILINGS = [
    {"TILE_M": 2, "TILE_K": 8, "BLOCK_B": 4},
    {"TILE_M": 8, "TILE_K": 4, "BLOCK_B": 8, "PROGRAM_M": 16},
    {"TILE_M": 4, "TILE_K": 32, "BLOCK_B": 2, "PROGRAM_M": 16},
    {"TILE_M": 16, "TILE_K": 16, "BLOCK_B": 16},  # tl.dot path
    {"TILE_M": 16, "TILE_K": 32, "BLOCK_B": 16, "PROGRAM_M": 32},  # dot, program walks 2 sub-tiles
    {"heuristic": "auto"},
]


def test_tilings_agree(device):
    """Every tiling (tl.dot and broadcast paths, PROGRAM_M walks) gives the same layer, batch 17."""
    x = layer(32, 16, 17, device)
    outs = [sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 16, **t) for t in TILINGS]
    outs.append(sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 16, impl="npu", TILE_K=8, GRID=3))
    for t, out in zip(TILINGS + [{"npu": 1}], outs):
        assert_close(out, outs[0], atol=2e-5, what=f"tiling {t}")
    F = torch.randn(32, 17, generator=torch.Generator().manual_seed(3)).to(device)
    flows = [
        sum_layer_backward(F, x["element_mars"], x["params"], outs[0], x["cids"], x["pids"], 16, **t)
        for t in ({"TILE_M": 4, "TILE_K": 8, "BLOCK_B": 4}, {"TILE_M": 8, "TILE_K": 4, "BLOCK_B": 32}, {})
    ]
    flows.append(
        sum_layer_backward(F, x["element_mars"], x["params"], outs[0], x["cids"], x["pids"], 16, impl="npu", GRID=2)
    )
    for e, p in flows[1:]:
        assert_close(e, flows[0][0], atol=1e-5, scale_by_max=True, what="element flows across tilings")
        assert_close(p, flows[0][1], atol=1e-5, scale_by_max=True, what="param flows across tilings")


# --- sum layer backward ----------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name,impl,tiles", IMPLS, ids=IMPL_IDS)
def test_sum_flows_match_reference(device, batch, name, impl, tiles):
    nodes, bs = (32, 16) if batch % 2 else (24, 4)
    x = layer(nodes, bs, batch, device, seed=batch)
    F = torch.rand(nodes, batch, generator=torch.Generator().manual_seed(batch)).to(device)
    out = sum_layer_reference(x["element_mars"], x["params"], x["cids"], x["pids"], bs)
    eflows, pflows = sum_layer_backward(
        F, x["element_mars"], x["params"], out, x["cids"], x["pids"], bs, impl=impl, **tiles
    )
    want_e, want_p = sum_layer_backward_reference(
        ref64(F), ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), bs
    )
    assert_close(eflows, want_e, scale_by_max=True, what=f"{name} element flows")
    assert_close(pflows, want_p, scale_by_max=True, what=f"{name} param flows")


@pytest.mark.parametrize("batch", (1, 3, 17))
@pytest.mark.parametrize("name,impl,tiles", IMPLS, ids=IMPL_IDS)
def test_sum_layer_autograd(device, batch, name, impl, tiles):
    """Gradients of the differentiable sum_layer equal the reference's autograd gradients."""
    x = layer(24, 8, batch, device, K=20, seed=7)
    em = x["element_mars"].clone().requires_grad_()
    p = x["params"].clone().requires_grad_()
    out = sum_layer(em, p, x["cids"], x["pids"], 8, impl=impl, **tiles)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(device)
    d_em, d_p = torch.autograd.grad(out, (em, p), g)
    em64, p64 = ref64(em).requires_grad_(), ref64(p).requires_grad_()
    want = sum_layer_reference(em64, p64, x["cids"].cpu(), x["pids"].cpu(), 8)
    w_em, w_p = torch.autograd.grad(want, (em64, p64), ref64(g))
    assert_close(d_em, w_em, scale_by_max=True, what=f"{name} d element_mars")
    assert_close(d_p, w_p, scale_by_max=True, what=f"{name} d params")


def test_sum_layer_autograd_only_needed_inputs(device):
    x = layer(16, 8, 2, device)
    em = x["element_mars"].clone().requires_grad_()
    out = sum_layer(em, x["params"], x["cids"], x["pids"], 8)
    (d_em,) = torch.autograd.grad(out.sum(), (em,))
    assert d_em.shape == em.shape and torch.isfinite(d_em).all()


# --- -inf, zero weights, tied parameters ------------------------------------------------------
@pytest.mark.parametrize("name,impl,tiles", IMPLS, ids=IMPL_IDS)
def test_all_neg_inf_children(device, name, impl, tiles):
    """Block 0's children are all -inf: its nodes are -inf, pass no flow, and nothing is NaN."""
    nodes, bs, batch = 16, 8, 3
    problem = {"layer": "sum", "nodes": nodes, "block_size": bs, "K": 6, "batch": batch, "tied": False}
    x = make_layer(problem, device)
    em = x["element_mars"].clone()
    em[x["cids"][0].long()] = float("-inf")  # every child of block 0
    em[:, 1] = float("-inf")  # batch column 1: every row -inf
    out = sum_layer(em, x["params"], x["cids"], x["pids"], bs, impl=impl, **tiles)
    want = sum_layer_reference(ref64(em), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), bs)
    assert torch.isneginf(out[:bs]).all() and torch.isneginf(out[:, 1]).all()
    assert_close(out, want, what="forward with -inf")
    F = torch.rand(nodes, batch).to(device)
    eflows, pflows = sum_layer_backward(F, em, x["params"], out, x["cids"], x["pids"], bs, impl=impl, **tiles)
    assert not torch.isnan(eflows).any() and not torch.isnan(pflows).any()
    want_e, want_p = sum_layer_backward_reference(
        ref64(F), ref64(em), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), bs
    )
    assert_close(eflows, want_e, scale_by_max=True, what="element flows with -inf")
    assert_close(pflows, want_p, scale_by_max=True, what="param flows with -inf")
    emg, pg = em.clone().requires_grad_(), x["params"].clone().requires_grad_()
    d_em, d_p = torch.autograd.grad(sum_layer(emg, pg, x["cids"], x["pids"], bs, impl=impl, **tiles).sum(), (emg, pg))
    assert not torch.isnan(d_em).any() and not torch.isnan(d_p).any()


@pytest.mark.parametrize("nodes,bs,batch", [(8, 4, 2), (32, 16, 16)])  # the second: tl.dot for "large"
@pytest.mark.parametrize("name,impl,tiles", IMPLS, ids=IMPL_IDS)
def test_zero_weights_far_above(device, nodes, bs, batch, name, impl, tiles):
    """Block 0 gives weight 0 to a child 200 nats above its other children: the forward must not
    shift by that child (its real terms would underflow to -inf), and the flows stay 0 there."""
    x = layer(nodes, bs, batch, device, K=16)
    em = x["element_mars"].clone()
    p = x["params"].clone()
    em[x["cids"][0, 0].long()] = 0.0
    em[x["cids"][0, 1:].long()] = -200.0
    p[x["pids"][0, 0] : x["pids"][0, 0] + bs] = 0.0  # block 0 ignores its highest child
    out = sum_layer(em, p, x["cids"], x["pids"], bs, impl=impl, **tiles)
    want = sum_layer_reference(ref64(em), ref64(p), x["cids"].cpu(), x["pids"].cpu(), bs)
    assert_close(out, want, atol=1e-3, what="forward")  # |out| ~ 200: fp32 spacing 1.5e-5
    F = torch.rand(nodes, batch).to(device)
    eflows, pflows = sum_layer_backward(F, em, p, out, x["cids"], x["pids"], bs, impl=impl, **tiles)
    want_e, want_p = sum_layer_backward_reference(ref64(F), ref64(em), ref64(p), x["cids"].cpu(), x["pids"].cpu(), bs)
    assert_close(eflows, want_e, atol=1e-3, scale_by_max=True, what="element flows")
    assert_close(pflows, want_p, atol=1e-3, scale_by_max=True, what="param flows")


@pytest.mark.parametrize("batch", (1, 17))
@pytest.mark.parametrize("name,impl,tiles", IMPLS, ids=IMPL_IDS)
def test_tied_parameters(device, batch, name, impl, tiles):
    """Blocks share one parameter set, and two edges of a block share a parameter run too."""
    nodes, bs, K = 24, 8, 10
    x = layer(nodes, bs, batch, device, K=K, tied=True, seed=2)
    pids = x["pids"].clone()
    pids[:, 3] = pids[:, 1]  # edges 1 and 3 of every block use the same weights
    F = torch.rand(nodes, batch, generator=torch.Generator().manual_seed(4)).to(device)
    out = sum_layer(x["element_mars"], x["params"], x["cids"], pids, bs, impl=impl, **tiles)
    want = sum_layer_reference(ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), pids.cpu(), bs)
    assert_close(out, want, what="tied forward")
    eflows, pflows = sum_layer_backward(F, x["element_mars"], x["params"], out, x["cids"], pids, bs, impl=impl, **tiles)
    want_e, want_p = sum_layer_backward_reference(
        ref64(F), ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), pids.cpu(), bs
    )
    assert_close(eflows, want_e, scale_by_max=True, what="tied element flows")
    assert_close(pflows, want_p, scale_by_max=True, what="tied param flows")
    assert float(pflows[x["pids"][0, 3] : x["pids"][0, 3] + bs].abs().sum()) == 0.0  # the unused run


# --- split-K forward, node-split flows (issue 16) ---------------------------------------------
SPLIT_IMPLS = (
    ("split_rule", "gpu", {"heuristic": "split"}),
    ("split4_tm8", "gpu", {"SPLITS": 4, "TILE_M": 8, "TILE_K": 4}),
    ("split2_dot", "gpu", {"SPLITS": 2, "TILE_M": 16, "TILE_K": 16, "BLOCK_B": 16}),
    ("split4_column", "gpu", {"SPLITS": 4, "TILE_M": 8, "TILE_K": 4, "SHIFT": "column"}),
    ("npu_split4", "npu", {"SPLITS": 4, "TILE_K": 4, "GRID": 3}),
    ("npu_split4_column", "npu", {"SPLITS": 4, "TILE_K": 4, "GRID": 3, "SHIFT": "column"}),
)
# (what, nodes, bs, K, batch, tied): odd K at batch 1; a block whose children are all -inf at
# batch 3; tied parameters (blocks share one set, two edges share a run) at batch 3.
SPLIT_CASES = (
    ("odd_K_batch1", 32, 16, 37, 1, False),
    ("dead_block_batch3", 32, 16, 21, 3, False),
    ("tied_batch3", 24, 8, 19, 3, True),
)


def _split_case(what, nodes, bs, K, batch, tied, device):
    x = layer(nodes, bs, batch, device, K=K, tied=tied, seed=K)
    em, pids = x["element_mars"].clone(), x["pids"].clone()
    if what.startswith("dead"):
        em[x["cids"][-1].long()] = float("-inf")  # every child of the last block (others share a few)
    if tied:
        pids[:, 3] = pids[:, 1]
    return em, x["params"], x["cids"], pids


@pytest.mark.parametrize("case", SPLIT_CASES, ids=[c[0] for c in SPLIT_CASES])
@pytest.mark.parametrize("name,impl,tiles", SPLIT_IMPLS, ids=[n for n, _, _ in SPLIT_IMPLS])
def test_split_forward_and_every_gradient(device, case, name, impl, tiles):
    """Split-K forward, its autograd gradients and the (node-split) flows against the reference."""
    what, nodes, bs, K, batch, tied = case
    em, params, cids, pids = _split_case(*case, device)
    em_g, p_g = em.clone().requires_grad_(), params.clone().requires_grad_()
    out = sum_layer(em_g, p_g, cids, pids, bs, impl=impl, **tiles)
    em64, p64 = ref64(em).requires_grad_(), ref64(params).requires_grad_()
    want = sum_layer_reference(em64, p64, cids.cpu(), pids.cpu(), bs)
    assert_close(out, want, what=f"{name} {what} forward")
    if what.startswith("dead"):
        assert torch.isneginf(out[-bs:]).all()
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(5)).to(device)
    d_em, d_p = torch.autograd.grad(out, (em_g, p_g), g)
    w_em, w_p = torch.autograd.grad(want, (em64, p64), ref64(g))
    assert_close(d_em, w_em, scale_by_max=True, what=f"{name} {what} d element_mars")
    assert_close(d_p, w_p, scale_by_max=True, what=f"{name} {what} d params")
    F = torch.rand(nodes, batch, generator=torch.Generator().manual_seed(6)).to(device)
    flow_tiles = {"NODE_SPLITS": 4, "TILE_M": 4} if impl == "gpu" else {}
    e, p = sum_layer_backward(F, em, params, out.detach(), cids, pids, bs, impl=impl, **flow_tiles)
    we, wp = sum_layer_backward_reference(ref64(F), ref64(em), ref64(params), cids.cpu(), pids.cpu(), bs)
    assert_close(e, we, scale_by_max=True, what=f"{name} {what} element flows")
    assert_close(p, wp, scale_by_max=True, what=f"{name} {what} param flows")


@pytest.mark.parametrize("precision", gpu.PRECISIONS)
@pytest.mark.parametrize("batch,K", [(16, 16), (17, 37), (33, 48)])
def test_dot_tiles_at_each_precision(device, precision, batch, K):
    """The tl.dot form at each input precision: odd K and batch (masked edges and columns), a
    node whose children are all -inf, and autograd through it, each within the precision's
    tolerance of the fp64 reference (TF32 on CUDA; the interpreter computes the dot in fp32)."""
    x = layer(32, 16, batch, device, K=K, seed=3)
    em = x["element_mars"].detach().clone()
    em[x["cids"][0, :].long(), :] = float("-inf")  # block 0: every child -inf
    em.requires_grad_(True)
    tiles = {"heuristic": "small", "TILE_M": 16, "TILE_K": 16, "BLOCK_B": 16}
    resolved = gpu.resolve_forward_tiles(2, 16, K, batch, 4, precision=precision, **tiles)
    assert resolved.USE_DOT and resolved.PRECISION == precision
    out = sum_layer(em, x["params"], x["cids"], x["pids"], 16, impl="gpu", precision=precision, **tiles)
    atol, _ = spec.tolerance("fp32", precision)
    em64, p64 = ref64(em).requires_grad_(True), ref64(x["params"]).requires_grad_(True)
    want = sum_layer_reference(em64, p64, x["cids"].cpu(), x["pids"].cpu(), 16)
    assert torch.isneginf(out[:16]).all()
    assert_close(out, want, atol=atol, what=f"forward at {precision}")
    grad = torch.randn_like(out).masked_fill(torch.isinf(out), 0.0)
    bwd = gpu.resolve_backward_tiles(2, 16, K, batch, 4, precision=precision)
    assert (bwd.element_form, bwd.param_form, bwd.PRECISION) == ("dot", "dot", precision)
    p = x["params"].detach().clone().requires_grad_(True)
    out = sum_layer(em, p, x["cids"], x["pids"], 16, impl="gpu", precision=precision, **tiles)
    d_em, d_p = torch.autograd.grad(out, (em, p), grad)
    d_em_ref, d_p_ref = torch.autograd.grad(want, (em64, p64), grad.detach().double().cpu())
    assert_close(d_em, d_em_ref, atol=atol, scale_by_max=True, what=f"d element_mars at {precision}")
    assert_close(d_p, d_p_ref, atol=atol, scale_by_max=True, what=f"d params at {precision}")


def test_tf32_operands_are_rounded_to_nearest_so_errors_do_not_drift():
    """At "tf32" the dot operands are rounded to the nearest TF32 value (the tensor cores would
    truncate: every product biased low, and an HMM's log-likelihood drifting over its layers).
    In the interpreter the dot itself is fp32, so the error is the rounding's alone: within TF32's
    tolerance, well above ieee's, and of either sign (a truncating conversion gives a mean signed
    error close to minus its mean absolute error)."""
    x = layer(64, 64, 32, "cpu", K=64, seed=21)
    tiles = {"heuristic": "small", "TILE_M": 16, "TILE_K": 16, "BLOCK_B": 16}
    want = sum_layer_reference(ref64(x["element_mars"]), ref64(x["params"]), x["cids"], x["pids"], 64)
    errs = {}
    for precision in ("ieee", "tf32"):
        out = sum_layer(
            x["element_mars"], x["params"], x["cids"], x["pids"], 64, impl="gpu", precision=precision, **tiles
        )
        errs[precision] = ref64(out) - want
    tf32 = errs["tf32"]
    assert tf32.abs().max() < spec.tolerance("fp32", "tf32")[0]
    assert tf32.abs().mean() > 10 * errs["ieee"].abs().mean()
    assert abs(float(tf32.mean())) < 0.25 * float(tf32.abs().mean())


# The factored flows (SHIFT="column"): tl.dot tiles on the GPU from batch 16, broadcast products on
# small tiles and on the NPU.
FACTORED = (
    ("gpu_dot", "gpu", 17, {"SHIFT": "column"}),
    ("gpu_dot_splits", "gpu", 16, {"SHIFT": "column", "NODE_SPLITS": 2}),
    ("gpu_broadcast", "gpu", 3, {"SHIFT": "column"}),
    ("npu", "npu", 3, {"SHIFT": "column"}),
)


@pytest.mark.parametrize("name,impl,batch,tiles", FACTORED, ids=[f[0] for f in FACTORED])
def test_factored_flows_signs_dead_nodes_and_far_apart_columns(device, name, impl, batch, tiles):
    """Flows of either sign, a column and a node with no flow, a block of dead nodes (all
    children -inf), and batch columns hundreds of nats apart (sequences of very different
    likelihood, where one shift for the whole batch would underflow): odd K, every flow against
    the fp64 reference."""
    nodes, bs, K = 48, 16, 37
    x = layer(nodes, bs, batch, device, K=K, seed=11)
    em = x["element_mars"].clone()
    em += torch.linspace(-300.0, 250.0, batch, device=em.device)[None, :]  # columns far apart
    em[x["cids"][2].long()] = float("-inf")  # block 2: dead nodes
    out = sum_layer_reference(em, x["params"], x["cids"], x["pids"], bs)
    F = torch.randn(nodes, batch, generator=torch.Generator().manual_seed(12)).to(device)
    F[:, batch // 2] = 0.0
    F[5] = 0.0
    e, p = sum_layer_backward(F, em, x["params"], out, x["cids"], x["pids"], bs, impl=impl, **tiles)
    we, wp = sum_layer_backward_reference(ref64(F), ref64(em), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), bs)
    assert not torch.isnan(e).any() and not torch.isnan(p).any()
    assert_close(e, we, scale_by_max=True, what=f"{name} element flows")
    assert_close(p, wp, scale_by_max=True, what=f"{name} param flows")


@pytest.mark.parametrize("precision", gpu.PRECISIONS)
def test_hmm_at_batch_16_takes_the_factored_flows_at_its_precision(device, precision):
    """The chain at batch 16 (L = 32: dot tiles forward and backward) against the classical
    recursion, log-likelihoods and flows, at each precision's tolerance."""
    hmm = HMM(T=3, L=32, V=5, device=device, impl="gpu", precision=precision)
    plan = hmm.plan(16)
    assert plan.trans_fwd.USE_DOT and plan.trans_fwd.PRECISION == precision
    assert (plan.trans_bwd.element_form, plan.trans_bwd.PRECISION) == ("dot", precision)
    x = hmm.sample(16, seed=3)
    ll, flows = hmm.forward_backward(x)
    want, want_flows = hmm.reference_loglik(x, grads=True)
    atol, _ = spec.tolerance("fp32", precision)
    assert_close(ll, want, atol=atol, what=f"ll at {precision}")
    assert_close(hmm.trans_matrix(flows["trans"]), want_flows["trans"], atol=atol, scale_by_max=True, what="trans")
    assert_close(flows["prior"], want_flows["prior"], atol=atol, scale_by_max=True, what="prior")
    with pytest.raises(ValueError, match="precision='bf16' is not allowed"):
        HMM(T=2, L=16, device=device, precision="bf16")


def test_shift_is_checked_and_resolved_per_tile():
    """SHIFT 'auto' is the small rule's on a broadcast tile (per column at every batch below 16),
    per node on other broadcast tiles and per column on a tl.dot tile; an explicit shift
    overrides the rule; 'node' on a tl.dot tile and unknown values say what to change."""
    for batch in (1, 2, 3, 8):
        small = gpu.resolve_forward_tiles(1, 1024, 1024, batch, 132, heuristic="small")
        assert (small.SHIFT, small.form, small.heuristic) == ("column", "column", "small"), batch
    exact = gpu.resolve_forward_tiles(1, 1024, 1024, 4, 132, heuristic="small", SHIFT="node")
    assert (exact.SHIFT, exact.form, exact.heuristic) == ("node", "node", "custom")
    exact1 = gpu.resolve_forward_tiles(1, 1024, 1024, 1, 132, heuristic="small", SHIFT="node")
    assert (exact1.SHIFT, exact1.form, exact1.heuristic) == ("node", "node", "custom")
    split = gpu.resolve_forward_tiles(1, 1024, 1024, 4, 132, heuristic="split")
    assert split.SHIFT == "node" and not split.USE_DOT
    dot = gpu.resolve_forward_tiles(1, 1024, 1024, 16, 132, heuristic="small")
    assert (dot.SHIFT, dot.form) == ("column", "dot")
    with pytest.raises(ValueError, match="SHIFT='node' needs a broadcast tile"):
        gpu.resolve_forward_tiles(1, 1024, 1024, 16, 132, heuristic="small", SHIFT="node")
    with pytest.raises(ValueError, match="SHIFT='row' is not allowed; use one of node, column"):
        gpu.resolve_forward_tiles(1, 1024, 1024, 4, 132, SHIFT="row")
    assert spec.variant("gpu").param("SHIFT").values == ("auto", "node", "column")
    assert spec.variant("npu").param("SHIFT").values == ("auto", "node", "column")
    assert npu.resolve_tiles(1, 64, 64, 3, 48).SHIFT == "node"
    assert npu.resolve_tiles(1, 64, 64, 3, 48, SHIFT="column").SHIFT == "column"
    with pytest.raises(ValueError, match="SHIFT='row' is not allowed"):
        npu.resolve_tiles(1, 64, 64, 3, 48, SHIFT="row")


def test_precision_is_checked_and_only_the_dot_form_uses_it():
    x = layer(8, 8, 2, "cpu")
    with pytest.raises(ValueError, match="precision='fp16' is not allowed; use one of ieee, tf32, tf32x3"):
        sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 8, precision="fp16")
    # batch 2: broadcast tiles, fp32 whatever the precision says
    a = sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 8, impl="gpu", precision="tf32")
    b = sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 8, impl="gpu")
    assert torch.equal(a, b)


def test_dot_tiles_that_overflow_shared_memory_are_refused_before_they_compile():
    """The model is the one measured exact on H200s (gpu.SumForwardTiles.shared_bytes): these
    points ran with that much shared memory, or failed at launch asking for it."""
    from kernels.runtime import described_device

    def tiles(heuristic, tm, tk, tb, **more):
        return gpu.resolve_forward_tiles(1, 1024, 1024, 64, 132, heuristic=heuristic, TILE_M=tm, TILE_K=tk,
                                         BLOCK_B=tb, **more)  # fmt: skip

    assert tiles("large", 16, 128, 32).shared_bytes() == 65536  # 3 stages (Triton's default)
    assert tiles("small", 16, 128, 64).shared_bytes() == 73728  # 2 stages (the small rule's)
    assert tiles("large", 16, 512, 32).shared_bytes() == 262144  # failed on the H200: "Required: 262144"
    assert tiles("small", 16, 512, 64, num_stages=1).shared_bytes() == 4 * 512 * 64
    assert tiles("small", 8, 32, 64).shared_bytes() == 0  # a broadcast tile stages nothing
    h100 = described_device("cuda", name="NVIDIA H100 80GB HBM3", num_cores=132, shared_bytes_per_program=232448)
    problem = spec.resolve_problem({"batch": 64})
    check = spec.variant("gpu").check
    check(problem, {"heuristic": "large", "TILE_M": 16, "TILE_K": 512, "BLOCK_B": 16}, "fp32", h100)  # 163840 fits
    with pytest.raises(ValueError, match=r"needs 262144 bytes of shared memory.*at most 232448: lower TILE_K"):
        check(problem, {"heuristic": "large", "TILE_M": 16, "TILE_K": 512, "BLOCK_B": 32}, "fp32", h100)
    check(problem, {"heuristic": "large", "TILE_M": 16, "TILE_K": 512, "BLOCK_B": 32, "num_stages": 2}, "fp32", h100)
    unknown = described_device("cuda", name="?", num_cores=132, shared_bytes_per_program=None)
    check(problem, {"heuristic": "large", "TILE_M": 16, "TILE_K": 512, "BLOCK_B": 32}, "fp32", unknown)


def test_the_spec_knows_each_variants_precision():
    tf32 = spec.resolve_problem({"batch": 16, "precision": "tf32"})
    ieee16 = spec.resolve_problem({"batch": 16})
    small = spec.resolve_problem({"batch": 8, "precision": "tf32"})
    assert spec.precision_of(spec.variant("gpu"), tf32) == "tf32"  # ours follows the knob
    assert spec.precision_of(spec.variant("gpu"), ieee16) == "ieee"
    assert spec.precision_of(spec.variant("torch"), tf32) == "ieee"  # always fp32
    assert spec.precision_of(spec.variant("npu"), tf32) == "ieee"  # no tl.dot on the NPU
    # PyJuice: its tl.dot path (TF32) from batch 16, exact small-batch kernels below
    assert spec.precision_of(spec.variant("pyjuice"), ieee16) == "tf32"
    assert spec.precision_of(spec.variant("pyjuice"), small) == "ieee"
    assert spec.tolerance("fp32", "tf32") == (5e-3, 5e-3) and spec.tolerance("fp32", "ieee") == (1e-4, 1e-4)
    assert spec.tolerance("fp32", "tf32x3") == (1e-4, 1e-4)  # no entry: the dtype's own
    with pytest.raises(ValueError, match="precision"):
        spec.resolve_problem({"precision": "bf16"})


def test_a_record_is_checked_at_its_precision():
    from workbench.measure import measure

    problem = {"nodes": 32, "block_size": 16, "batch": 16, "precision": "tf32"}
    params = {"heuristic": "small", "TILE_M": 16, "TILE_K": 16, "BLOCK_B": 16}
    rec = measure(
        "block_sparse", "gpu", device="cpu", dtype="fp32", mode="full", problem=problem, params=params, rep_ms=1
    )
    assert rec.ok and rec.precision == "tf32", rec.error
    ref = measure("block_sparse", "torch", device="cpu", dtype="fp32", mode="forward", problem=problem, rep_ms=1)
    assert ref.ok and ref.precision == "ieee"


def test_pyjuice_circuit_lookup_follows_the_tensors_not_their_addresses(monkeypatch):
    """The peer reuses a PyJuice circuit per weights: found again for the same tensors, rebuilt
    for other weights, and never handed out for a different tensor object or a changed one."""
    from types import SimpleNamespace

    from kernels.block_sparse import peer

    builds = []

    def build(shape, A, device):
        builds.append(A)
        pc = SimpleNamespace(node_mars=torch.empty(4, shape["B"]))
        return {"A": A, "hmm": SimpleNamespace(pc=pc), "layer": len(builds), "children": None, "rows": (0, 4)}

    monkeypatch.setattr(peer, "_build_circuit", build)
    monkeypatch.setattr(peer, "_transition_matrix", lambda shape, params, pids: params.clone())
    monkeypatch.setattr(peer, "_SEEN", {})
    monkeypatch.setattr(peer, "_CIRCUITS", {})
    shape = {"nodes": 4, "bs": 4, "B": 2}
    pids = torch.zeros(1, 4, dtype=torch.long)
    first = torch.rand(8)
    assert peer.layer_for(shape, first, pids, "cpu")[1] == 1
    assert peer.layer_for(shape, first, pids, "cpu")[1] == 1 and len(builds) == 1  # found, not rebuilt
    other = first + 1.0
    assert peer.layer_for(shape, other, pids, "cpu")[1] == 2  # other weights: their own circuit
    same_values = first.clone()
    assert peer.layer_for(shape, same_values, pids, "cpu")[1] == 1 and len(builds) == 2  # same A: shared
    first.add_(1.0)  # changed in place: its circuit is looked up again, by value
    assert peer.layer_for(shape, first, pids, "cpu")[1] == 2 and len(builds) == 2


def test_pyjuice_picks_its_layer_kernel_by_kernel_time(monkeypatch):
    """PyJuice's per-layer autotune is replaced by a pick over the same candidates by device
    time: the fastest wins, a failing candidate is skipped, none left gives None."""
    import sys
    from types import ModuleType

    from kernels.block_sparse import peer

    fake = ModuleType("pyjuice.layer.kernels.c")
    fake.autotune = lambda candidates, warmup=3, reps=7: candidates[0][0]
    layer_pkg = ModuleType("pyjuice.layer.kernels")
    layer_pkg.c = fake
    monkeypatch.setitem(sys.modules, "pyjuice.layer.kernels", layer_pkg)
    monkeypatch.setitem(sys.modules, "pyjuice.layer.kernels.c", fake)
    peer._use_kernel_time_pick()
    assert fake.autotune is peer.pick_by_kernel_time

    def fails():
        raise RuntimeError("no such config")

    device_ms = {"cuda_a": 0.019, "cuda_b": 0.012, "triton": 0.015}
    monkeypatch.setattr(peer, "_kernel_time_ms", lambda run_fn: run_fn())
    candidates = [(key, (lambda ms=ms: ms)) for key, ms in device_ms.items()] + [("broken", fails)]
    assert fake.autotune(candidates) == "cuda_b"
    assert fake.autotune([("broken", fails)]) is None


def test_split_equals_unsplit_and_splits_beyond_k(device):
    """More splits than TILE_K chunks (empty splits are not launched), one split, and the unsplit
    kernel agree to rounding; every SPLITS value resolves, with a clear error for others."""
    x = layer(16, 16, 2, device, K=33, seed=3)
    args = (x["element_mars"], x["params"], x["cids"], x["pids"], 16)
    base = sum_layer(*args, heuristic="small")
    for splits in (1, 2, 64):
        assert_close(sum_layer(*args, SPLITS=splits, TILE_K=8), base, atol=2e-6, what=f"SPLITS={splits}")
    t = gpu.resolve_forward_tiles(1, 16, 33, 2, 4, SPLITS=64, TILE_K=8)
    assert gpu.used_splits(33, t.SPLITS, t.TILE_K) == 5 and t.grid(1, 16, 2, 33)[2] == 5
    with pytest.raises(ValueError, match="SPLITS=3 is not allowed"):
        sum_layer(*args, SPLITS=3)
    with pytest.raises(ValueError, match="SPLITS=3 is not allowed"):
        sum_layer_backward(base, args[0], args[1], base, args[2], args[3], 16, NODE_SPLITS=3)


def test_single_writer_stores_and_node_splits(device):
    """Plain stores where each address has one writer (untied, distinct children), atomics where
    blocks share children or tied runs share parameters; node splits always add atomically."""
    untied = layer(16, 16, 3, device, K=16, seed=1)  # G = 1: distinct children, disjoint runs
    assert _single_writers(untied["cids"], untied["pids"], 16) == {"element_atomic": False, "param_atomic": False}
    shared = layer(32, 8, 3, device, K=16, tied=True, seed=1)  # G = 4 blocks over 16 rows, one set
    assert _single_writers(shared["cids"], shared["pids"], 8) == {"element_atomic": True, "param_atomic": True}
    for x, bs in ((untied, 16), (shared, 8)):
        args = (x["element_mars"], x["params"], x["cids"], x["pids"], bs)
        out = sum_layer(*args)
        F = torch.rand(out.shape, generator=torch.Generator().manual_seed(2)).to(device)
        we, wp = sum_layer_backward_reference(
            ref64(F), ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), bs
        )
        for tiles in ({"NODE_SPLITS": 1, "TILE_M": 4}, {"NODE_SPLITS": 2, "TILE_M": 2}, {"heuristic": "small"}):
            e, p = sum_layer_backward(F, *args[:2], out, *args[2:], **tiles)
            assert_close(e, we, scale_by_max=True, what=f"element flows {tiles}")
            assert_close(p, wp, scale_by_max=True, what=f"param flows {tiles}")
    pids = untied["pids"].clone()
    pids[0, 1] = pids[0, 0]  # a tied run appears: the cached fact follows the new version
    assert _single_writers(untied["cids"], pids, 16)["param_atomic"]


# --- edge layouts (edges.py): affine indices computed, others gathered ---------------------------
def affine_layer(device, G, bs, K, batch, child0, child_step, param0, param_step, seed=0):
    """A layer whose indices are affine with offsets: block g, edge k reads row ``child0 + g *
    child_step + k`` and weights at ``param0 + g * param_step + k * bs`` (runs overlap when
    ``param_step < K * bs``: parameters shared between blocks)."""
    gen = torch.Generator().manual_seed(seed)
    rows = child0 + (G - 1) * child_step + K + 3  # spare rows beyond the last child
    n_params = param0 + (G - 1) * param_step + K * bs + bs
    g, k = torch.arange(G)[:, None], torch.arange(K)[None, :]
    x = {
        "element_mars": -2.0 + 1.5 * torch.randn(rows, batch, generator=gen),
        "params": torch.rand(n_params, generator=gen) / K + 0.01,
        "cids": (child0 + g * child_step + k).to(torch.int32),
        "pids": (param0 + g * param_step + k * bs).to(torch.int32),
    }
    return {name: t.to(device) for name, t in x.items()}


AFFINE_CASES = [
    # (G, bs, K, batch, child0, child_step, param0, param_step)
    (1, 16, 16, 2, 0, 0, 0, 0),  # the HMM's transition layer at G = 1
    (3, 6, 7, 3, 5, 7, 11, 42),  # offsets, a non-power-of-two block, odd K, disjoint runs
    (2, 8, 37, 1, 2, 0, 0, 0),  # both blocks read the same children and share one parameter set
    (2, 16, 20, 17, 0, 20, 3, 320),  # batch 17: tl.dot tiles for the large tiling
]
AFFINE_IMPLS = [
    ("small", "gpu", {"heuristic": "small"}),
    ("column", "gpu", {"heuristic": "small", "SHIFT": "column"}),
    ("large", "gpu", {"heuristic": "large"}),
    ("split", "gpu", {"heuristic": "split", "SPLITS": 2}),
    ("npu", "npu", {}),
    ("npu_column", "npu", {"SHIFT": "column"}),
]


@pytest.mark.parametrize("case", AFFINE_CASES, ids=[f"G{c[0]}bs{c[1]}K{c[2]}b{c[3]}" for c in AFFINE_CASES])
@pytest.mark.parametrize("name,impl,tiles", AFFINE_IMPLS, ids=[n for n, _, _ in AFFINE_IMPLS])
def test_affine_edges_forward_and_every_gradient(device, case, name, impl, tiles):
    """Computed edges give the reference's forward and gradients, and the gathered kernels' results."""
    G, bs, K, batch, *steps = case
    x = affine_layer(device, G, bs, K, batch, *steps)
    assert layer_edges(x["cids"], x["pids"], bs).kernel_args() == tuple(steps)
    em64 = ref64(x["element_mars"]).requires_grad_()
    p64 = ref64(x["params"]).requires_grad_()
    want = sum_layer_reference(em64, p64, x["cids"].cpu(), x["pids"].cpu(), bs)
    grad = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    want.backward(grad)
    results = {}
    for edges in ("affine", "gather"):
        em = x["element_mars"].clone().requires_grad_()
        p = x["params"].clone().requires_grad_()
        out = sum_layer(em, p, x["cids"], x["pids"], bs, impl=impl, EDGES=edges, **tiles)
        out.backward(grad.float().to(device))
        what = f"{name} EDGES={edges}"
        assert_close(out, want, what=f"{what} forward")
        assert_close(em.grad, em64.grad, scale_by_max=True, what=f"{what} d element_mars")
        assert_close(p.grad, p64.grad, scale_by_max=True, what=f"{what} d params")
        results[edges] = (out, em.grad, p.grad)
    for got, gathered in zip(results["affine"], results["gather"]):
        assert_close(got, gathered, atol=2e-6, scale_by_max=True, what=f"{name}: computed vs gathered edges")


def test_edge_layout_is_detected_and_follows_mutation(device):
    """Affine where every edge fits the form, gathered where one does not; an in-place edit of
    the indices is seen (the answer is remembered per tensor version)."""
    x = affine_layer(device, 3, 4, 5, 2, 1, 5, 2, 20)
    assert edge_layout(x["cids"], x["pids"], 4).kernel_args() == (1, 5, 2, 20)
    assert edge_layout(x["cids"], x["pids"], 8) == GATHER  # pids step by 4 per edge, not 8
    wrapped = layer(40, 8, 2, device, K=20)  # block 2 wraps around to row 0: not affine
    assert edge_layout(wrapped["cids"], wrapped["pids"], 8) == GATHER
    assert edge_layout(x["cids"][:, :0], x["pids"][:, :0], 4) == GATHER  # no edges
    cids = x["cids"].clone()
    assert layer_edges(cids, x["pids"], 4).affine
    cids[2, 4] = 0  # the last edge of the last block leaves the form
    assert layer_edges(cids, x["pids"], 4) == GATHER
    with pytest.raises(ValueError, match="EDGES='affine' needs cids"):
        sum_layer(x["element_mars"], x["params"], cids, x["pids"], 4, EDGES="affine")
    # "auto" computes them on the GPU only; "gather" never; anything else is refused.
    assert layer_edges(x["cids"], x["pids"], 4, "gather") == GATHER
    assert layer_edges(x["cids"], x["pids"], 4, "auto", "npu") == GATHER
    assert layer_edges(x["cids"], x["pids"], 4, "affine", "npu").affine
    with pytest.raises(ValueError, match="EDGES='computed' is not allowed"):
        sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 4, EDGES="computed")
    out = sum_layer(x["element_mars"], x["params"], cids, x["pids"], 4)  # the edited layer, gathered
    want = sum_layer_reference(ref64(x["element_mars"]), ref64(x["params"]), cids.cpu(), x["pids"].cpu(), 4)
    assert_close(out, want, what="edited indices")


def test_hmm_computes_its_edges_and_gathering_agrees(device):
    """Both HMM sum layers are affine; EDGES='gather' loads their indices and gives the same chain."""
    hmm = HMM(T=3, L=12, V=4, device=device, seed=3)
    gathered = HMM(T=3, L=12, V=4, device=device, seed=3, EDGES="gather")
    assert hmm.trans_edges.affine and hmm.root_edges.affine
    assert gathered.trans_edges == GATHER and gathered.root_edges == GATHER
    x = hmm.sample(3, seed=4)
    ll, flows = hmm.forward_backward(x)
    ll_g, flows_g = gathered.forward_backward(x)
    assert_close(ll, hmm.reference_loglik(x), what="affine HMM log-likelihood")
    assert_close(ll, ll_g, atol=1e-6, what="affine vs gathered log-likelihood")
    for name in ("trans", "prior", "emit"):
        assert_close(flows[name], flows_g[name], atol=1e-5, scale_by_max=True, what=f"{name} flows")


def test_split_heuristics_and_tuned_table(monkeypatch, tmp_path):
    """The split rule fills the machine at L = 1024; 'auto' follows the tuned table of its device
    (nearest tuned batch on a log2 scale, none outside the table, all of an entry's tiles or none
    when the call sets one) and falls back to its rule elsewhere."""
    for batch in (1, 2, 4, 8, 16, 32, 64):
        t = gpu.resolve_forward_tiles(1, 1024, 1024, batch, 132, heuristic="split")
        programs, b_tiles, splits = t.grid(1, 1024, batch, 1024)
        assert programs * b_tiles * splits >= 2 * 132 and t.SPLITS == splits > 1
        assert t.TILE_M == (32 if batch <= 2 else 16) and t.USE_DOT == (batch >= 16)
    bwd = gpu.resolve_backward_tiles(1, 1024, 1024, 1, 132)
    assert bwd.E_SPLITS > 1 and bwd.E_TILE_M <= gpu.SMALL_BWD_TILE_M  # node fan-out at batch 1
    key = "cuda:Fake GPU"
    buckets = [
        {"size": 1, "tiles": {"SPLITS": 8, "TILE_M": 64}},
        {"size": 4, "tiles": {"SPLITS": 1, "TILE_M": 8, "heuristic": "small"}},
        {"size": 16, "tiles": {"SPLITS": 4, "TILE_M": 16, "num_warps": 4}},
    ]
    table = {"schema": tuned_tables.SCHEMA, "family": "block_sparse", "device_key": key, "knob": "batch"}
    (tmp_path / "block_sparse").mkdir()
    (tmp_path / "block_sparse" / tuned_tables.file_name(key)).write_text(json.dumps({**table, "buckets": buckets}))
    monkeypatch.setenv("KERNELS_TUNED_DIR", str(tmp_path))
    tuned_tables.reload()
    try:
        t1 = gpu.resolve_forward_tiles(1, 1024, 1024, 1, 132, device_key=key)
        assert (t1.heuristic, t1.SPLITS, t1.TILE_M, t1.PROGRAM_M) == ("split", 8, 64, 64)
        assert t1.source == f"tuned:{key}@1"
        t3 = gpu.resolve_forward_tiles(1, 1024, 1024, 3, 132, device_key=key)  # log2(3) is nearer 4 than 2
        assert (t3.heuristic, t3.SPLITS, t3.TILE_M, t3.source) == ("small", 1, 8, f"tuned:{key}@4")
        t10 = gpu.resolve_forward_tiles(1, 1024, 1024, 10, 132, device_key=key)
        assert (t10.SPLITS, t10.TILE_M, t10.num_warps, t10.source) == (4, 16, 4, f"tuned:{key}@16")
        explicit = gpu.resolve_forward_tiles(1, 1024, 1024, 4, 132, device_key=key, SPLITS=2)
        assert explicit.SPLITS == 2 and explicit.TILE_M != 8 and explicit.source == "explicit"
        beyond = gpu.resolve_forward_tiles(1, 1024, 1024, 64, 132, device_key=key)
        assert beyond.source.startswith("heuristic (batch=64 outside the table")
        other = gpu.resolve_forward_tiles(1, 1024, 1024, 4, 132, device_key="cuda:Other GPU")
        assert other.heuristic == "small" and other.source == "heuristic (no table for cuda:Other GPU)"
        assert gpu.resolve_forward_tiles(1, 1024, 1024, 4, 132).source == "heuristic"  # no device: the rule
    finally:
        monkeypatch.delenv("KERNELS_TUNED_DIR")
        tuned_tables.reload()


def test_h100_table_is_installed_and_read():
    """The H100 table (workbench tune) is read for that device key: every tile an entry sets is
    the tile resolved at its batch, an empty entry (the tune kept the rule) gives the rule's."""
    key = "cuda:NVIDIA H100 80GB HBM3"
    path = tuned_tables.table_dir("block_sparse") / tuned_tables.file_name(key)
    table = tuned_tables.read_table(path, "block_sparse")
    assert table["provenance"]["commit"] and [b["size"] for b in table["buckets"]] == [1, 2, 4, 8, 16, 32, 64]
    assert any(b["tiles"] for b in table["buckets"])
    for bucket in table["buckets"]:
        batch = bucket["size"]
        tiles = gpu.resolve_forward_tiles(1, 1024, 1024, batch, 132, device_key=key)
        assert tiles.source == f"tuned:{key}@{batch}"
        for name, value in bucket["tiles"].items():
            assert getattr(tiles, name) == value, (batch, name)
        if not bucket["tiles"]:
            rule = gpu.resolve_forward_tiles(1, 1024, 1024, batch, 132)
            assert (tiles.TILE_M, tiles.TILE_K, tiles.BLOCK_B, tiles.SPLITS) == (
                rule.TILE_M, rule.TILE_K, rule.BLOCK_B, rule.SPLITS
            )  # fmt: skip


def test_hmm_split_matches_classical_recursion(device):
    hmm = HMM(T=3, L=16, V=4, device=device, heuristic="split", seed=3)
    x = hmm.sample(3, seed=1)
    ll, flows = hmm.forward_backward(x)
    want, want_flows = hmm.reference_loglik(x, grads=True)
    assert hmm.plan(3).trans_fwd.SPLITS >= 1 and hmm.plan(3).trans_fwd.heuristic == "split"
    assert_close(ll, want, what="split HMM log-likelihood")
    assert_close(hmm.trans_matrix(flows["trans"]), want_flows["trans"], scale_by_max=True, what="transition flows")


# --- product layer ---------------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name,impl,tiles", IMPLS, ids=IMPL_IDS)
def test_product_layer(device, batch, name, impl, tiles):
    nodes, bs = (24, 8) if batch % 2 else (12, 4)
    problem = {"layer": "product", "nodes": nodes, "block_size": bs, "K": 3, "batch": batch, "tied": False}
    x = make_layer(problem, device)
    nm = x["node_mars"].clone()
    nm[5, 0] = float("-inf")
    nm = nm.requires_grad_()
    out = product_layer(nm, x["cids"], bs, impl=impl, **product_tiles(tiles))
    nm64 = ref64(nm).requires_grad_()
    want = product_layer_reference(nm64, x["cids"].cpu(), bs)
    assert_close(out, want, what=f"{name} product forward")
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(batch)).to(device)
    (d,) = torch.autograd.grad(out, (nm,), g)
    (w,) = torch.autograd.grad(want, (nm64,), ref64(g))
    assert_close(d, w, what=f"{name} product backward")


def test_product_layer_shared_children(device):
    """Two parent blocks read overlapping child rows: the backward sums both contributions."""
    nm = torch.randn(12, 5).to(device).requires_grad_()
    cids = torch.tensor([[0, 4], [2, 4]], dtype=torch.int64, device=device)
    for impl, tiles in (("gpu", {"BLOCK_M": 2, "BLOCK_B": 4}), ("npu", {"TILE_M": 1, "GRID": 2})):
        out = product_layer(nm, cids, 4, impl=impl, **tiles)
        (d,) = torch.autograd.grad(out.sum(), (nm,))
        nm64 = ref64(nm).requires_grad_()
        (w,) = torch.autograd.grad(product_layer_reference(nm64, cids.cpu(), 4).sum(), (nm64,))
        assert_close(d, w, what=f"{impl} shared children")


# --- heuristics ------------------------------------------------------------------------------
def test_heuristics_at_the_issue_shape():
    """L = 1024 (one block of 1024), 132 SMs: large walks the block in one program at batch 1,
    small spreads it over 128 node tiles of 8 at batch 1 and 256 of 4 at batch 2-8 (the H100
    sweeps' best below batch 16) and from batch 16 over 64 tl.dot programs; auto picks small
    there and large once its grid fills the SMs."""
    large = gpu.resolve_forward_tiles(1, 1024, 1024, 1, 132, heuristic="large")
    small = gpu.resolve_forward_tiles(1, 1024, 1024, 1, 132, heuristic="small")
    assert large.grid(1, 1024, 1) == (1, 1)
    assert small.TILE_M == 8 and small.grid(1, 1024, 1)[0] == 128 and not small.USE_DOT
    assert small.TILE_K > small.BLOCK_B  # TILE_K decoupled from the batch
    at4 = gpu.resolve_forward_tiles(1, 1024, 1024, 4, 132, heuristic="small")
    assert at4.TILE_M == 4 and at4.grid(1, 1024, 4) == (256, 1)
    at16 = gpu.resolve_forward_tiles(1, 1024, 1024, 16, 132)
    assert at16.heuristic == "small" and at16.USE_DOT and at16.grid(1, 1024, 16) == (64, 1)
    assert at16.num_stages == 2 and at16.num_warps == 4
    assert gpu.resolve_forward_tiles(1, 1024, 1024, 2, 132).heuristic == "small"
    assert gpu.resolve_forward_tiles(16, 64, 1024, 8192, 132).heuristic == "large"
    assert gpu.resolve_forward_tiles(1, 1024, 1024, 64, 132, heuristic="large").USE_DOT
    assert gpu.resolve_product_tiles(1, 1024, 1, 132, heuristic="small").BLOCK_M == 8
    assert gpu.resolve_product_tiles(1, 1024, 1, 132, heuristic="large").BLOCK_M == 1024
    bwd = gpu.resolve_backward_tiles(1, 1024, 1024, 16, 132)
    assert 1024 // bwd.P_TILE_M * (1024 // bwd.P_TILE_K) >= 132  # parameter flows fill the SMs at batch 16
    assert (bwd.SHIFT, bwd.element_form, bwd.param_form) == ("column", "dot", "dot")  # the factored flows
    assert 1024 // bwd.E_TILE_K * bwd.E_SPLITS >= 132  # so do element flows (their nodes split)
    assert gpu.resolve_backward_tiles(1, 1024, 1024, 8, 132).SHIFT == "node"  # exact below batch 16
    for batch in (1, 2, 3, 8, 16, 17, 64, 256):  # NPU defaults fit the calibrated UB model, never BLOCK_B = 8
        t = npu.resolve_tiles(1, 1024, 1024, batch, 48, on_npu=True)
        assert npu.ub_bytes(t.TILE_M, t.TILE_K, t.BLOCK_B) <= npu.UB_BYTES // 2 and t.BLOCK_B != 8
    with pytest.raises(ValueError, match="ub overflow predicted"):
        npu.resolve_tiles(1, 1024, 1024, 8, 48, on_npu=True, BLOCK_B=16, TILE_K=256)


def test_largest_block_size():
    assert largest_block_size(1024) == 1024
    assert largest_block_size(4096) == 1024
    assert largest_block_size(1536) == 512
    assert largest_block_size(24) == 8
    assert largest_block_size(7) == 1


# --- bad input -------------------------------------------------------------------------------
def _base(device="cpu"):
    return layer(16, 8, 2, device, K=6)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda x: x.update(cids=x["cids"] + 100), "cids out of range"),
        (lambda x: x.update(cids=x["cids"] - 100), "cids out of range"),
        (lambda x: x.update(pids=x["pids"] + 10_000), "pids out of range"),
        (lambda x: x.update(pids=x["pids"][:, :5].contiguous()), "K, the edges per block, must match"),
        (lambda x: x.update(element_mars=x["element_mars"].double()), "element_mars has dtype"),
        (lambda x: x.update(element_mars=x["element_mars"].to(torch.bfloat16)), "element_mars has dtype"),
        (lambda x: x.update(params=x["params"].half()), "params has dtype"),
        (lambda x: x.update(cids=x["cids"].float()), "cids has dtype"),
        (lambda x: x.update(element_mars=x["element_mars"][0]), "element_mars must be 2-D"),
        (lambda x: x.update(params=x["params"].reshape(1, -1)), "params must be 1-D"),
        (lambda x: x.update(cids=x["cids"][0]), "cids must be 2-D"),
        (lambda x: x.update(params=x["params"].to("meta")), "params is on meta"),
        (lambda x: x.update(pids=x["pids"].to("meta")), "pids is on meta"),
        (lambda x: x.update(element_mars=[[0.0]]), "element_mars must be a torch.Tensor"),
    ],
)
def test_bad_sum_input(mutate, match):
    x = _base()
    mutate(x)
    with pytest.raises(ValueError, match=match):
        sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 8)


def test_num_stages_is_a_forward_tile(device):
    lay = layer(64, 16, 5, device, seed=3)
    args = (lay["element_mars"], lay["params"], lay["cids"], lay["pids"], 16)
    want = sum_layer_reference(*args)
    for stages in (1, 3):
        assert_close(sum_layer(*args, heuristic="small", num_stages=stages), want, what=f"num_stages={stages}")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"block_size": 0}, "block_size=0 must be a positive integer"),
        ({"block_size": 8.0}, "block_size=8.0"),
        ({"block_size": 4096}, "pids out of range"),
        ({"impl": "tpu"}, "impl='tpu' is not allowed"),
        ({"TILE_M": 3}, "TILE_M=3 must be a power of two"),
        ({"TILE_K": 0}, "TILE_K=0 must be a power of two"),
        ({"BLOCK_B": 12}, "BLOCK_B=12 must be a power of two"),
        ({"PROGRAM_M": 4, "TILE_M": 8}, "PROGRAM_M=4 must be >= TILE_M=8"),
        ({"heuristic": "medium"}, "heuristic='medium' is not allowed"),
        ({"num_warps": 3}, "num_warps=3 is not allowed"),
        ({"num_stages": 0}, "num_stages=0 is not allowed"),
        ({"TILE_M": 64, "TILE_K": 64, "BLOCK_B": 8}, "exceeds the 16384-element"),
        ({"BLOCK_SIZE": 64}, "unknown tile parameter BLOCK_SIZE"),
        ({"impl": "npu", "heuristic": "small"}, "unknown tile parameter heuristic"),
        ({"impl": "npu", "GRID": 0}, "GRID=0 must be a positive integer"),
        ({"impl": "npu", "TILE_K": 6}, "TILE_K=6 must be a power of two"),
    ],
)
def test_bad_sum_arguments(kwargs, match):
    x = _base()
    kwargs = dict(kwargs)
    bs = kwargs.pop("block_size", 8)
    with pytest.raises(ValueError, match=match):
        sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], bs, **kwargs)


def test_bad_backward_and_product_input():
    x = _base()
    out = sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 8)
    with pytest.raises(ValueError, match=r"node_flows has shape \(16, 3\)"):
        sum_layer_backward(torch.ones(16, 3), x["element_mars"], x["params"], out, x["cids"], x["pids"], 8)
    with pytest.raises(ValueError, match=r"out has shape \(8, 2\)"):
        sum_layer_backward(torch.ones(16, 2), x["element_mars"], x["params"], out[:8], x["cids"], x["pids"], 8)
    with pytest.raises(ValueError, match="PROGRAM_M"):
        sum_layer_backward(out, x["element_mars"], x["params"], out, x["cids"], x["pids"], 8, PROGRAM_M=8)
    nm = torch.randn(10, 2)
    with pytest.raises(ValueError, match=r"cids out of range.*\+ block_size \(4\)"):
        product_layer(nm, torch.tensor([[0, 8]]), 4)
    with pytest.raises(ValueError, match="BLOCK_M=5 must be a power of two"):
        product_layer(nm, torch.tensor([[0, 4]]), 4, BLOCK_M=5)
    with pytest.raises(ValueError, match="node_mars has dtype"):
        product_layer(nm.double(), torch.tensor([[0, 4]]), 4)


def test_block_size_must_divide_the_layer():
    with pytest.raises(ValueError, match="block_size=5 does not divide the layer's nodes=16"):
        spec.make_inputs({**spec.resolve_problem({"nodes": 16, "block_size": 5})}, torch.float32, "cpu", 0)
    with pytest.raises(ValueError, match="does not divide the layer's L=12"):
        HMM(T=2, L=12, block_size=8, device="cpu")


def test_index_checks_are_cached_and_follow_mutation():
    """Ranges are checked once per index tensor and version: an in-place edit is re-checked."""
    x = _base()
    sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 8)
    x["cids"][0, 0] = 999
    with pytest.raises(ValueError, match="cids out of range"):
        sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 8)


# --- HMM -------------------------------------------------------------------------------------
@pytest.mark.parametrize("impl,L,batch", [("gpu", 24, 3), ("npu", 24, 1), ("gpu", 16, 2)])
def test_hmm_chain_matches_classical_recursion(device, impl, L, batch):
    hmm = HMM(T=4, L=L, V=5, device=device, impl=impl, seed=1)
    assert hmm.block_size == largest_block_size(L)
    x = hmm.sample(batch, seed=2)
    ll, flows = hmm.forward_backward(x)
    want, want_flows = hmm.reference_loglik(x, grads=True)
    assert_close(ll, want, what="log-likelihood")
    assert_close(hmm.trans_matrix(flows["trans"]), want_flows["trans"], scale_by_max=True, what="transition flows")
    assert_close(flows["prior"], want_flows["prior"], scale_by_max=True, what="prior flows")
    assert_close(flows["emit"], want_flows["emit"], scale_by_max=True, what="emission flows")
    # Flows at the root sum to the batch (every sequence sends flow 1 through the prior).
    assert abs(float(flows["prior"].sum()) - batch) < 1e-4


def test_hmm_single_step_and_small_heuristic():
    hmm = HMM(T=1, L=8, V=3, device="cpu", heuristic="small")
    x = hmm.sample(2)
    ll, flows = hmm.forward_backward(x)
    assert_close(ll, hmm.reference_loglik(x), what="T=1 log-likelihood")
    with pytest.raises(ValueError, match="CUDA graph replay needs a CUDA device"):
        hmm.graphed(2)


# --- spec and harness ------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["gpu", "gpu_small", "gpu_split", "npu", "torch"])
@pytest.mark.parametrize("layer_kind", ["sum", "product"])
def test_spec_variants_pass_the_harness(variant, layer_kind):
    from workbench.measure import measure

    rec = measure(
        "block_sparse",
        variant,
        device="cpu",
        dtype="fp32",
        mode="full",
        quick=True,
        problem={"layer": layer_kind, "batch": 3},
        rep_ms=1,
        time_it=False,
    )
    assert rec.passed, rec.checks
    names = {c["name"] for c in rec.checks}
    want = {"out", "delement_mars", "dparams"} if layer_kind == "sum" else {"out", "dnode_mars"}
    assert names == want


def test_spec_shape_and_bytes():
    problem = spec.resolve_problem({"nodes": 1024, "batch": 4})
    assert problem["layer"] == "sum" and problem["block_size"] == 0
    # forward: 1024 rows x 4 in, 1024*1024 params, 2 index arrays of 1024 int32, 1024 x 4 out
    assert spec.min_bytes(problem, "forward", "fp32") == 4 * (1024 * 4 + 1024 * 1024 + 1024 * 4) + 8 * 1024
    assert spec.variant("pyjuice").unavailable_reason("cpu")
    assert spec.dtypes == ("fp32",)


def test_npu_compile_cases_match_the_kernels():
    import inspect

    cases = npu.npu_compile_cases()
    assert any(c.default for c in cases) and any(not c.default for c in cases)
    for case in cases:
        names = list(inspect.signature(case.kernel.fn).parameters)
        assert set(case.signature) | set(case.constants) == set(names), case.name
        assert not set(case.signature) & set(case.constants), case.name
        assert case.ub_bytes and (not case.default or case.ub_bytes <= npu.UB_BYTES), case.name


# --- GPU only: the issue's shapes ------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("batch", (1, 2, 8, 16, 64))
@pytest.mark.parametrize("heuristic", ("large", "small"))
def test_gpu_issue_shape(batch, heuristic):
    x = layer(1024, 1024, batch, "cuda")
    out = sum_layer(x["element_mars"], x["params"], x["cids"], x["pids"], 1024, heuristic=heuristic)
    want = sum_layer_reference(ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), 1024)
    assert_close(out, want, what="L=1024 forward")
    F = torch.rand(1024, batch, device="cuda")
    e, p = sum_layer_backward(F, x["element_mars"], x["params"], out, x["cids"], x["pids"], 1024, heuristic=heuristic)
    we, wp = sum_layer_backward_reference(
        ref64(F), ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), 1024
    )
    assert_close(e, we, scale_by_max=True, what="L=1024 element flows")
    assert_close(p, wp, scale_by_max=True, what="L=1024 param flows")


@pytest.mark.gpu
def test_gpu_graph_replay_matches_eager():
    hmm = HMM(T=8, L=256, V=16, device="cuda")
    g = hmm.graphed(4)
    x = hmm.sample(4, seed=5)
    g.x.copy_(x)
    ll_graph, flows_graph = g.replay()
    ll, flows = hmm.forward_backward(x)
    assert_close(ll_graph, ll, atol=1e-5, what="graph ll")
    assert_close(flows_graph["trans"], flows["trans"], atol=1e-5, scale_by_max=True, what="graph flows")


@pytest.mark.gpu
@pytest.mark.long_gpu
def test_gpu_pyjuice_peer_agrees():
    from kernels.block_sparse import peer

    if peer.available():
        pytest.skip(peer.available())
    hmm = HMM(T=6, L=128, V=16, device="cuda")
    x = hmm.sample(4)
    theirs = peer.PyJuiceHMM.like(hmm).forward(x)
    assert_close(theirs, hmm.forward(x)["ll"], atol=1e-3, what="PyJuice vs our HMM")


@pytest.mark.gpu
@pytest.mark.parametrize("batch", (1, 2, 4, 8, 16, 32, 64))
def test_gpu_split_vs_unsplit_vs_reference(batch):
    """Issue 16 at its shape (L = 1024, K = 1024): the split-K forward, the unsplit tilings and
    'auto' (tuned table) agree with the fp64 reference and with each other; so do the
    node-split / single-writer flows and the autograd gradients through the split forward."""
    x = layer(1024, 1024, batch, "cuda", seed=batch)
    args = (x["element_mars"], x["params"], x["cids"], x["pids"], 1024)
    want = sum_layer_reference(ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), 1024)
    outs = {h: sum_layer(*args, heuristic=h) for h in ("split", "small", "large", "auto")}
    outs["split_x2"] = sum_layer(*args, heuristic="split", SPLITS=2)
    for name, out in outs.items():
        assert_close(out, want, what=f"{name} forward b={batch}")
        assert_close(out, outs["small"], atol=2e-5, what=f"{name} vs unsplit b={batch}")
    F = torch.rand(1024, batch, device="cuda")
    we, wp = sum_layer_backward_reference(
        ref64(F), ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), 1024
    )
    for tiles in ({"heuristic": "small"}, {"heuristic": "large"}, {"NODE_SPLITS": 8, "TILE_M": 16}):
        e, p = sum_layer_backward(F, *args[:2], outs["split"], *args[2:], **tiles)
        assert_close(e, we, scale_by_max=True, what=f"element flows {tiles} b={batch}")
        assert_close(p, wp, scale_by_max=True, what=f"param flows {tiles} b={batch}")
    em, pr = x["element_mars"].clone().requires_grad_(), x["params"].clone().requires_grad_()
    out = sum_layer(em, pr, x["cids"], x["pids"], 1024, heuristic="split")
    d_em, d_p = torch.autograd.grad(out, (em, pr), F)
    em64, p64 = ref64(em).requires_grad_(), ref64(pr).requires_grad_()
    w_em, w_p = torch.autograd.grad(
        sum_layer_reference(em64, p64, x["cids"].cpu(), x["pids"].cpu(), 1024), (em64, p64), ref64(F)
    )
    assert_close(d_em, w_em, scale_by_max=True, what="split d element_mars")
    assert_close(d_p, w_p, scale_by_max=True, what="split d params")


@pytest.mark.gpu
@pytest.mark.parametrize("heuristic", ("small", "split", "large"))
def test_gpu_each_precision_at_the_issue_shape(heuristic):
    """L = 1024 at batch 17 (dot tiles, a masked column): each precision within its tolerance of
    the fp64 reference, and TF32 really reaching the tensor cores (its error well above fp32's)."""
    x = layer(1024, 1024, 17, "cuda", seed=5)
    args = (x["element_mars"], x["params"], x["cids"], x["pids"], 1024)
    want = sum_layer_reference(ref64(x["element_mars"]), ref64(x["params"]), x["cids"].cpu(), x["pids"].cpu(), 1024)
    F = torch.randn(1024, 17, device="cuda", generator=torch.Generator("cuda").manual_seed(3))
    we, wp = sum_layer_backward_reference(
        ref64(F), *(ref64(a) if a.is_floating_point() else a.cpu() for a in args[:4]), 1024
    )
    errors, flow_errors = {}, {}
    for precision in gpu.PRECISIONS:
        atol = spec.tolerance("fp32", precision)[0]
        out = sum_layer(*args, heuristic=heuristic, precision=precision)
        assert_close(out, want, atol=atol, what=f"{heuristic} at {precision}")
        errors[precision] = (ref64(out) - want).abs().max().item()
        # the factored flows (tl.dot from batch 16) at the same precision
        e, p = sum_layer_backward(F, args[0], args[1], out, *args[2:], heuristic=heuristic, precision=precision)
        assert_close(e, we, atol=atol, scale_by_max=True, what=f"{heuristic} element flows at {precision}")
        assert_close(p, wp, atol=atol, scale_by_max=True, what=f"{heuristic} param flows at {precision}")
        flow_errors[precision] = (ref64(e) - we).abs().max().item() / we.abs().max().item()
    assert errors["tf32"] > 10 * max(errors["ieee"], 1e-7), errors
    assert errors["tf32x3"] < errors["tf32"] / 10, errors
    assert flow_errors["tf32"] > 10 * max(flow_errors["ieee"], 1e-7), flow_errors


@pytest.mark.gpu
@pytest.mark.parametrize("heuristic", ("auto", "split"))
@pytest.mark.parametrize("batch", (1, 16))
def test_gpu_hmm_graphed_matches_classical_recursion(heuristic, batch):
    """The HMM chain at L = 1024 (the suite's chain shape, shorter), replayed as a CUDA graph,
    against the classical forward recursion and its autograd flows in fp64."""
    hmm = HMM(T=8, L=1024, V=32, device="cuda", heuristic=heuristic, seed=2)
    g = hmm.graphed(batch)
    x = hmm.sample(batch, seed=7)
    g.x.copy_(x)
    ll, flows = g.replay()
    want, want_flows = hmm.reference_loglik(x, grads=True)
    assert_close(ll, want, atol=1e-3, what=f"{heuristic} ll b={batch}")
    assert_close(
        hmm.trans_matrix(flows["trans"]), want_flows["trans"], atol=1e-3, scale_by_max=True, what="transition flows"
    )
    assert_close(flows["prior"], want_flows["prior"], atol=1e-3, scale_by_max=True, what="prior flows")
    assert_close(flows["emit"], want_flows["emit"], atol=1e-3, scale_by_max=True, what="emission flows")


def test_small_rule_fills_the_broadcast_cap_with_edges_and_narrows_for_a_given_tile():
    """Below batch 16 the small tiling takes TILE_K as wide as the broadcast cap allows (the H100
    sweep's fastest at L=1024), never wider than the edges; a wider TILE_M given by a table or a
    caller narrows the rule's TILE_K instead of failing the cap; an explicit TILE_K still fails."""
    tiles = {b: gpu._forward_tiles(1, 1024, 1024, b, 132, heuristic="small") for b in (1, 2, 3, 4, 8)}
    assert {b: t.TILE_K for b, t in tiles.items()} == {1: 1024, 2: 1024, 3: 1024, 4: 1024, 8: 512}
    assert {b: t.TILE_M for b, t in tiles.items()} == {1: 8, 2: 4, 3: 4, 4: 4, 8: 4}  # 8 nodes at batch 1
    assert gpu._forward_tiles(1, 16, 48, 1, 132, heuristic="small").TILE_K == 64  # 48 edges: one masked step
    for batch in (1, 3, 8):
        t = gpu._forward_tiles(1, 1024, 1024, batch, 132, heuristic="small", TILE_M=8)
        assert t.TILE_M * t.TILE_K * t.BLOCK_B <= gpu.MAX_3D_TILE and not t.USE_DOT
    with pytest.raises(ValueError, match="lower TILE_K or BLOCK_B"):
        gpu._forward_tiles(1, 1024, 1024, 8, 132, heuristic="small", TILE_M=8, TILE_K=1024)


@pytest.mark.parametrize("batch", (1, 3))
def test_small_tiling_walks_many_edges_in_one_masked_step(device, batch):
    """The small tiling's edge tile filling the broadcast cap: 600 edges (not a power of two) in
    one 1024-wide step, batch 1 and 3, one node's children all -inf; forward and both gradients
    against the reference."""
    x = layer(12, 4, batch, device, K=600)
    tiles = gpu._forward_tiles(3, 4, 600, batch, 132, heuristic="small")
    assert tiles.TILE_K == 1024 and not tiles.USE_DOT
    em = x["element_mars"].clone()
    em[x["cids"][0]] = float("-inf")  # every child of block 0: its nodes end at -inf
    em.requires_grad_(True)
    params = x["params"].clone().requires_grad_(True)
    out = sum_layer(em, params, x["cids"], x["pids"], 4, impl="gpu", heuristic="small")
    em64, p64 = ref64(em).requires_grad_(True), ref64(params).requires_grad_(True)
    want = sum_layer_reference(em64, p64, x["cids"].cpu(), x["pids"].cpu(), 4)
    assert_close(out, want, what="forward")
    grad = torch.randn_like(out).masked_fill(~torch.isfinite(out), 0.0)
    got_em, got_p = torch.autograd.grad(out, (em, params), grad)
    want_em, want_p = torch.autograd.grad(want, (em64, p64), ref64(grad))
    assert_close(got_em, want_em, atol=1e-3, scale_by_max=True, what="element gradient")
    assert_close(got_p, want_p, atol=1e-3, scale_by_max=True, what="parameter gradient")


@pytest.mark.parametrize("T,L,batch", [(4, 24, 3), (2, 6, 1), (5, 1024, 1)])
def test_chain_layout_addresses_are_the_views_the_long_way_launches_with(T, L, batch):
    """The eager chain's replays (kernels/block_sparse/chain_replay.py) launch from addresses
    computed from the buffers' bases; each must be the address of the view hmm.py slices."""
    from kernels.block_sparse.chain_replay import ChainLayout

    steps = torch.empty((T, 2 * L, batch))
    zs = torch.empty((max(T - 1, 1), L, batch))
    layout = ChainLayout(T, L, batch)
    base, z_base = steps.data_ptr(), zs.data_ptr()
    for t in range(T):
        assert layout.step(base, t) == steps[t].data_ptr() == steps[t, :L].data_ptr()
        assert layout.step(base, t, upper=True) == steps[t, L:].data_ptr()
        z = steps[t, :L] if t == T - 1 else zs[t]
        assert layout.z(base, z_base, t) == z.data_ptr()
