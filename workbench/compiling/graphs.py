"""torch.compile's graphs compiled ahead: Inductor run in processes that see the GPU, compiling a
configuration's graphs into Inductor's disk caches and running nothing.

A peer that declares ``inductor_peer`` (torch.compile of a family's reference, through
``kernels.peers.compiled``) compiles its graphs at its first call: Dynamo traces the function,
AOTAutograd splits the forward from the backward, Inductor lowers each graph and compiles its
Triton kernels. That took 0.6-2.4 s a shape on an H200, in the measuring process, one shape after
another. Those kernels are launched by Inductor's code, not through ``kernels.launch``, so
``compile_only`` cannot take them. Instead a graph process makes the same first call on stand-in
inputs (empty CUDA tensors of the same shapes, dtypes, strides and grad flags), with Inductor's
``compile_fx`` wrapped so that it compiles and then stops the call before anything runs:

- Inductor keeps each graph it compiled in its FX graph cache (the graph's module with its Triton
  kernels bundled); the measuring process's first call of the same configuration traces the
  function again (Dynamo's and AOTAutograd's part) and finds both graphs there;
- the backward is compiled together with the forward (``force_non_lazy_backward_lowering``), not
  at a first backward call, since nothing is called here. AOTAutograd's own cache is keyed by
  that switch, so the measuring process does not find its entry there, only Inductor's;
- Inductor's own compile workers are off (one compile thread): the pool's processes are the
  parallelism, and the compile processes (:mod:`workbench.compiling.pool`) have the other cores.

Nothing is launched on the GPU: Dynamo and Inductor trace on fake tensors, the stand-ins are
allocated and never written, and Inductor benchmarks its kernels' launch configurations at a
graph's first run, which is the measuring process's. A graph process holds a CUDA context
(Inductor reads the device's properties and loads its kernels), so there are few of them
(:func:`default_graph_workers`); each lowers its priority and writes its output to the pool's
log, as a compile process does.
"""

from __future__ import annotations

import os
import time

from workbench.compiling.jobs import CompileJob, register_module, worker_info
from workbench.compiling.pool import HelperPool, into_log_and_lowered

# Below the measuring process, above the compile processes (10): a graph job is nearer the
# critical path (a sweep reaches its torch.compile peer seconds after submitting it).
NICENESS = 5
JOB_TIMEOUT_S = 300.0


class GraphsCompiled(Exception):
    """Raised by the wrapped ``compile_fx`` once a graph is compiled: the call stops there."""


def default_graph_workers(cpus: int | None = None) -> int:
    """Graph processes for a host of ``cpus`` CPUs: a quarter of them, 1 to 4 (a sweep submits
    a graph per size; each process holds a CUDA context)."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(4, cpus // 4))


def inductor_cache_counts() -> dict | None:
    """Inductor's FX graph cache hits and misses in this process so far (``{"hit", "miss"}``), or
    None where torch.compile was never used here (nothing is imported for it)."""
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    counts = utils.counters.get("inductor", {})
    return {"hit": int(counts.get("fxgraph_cache_hit", 0)), "miss": int(counts.get("fxgraph_cache_miss", 0))}


def _start_graph_process(log_path: str, triton_environment: dict, inductor_dir: str | None, device_index: int) -> None:
    """A graph process's start (see the module docstring). Never raises: what fails here fails
    the first job, and the measuring process compiles that configuration itself. ``inductor_dir``:
    the measuring process's ``TORCHINDUCTOR_CACHE_DIR`` (None: unset there, and Inductor's default
    folder, which is the same for both, is used)."""
    into_log_and_lowered(log_path, NICENESS)
    # Read by torch when Inductor's config is imported, so set before torch is.
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    os.environ.update(triton_environment)  # the measuring process's cache folder and ptxas
    if inductor_dir:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_dir
    try:
        compile_graphs_only(device_index)
        _compile_one_op("cuda")  # Dynamo's and Inductor's first-use costs, before the first job
        print(f"graph process {os.getpid()}: started on cuda:{device_index}", flush=True)
    except Exception as exc:  # noqa: BLE001 - into the log; its jobs fail and are compiled by the measuring process
        print(f"graph process {os.getpid()}: start failed: {type(exc).__name__}: {exc}", flush=True)


_COUNT = {"graphs": 0}


def compile_graphs_only(device_index: int | None = None) -> None:
    """Make this process's torch.compile calls compile and stop (:class:`GraphsCompiled`), with the
    backward compiled together with the forward, and its CUDA context made on ``device_index``.
    For a graph process only: every later torch.compile call in it raises."""
    import torch
    import torch._functorch.config as functorch_config
    from torch._inductor import compile_fx as inductor

    if getattr(inductor.compile_fx, "graphs_only", False):
        return
    real = inductor.compile_fx

    def compile_and_stop(*args, **kwargs):
        real(*args, **kwargs)
        _COUNT["graphs"] += 1
        raise GraphsCompiled()

    compile_and_stop.graphs_only = True
    # Dynamo's inductor backend imports compile_fx from this module at each compile
    inductor.compile_fx = compile_and_stop
    functorch_config.force_non_lazy_backward_lowering = True
    torch._dynamo.config.suppress_errors = False  # the stop must reach this process, not fall back to eager
    if device_index is not None and torch.cuda.is_available():
        torch.cuda.set_device(device_index)
        torch.empty(1, device="cuda")  # the context, made now rather than in the first job


def _compile_one_op(device: str) -> None:
    """Compile a one-op graph on ``device`` with :func:`compile_graphs_only`'s stop in force (it
    never runs): what torch.compile does once per process (its lazy imports, Inductor's tables,
    a first Triton compile) is then paid."""
    import torch

    def one_op(x):
        return x * 2

    try:
        torch.compile(one_op, dynamic=False)(torch.empty(64, device=device))
    except Exception as exc:  # noqa: BLE001 - the stop, or a failure the first real job meets again
        if not _stopped(exc):
            raise


def compile_graphs(job: CompileJob, device: str = "cuda") -> dict:
    """Compile ``job``'s torch.compile graphs for ``device`` into Inductor's caches, running
    nothing (in a graph process: :func:`compile_graphs_only` in force; ``device`` is "cpu" only in
    the CPU tests, where Inductor compiles C++). ``{"ok", "inputs", "kernels": [], "graphs":
    Dynamo graphs compiled, "cache": this process's FX graph cache hits and misses, "ms",
    "error", "worker"}``; never raises."""
    started = time.perf_counter()
    result = dict(ok=False, inputs=None, kernels=[], graphs=0, ms=0.0, error=None, worker=worker_info())
    before, graphs_before = inductor_cache_counts() or {"hit": 0, "miss": 0}, _COUNT["graphs"]
    try:
        result["inputs"] = _stop_at_compile(job, device)
        result["ok"] = True
    except Exception as exc:  # noqa: BLE001 - best effort: the measuring process compiles it itself
        result["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
    after = inductor_cache_counts() or before
    result["graphs"] = _COUNT["graphs"] - graphs_before
    result["cache"] = {k: after[k] - before[k] for k in ("hit", "miss")}
    result["ms"] = (time.perf_counter() - started) * 1e3
    return result


def _stop_at_compile(job: CompileJob, device: str) -> str:
    """The variant's first call on empty stand-ins on ``device``, stopped once its graphs are
    compiled; what the stand-ins were made from."""
    import torch

    from kernels.spec import DTYPES, as_tuple, get

    register_module(job.family, job.family_module)
    spec = get(job.family)
    var = spec.variant(job.variant)
    if not var.inductor_peer:
        raise ValueError(f"{var.name} declares no torch.compile graphs to compile ahead")
    made_on, inputs = None, None
    for where in ("meta", "cpu"):  # shapes and strides only; meta costs nothing where it works
        try:
            inputs = spec.make_inputs(job.problem, DTYPES[job.dtype], torch.device(where), job.seed)
            made_on = where
            break
        except Exception:  # noqa: BLE001 - a family whose inputs need values: made on the CPU
            continue
    if inputs is None:
        raise ValueError(f"{spec.name}: its inputs could not be made for {job.problem}")
    stand_ins = {name: _empty_on(value, device) for name, value in inputs.items()}
    backward = job.mode in ("backward", "full")
    try:
        with torch.set_grad_enabled(backward):
            as_tuple(var.run(stand_ins, job.problem, **job.params))
    except Exception as exc:  # noqa: BLE001 - Dynamo wraps the stop in its own error
        if _stopped(exc):
            return f"empty {device} (shapes from {made_on})"
        raise
    raise RuntimeError(f"{var.name}'s call returned without compiling a graph (it ran; nothing is cached)")


def _stopped(exc: BaseException | None) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, GraphsCompiled):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _empty_on(value, device: str):
    """An uninitialised tensor on ``device`` of ``value``'s shape, strides, dtype and grad flag
    (nothing is written: allocating launches no kernel)."""
    import torch

    if not isinstance(value, torch.Tensor):
        return value
    empty = torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device=device)
    return empty.requires_grad_(value.requires_grad)


class GraphPool(HelperPool):
    """``workers`` graph processes on CUDA device ``device_index``; :meth:`submit` returns a
    future of :func:`compile_graphs`' result (as :class:`workbench.compiling.pool.CompilePool`)."""

    def __init__(self, device_index: int, workers: int, log_path: str | os.PathLike, timeout_s: float = JOB_TIMEOUT_S):
        from workbench.compiling.cache import pin_triton_environment

        # Inductor's folder as the environment names it: asking Inductor would import it here (1.3 s)
        inductor_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        initargs = (str(log_path), pin_triton_environment(), inductor_dir, device_index)
        super().__init__(workers, log_path, timeout_s, _start_graph_process, initargs)

    def submit(self, job: CompileJob):
        return self.schedule(compile_graphs, job)
