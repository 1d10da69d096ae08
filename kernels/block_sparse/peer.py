"""PyJuice (``pip install pyjuice``, CUDA only) as a peer: its own kernels on the same HMM.

Two entry points, both building PyJuice's HMM with *our* parameters through its public
constructor ``pyjuice.structures.HMM(seq_length, num_latents, num_emits, homogeneous=True,
block_size=..., alpha=A, beta=E, gamma=pi)`` and ``pyjuice.compile``:

- :class:`PyJuiceHMM` — the whole circuit: ``forward(x)`` is ``pc(x)`` (log-likelihoods, to
  compare with :meth:`kernels.block_sparse.hmm.HMM.forward`), ``forward_backward(x)`` adds
  ``pc.backward(x)`` (flows and parameter flows), optionally with PyJuice's own CUDA-graph
  recording (``record_cudagraph=True`` once, replayed afterwards). :meth:`PyJuiceHMM.sum_layer`
  returns a callable running PyJuice's first transition sum layer on its live buffers: PyJuice's
  kernel on exactly the layer shape our sum-layer table measures.
- :func:`pyjuice_sum_layer` — the spec's ``pyjuice`` variant: one transition layer with our
  ``element_mars`` and weights. It writes our child values into the element rows PyJuice's layer
  reads (``layer.partitioned_cids``), runs the layer and returns its node rows. It assumes the
  layer's edge ``k`` is latent ``k`` of the children (PyJuice's HMM builds them in order); the
  harness's correctness check against the reference is what confirms it on a GPU.

Nothing here is imported unless PyJuice is installed and asked for.
"""

from __future__ import annotations

import importlib.util

import torch


def available() -> str | None:
    if importlib.util.find_spec("pyjuice") is None:
        return "PyJuice is not installed (pip install pyjuice)"
    if not torch.cuda.is_available():
        return "PyJuice runs on CUDA only"
    return None


def _require():
    reason = available()
    if reason:
        raise ValueError(reason)
    import pyjuice

    return pyjuice


class PyJuiceHMM:
    """PyJuice's HMM with the parameters of one of ours (``kernels.block_sparse.hmm.HMM``)."""

    def __init__(self, T: int, L: int, V: int, A, E, pi, block_size: int, device="cuda"):
        juice = _require()
        root = juice.structures.HMM(
            T,
            L,
            V,
            homogeneous=True,
            block_size=block_size,
            alpha=A.detach().float().cpu(),
            beta=E.detach().float().cpu(),
            gamma=pi.detach().float().cpu(),
        )
        self.pc = juice.compile(root)
        self.pc.to(torch.device(device))
        self.T, self.L, self.V = T, L, V
        self._graph_recorded: set = set()

    @classmethod
    def like(cls, hmm) -> PyJuiceHMM:
        return cls(hmm.T, hmm.L, hmm.V, hmm.A, hmm.E, hmm.pi, hmm.block_size, hmm.device.torch_device)

    def forward(self, x: torch.Tensor, graph: bool = False) -> torch.Tensor:
        """Log-likelihoods ``[B]``."""
        with torch.no_grad():
            lls = self.pc(x, record_cudagraph=graph, apply_cudagraph=graph)
        return lls.reshape(-1)

    def forward_backward(self, x: torch.Tensor, graph: bool = False) -> torch.Tensor:
        """Forward, then flows and parameter flows (``pc.backward``); returns the log-likelihoods."""
        with torch.no_grad():
            lls = self.pc(x, record_cudagraph=graph, apply_cudagraph=graph)
            self.pc.backward(x, flows_memory=0.0, record_cudagraph=graph, apply_cudagraph=graph)
        return lls.reshape(-1)

    def transition_layer(self):
        """PyJuice's first sum layer with L nodes (a transition), after a forward pass."""
        for group in self.pc.inner_layer_groups:
            if group.is_sum():
                for layer in group:
                    if layer.num_nodes == self.L:
                        return layer
        raise ValueError(f"PyJuice's HMM has no sum layer with {self.L} nodes; its layout is not what we assumed")

    def sum_layer(self, x: torch.Tensor):
        """A callable running PyJuice's transition sum-layer kernel on live buffers for batch ``x``."""
        self.forward(x)
        layer = self.transition_layer()
        pc = self.pc
        return lambda: layer(pc.node_mars, pc.element_mars, pc.params)


_LAYERS: dict = {}


def _layer_for(shape: dict, params: torch.Tensor, pids: torch.Tensor, device) -> tuple:
    """A cached (PyJuiceHMM with T=2, transition layer, child element ids, node row range)."""
    L, bs, G = shape["nodes"], shape["bs"], shape["G"]
    key = (L, bs, shape["B"], str(device), params.data_ptr(), params._version)
    if key in _LAYERS:
        return _LAYERS[key]
    _LAYERS.clear()
    i = torch.arange(bs, device=params.device)
    weights = params.detach()[pids.long()[:, :, None] + i]  # [G, K, bs]: A[g*bs + i, k]
    A = weights.permute(0, 2, 1).reshape(G * bs, shape["K"])
    V = 2
    hmm = PyJuiceHMM(2, L, V, A, torch.full((L, V), 1.0 / V), torch.full((L,), 1.0 / L), bs, device)
    x = torch.zeros((shape["B"], 2), dtype=torch.long, device=device)
    hmm.forward(x)
    layer = hmm.transition_layer()
    if layer.num_fw_partitions != 1:
        raise ValueError("PyJuice split the transition layer into several partitions; the peer expects one")
    cids = layer.partitioned_cids[0]
    children = cids[0, :L].long()
    if not bool((cids[:, :L] == children[None, :]).all()):
        raise ValueError("PyJuice's node blocks read different child rows; the peer's layout assumption fails")
    start, end = layer._layer_nid_range
    entry = (hmm, layer, children, (start, end))
    _LAYERS[key] = entry
    return entry


def pyjuice_sum_layer(inputs: dict, shape: dict, problem: dict) -> torch.Tensor:
    """The spec's ``pyjuice`` variant: PyJuice's sum-layer kernel on our layer (module docstring)."""
    _require()
    if problem["tied"] or shape["K"] != shape["nodes"] or shape["M"] != shape["nodes"]:
        raise ValueError("the PyJuice peer runs an HMM transition layer: K = nodes (K=0) and tied=False")
    em = inputs["element_mars"]
    hmm, layer, children, (start, end) = _layer_for(shape, inputs["params"], inputs["pids"], em.device)
    pc = hmm.pc
    pc.element_mars[children] = em.detach()[inputs["cids"][0].long()]
    layer(pc.node_mars, pc.element_mars, pc.params)
    return pc.node_mars[start:end]


def pyjuice_layer_kernel(inputs: dict, shape: dict, problem: dict, mode: str = "forward"):
    """The ``pyjuice`` variant's bare kernel: a call of PyJuice's sum layer on its live buffers for
    our layer, with no staging of our inputs (what a PyJuice model runs per layer).

    ``mode="backward"``: the layer's ``backward`` (element flows and parameter flows, PyJuice's
    ``layer.backward(node_flows, element_flows, node_mars, element_mars, params, param_flows)``)
    on the flow buffers a first ``pc.backward`` allocated — the same work as our autograd
    backward of the layer (element and parameter gradients). Its values on our inputs are not
    compared (PyJuice's flow layout differs from ours); the forward record checks the layer."""
    _require()
    if problem["tied"] or shape["K"] != shape["nodes"] or shape["M"] != shape["nodes"]:
        raise ValueError("the PyJuice peer runs an HMM transition layer: K = nodes (K=0) and tied=False")
    if mode not in ("forward", "backward"):
        raise ValueError(f"the PyJuice layer kernel has modes forward and backward, not {mode!r}")
    em = inputs["element_mars"]
    hmm, layer, _, _ = _layer_for(shape, inputs["params"], inputs["pids"], em.device)
    pc = hmm.pc
    if mode == "forward":
        return lambda: layer(pc.node_mars, pc.element_mars, pc.params)
    hmm.forward_backward(torch.zeros((shape["B"], 2), dtype=torch.long, device=em.device))
    return lambda: layer.backward(
        pc.node_flows, pc.element_flows, pc.node_mars, pc.element_mars, pc.params, pc.param_flows
    )
