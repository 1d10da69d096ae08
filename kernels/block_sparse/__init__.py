"""Block-sparse probabilistic-circuit layers: the functional API, autograd wiring and the KernelSpec.

    out = sum_layer(element_mars, params, cids, pids, block_size, impl="auto", **tiles)
    eflows, pflows = sum_layer_backward(node_flows, element_mars, params, out, cids, pids, block_size,
                                        impl="auto", **tiles)
    prod = product_layer(node_mars, cids, block_size, impl="auto", **tiles)

Math and layout: docs/families.md and :mod:`.reference`. ``impl="gpu"`` runs :mod:`.gpu`, ``"npu"``
runs :mod:`.npu` (grid = cores, grid-stride), ``"auto"`` the NPU kernels on an NPU and the GPU
kernels elsewhere (the CPU runs either in the Triton interpreter). Tiles, as keyword arguments:

- ``sum_layer`` (gpu): ``heuristic`` ("auto" | "large" | "small" | "split"), ``TILE_M``, ``TILE_K``,
  ``BLOCK_B``, ``PROGRAM_M``, ``num_warps``, ``num_stages``, ``SPLITS`` (split-K: programs
  sharing a node tile's edges, merged by a combine kernel). A call that leaves them all "auto"
  takes the device's tuned table (``tuned/<device>.json``, :mod:`kernels.tuned_tables`) where
  it has one. These steer the forward kernel; the backward kernels autograd runs follow
  ``heuristic`` alone (their broadcast tiles have different limits).
- ``sum_layer_backward`` (gpu): ``heuristic``, ``TILE_M``, ``TILE_K``, ``BLOCK_B``, ``num_warps``,
  ``NODE_SPLITS`` (element flows: programs sharing a block's nodes).
- ``product_layer`` (gpu): ``heuristic``, ``BLOCK_M`` (alias ``TILE_M``), ``BLOCK_B``, ``num_warps``.
- every npu call: ``TILE_M``, ``TILE_K``, ``BLOCK_B``, ``GRID``; ``sum_layer`` also ``SPLITS``.

Scatters in the backward use plain stores where each address has one writer (distinct
``cids``; disjoint ``pids`` runs — checked once per index tensors) and atomics otherwise.

Autograd. ``sum_layer`` and ``product_layer`` are differentiable. DESIGN's backward takes linear
node flows ``F`` and returns flows; for a loss with ``g = d loss / d out``:

- ``d loss / d element_mars`` is exactly the element-flow formula with ``F = g``;
- ``d loss / d params[j] = sum over edges using j, sum_b g * exp(em - out)``, i.e. the parameter
  flows *without* the factor ``params`` (flows are gradients w.r.t. log-parameters). The autograd
  backward runs the same parameter-flow kernel with that factor switched off (``MUL_PARAMS``),
  rather than dividing flows by ``params`` (which would fail for zero weights).

Both kernels are skipped when the corresponding input does not require grad.

Dtypes: log-probabilities and weights are fp32 (a bf16 log-probability of -300 is only good to
±1, useless for a circuit); indices int32 or int64 (the NPU path converts to int32 once).
Index ranges are checked against the tensor they index, once per index tensor (cached by
identity and version), so repeated calls — and CUDA graph capture after a first call — pay no
device-to-host synchronisation.

Why one long module: the functional API, its validation and its autograd wiring are the
family's contract; the KernelSpec beside them describes exactly those calls.
"""

from __future__ import annotations

import functools
import weakref

import torch

from kernels.block_sparse import gpu, npu, peer
from kernels.block_sparse.edges import EDGES, EdgeLayout, check_edges, choose, edge_layout
from kernels.block_sparse.reference import (
    product_layer_reference,
    sum_layer_backward_reference,
    sum_layer_reference,
)
from kernels.block_sparse.tile_math import SHIFTS
from kernels.plans import eager_plans, remember_plan, tile_items
from kernels.runtime import auto_impl, device_of
from kernels.spec import KernelSpec, Knob, Param, Tuning, Variant, run_of
from kernels.testing import looser
from kernels.tuned_tables import device_key

IMPLS = ("gpu", "npu", "auto")
_GPU_SUM_TILES = ("heuristic", "TILE_M", "TILE_K", "BLOCK_B", "PROGRAM_M", "num_warps", "num_stages", "SPLITS", "SHIFT")
_GPU_BWD_TILES = ("heuristic", "TILE_M", "TILE_K", "BLOCK_B", "num_warps", "NODE_SPLITS", "SHIFT")
_GPU_PRODUCT_TILES = ("heuristic", "BLOCK_M", "TILE_M", "BLOCK_B", "num_warps")
_NPU_TILES = ("TILE_M", "TILE_K", "BLOCK_B", "GRID", "SPLITS", "SHIFT")
_INDEX_DTYPES = (torch.int32, torch.int64)


# --- validation ------------------------------------------------------------------------------
def _impl(impl: str, tensor: torch.Tensor) -> str:
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not allowed; use one of {', '.join(IMPLS)}")
    if impl == "auto":
        return auto_impl(tensor)
    return impl


def _check_tile_names(tiles: dict, allowed: tuple, what: str):
    unknown = sorted(set(tiles) - set(allowed))
    if unknown:
        raise ValueError(f"unknown tile parameter {', '.join(unknown)} for {what}; allowed: {', '.join(allowed)}")


def _check_float(name: str, t, ndim: int, device=None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        shape = "[rows, batch]" if ndim == 2 else "[num_params]"
        raise ValueError(f"{name} must be {ndim}-D {shape}, got shape {tuple(t.shape)}")
    if t.dtype != torch.float32:
        raise ValueError(
            f"{name} has dtype {t.dtype}; block-sparse layers take float32 (log-probabilities and weights "
            f"need fp32 range and precision)"
        )
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but element_mars is on {device}; put all tensors on one device")
    return t.contiguous()


def _check_index(name: str, t, device) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of int32/int64, got {type(t).__name__}")
    if t.dtype not in _INDEX_DTYPES:
        raise ValueError(f"{name} has dtype {t.dtype}; use torch.int32 or torch.int64")
    if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise ValueError(f"{name} must be 2-D [num_blocks, K] with K >= 1, got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but the values are on {device}; put all tensors on one device")
    return t.contiguous()


def _check_block_size(block_size):
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be a positive integer (nodes per block)")
    return block_size


def _memo(cache: dict, tensors: tuple, make, *extra):
    """``make()``, remembered per tensor objects and their versions: a new tensor, or an in-place
    change to one (its ``_version``), computes again. Weak references, so a freed tensor's
    entry (pruned past 4096) never answers for a new one at the same address."""
    key = tuple(id(t) for t in tensors) + extra
    versions = tuple(t._version for t in tensors)
    hit = cache.get(key)
    if hit is not None and hit[1] == versions and all(ref() is t for ref, t in zip(hit[0], tensors)):
        return hit[2]
    value = make()
    if len(cache) > 4096:
        for k in [k for k, v in cache.items() if any(ref() is None for ref in v[0])]:
            del cache[k]
    cache[key] = (tuple(weakref.ref(t) for t in tensors), versions, value)
    return value


# Index ranges per tensor (one host sync each, then none while the tensor is unchanged).
_RANGES: dict[tuple, tuple] = {}


def _index_range(t: torch.Tensor) -> tuple[int, int]:
    return _memo(_RANGES, (t,), lambda: tuple(int(v) for v in torch.aminmax(t)))


def _check_range(name: str, t: torch.Tensor, limit: int, span: int, what: str):
    """Every ``t + [0, span)`` must lie in ``[0, limit)``."""
    lo, hi = _index_range(t)
    if lo < 0 or hi + span > limit:
        extra = f" + block_size ({span})" if span > 1 else ""
        raise ValueError(
            f"{name} out of range: values span [{lo}, {hi}]{extra}, but {what} has {limit} rows/entries; "
            f"allowed: 0 <= {name}{' + i' if span > 1 else ''} < {limit}"
        )


_INT32: dict[tuple, tuple] = {}


def _as_int32(t: torch.Tensor) -> torch.Tensor:
    """int32 copy for the NPU kernels (int32 offsets), cached per tensor object and version."""
    if t.dtype == torch.int32:
        return t

    def copy():
        lo, hi = _index_range(t)
        if hi >= 2**31 or lo < -(2**31):
            raise ValueError("indices do not fit int32, which the NPU kernels use; use impl='gpu'")
        return t.to(torch.int32)

    return _memo(_INT32, (t,), copy)


def _validate_sum(element_mars, params, cids, pids, block_size):
    if not isinstance(element_mars, torch.Tensor):
        raise ValueError(f"element_mars must be a torch.Tensor, got {type(element_mars).__name__}")
    device = element_mars.device
    element_mars = _check_float("element_mars", element_mars, 2)
    params = _check_float("params", params, 1, device)
    cids = _check_index("cids", cids, device)
    pids = _check_index("pids", pids, device)
    block_size = _check_block_size(block_size)
    if cids.shape != pids.shape:
        raise ValueError(
            f"cids has shape {tuple(cids.shape)} but pids has {tuple(pids.shape)}; both are [num_blocks, K] "
            f"(K, the edges per block, must match)"
        )
    _check_range("cids", cids, element_mars.shape[0], 1, "element_mars")
    _check_range("pids", pids, params.shape[0], block_size, "params")
    return element_mars, params, cids, pids


def _validate_product(node_mars, cids, block_size):
    if not isinstance(node_mars, torch.Tensor):
        raise ValueError(f"node_mars must be a torch.Tensor, got {type(node_mars).__name__}")
    node_mars = _check_float("node_mars", node_mars, 2)
    cids = _check_index("cids", cids, node_mars.device)
    block_size = _check_block_size(block_size)
    _check_range("cids", cids, node_mars.shape[0], block_size, "node_mars")
    return node_mars, cids


# Single-writer facts per (cids, pids, block_size).
_WRITERS: dict[tuple, tuple] = {}


def _single_writers(cids: torch.Tensor, pids: torch.Tensor, block_size: int) -> dict:
    """``element_atomic`` / ``param_atomic`` for the backward: False where each address has one
    writer — every ``cids`` entry distinct (element flows), the runs ``pids + [0, block_size)``
    disjoint (parameter flows) — so plain stores replace atomics. One host sync per index pair
    and version (cached like the range checks), none on repeated calls or under graph capture."""

    def facts():
        flat = cids.reshape(-1)
        distinct = torch.unique(flat).numel() == flat.numel()
        runs = torch.sort(pids.reshape(-1)).values
        disjoint = runs.numel() < 2 or int((runs[1:] - runs[:-1]).min()) >= block_size
        return {"element_atomic": not distinct, "param_atomic": not disjoint}

    return _memo(_WRITERS, (cids, pids), facts, block_size)


# Edge layouts per (cids, pids, block_size): affine or gathered (edges.py).
_EDGES: dict[tuple, tuple] = {}


def layer_edges(cids: torch.Tensor, pids: torch.Tensor, block_size: int, option="auto", impl="gpu") -> EdgeLayout:
    """How ``impl``'s kernels find a layer's edges for the ``EDGES`` option (edges.choose):
    computed where ``cids`` / ``pids`` are affine, else gathered. One host sync per index pair
    and version, none on repeated calls or under graph capture."""
    return choose(
        option, impl, lambda: _memo(_EDGES, (cids, pids), lambda: edge_layout(cids, pids, block_size), block_size)
    )


def _num_cores(t: torch.Tensor) -> int:
    return device_of(t).num_cores


def _npu_tiles(cids, block_size, batch, t, tiles):
    dev = device_of(t)
    return npu.resolve_tiles(
        cids.shape[0], block_size, cids.shape[1], batch, dev.num_cores, on_npu=dev.kind == "npu", **tiles
    )


# --- autograd --------------------------------------------------------------------------------
class _SumLayerFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, element_mars, params, cids, pids, block_size, impl, fwd_tiles, bwd_tiles, writers, edges):
        module = gpu if impl == "gpu" else npu
        out = module.sum_forward(element_mars, params, cids, pids, block_size, fwd_tiles, edges=edges)
        ctx.save_for_backward(element_mars, params, cids, pids, out)
        ctx.config = (block_size, module, bwd_tiles, writers, edges)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        element_mars, params, cids, pids, out = ctx.saved_tensors
        block_size, module, bwd_tiles, writers, edges = ctx.config
        need_em, need_p = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        d_em, d_p = module.sum_backward(
            grad_out.contiguous().float(),
            element_mars,
            params,
            out,
            cids,
            pids,
            block_size,
            bwd_tiles,
            element_flows=need_em,
            param_flows=need_p,
            mul_params=False,
            edges=edges,
            **writers,
        )
        return d_em, d_p, None, None, None, None, None, None, None, None


class _ProductLayerFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, node_mars, cids, block_size, impl, tiles):
        module = gpu if impl == "gpu" else npu
        ctx.save_for_backward(cids)
        ctx.config = (block_size, module, tiles, node_mars.shape[0])
        return module.product_forward(node_mars, cids, block_size, tiles)

    @staticmethod
    def backward(ctx, grad_out):
        (cids,) = ctx.saved_tensors
        block_size, module, tiles, n_rows = ctx.config
        grad_in = module.product_backward(grad_out.contiguous().float(), cids, block_size, n_rows, tiles)
        return grad_in, None, None, None, None


# --- the functional API ----------------------------------------------------------------------
# Eager plans of the sum layer's forward without gradients on CUDA (kernels.plans.eager_plans):
# per layout (element_mars' and params' shapes, strides, dtypes, devices and address alignment
# classes; the index tensors by identity, version and address; block size, impl, precision and
# tiles) a gpu.SumForwardReplay and weak references to the index tensors, or False where the
# layout has no replay. The index tensors' range checks and edge layout are facts of their
# values, which the identity and version pin down.
_SUM_EAGER = eager_plans()


def _sum_eager_key(element_mars, params, cids, pids, block_size, impl, precision, tiles):
    """The eager plan's key of a sum-layer call, or None for a call no plan serves (not CUDA
    tensors, gradients asked for, an argument of the wrong type: the long path says what is
    wrong)."""
    try:
        if (
            type(element_mars) is not torch.Tensor
            or not element_mars.is_cuda
            or type(block_size) is not int
            or (torch.is_grad_enabled() and (element_mars.requires_grad or params.requires_grad))
        ):
            return None
        return (
            element_mars.shape, element_mars.stride(), element_mars.dtype, element_mars.get_device(),
            element_mars.data_ptr() & 15, params.shape, params.stride(), params.dtype, params.get_device(),
            params.data_ptr() & 15, id(cids), cids._version, cids.data_ptr(), id(pids), pids._version,
            pids.data_ptr(), block_size, impl, precision, tile_items(tiles),
        )  # fmt: skip
    except (AttributeError, TypeError):  # not tensors, an unhashable setting
        return None


def _replayed_sum(key, element_mars, params, cids, pids):
    """The planned call's output, or None where there is no plan, it is another index tensor's
    (an id reused after a free) or its replay refuses (the plan is dropped: the next call plans
    again)."""
    plan = _SUM_EAGER.get(key)
    if not plan:
        return None
    replay, cids_ref, pids_ref = plan
    if cids_ref() is cids and pids_ref() is pids:
        out = replay(element_mars, params, cids, pids)
        if out is not None:
            return out
    del _SUM_EAGER[key]
    return None


def sum_layer(element_mars, params, cids, pids, block_size, impl="auto", precision="ieee", **tiles) -> torch.Tensor:
    """``out [G*block_size, B]``; differentiable in element_mars and params (module docstring).

    ``precision``: the input precision of the GPU's ``tl.dot`` tiles (``gpu.PRECISIONS``: "ieee"
    fp32, "tf32", "tf32x3"), the forward's and, from batch 16, the backward's factored flows;
    broadcast tiles and the NPU kernels compute in fp32 whatever it says. An explicit ``SHIFT``
    applies to the backward too. ``EDGES`` (:data:`edges.EDGES`): "auto" computes the edges on the
    GPU where cids/pids are affine (:func:`layer_edges`), "affine" asks for that on either device,
    "gather" always loads them.

    On CUDA a call without gradients keeps a plan per layout (``_SUM_EAGER``): after the first
    call, the forward's launches are replayed from the tensors' addresses, skipping the checks,
    the tile resolution and Triton's launch."""
    eager_key = _sum_eager_key(element_mars, params, cids, pids, block_size, impl, precision, tiles)
    if eager_key is not None:
        out = _replayed_sum(eager_key, element_mars, params, cids, pids)
        if out is not None:
            return out
    given = (element_mars, params, cids, pids)
    element_mars, params, cids, pids = _validate_sum(element_mars, params, cids, pids, block_size)
    if any(a is not b for a, b in zip(given, (element_mars, params, cids, pids))):
        eager_key = None  # a contiguous copy was made: the plan would replay the strided tensor
    impl = _impl(impl, element_mars)
    edges = layer_edges(cids, pids, block_size, tiles.pop("EDGES", "auto"), impl)
    n_blocks, n_edges = cids.shape
    batch = element_mars.shape[1]
    if impl == "gpu":
        if tiles:
            _check_tile_names(tiles, _GPU_SUM_TILES, "sum_layer (impl='gpu')")
        dev = device_of(element_mars)
        cores = dev.num_cores
        fwd = gpu.resolve_forward_tiles(
            n_blocks, block_size, n_edges, batch, cores, **tiles, device_key=device_key(dev), precision=precision
        )
        bwd = None  # resolved below only when a backward can follow
    else:
        _check_tile_names(tiles, _NPU_TILES, "sum_layer (impl='npu')")
        gpu.check_precision(precision)  # the GPU path checks it when it resolves its tiles
        fwd = bwd = _npu_tiles(cids, block_size, batch, element_mars, tiles)
        cids, pids = _as_int32(cids), _as_int32(pids)
    if batch == 0:
        return element_mars.new_empty((n_blocks * block_size, 0))
    if torch.is_grad_enabled() and (element_mars.requires_grad or params.requires_grad):
        if bwd is None:
            heuristic, shift = tiles.get("heuristic", "auto"), tiles.get("SHIFT", "auto")
            bwd = gpu.resolve_backward_tiles(
                n_blocks, block_size, n_edges, batch, cores, heuristic, SHIFT=shift, precision=precision
            )
        # Single-writer facts now, beside the range checks: a backward captured in a CUDA graph
        # must not be the first to ask (it would synchronise).
        writers = _single_writers(cids, pids, block_size)
        return _SumLayerFunction.apply(element_mars, params, cids, pids, block_size, impl, fwd, bwd, writers, edges)
    if impl == "npu":
        return npu.sum_forward(element_mars, params, cids, pids, block_size, fwd, edges=edges)
    out = gpu.sum_forward(element_mars, params, cids, pids, block_size, fwd, edges=edges)
    if eager_key is not None and eager_key not in _SUM_EAGER:
        remember_plan(
            _SUM_EAGER, eager_key, lambda: _sum_plan(element_mars, params, cids, pids, block_size, fwd, out, edges)
        )
    return out


def _sum_plan(element_mars, params, cids, pids, block_size, tiles, out, edges):
    """The eager plan of a forward just run (None where its launches have no replay)."""
    replay = gpu.sum_forward_replay(element_mars, params, cids, pids, block_size, tiles, out, edges)
    return replay and (replay, weakref.ref(cids), weakref.ref(pids))


def sum_layer_backward(
    node_flows, element_mars, params, out, cids, pids, block_size, impl="auto", precision="ieee", **tiles
) -> tuple[torch.Tensor, torch.Tensor]:
    """DESIGN's flows: ``(eflows [M, B], pflows [P])`` for linear node flows ``F [G*block_size, B]``.

    ``precision``: the GPU's factored tiles' ``tl.dot`` input precision (``gpu.PRECISIONS``);
    ``SHIFT`` "node" keeps the exact broadcast form at every batch (gpu.resolve_backward_tiles);
    ``EDGES`` as in :func:`sum_layer`."""
    element_mars, params, cids, pids = _validate_sum(element_mars, params, cids, pids, block_size)
    device = element_mars.device
    n_blocks, n_edges = cids.shape
    batch = element_mars.shape[1]
    node_flows = _check_float("node_flows", node_flows, 2, device)
    out = _check_float("out", out, 2, device)
    want = (n_blocks * block_size, batch)
    for name, t in (("node_flows", node_flows), ("out", out)):
        if tuple(t.shape) != want:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; it must be [G*block_size, B] = {list(want)}")
    impl = _impl(impl, element_mars)
    edges = layer_edges(cids, pids, block_size, tiles.pop("EDGES", "auto"), impl)
    if impl == "gpu":
        _check_tile_names(tiles, _GPU_BWD_TILES, "sum_layer_backward (impl='gpu')")
        t = gpu.resolve_backward_tiles(
            n_blocks, block_size, n_edges, batch, _num_cores(element_mars), **tiles, precision=precision
        )
        module = gpu
    else:
        _check_tile_names(tiles, _NPU_TILES, "sum_layer_backward (impl='npu')")
        gpu.check_precision(precision)
        t = _npu_tiles(cids, block_size, batch, element_mars, tiles)
        cids, pids = _as_int32(cids), _as_int32(pids)
        module = npu
    if batch == 0:
        return torch.zeros_like(element_mars), torch.zeros_like(params)
    with torch.no_grad():
        writers = _single_writers(cids, pids, block_size)
        return module.sum_backward(
            node_flows, element_mars, params, out, cids, pids, block_size, t, edges=edges, **writers
        )


def product_layer(node_mars, cids, block_size, impl="auto", **tiles) -> torch.Tensor:
    """``prod [G*block_size, B]`` with ``prod[g*bs+i] = sum_k node_mars[cids[g, k] + i]``; differentiable."""
    node_mars, cids = _validate_product(node_mars, cids, block_size)
    impl = _impl(impl, node_mars)
    n_blocks = cids.shape[0]
    batch = node_mars.shape[1]
    if impl == "gpu":
        _check_tile_names(tiles, _GPU_PRODUCT_TILES, "product_layer (impl='gpu')")
        tiles = dict(tiles)
        alias = tiles.pop("TILE_M", "auto")
        if tiles.get("BLOCK_M", "auto") == "auto":
            tiles["BLOCK_M"] = alias
        resolved = gpu.resolve_product_tiles(n_blocks, block_size, batch, _num_cores(node_mars), **tiles)
    else:
        _check_tile_names(tiles, _NPU_TILES, "product_layer (impl='npu')")
        resolved = _npu_tiles(cids, block_size, batch, node_mars, tiles)
        cids = _as_int32(cids)
    if batch == 0:
        return node_mars.new_empty((n_blocks * block_size, 0))
    if torch.is_grad_enabled() and node_mars.requires_grad:
        return _ProductLayerFunction.apply(node_mars, cids, block_size, impl, resolved)
    module = gpu if impl == "gpu" else npu
    return module.product_forward(node_mars, cids, block_size, resolved)


def largest_block_size(nodes: int, cap: int = 1024) -> int:
    """The largest power of two dividing ``nodes``, at most ``cap`` (PyJuice's HMM rule)."""
    if nodes < 1:
        raise ValueError(f"nodes={nodes!r} must be a positive integer")
    return min(nodes & -nodes, cap)


# --- the spec --------------------------------------------------------------------------------
def _shape(problem) -> dict:
    """Derived layer shape: G blocks of bs nodes, K edges per block, M child rows, P params."""
    nodes = problem["nodes"]
    bs = problem["block_size"] or largest_block_size(nodes)
    if nodes % bs:
        raise ValueError(
            f"block_size={bs} does not divide the layer's nodes={nodes}; use a divisor of {nodes} "
            f"(0 picks the largest power of two dividing it, {largest_block_size(nodes)})"
        )
    n_blocks = nodes // bs
    if problem["layer"] == "sum":
        k = problem["K"] or nodes
        rows = max(nodes, k)
        n_params = (1 if problem["tied"] else n_blocks) * k * bs
    else:
        k = problem["K"] or 2
        rows = k * nodes
        n_params = 0
    return {"nodes": nodes, "bs": bs, "G": n_blocks, "K": k, "M": rows, "P": n_params, "B": problem["batch"]}


def make_layer(problem, device="cpu", seed=0) -> dict:
    """Random inputs for one layer (never zeros): log-probabilities, normalised weights, indices.

    Sum layer: block ``g`` takes the K child rows ``(g*K + k) mod M`` (every row is used when
    ``G*K >= M``); untied parameters are laid out ``[G, K, bs]`` (``pids[g, k] = (g*K + k)*bs``),
    tied ones share one ``[K, bs]`` set across blocks. Product layer: ``K`` disjoint child
    blocks per node block, ``cids[g, k] = k*nodes + g*bs``.
    """
    s = _shape(problem)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    g_idx = torch.arange(s["G"])[:, None]
    k_idx = torch.arange(s["K"])[None, :]
    if problem["layer"] == "product":
        node_mars = -2.0 + 1.5 * torch.randn(s["M"], s["B"], generator=gen)
        cids = (k_idx * s["nodes"] + g_idx * s["bs"]).to(torch.int32)
        return {"node_mars": node_mars.to(device), "cids": cids.to(device)}
    element_mars = -2.0 + 1.5 * torch.randn(s["M"], s["B"], generator=gen)
    cids = torch.sort((g_idx * s["K"] + k_idx) % s["M"], dim=1).values.to(torch.int32)
    if problem["tied"]:
        pids = (k_idx * s["bs"]).expand(s["G"], s["K"])
        sets = 1
    else:
        pids = (g_idx * s["K"] + k_idx) * s["bs"]
        sets = s["G"]
    weights = torch.rand(sets, s["K"], s["bs"], generator=gen) + 0.05
    weights = weights / weights.sum(dim=1, keepdim=True)  # each node's weights sum to 1
    return {
        "element_mars": element_mars.to(device),
        "params": weights.reshape(-1).to(device),
        "cids": cids.to(device),
        "pids": pids.contiguous().to(torch.int32).to(device),
    }


def _make_inputs(problem, dtype, device, seed):
    inputs = make_layer(problem, device, seed)
    for name in ("element_mars", "params", "node_mars"):
        if name in inputs:
            inputs[name] = inputs[name].to(dtype).requires_grad_()
    return inputs


def _reference(inputs, problem):
    bs = _shape(problem)["bs"]
    if problem["layer"] == "product":
        return product_layer_reference(inputs["node_mars"], inputs["cids"], bs)
    return sum_layer_reference(inputs["element_mars"], inputs["params"], inputs["cids"], inputs["pids"], bs)


def _min_bytes(problem, mode, dtype):
    """Fewest bytes each mode must move (fp32 values, int32 indices).

    Sum forward: every referenced child row once (``min(M, G*K)`` rows of B), every parameter
    once (P), both index arrays once (``2*G*K``), the output once (``N*B``). Sum backward
    (autograd): read the incoming gradient and ``out`` (``2*N*B``), the referenced child rows,
    the parameters and indices; write the full element gradient (``M*B``) and parameter
    gradient (P). Product forward: read its ``K*N`` child rows, write N rows; backward: read N
    rows of gradient, write the ``M`` rows of the input gradient.
    """
    s = _shape(problem)
    n, b = s["nodes"], s["B"]
    if problem["layer"] == "product":
        forward = 4 * (s["K"] * n * b + n * b) + 4 * s["G"] * s["K"]
        backward = 4 * (n * b + s["M"] * b) + 4 * s["G"] * s["K"]
    else:
        ref_rows = min(s["M"], s["G"] * s["K"])
        index = 2 * 4 * s["G"] * s["K"]
        forward = 4 * (ref_rows * b + s["P"] + n * b) + index
        backward = 4 * (2 * n * b + ref_rows * b + s["P"] + s["M"] * b + s["P"]) + index
    return {"forward": forward, "backward": backward, "full": forward + backward}[mode]


def _flops(problem, mode):
    """Floating-point operations each mode must do, for the roofline. Sum forward: a multiply and
    an add per (node, edge, batch column) in the product of parameters and ``exp(children)`` (the
    exps and logs of the log-sum-exp not counted); its backward two such products (element and
    parameter flows). Product layer: one add per (node, edge, column) each way."""
    s = _shape(problem)
    work = s["nodes"] * s["K"] * s["B"]
    forward, backward = (work, work) if problem["layer"] == "product" else (2 * work, 4 * work)
    return {"forward": forward, "backward": backward, "full": forward + backward}[mode]


def _tiles(params: dict) -> dict:
    return {k: v for k, v in params.items() if v != "auto"}


def _ours(impl: str, fixed: dict | None = None):
    fixed = dict(fixed or {})

    def split(problem, params):
        tiles = {**fixed, **_tiles(params)}
        if problem["layer"] == "product":
            for name in ("TILE_K", "PROGRAM_M", "num_stages", "SPLITS", "SHIFT", "EDGES"):  # sum-layer tiles only
                tiles.pop(name, None)
        return tiles

    def bind(inputs, problem, **params):
        bs = _shape(problem)["bs"]
        tiles = split(problem, params)
        if problem["layer"] == "product":
            return functools.partial(product_layer, inputs["node_mars"], inputs["cids"], bs, impl=impl, **tiles)
        return functools.partial(
            sum_layer,
            inputs["element_mars"],
            inputs["params"],
            inputs["cids"],
            inputs["pids"],
            bs,
            impl=impl,
            precision=problem["precision"],
            **tiles,
        )

    def check(problem, params, dtype, device):
        s = _shape(problem)
        tiles = split(problem, params)
        check_edges(tiles.pop("EDGES", "auto"))  # a call option, not a tile
        if impl == "npu":
            npu.resolve_tiles(s["G"], s["bs"], s["K"], s["B"], device.num_cores, on_npu=device.kind == "npu", **tiles)
        elif problem["layer"] == "product":
            if "TILE_M" in tiles:
                tiles["BLOCK_M"] = tiles.pop("TILE_M")
            gpu.resolve_product_tiles(s["G"], s["bs"], s["B"], device.num_cores, **tiles)
        else:
            chosen = gpu.resolve_forward_tiles(
                s["G"], s["bs"], s["K"], s["B"], device.num_cores, **tiles, precision=problem["precision"]
            )
            # before a compile of up to a minute that would fail at launch
            chosen.check_shared_memory(getattr(device, "shared_bytes_per_program", None))

    def source(problem, params, device):
        """Where the sum forward's tiles come from on ``device`` (records' ``tiles_source``)."""
        tiles = split(problem, params)
        tiles.pop("EDGES", None)
        if problem["layer"] == "product" or impl == "npu":  # no tuned tables for these
            return "explicit" if tiles else "heuristic"
        s = _shape(problem)
        return gpu.resolve_forward_tiles(
            s["G"], s["bs"], s["K"], s["B"], device.num_cores, **tiles, device_key=device_key(device),
            precision=problem["precision"],
        ).source  # fmt: skip

    return run_of(bind), bind, check, source


def _compile_s(problem, params) -> float | None:
    """A sum forward's expected compile seconds from its explicit tile (TILE_M x TILE_K x
    BLOCK_B elements), or None where a tile is left "auto". The H100 host's compiles (issue 44's
    tune-sized sweep): medians of 0.3-0.5 s up to 8192 elements, then 0.6, 1.3, 2.6 and 6.5 s at
    2^14, 2^16, 2^17 and 2^18."""
    tile = [params.get(name, "auto") for name in ("TILE_M", "TILE_K", "BLOCK_B")]
    if problem.get("layer") != "sum" or "auto" in tile or None in tile:
        return None
    return 0.4 * max(1.0, tile[0] * tile[1] * tile[2] / 8192) ** 0.8


def _fp32(problem) -> str:
    return "ieee"


def _torch_path(inputs, problem):
    return _reference(inputs, problem)


def _pyjuice_kernel(inputs, problem, mode="forward"):
    return peer.pyjuice_layer_kernel(inputs, _shape(problem), problem, mode)


def _pyjuice_run(inputs, problem):
    if problem["layer"] != "sum":
        raise ValueError("the PyJuice peer runs the sum layer only (layer='sum')")
    return peer.pyjuice_sum_layer(inputs, _shape(problem), problem)


_POW2 = tuple(2**k for k in range(0, 11))
_COMMON_PARAMS = (
    Param("TILE_M", ("auto",) + _POW2[:9], "auto", "nodes per tile (product layer: BLOCK_M)"),
    Param("TILE_K", ("auto",) + _POW2, "auto", "edges per chunk (sum layer)"),
    Param("BLOCK_B", ("auto",) + _POW2[:9], "auto", "batch columns per program"),
)
_SPLITS = Param(
    "SPLITS",
    ("auto",) + gpu.SPLIT_VALUES,
    "auto",
    "split-K: programs sharing a tile's edges, merged by a combine kernel",
)
_SHIFT = Param(
    "SHIFT",
    ("auto",) + SHIFTS,
    "auto",
    "a broadcast tile's log-sum-exp shift: per node (exact) or per column (fewer exponentials; sum forward)",
)
_EDGES_PARAM = Param(
    "EDGES",
    EDGES,
    "auto",
    "how programs find their edges: computed where cids/pids are affine (no index loads; auto: on the GPU) or gathered",
)
_GPU_EXTRA = (
    _SPLITS,
    Param("PROGRAM_M", ("auto",) + _POW2, "auto", "nodes one program walks, in TILE_M sub-tiles (sum forward)"),
    Param("num_warps", ("auto",) + gpu.NUM_WARPS, "auto", "warps per program"),
    Param("num_stages", ("auto",) + gpu.NUM_STAGES, "auto", "software-pipelining depth of the edge loop (sum forward)"),
    _SHIFT,
    _EDGES_PARAM,
)

_gpu_run, _gpu_bind, _gpu_check, _gpu_source = _ours("gpu")
_npu_run, _npu_bind, _npu_check, _npu_source = _ours("npu")


def _gpu_tiling(heuristic: str, doc: str) -> Variant:
    """The GPU kernels held to one tiling ``heuristic`` (the ``gpu`` variant lets it be chosen)."""
    run, bind, check, source = _ours("gpu", {"heuristic": heuristic})
    return Variant(
        f"gpu_{heuristic}",
        "gpu",
        run,
        params=_COMMON_PARAMS + _GPU_EXTRA,
        devices=("cuda", "cpu"),
        check=check,
        tiles_source=source,
        bind=bind,
        doc=doc,
    )


def _keep_tuned(batch: int, params) -> bool:
    """The tune's grid at one batch: one column tile as wide as the batch below 16 (wider
    tiles only pad), 16-64 columns from 16 (the tl.dot form); the large tiling is unsplit; a
    broadcast tile (a side under 16) within the kernel's element cap."""
    b2 = 1 << max(0, (batch - 1).bit_length())
    block_b = params.get("BLOCK_B", 1)
    if batch < 16 and block_b != b2:
        return False
    if batch >= 16 and not (16 <= block_b <= b2):
        return False
    if params.get("heuristic") == "large" and params.get("SPLITS", 1) != 1:
        return False
    # the check refuses it: nothing to time
    return not gpu.broadcast_over_cap(params.get("TILE_M", 1), params.get("TILE_K", 1), block_b)


TUNING = Tuning(
    variant="gpu",
    knob="batch",
    # Issue 16's batches of the HMM transition layer (L = 1024), the suite's sizes.
    sizes=(1, 2, 4, 8, 16, 32, 64),
    problem={"layer": "sum", "nodes": 1024, "block_size": 1024, "K": 1024, "precision": "ieee"},
    params={
        "heuristic": ("small", "large"),
        "TILE_M": (4, 8, 16, 32),
        "TILE_K": (16, 32, 64, 128, 256, 512, 1024),
        "BLOCK_B": (1, 2, 4, 8, 16, 32, 64),
        "SPLITS": (1, 2, 4, 8, 16),
        "num_warps": (2, 4, 8),
    },
    dtype="fp32",
    quick_sizes=(1, 3),
    quick_params={"heuristic": ("small",), "TILE_M": (4, 8), "BLOCK_B": (1, 4), "SPLITS": (1, 2)},
    quick_problem={"layer": "sum", "nodes": 48, "block_size": 16, "K": 48, "precision": "ieee"},
    keep=_keep_tuned,
)

spec = KernelSpec(
    name="block_sparse",
    title="Block-sparse PC layers (HMM)",
    doc=(
        "Log-space block-sparse sum layer out = log sum_k p * exp(em[cids]) and product layer "
        "prod = sum_k node_mars[cids + i] of a PyJuice-style HMM; tiles TILE_M x TILE_K x BLOCK_B."
    ),
    knobs=(
        Knob("layer", "sum", values=("sum", "product"), doc="which layer: sum (block-sparse logsumexp) or product"),
        Knob("nodes", 1024, low=1, high=1 << 16, doc="nodes in the layer (L of the HMM)", sweep=(128, 256, 512, 1024)),
        Knob(
            "block_size",
            0,
            low=0,
            high=1 << 16,
            doc="nodes per block; 0 = the largest power of two dividing nodes, at most 1024",
            sweep=(16, 64, 256, 1024),
        ),
        Knob("K", 0, low=0, high=1 << 16, doc="edges per block; 0 = nodes (sum: full transition) or 2 (product)"),
        Knob("batch", 8, low=1, high=1 << 16, doc="batch size", sweep=(1, 2, 4, 8, 16, 32, 64, 128, 256)),
        Knob("tied", False, values=(False, True), doc="sum layer: every block shares one parameter set"),
        Knob(
            "precision",
            "ieee",
            values=gpu.PRECISIONS,
            doc="input precision of the sum forward's tl.dot tiles (ieee = fp32; tf32 as PyJuice's kernels use "
            "from batch 16); results are checked at that precision's tolerance",
        ),
    ),
    quick={"nodes": 48, "batch": 3},
    make_inputs=_make_inputs,
    reference=_reference,
    output_names=("out",),
    axis="batch",
    min_bytes=_min_bytes,
    flops=_flops,
    dtypes=("fp32",),
    # TF32 keeps 10 of fp32's 23 mantissa bits: each product is off by up to ~1e-3 relative, and a
    # sum of positive terms keeps that relative error, so log-space outputs move by ~1e-3 (PyJuice's
    # TF32 kernels: max 1.0e-3 abs, 1.9e-3 rel on the H100 at batch 16-64).
    tolerances={"fp32": (1e-4, 1e-4), "fp32/tf32": (5e-3, 5e-3)},
    strided=True,  # element_mars / node_mars as views of wider rows are read through their strides
    # Log-space sums in fp32: each layer exponentiates and sums its terms in tiles (and in split-K
    # partials) in another order than torch.logsumexp, and the flows come from exp(x - out), not
    # from autograd through the logsumexp; on the CPU interpreter correct kernels erred up to 2.3
    # times the reference's RMS error in fp32 (benchmarks/error_rule.py), against 1.3 for the
    # norms, while every wrong copy erred over 20,000 times it.
    error_rule=looser(
        4,
        "log-space sums in another order than torch.logsumexp (tiles, split-K), flows from exp(x - out): "
        "correct kernels erred up to 2.3x the reference in fp32",
    ),
    ub_estimate=npu.ub_estimate,  # NPU tiles -> Unified Buffer bytes (calibrated; > npu.UB_BYTES overflows)
    tuning=TUNING,
    compile_s=_compile_s,
    variants=(
        Variant(
            "gpu",
            "gpu",
            _gpu_run,
            params=(Param("heuristic", gpu.HEURISTICS, "auto", "tiling heuristic"),) + _COMMON_PARAMS + _GPU_EXTRA,
            devices=("cuda", "cpu"),
            check=_gpu_check,
            tiles_source=_gpu_source,
            bind=_gpu_bind,
            doc="Triton kernels; heuristic auto = large when its grid fills the SMs, else small",
        ),
        _gpu_tiling("large", "large-batch tiling: one program walks a whole block of nodes"),
        _gpu_tiling("small", "small-batch tiling: TILE_M = 8 node tiles, TILE_K decoupled from batch"),
        _gpu_tiling(
            "split", "split-K small-batch forward: SPLITS programs per node tile of TILE_M, online log-sum-exp, combine"
        ),
        Variant(
            "npu",
            "npu",
            _npu_run,
            params=_COMMON_PARAMS
            + (
                Param("GRID", ("auto",) + tuple(2**k for k in range(0, 12)), "auto", "programs"),
                _SPLITS,
                _SHIFT,
                _EDGES_PARAM,
            ),
            devices=("npu", "cuda", "cpu"),
            check=_npu_check,
            tiles_source=_npu_source,
            bind=_npu_bind,
            doc="triton-ascend style: grid = cores, grid-stride over tiles, no tl.where",
            precision=_fp32,  # vector cores only, no tl.dot
        ),
        Variant("torch", "torch", _torch_path, doc="PyTorch reference path: gather + einsum + log", precision=_fp32),
        Variant(
            "pyjuice",
            "peer",
            _pyjuice_run,
            devices=("cuda",),
            available=peer.available,
            modes=("forward",),
            doc="PyJuice's own sum-layer kernel on the same HMM transition layer (needs K = nodes, untied); "
            "its bare kernel also times the layer's backward",
            kernel=_pyjuice_kernel,
            prebuild=peer.prebuild,
            precision=peer.precision,
            imports=("pyjuice",),
        ),
    ),
)

__all__ = [
    "largest_block_size",
    "make_layer",
    "product_layer",
    "product_layer_reference",
    "spec",
    "sum_layer",
    "sum_layer_backward",
    "sum_layer_backward_reference",
    "sum_layer_reference",
]
