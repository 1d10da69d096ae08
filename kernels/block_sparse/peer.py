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

import contextlib
import importlib.util
import io
import os
import warnings
import weakref

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


# PyJuice picks each layer's kernel (its CUDA configurations or its Triton kernel) once per layer
# signature (pyjuice.layer.kernels.c.autotune), timing each candidate with events around a single
# call on an idle device: launch latency included, which for kernels of 6-20 us is most of what
# it sees. Candidates then tie and the pick flips between processes: on the H100 its bare layer
# kernel read 12.2 us in one suite run and 18.9 us in the next at batch 2, the reverse at 4, and
# still 12.3 against 19.3 us at batch 1 with 51 calls per candidate. The suite judges kernel
# time, so PyJuice gets to pick by kernel time: each candidate's calls run back to back behind a
# device-side sleep, so the host's launches are all queued before the first one starts and the
# events time the device's work alone. The candidates are PyJuice's own; only the clock changes.
_PICK_WARMUP, _PICK_CALLS, _PICK_REPS = 5, 20, 5
_SLEEP_CYCLES = 4_000_000  # ~2 ms at the H100's 1.98 GHz: longer than queueing 20 calls takes


def _kernel_time_ms(run_fn) -> float:
    """Median device time of one call of ``run_fn`` over back-to-back calls (L2 warm)."""
    for _ in range(_PICK_WARMUP):
        run_fn()
    times = []
    for _ in range(_PICK_REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda._sleep(_SLEEP_CYCLES)
        start.record()
        for _ in range(_PICK_CALLS):
            run_fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / _PICK_CALLS)
    return sorted(times)[len(times) // 2]


def pick_by_kernel_time(candidates, warmup: int = 3, reps: int = 7):
    """PyJuice's autotune contract (``[(key, run_fn)]`` -> the fastest key, failures skipped),
    with the fastest judged by device time (see above). ``warmup`` and ``reps`` are PyJuice's
    signature; the pick uses this module's own counts."""
    best_key, best_ms = None, float("inf")
    for key, run_fn in candidates:
        try:
            ms = _kernel_time_ms(run_fn)
        except Exception:  # noqa: BLE001 - as PyJuice does: a candidate that fails is skipped
            continue
        if ms < best_ms:
            best_key, best_ms = key, ms
    return best_key


def _use_kernel_time_pick() -> None:
    """Have PyJuice pick its layer kernels by kernel time (once per process; see above)."""
    try:
        from pyjuice.layer.kernels import c as pyjuice_kernels
    except Exception:  # noqa: BLE001 - another PyJuice layout: its own choice stands
        return
    if getattr(pyjuice_kernels, "autotune", None) is not None:
        pyjuice_kernels.autotune = pick_by_kernel_time


@contextlib.contextmanager
def _quiet():
    """Hold back what PyJuice prints while it builds a circuit ("Compiling N TensorCircuit
    layers...", tqdm bars on stderr) and torch's warning about unchecked sparse invariants:
    a notebook or a suite log would otherwise show them as red error blocks. An exception
    raised inside still propagates, with the held-back text in its notes."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
            yield
    except Exception as exc:
        held = (out.getvalue() + err.getvalue()).strip()
        if held and hasattr(exc, "add_note"):
            exc.add_note(f"PyJuice printed:\n{held[-2000:]}")
        raise


class PyJuiceHMM:
    """PyJuice's HMM with the parameters of one of ours (``kernels.block_sparse.hmm.HMM``)."""

    def __init__(self, T: int, L: int, V: int, A, E, pi, block_size: int, device="cuda"):
        juice = _require()
        _use_kernel_time_pick()  # before the first forward, where PyJuice's autotune runs
        with _quiet():  # its per-layer progress bars and a sparse-tensor warning, not news to a reader
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


# PyJuice circuits built for the peer, by (nodes, block size, device): each entry keeps the
# transition matrix it was built from, so a layer with the same weights (a new tensor with the
# same values, or another batch size) reuses the circuit instead of compiling a new one.
_CIRCUITS: dict = {}
# (shape, params and pids objects, params' version) -> entry: the call path's lookup, no compare.
# Keyed by the tensors themselves through weak references, never by their addresses: a freed
# tensor's address is handed to the next one, and an address-keyed hit gives PyJuice another
# layer's weights (the likely cause of its result being off by 0.48 at batch 64 on the H100 when
# a process reached that batch a second time, with new inputs).
_SEEN: dict = {}
_MAX_CIRCUITS = 4


def _transition_matrix(shape: dict, params: torch.Tensor, pids: torch.Tensor) -> torch.Tensor:
    """Our layer's weights as PyJuice's transition matrix ``A[g*bs + i, k]``."""
    bs, G = shape["bs"], shape["G"]
    i = torch.arange(bs, device=params.device)
    weights = params.detach()[pids.long()[:, :, None] + i]  # [G, K, bs]
    return weights.permute(0, 2, 1).reshape(G * bs, shape["K"])


def _build_circuit(shape: dict, A: torch.Tensor, device) -> dict:
    """A PyJuice HMM with T=2 whose transition layer is our layer; checks the layout we assume."""
    L, bs, V = shape["nodes"], shape["bs"], 2
    hmm = PyJuiceHMM(2, L, V, A, torch.full((L, V), 1.0 / V), torch.full((L,), 1.0 / L), bs, device)
    hmm.forward(torch.zeros((shape["B"], 2), dtype=torch.long, device=device))
    layer = hmm.transition_layer()
    if layer.num_fw_partitions != 1:
        raise ValueError("PyJuice split the transition layer into several partitions; the peer expects one")
    cids = layer.partitioned_cids[0]
    children = cids[0, :L].long()
    if not bool((cids[:, :L] == children[None, :]).all()):
        raise ValueError("PyJuice's node blocks read different child rows; the peer's layout assumption fails")
    return {"A": A.clone(), "hmm": hmm, "layer": layer, "children": children, "rows": layer._layer_nid_range}


def layer_for(shape: dict, params: torch.Tensor, pids: torch.Tensor, device) -> tuple:
    """(PyJuiceHMM with T=2, transition layer, child element ids, node row range) for our layer at
    batch ``shape["B"]``: one circuit per weights, its buffers resized when the batch changes."""
    seen_key = (shape["nodes"], shape["bs"], str(device), id(params), id(pids))
    seen = _SEEN.get(seen_key)
    entry = None
    if seen is not None and seen[0]() is params and seen[1]() is pids and seen[2] == params._version:
        entry = seen[3]
    if entry is None:
        A = _transition_matrix(shape, params, pids)
        shelf = _CIRCUITS.setdefault((shape["nodes"], shape["bs"], str(device)), [])
        entry = next((e for e in shelf if e["A"].shape == A.shape and torch.equal(e["A"], A)), None)
        if entry is None:
            entry = _build_circuit(shape, A, device)
            shelf.insert(0, entry)
            del shelf[_MAX_CIRCUITS:]
        if len(_SEEN) > 64:
            _SEEN.clear()
        _SEEN[seen_key] = (weakref.ref(params), weakref.ref(pids), params._version, entry)
    hmm = entry["hmm"]
    if hmm.pc.node_mars.size(1) != shape["B"]:  # another batch: PyJuice re-sizes its buffers
        hmm.forward(torch.zeros((shape["B"], 2), dtype=torch.long, device=device))
    return hmm, entry["layer"], entry["children"], entry["rows"]


# PyJuice's optional CUDA kernels (pyjuice.layer.kernels.c): each is an nvcc build of one .cu
# file on first use, 50-140 s apiece on the H100 machine, one after another in the caller's
# thread. ``prebuild`` starts them all at once in background processes instead.
_EXTENSION_BUILDERS = (
    "is_available",
    "ele_is_available",
    "par_is_available",
    "smallbatch_fw_is_available",
    "smallbatch_ele_is_available",
    "smallbatch_par_is_available",
)
_BUILDS: list = []


def prebuild() -> None:
    """Start building PyJuice's CUDA extensions, one background process each (niced), and return.

    The builds land in torch's extension folder (``TORCH_EXTENSIONS_DIR``) under their build
    lock; PyJuice's own first use in this process then waits on that lock where a build is still
    running, and loads the finished library. Where PyJuice or CUDA is missing this does nothing.
    """
    if _BUILDS or available() is not None:
        return
    import subprocess
    import sys

    code = "import sys\nfrom pyjuice.layer.kernels import c\ngetattr(c, sys.argv[1], lambda: None)()\n"
    for name in _EXTENSION_BUILDERS:
        _BUILDS.append(
            subprocess.Popen(
                [sys.executable, "-c", code, name],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=lambda: os.nice(10),
            )
        )


# PyJuice's sum-layer kernels take its tl.dot path from batch 16 (its small-batch kernels below),
# and call tl.dot at Triton's default input precision: TF32 on Hopper for fp32. Seen on the H100:
# its forward was within 2e-6 of the fp64 reference at batch 1-8 and 1e-3 off at 16-64.
PYJUICE_DOT_FROM_BATCH = 16


def precision(problem: dict) -> str:
    """The precision PyJuice computes our sum layer at (the spec's ``Variant.precision``)."""
    return "tf32" if problem["batch"] >= PYJUICE_DOT_FROM_BATCH else "ieee"


def pyjuice_sum_layer(inputs: dict, shape: dict, problem: dict) -> torch.Tensor:
    """The spec's ``pyjuice`` variant: PyJuice's sum-layer kernel on our layer (module docstring)."""
    _require()
    if problem["tied"] or shape["K"] != shape["nodes"] or shape["M"] != shape["nodes"]:
        raise ValueError("the PyJuice peer runs an HMM transition layer: K = nodes (K=0) and tied=False")
    em = inputs["element_mars"]
    hmm, layer, children, (start, end) = layer_for(shape, inputs["params"], inputs["pids"], em.device)
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
    hmm, layer, _, _ = layer_for(shape, inputs["params"], inputs["pids"], em.device)
    pc = hmm.pc
    if mode == "forward":
        return lambda: layer(pc.node_mars, pc.element_mars, pc.params)
    hmm.forward_backward(torch.zeros((shape["B"], 2), dtype=torch.long, device=em.device))
    return lambda: layer.backward(
        pc.node_flows, pc.element_flows, pc.node_mars, pc.element_mars, pc.params, pc.param_flows
    )
