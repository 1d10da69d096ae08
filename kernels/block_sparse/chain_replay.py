"""The HMM chain's eager launches, replayed from addresses (CUDA).

An eager chain (:mod:`.hmm`) issues ``2 (T - 1) + 1`` forward kernels and ``3 (T - 1) + 2``
backward kernels from Python. Through the layer functions each launch slices the step buffers
into views, builds its arguments and keys Triton's compiled kernel (kernels/launch.py): tens of
microseconds of host time per launch, which at small batch is most of the chain's time. A
replay (:func:`kernels.launch.replay_of`) takes only the tensor arguments' addresses, and every
address the chain launches with is one of its buffers' base address plus an offset fixed by the
step. So a replayed step is a few integer additions and its launches.

Buffers (fp32, contiguous, batch innermost; L rows are ``ChainLayout.half`` bytes): the step buffers
``[T, 2L, B]`` (rows ``0..L-1`` of step t hold ``e_t``, rows ``L..2L-1`` the transition's ``s_t``)
and the z buffers ``[T - 1, L, B]``; ``z_{T-1}`` is the last step buffer's lower half. The
backward's flow buffers have the same two shapes.

:class:`ChainReplays` keeps one HMM's replays per direction and batch size. A chain call at a
batch without them runs the long way, then plans from its own tensors (the same layers, tiles
and settings any later call at that batch launches). A later call gets a pass over its buffers
(:class:`ForwardPass`, :class:`BackwardPass`) whose methods launch one step's layer and return
False where a replay refuses: a launch being recorded, the fast path turned off, or an address
of another 16-byte alignment class than the planned step's. :mod:`.hmm` then runs that layer
the long way. Each backward kernel adds into its flows, so the transition layer's two backward
kernels (element flows, parameter flows) are replayed, and fall back, one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels import fast_launch
from kernels.block_sparse import gpu
from kernels.launch import observed

# Bumped when the fast path is reset: its replays retire then, so plans made before are stale.
_GENERATION = [0]


def _retire() -> None:
    _GENERATION[0] += 1


fast_launch.on_reset(_retire)


class ChainLayout:
    """Addresses inside the chain's buffers at one batch size (module docstring)."""

    __slots__ = ("T", "half")

    def __init__(self, T: int, L: int, batch: int):
        self.T = T
        self.half = L * batch * 4  # bytes of L rows: half a step buffer, one z buffer

    def step(self, base: int, t: int, upper: bool = False) -> int:
        """Step ``t``'s buffer (its rows ``L..2L-1`` with ``upper``) in step buffers at ``base``."""
        return base + (2 * t + upper) * self.half

    def z(self, steps: int, zs: int, t: int) -> int:
        """``z_t``: the last step buffer's lower half for ``t = T - 1``, else z buffer ``t``."""
        return self.step(steps, t) if t == self.T - 1 else zs + t * self.half


@dataclass(frozen=True)
class ForwardReplays:
    """One batch size's forward launches: the transition (sum) layer, the product layer, the root."""

    layout: ChainLayout
    transition: gpu.SumForwardReplay
    product: object  # replay of (out, node_mars, cids) addresses
    root: gpu.SumForwardReplay


@dataclass(frozen=True)
class BackwardReplays:
    """One batch size's backward launches: the product layer, the transition layer's element
    flows and its parameter flows."""

    layout: ChainLayout
    product: object  # replay of (grad_in, grad_out, cids) addresses
    element_flows: object  # replay of (eflows, node_flows, element_mars, params, out, cids, pids)
    param_flows: object  # replay of (pflows, node_flows, element_mars, params, out, cids, pids)


class ForwardPass:
    """One forward call's replays over its buffers ``bufs`` and ``zs``."""

    __slots__ = ("_layout", "_replays", "_bufs", "_zs", "_workspace", "_ws", "_params", "_cids", "_pids", "_prod")

    def __init__(self, replays: ForwardReplays, hmm, bufs: torch.Tensor, zs: torch.Tensor):
        self._layout, self._replays = replays.layout, replays
        self._bufs, self._zs = bufs.data_ptr(), zs.data_ptr()
        shape = replays.transition.workspace_shape  # split-K: one workspace serves every step in turn
        self._workspace = None if shape is None else torch.empty(shape, dtype=torch.float32, device=bufs.device)
        self._ws = None if self._workspace is None else self._workspace.data_ptr()
        self._params, self._cids, self._pids = (
            t.data_ptr() for t in (hmm.trans_params, hmm.trans_cids, hmm.trans_pids)
        )
        self._prod = hmm.prod_cids.data_ptr()

    def transition(self, t: int) -> bool:
        """``s_t`` into step ``t``'s upper half from ``z_{t+1}``."""
        lay = self._layout
        child = lay.z(self._bufs, self._zs, t + 1)
        out = lay.step(self._bufs, t, upper=True)
        return self._replays.transition.into(out, self._ws, child, self._params, self._cids, self._pids)

    def product(self, t: int) -> bool:
        """``z_t`` from step ``t``'s buffer (``[e_t; s_t]``)."""
        return self._replays.product(self._zs + t * self._layout.half, self._layout.step(self._bufs, t), self._prod)

    def root(self, top: torch.Tensor, hmm) -> torch.Tensor | None:
        """The root's ``[1, B]`` output over ``z_0``, or None where the replay refuses."""
        return self._replays.root(top, hmm.root_params, hmm.root_cids, hmm.root_pids)


class BackwardPass:
    """One backward call's replays over the forward's buffers and its own flow buffers."""

    __slots__ = ("_layout", "_replays", "_bufs", "_zs", "_fbufs", "_zflows", "_pflows", "_edge_tensors", "_prod")

    def __init__(self, replays: BackwardReplays, hmm, state: dict, fbufs, zflows, trans_flows):
        self._layout, self._replays = replays.layout, replays
        self._bufs, self._zs = state["bufs"].data_ptr(), state["zs"].data_ptr()
        self._fbufs, self._zflows, self._pflows = fbufs.data_ptr(), zflows.data_ptr(), trans_flows.data_ptr()
        self._edge_tensors = tuple(t.data_ptr() for t in (hmm.trans_params, hmm.trans_cids, hmm.trans_pids))
        self._prod = hmm.prod_cids.data_ptr()

    def product(self, t: int) -> bool:
        """Step ``t``'s flows (``[e_t; s_t]`` rows) from ``z_t``'s."""
        lay = self._layout
        return self._replays.product(lay.step(self._fbufs, t), self._zflows + t * lay.half, self._prod)

    def _sides(self, t: int) -> tuple:
        """(node flows, element_mars, params, out, cids, pids) addresses of step ``t``'s transition."""
        lay = self._layout
        params, cids, pids = self._edge_tensors
        node_flows = lay.step(self._fbufs, t, upper=True)
        return node_flows, lay.z(self._bufs, self._zs, t + 1), params, lay.step(self._bufs, t, upper=True), cids, pids

    def element_flows(self, t: int) -> bool:
        """Step ``t``'s transition adds ``z_{t+1}``'s flows."""
        target = self._layout.z(self._fbufs, self._zflows, t + 1)
        return self._replays.element_flows(target, *self._sides(t))

    def param_flows(self, t: int) -> bool:
        """Step ``t``'s transition adds its parameter flows into the tied layers' buffer."""
        return self._replays.param_flows(self._pflows, *self._sides(t))


class ChainReplays:
    """One HMM's replays per (direction, batch size), planned from the chain's own calls (module
    docstring); None is kept where a batch has none (not CUDA, not the GPU kernels, a launch
    without a replay), so the chain does not plan again until the fast path is reset.
    ``enabled=False`` plans nothing: every call runs the long way."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._plans: dict = {}

    def _planned(self, key):
        """``(is planned now, replays or None)``."""
        entry = self._plans.get(key)
        if entry is None or entry[0] != _GENERATION[0]:
            return False, None
        return True, entry[1]

    def _remember(self, key, make) -> None:
        if not self.enabled or observed() or self._planned(key)[0]:  # a recorded call plans nothing: the next does
            return
        self._plans[key] = (_GENERATION[0], make())

    def forward_pass(self, hmm, bufs: torch.Tensor, zs: torch.Tensor) -> ForwardPass | None:
        replays = self._planned(("forward", bufs.shape[2]))[1]
        return None if replays is None else ForwardPass(replays, hmm, bufs, zs)

    def plan_forward(self, hmm, plan, bufs: torch.Tensor, zs: torch.Tensor, root: torch.Tensor) -> None:
        """After a forward made the long way with these buffers and root output (T >= 2)."""

        def make():
            if hmm.module is not gpu or not bufs.is_cuda:
                return None
            T, L, bs = hmm.T, hmm.L, hmm.block_size
            child, out = hmm.z_of(bufs, zs, T - 1), bufs[T - 2, L:]
            transition = gpu.sum_forward_replay(
                child, hmm.trans_params, hmm.trans_cids, hmm.trans_pids, bs, plan.trans_fwd, out, hmm.trans_edges
            )
            product = gpu.product_replay(zs[T - 2], bufs[T - 2], hmm.prod_cids, bs, plan.product)
            root_replay = gpu.sum_forward_replay(
                zs[0], hmm.root_params, hmm.root_cids, hmm.root_pids, 1, plan.root_fwd, root, hmm.root_edges
            )
            if transition is None or product is None or root_replay is None:
                return None
            return ForwardReplays(ChainLayout(T, L, bufs.shape[2]), transition, product, root_replay)

        self._remember(("forward", bufs.shape[2]), make)

    def backward_pass(self, hmm, state: dict, fbufs, zflows, trans_flows) -> BackwardPass | None:
        replays = self._planned(("backward", fbufs.shape[2]))[1]
        return None if replays is None else BackwardPass(replays, hmm, state, fbufs, zflows, trans_flows)

    def plan_backward(self, hmm, plan, state: dict, fbufs, zflows, trans_flows, writers: dict) -> None:
        """After a backward made the long way with these buffers and ``writers`` (T >= 2)."""

        def make():
            if hmm.module is not gpu or not fbufs.is_cuda:
                return None
            T, L, bs = hmm.T, hmm.L, hmm.block_size
            t = T - 2
            product = gpu.product_replay(fbufs[t], zflows[t], hmm.prod_cids, bs, plan.product, backward=True)
            flows = gpu.sum_backward_replays(
                fbufs[t, L:], hmm.z(state, t + 1), hmm.trans_params, state["bufs"][t, L:], hmm.trans_cids,
                hmm.trans_pids, bs, plan.trans_bwd, hmm.z_of(fbufs, zflows, t + 1), trans_flows,
                edges=hmm.trans_edges, **writers,
            )  # fmt: skip
            if product is None or flows is None:
                return None
            return BackwardReplays(ChainLayout(T, L, fbufs.shape[2]), product, *flows)

        self._remember(("backward", fbufs.shape[2]), make)


__all__ = ["BackwardPass", "ChainLayout", "ChainReplays", "ForwardPass"]
