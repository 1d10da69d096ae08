"""An HMM as a chain of block-sparse layers: the workload the issue measures.

The circuit is PyJuice's HMM structure. With latents ``L``, sequence length ``T``, emissions
``V``, transition ``A [L, L]`` (``A[n, k] = p(z_{t+1} = k | z_t = n)``), emission ``E [L, V]`` and
prior ``pi [L]``, for a batch of sequences ``x [B, T]``::

    e_t   = log E[:, x_t]                              input layer: a gather, [L, B]
    z_T-1 = e_T-1
    s_t   = sum_layer(z_t+1, A)                        L nodes in blocks of bs, K = L edges each
    z_t   = product_layer([e_t; s_t])                  two children per node: e_t[n] + s_t[n]
    ll    = sum_layer(z_0, pi)                         one node, block size 1

so the chain is ``T - 1`` transition sum layers and product layers plus the root. The block size
is the largest power of two dividing ``L``, at most 1024 (PyJuice's rule); the transition layer
has ``G = L / bs`` blocks. ``ll`` is the log-likelihood of each sequence (the classical HMM
backward recursion, checked by :meth:`HMM.reference_loglik`).

Backward runs the flows top-down with root flow 1 per sequence (PyJuice's ``pc.backward``): the
product layer passes flows through, each transition layer produces element flows (the flows of
``z_{t+1}``) and adds its parameter flows into one buffer — the layers are *tied* across time
(homogeneous HMM). Flows equal gradients of ``sum_b ll`` with respect to log-values and
log-parameters, which is how the tests check them against autograd.

Buffers: step ``t`` owns a ``[2L, B]`` buffer whose rows ``0..L-1`` hold ``e_t`` (written by one
gather for all steps) and rows ``L..2L-1`` receive ``s_t`` directly from the sum kernel, so the
product layer reads both children with no concatenation copy.

Launch overhead: an eager chain issues ``2 (T - 1) + 1`` forward kernels from Python; at small
batch that can dominate (the issue: 2.8 ms wall for 0.24 ms of kernels). Two answers: after the
first call at a batch size on CUDA, the eager chain replays its steps' launches from the buffers'
addresses (:mod:`.chain_replay`), and :meth:`HMM.graphed` captures forward (+ backward) once in a
CUDA graph (``torch.cuda.graph``) and replays it, which separates launch overhead from kernel
time. Guarded: CUDA only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.block_sparse import (
    _single_writers,
    _validate_product,
    _validate_sum,
    gpu,
    largest_block_size,
    layer_edges,
    npu,
)
from kernels.block_sparse.chain_replay import ChainReplays
from kernels.block_sparse.edges import check_edges
from kernels.runtime import device_info, device_of
from kernels.tuned_tables import device_key


@dataclass(frozen=True)
class ChainPlan:
    """Resolved tiles for one batch size (resolved once, so a chain call does no Python tiling)."""

    batch: int
    trans_fwd: object
    trans_bwd: object
    root_fwd: object
    root_bwd: object
    product: object


class HMM:
    """A homogeneous HMM as block-sparse layers, with random (normalised) parameters.

    ``impl``: ``"gpu"`` | ``"npu"`` | ``"auto"``; ``heuristic`` and ``tiles`` steer the
    transition layer's GPU tiles (``TILE_M``, ``TILE_K``, ``BLOCK_B``, ``PROGRAM_M``) or the NPU
    tiles (``TILE_M``, ``TILE_K``, ``BLOCK_B``, ``GRID``); ``EDGES`` says how both sum layers find
    their edges (edges.py; "auto": computed on the GPU, gathered on the NPU). ``precision``: the
    transition layer's ``tl.dot`` input precision on the GPU (``gpu.PRECISIONS``), forward and
    backward (from batch 16 the rule's tiles take the dot forms); the NPU computes in fp32.
    ``replays``: after the first eager chain call at a batch size on CUDA, later calls launch
    the transition and product layers from addresses (:mod:`.chain_replay`); False runs every
    launch through the layer functions (to compare the two).
    """

    def __init__(
        self,
        T: int,
        L: int,
        V: int = 32,
        block_size: int | None = None,
        device="auto",
        seed: int = 0,
        impl: str = "auto",
        heuristic: str = "auto",
        precision: str = "ieee",
        replays: bool = True,
        **tiles,
    ):
        for name, value, low in (("T", T, 1), ("L", L, 1), ("V", V, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} must be an integer >= {low}")
        self.device = device_info(device)
        self.T, self.L, self.V = T, L, V
        self.block_size = largest_block_size(L) if block_size is None else block_size
        if (
            isinstance(self.block_size, bool)
            or not isinstance(self.block_size, int)
            or self.block_size < 1
            or L % self.block_size
        ):
            raise ValueError(f"block_size={block_size!r} does not divide the layer's L={L} nodes; use a divisor of L")
        if impl not in ("gpu", "npu", "auto"):
            raise ValueError(f"impl={impl!r} is not allowed; use one of gpu, npu, auto")
        self.impl = ("npu" if self.device.kind == "npu" else "gpu") if impl == "auto" else impl
        self.module = gpu if self.impl == "gpu" else npu
        gpu.check_heuristic(heuristic)
        gpu.check_precision(precision)
        self.heuristic = heuristic
        self.precision = precision
        self.tiles = dict(tiles)
        edges_option = check_edges(self.tiles.pop("EDGES", "auto"))
        self.edges = edges_option
        self._plans: dict[int, ChainPlan] = {}
        self._replays = ChainReplays(enabled=replays)  # the eager chain's launches from addresses, per batch

        dev = self.device.torch_device
        gen = torch.Generator(device="cpu").manual_seed(seed)
        A = torch.rand(L, L, generator=gen) + 0.05
        E = torch.rand(L, V, generator=gen) + 0.05
        pi = torch.rand(L, generator=gen) + 0.05
        self.A = (A / A.sum(1, keepdim=True)).to(dev)
        self.E = (E / E.sum(1, keepdim=True)).to(dev)
        self.pi = (pi / pi.sum()).to(dev)
        self.log_emit = self.E.log().contiguous()

        G, bs = L // self.block_size, self.block_size
        self.G = G
        # Transition: block g, edge k -> child row k; params[(g*L + k)*bs + i] = A[g*bs + i, k].
        self.trans_params = self.A.reshape(G, bs, L).permute(0, 2, 1).contiguous().reshape(-1)
        g_idx = torch.arange(G)[:, None]
        k_idx = torch.arange(L)[None, :]
        self.trans_cids = k_idx.expand(G, L).contiguous().to(torch.int32).to(dev)
        self.trans_pids = ((g_idx * L + k_idx) * bs).to(torch.int32).to(dev)
        # Product: node block g of z_t reads rows g*bs (e_t) and L + g*bs (s_t) of the step buffer.
        self.prod_cids = torch.stack([torch.arange(G) * bs, L + torch.arange(G) * bs], 1).to(torch.int32).to(dev)
        # Root: one node, block size 1, weights pi.
        self.root_params = self.pi.contiguous()
        self.root_cids = torch.arange(L, dtype=torch.int32).reshape(1, L).to(dev)
        self.root_pids = self.root_cids.clone()
        # Validate every index array once (ranges are cached; later calls do not sync).
        probe = torch.zeros(2 * L, 1, device=dev)
        _validate_sum(probe[:L], self.trans_params, self.trans_cids, self.trans_pids, bs)
        _validate_sum(probe[:L], self.root_params, self.root_cids, self.root_pids, 1)
        _validate_product(probe, self.prod_cids, bs)
        if self.impl == "npu":
            npu._check_int32(2 * L, 1, self.trans_params.numel())
        # Which backward scatters have one writer per address (plain stores instead of atomics):
        # the transition's child rows are distinct when G = 1, its parameter runs always are.
        self.trans_writers = _single_writers(self.trans_cids, self.trans_pids, bs)
        self.root_writers = _single_writers(self.root_cids, self.root_pids, 1)
        # Both layers' indices are affine (edges.py): the GPU kernels compute them (EDGES="auto").
        self.trans_edges = layer_edges(self.trans_cids, self.trans_pids, bs, edges_option, self.impl)
        self.root_edges = layer_edges(self.root_cids, self.root_pids, 1, edges_option, self.impl)

    def settings(self) -> dict:
        """The constructor's arguments that decide which kernels the chain launches (all but the
        device, the seed and ``replays``): ``HMM(device=..., **hmm.settings())`` builds one that
        launches the same kernels (a compile-ahead's, on another device)."""
        return {
            "T": self.T,
            "L": self.L,
            "V": self.V,
            "block_size": self.block_size,
            "impl": self.impl,
            "heuristic": self.heuristic,
            "precision": self.precision,
            **self.tiles,
            "EDGES": self.edges,
        }

    # --- data and tiles ------------------------------------------------------------------
    def sample(self, batch: int, seed: int = 0) -> torch.Tensor:
        """Random observation sequences ``x [batch, T]`` (int64 emission ids)."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        return torch.randint(0, self.V, (batch, self.T), generator=gen).to(self.device.torch_device)

    def plan(self, batch: int) -> ChainPlan:
        """The tiles of every layer at ``batch``, resolved once, for the device the parameters
        are on as the layer functions see it (``device_of``: a compile-ahead's stand-in CPU
        tensors plan for the GPU it compiles for)."""
        if batch < 1:
            raise ValueError(f"batch={batch!r} must be >= 1")
        if batch not in self._plans:
            planned_for = device_of(self.trans_params)
            cores, L, G, bs = planned_for.num_cores, self.L, self.G, self.block_size
            if self.impl == "gpu":
                key = device_key(planned_for)
                fwd = gpu.resolve_forward_tiles(
                    G, bs, L, batch, cores, heuristic=self.heuristic, **self.tiles, device_key=key,
                    precision=self.precision,
                )  # fmt: skip
                bwd = gpu.resolve_backward_tiles(
                    G, bs, L, batch, cores, heuristic=self.heuristic, precision=self.precision
                )
                root_fwd = gpu.resolve_forward_tiles(1, 1, L, batch, cores, heuristic="small")
                root_bwd = gpu.resolve_backward_tiles(1, 1, L, batch, cores, heuristic="small")
                prod = gpu.resolve_product_tiles(G, bs, batch, cores, heuristic=self.heuristic)
            else:
                on_npu = self.device.kind == "npu"
                fwd = bwd = prod = npu.resolve_tiles(G, bs, L, batch, cores, on_npu=on_npu, **self.tiles)
                root_fwd = root_bwd = npu.resolve_tiles(1, 1, L, batch, cores, on_npu=on_npu)
            self._plans[batch] = ChainPlan(batch, fwd, bwd, root_fwd, root_bwd, prod)
        return self._plans[batch]

    # --- the chain -----------------------------------------------------------------------
    def emissions(self, x: torch.Tensor) -> torch.Tensor:
        """Step buffers ``[T, 2L, B]`` with rows ``0..L-1`` of step t = ``log E[:, x[:, t]]``."""
        B = x.shape[0]
        bufs = torch.empty((self.T, 2 * self.L, B), dtype=torch.float32, device=x.device)
        bufs[:, : self.L] = self.log_emit[:, x].permute(2, 0, 1)
        return bufs

    def forward(self, x: torch.Tensor) -> dict:
        """Log-likelihoods ``ll [B]`` and the saved values the backward needs."""
        if x.dim() != 2 or x.shape[1] != self.T:
            raise ValueError(f"x must be [batch, T={self.T}] emission ids, got shape {tuple(x.shape)}")
        B = x.shape[0]
        plan = self.plan(B)
        m, L, bs = self.module, self.L, self.block_size
        bufs = self.emissions(x)
        zs = torch.empty((max(self.T - 1, 1), L, B), dtype=torch.float32, device=x.device)
        steps = self._replays.forward_pass(self, bufs, zs)  # None: the long way (chain_replay.py)
        for t in range(self.T - 2, -1, -1):
            if steps is None or not steps.transition(t):
                self.trans_forward(self.z_of(bufs, zs, t + 1), plan, out=bufs[t, L:])
            if steps is None or not steps.product(t):
                m.product_forward(bufs[t], self.prod_cids, bs, plan.product, out=zs[t])
        top = zs[0] if self.T > 1 else bufs[0, :L]
        root = None if steps is None else steps.root(top, self)
        if root is None:
            root = self.root_forward(top, plan)
        if steps is None and self.T > 1:
            self._replays.plan_forward(self, plan, bufs, zs, root)
        return {"ll": root[0], "root": root, "bufs": bufs, "zs": zs, "x": x}

    def z(self, state: dict, t: int) -> torch.Tensor:
        return self.z_of(state["bufs"], state["zs"], t)

    def z_of(self, steps: torch.Tensor, zs: torch.Tensor, t: int) -> torch.Tensor:
        """``z_t`` (or its flows) in step buffers ``steps`` and z buffers ``zs``: the last step's
        lower half for ``t = T - 1``, else ``zs[t]``."""
        return steps[t, : self.L] if t == self.T - 1 else zs[t]

    def backward(self, state: dict) -> dict:
        """Flows with root flow 1 per sequence: parameter flows of A (as ``trans_params``), pi, E."""
        B = state["x"].shape[0]
        plan = self.plan(B)
        m, L, bs, T = self.module, self.L, self.block_size, self.T
        dev = state["x"].device
        ones = torch.ones((1, B), dtype=torch.float32, device=dev)
        fbufs = torch.zeros((T, 2 * L, B), dtype=torch.float32, device=dev)
        zflows = torch.zeros((max(T - 1, 1), L, B), dtype=torch.float32, device=dev)
        trans_flows = torch.zeros_like(self.trans_params)
        top_flows = zflows[0] if T > 1 else fbufs[0, :L]
        _, root_flows = m.sum_backward(
            ones,
            self.z(state, 0),
            self.root_params,
            state["root"],
            self.root_cids,
            self.root_pids,
            1,
            plan.root_bwd,
            element_flows=top_flows,
            edges=self.root_edges,
            **self.root_writers,
        )
        steps = self._replays.backward_pass(self, state, fbufs, zflows, trans_flows)
        for t in range(0, T - 1):
            if steps is None or not steps.product(t):
                m.product_backward(zflows[t], self.prod_cids, bs, 2 * L, plan.product, grad_in=fbufs[t])
            # The transition's two kernels add into their flows: each falls back alone.
            element = steps is not None and steps.element_flows(t)
            param = steps is not None and steps.param_flows(t)
            if not (element and param):
                self.trans_backward(
                    fbufs[t, L:], self.z(state, t + 1), state["bufs"][t, L:], plan,
                    None if element else self.z_of(fbufs, zflows, t + 1), None if param else trans_flows,
                )  # fmt: skip
        if steps is None and T > 1:
            self._replays.plan_backward(self, plan, state, fbufs, zflows, trans_flows, self.trans_writers)
        emit_flows = torch.zeros((L, self.V), dtype=torch.float32, device=dev)
        src = fbufs[:, :L].permute(1, 0, 2).reshape(L, T * B)
        emit_flows.index_add_(1, state["x"].t().reshape(-1), src)
        return {"trans": trans_flows, "prior": root_flows, "emit": emit_flows}

    # --- one layer each: the chain's steps, and what a suite times alone ------------------------
    def trans_forward(self, child: torch.Tensor, plan: ChainPlan, out: torch.Tensor) -> torch.Tensor:
        """One transition (sum) layer: ``out [L, B]`` from the child rows ``child [L, B]``."""
        return self.module.sum_forward(
            child, self.trans_params, self.trans_cids, self.trans_pids, self.block_size, plan.trans_fwd, out=out,
            edges=self.trans_edges,
        )  # fmt: skip

    def trans_backward(
        self, node_flows, child, out, plan: ChainPlan, element_flows, param_flows, atomics: bool = False
    ) -> None:
        """One transition layer's flows, added into ``element_flows`` and ``param_flows``. The
        scatters store plainly where the layer has one writer per address; ``atomics`` makes them
        all atomic."""
        writers = {} if atomics else self.trans_writers
        self.module.sum_backward(
            node_flows, child, self.trans_params, out, self.trans_cids, self.trans_pids, self.block_size,
            plan.trans_bwd, element_flows=element_flows, param_flows=param_flows, edges=self.trans_edges, **writers,
        )  # fmt: skip

    def root_forward(self, top: torch.Tensor, plan: ChainPlan, out: torch.Tensor | None = None) -> torch.Tensor:
        """The root (one node over the L states, weights pi): ``[1, B]``."""
        return self.module.sum_forward(
            top, self.root_params, self.root_cids, self.root_pids, 1, plan.root_fwd, out=out, edges=self.root_edges
        )

    def forward_backward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict]:
        state = self.forward(x)
        return state["ll"], self.backward(state)

    def trans_matrix(self, flat: torch.Tensor) -> torch.Tensor:
        """``[L, L]`` view (node n, child k) of a transition-parameter-shaped vector."""
        G, bs, L = self.G, self.block_size, self.L
        return flat.reshape(G, L, bs).permute(0, 2, 1).reshape(L, L)

    # --- references ----------------------------------------------------------------------
    def reference_loglik(self, x: torch.Tensor, dtype=torch.float64, grads: bool = False):
        """Classical HMM backward recursion in log space (no layer layout involved).

        With ``grads=True`` also returns the flows autograd gives: ``A * d sum(ll)/dA``,
        ``pi * d sum(ll)/dpi`` and ``d sum(ll) / d log E`` — what :meth:`backward` computes.
        """
        A = self.A.to(dtype).requires_grad_(grads)
        pi = self.pi.to(dtype).requires_grad_(grads)
        log_e = self.log_emit.to(dtype).requires_grad_(grads)
        with torch.set_grad_enabled(grads):
            beta = log_e[:, x[:, -1]]  # [L, B]
            for t in range(self.T - 2, -1, -1):
                beta = log_e[:, x[:, t]] + torch.logsumexp(A.log()[:, :, None] + beta[None, :, :], dim=1)
            ll = torch.logsumexp(pi.log()[:, None] + beta, dim=0)
            if not grads:
                return ll
            dA, dpi, dlog_e = torch.autograd.grad(ll.sum(), (A, pi, log_e))
        return ll.detach(), {"trans": (A * dA).detach(), "prior": (pi * dpi).detach(), "emit": dlog_e}

    # --- CUDA graphs ---------------------------------------------------------------------
    def graphed(self, batch: int, backward: bool = True, seed: int = 0) -> GraphedChain:
        """Capture the chain (forward, + backward) for a static ``x [batch, T]``; CUDA only."""
        if self.device.kind != "cuda":
            raise ValueError(f"CUDA graph replay needs a CUDA device; this HMM runs on {self.device.kind}")
        static_x = self.sample(batch, seed)

        def step():
            if backward:
                return self.forward_backward(static_x)
            return self.forward(static_x)["ll"], None

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up: compile kernels, settle the allocator
                step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = step()
        return GraphedChain(graph, static_x, outputs)


@dataclass
class GraphedChain:
    """A captured chain: copy new data into ``x`` and call :meth:`replay`."""

    graph: object
    x: torch.Tensor
    outputs: tuple

    def replay(self):
        self.graph.replay()
        return self.outputs


def chain_first_calls(batch: int, **settings) -> None:
    """The chain's first forward and backward at ``batch``, on an HMM built on the CPU from
    ``settings`` (:meth:`HMM.settings`): the calls a compile process makes under
    ``kernels.launch.compile_only`` to compile a chain ahead (the parameters and index arrays hold
    real values, checked as on the GPU; the tiles are planned for the device the block compiles
    for)."""
    hmm = HMM(device="cpu", replays=False, **settings)
    hmm.forward_backward(hmm.sample(batch))


__all__ = ["HMM", "ChainPlan", "GraphedChain", "chain_first_calls"]
