"""The HMM chain target: ours (graph replay or eager) against PyJuice on the same HMM, and the
chain / per-layer timings the block-sparse benchmark prints.

On a GPU each chain's kernels are compiled ahead: :func:`submit_chains` hands every HMM's chain
at every batch to the process's compile service (:func:`chain_job`: a call job of
``kernels.block_sparse.hmm.chain_first_calls``), and the first call at a batch settles with it
(:func:`settled_chain`), as a measured configuration does."""

from __future__ import annotations

import time
from dataclasses import asdict

import torch

from kernels.block_sparse.hmm import HMM, chain_first_calls
from workbench.compiling import service as compile_service
from workbench.compiling.jobs import CompileJob, call_job
from workbench.device import get_device
from workbench.measure import compare
from workbench.suites.context import RunContext, SuiteRun, new_record
from workbench.suites.targets import Chain

# (atol, rtol) of the chain's checks per precision of its products. TF32 rounds each product's
# inputs to 10-bit mantissas (~1e-3 relative, the layer's own TF32 tolerance is 5e-3); T - 1
# layers add such errors up, so the log-likelihood gets the layer's tolerance plus a relative part.
CHAIN_TOLERANCES = {"ieee": (1e-3, 1e-5), "tf32": (5e-3, 5e-5), "tf32x3": (1e-3, 1e-5)}


def _chain_checks(hmm, ll, flows, want, want_flows) -> list:
    """Log-likelihoods and transition / prior flows against the classical recursion (fp64), at
    the tolerance of the HMM's precision. Judged by the tolerance alone, not by the rule of
    kernels/testing.py: the chain is T block-sparse layers against another algorithm (the
    classical recursion), whose fp32 form errs in another way (on the CPU the chain's fp32 flows
    erred 0.6-2.3 times the recursion's, the latter where one log-likelihood error scales every
    flow of its sequence); each layer is judged by the rule on its own (the block_sparse family)."""
    atol, rtol = CHAIN_TOLERANCES[hmm.precision]
    out = [compare("ll", ll, want, atol, rtol)]
    for name, got in (("trans", hmm.trans_matrix(flows["trans"])), ("prior", flows["prior"])):
        ref = want_flows[name]
        scale = max(1.0, float(ref.abs().max()))
        out.append(compare(f"flows_{name}", got, ref, atol * scale, rtol))
    return out


def chain_job(hmm: HMM, batch: int) -> CompileJob:
    """The compile job of ``hmm``'s chain at ``batch``, forward and backward: the HMM's settings
    and the batch as the arguments of its first calls."""
    return call_job(
        chain_first_calls, {**hmm.settings(), "batch": batch}, family="block_sparse", dtype="fp32", mode="full"
    )


def submit_chains(hmms, batches) -> int:
    """Hand each of ``hmms``' chains at each of ``batches`` (forward and backward) to this
    process's compile service, in the order they will be measured; how many were new (0 where
    nothing is compiled ahead: the CPU, an NPU)."""
    submitted = 0
    for hmm in hmms:
        service = compile_service.for_kind(hmm.device.kind)
        if service is not None:
            submitted += service.submit(chain_job(hmm, batch) for batch in batches)
    return submitted


def settled_chain(hmm: HMM, batch: int) -> dict | None:
    """Before the chain's first call at ``batch``: its compile-ahead result (waited for where it
    is under way), or None where the first call compiles it (never submitted, or still queued)."""
    service = compile_service.active()
    return None if service is None else service.settle(chain_job(hmm, batch))


def run_chain(target: Chain, ctx: RunContext, run: SuiteRun) -> None:
    from kernels.block_sparse import peer

    dev = ctx.device
    missing: dict[str, str] = {}
    run.missing[target.name] = missing
    # Chains of one shape and precision measure the same cells: a later target (judging them
    # against another peer) reuses the records an earlier one took in this run; PyJuice's records
    # (its precision is its own) are reused by batch across precisions.
    taken_key = ("chain", target.T, target.L, target.V, tuple(target.batches), target.precision)
    peer_taken = ctx.taken.setdefault(("chain peers", target.T, target.L, target.V), {})
    if taken_key in ctx.taken:
        old_missing, recs = ctx.taken[taken_key]
        missing.update(old_missing)
        for rec in recs:
            ctx.emit(rec)
        return
    ctx.taken[taken_key] = (missing, [])
    phase = ctx.phases
    with phase("setup"):
        hmm = HMM(T=target.T, L=target.L, V=target.V, device=dev, precision=target.precision)
    submit_chains([hmm], target.batches)  # compiled while PyJuice builds its HMM
    problem = {"T": target.T, "L": target.L, "V": target.V, "block_size": hmm.block_size, "precision": hmm.precision}
    pj, reason = None, peer.available()
    reuse_peers = all(b in peer_taken for b in target.batches)  # no second build of PyJuice's HMM
    if reason is None and not reuse_peers:
        try:
            with phase("compile"):
                pj = peer.PyJuiceHMM.like(hmm)
        except Exception as exc:  # noqa: BLE001 - reported as the peer failing to build
            reason = f"PyJuice's HMM could not be built: {type(exc).__name__}: {exc}"
    if pj is None and not reuse_peers:
        missing["pyjuice"] = reason
    graphs = dev.kind == "cuda"

    def record(variant, backend, mode, batch, ms, method, checks=(), error=None, params=None):
        rec = new_record(
            "hmm_chain", variant, backend, mode, "fp32", dev, {**problem, "batch": batch}, params or {}, "batch", batch
        )
        if backend == "peer":  # PyJuice's sum layers run TF32 products from batch 16 (peer.precision)
            rec.precision = peer.precision({"batch": batch})
            rec.problem = {**problem, "batch": batch, "precision": rec.precision}
        else:
            rec.precision = hmm.precision
        rec.timing_method = method
        rec.ms_p50 = rec.wall_ms = ms
        rec.checks = [asdict(c) for c in checks]
        rec.max_abs_err = max((c.max_abs for c in checks), default=None)
        rec.max_rel_err = max((c.max_rel for c in checks), default=None)
        rec.error = error
        rec.passed = False if error else all(c.passed for c in checks)
        ctx.emit(rec, to_store=True)
        ctx.taken[taken_key][1].append(rec)
        if backend == "peer":
            peer_taken.setdefault(batch, []).append(rec)

    wall_rep = min(ctx.rep_ms, 50)
    for batch in target.batches:
        x = hmm.sample(batch)
        try:
            with phase("check"):
                want, want_flows = hmm.reference_loglik(x, grads=True)
            with phase("compile"):
                settled_chain(hmm, batch)
                ll, flows = hmm.forward_backward(x)
            eager_checks = _chain_checks(hmm, ll, flows, want, want_flows)
            graph_checks = []
            if graphs:
                with phase("compile"):
                    g = hmm.graphed(batch)
                    g.x.copy_(x)
                    g_ll, g_flows = g.replay()
                    dev.synchronize()
                graph_checks = _chain_checks(hmm, g_ll, g_flows, want, want_flows)
            with phase("timing"):
                rows = chain_timings(hmm, batch, rep_ms=ctx.rep_ms, graphs=graphs)
            for row in rows:
                mode = "full" if row["mode"] == "forward+backward" else "forward"
                cpu = dev.kind == "cpu"
                n = len(eager_checks) if mode == "full" else 1  # forward: the log-likelihood only
                method = row["timing"] if cpu else "host-wall"
                record("ours_eager", "gpu", mode, batch, row["eager_wall_ms"], method, eager_checks[:n])
                if not cpu:
                    record("ours_eager_kernels", "gpu", mode, batch, row["device_ms"], row["timing"], eager_checks[:n])
                if row["graph_wall_ms"] is not None:
                    record("ours_graph", "gpu", mode, batch, row["graph_wall_ms"], "host-wall", graph_checks[:n])
        except Exception as exc:  # noqa: BLE001 - one batch failing must not stop the suite
            record("ours_eager", "gpu", target.mode, batch, None, "", error=f"{type(exc).__name__}: {exc}"[:2000])
        if reuse_peers:
            for rec in list(peer_taken[batch]):
                ctx.emit(rec)
                ctx.taken[taken_key][1].append(rec)
            continue
        if pj is None:
            continue
        for variant, use_graph in (("pyjuice_eager", False), ("pyjuice_graph", True)):
            try:
                with phase("compile"):
                    theirs = pj.forward(x)
                with phase("check"):
                    checks = [compare("ll", theirs, hmm.reference_loglik(x), 1e-3, 1e-5)]
                fn = lambda g=use_graph, x=x: pj.forward_backward(x, graph=g)  # noqa: E731
                with torch.no_grad():
                    with phase("compile"):
                        fn()  # with graph=True PyJuice records its graph here and replays it afterwards
                    with phase("timing"):
                        ms = dev.wall_per_call(fn, rep_ms=wall_rep).p50
                record(variant, "peer", "full", batch, ms, "host-wall", checks, params={"graph": use_graph})
            except Exception as exc:  # noqa: BLE001
                record(variant, "peer", "full", batch, None, "", error=f"{type(exc).__name__}: {exc}"[:2000])


# --- chain and layer timings ---------------------------------------------------------------------------
def _graph_of(fn):
    """Capture ``fn`` (which must allocate nothing it returns to the caller) as a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def layer_calls(hmm: HMM, batch: int, seed: int = 0) -> dict:
    """One callable per layer of the chain at ``batch``, on live buffers from one forward pass."""
    x = hmm.sample(batch, seed)
    state = hmm.forward(x)
    plan = hmm.plan(batch)
    m, L, bs = hmm.module, hmm.L, hmm.block_size
    dev = x.device
    t = 0 if hmm.T > 1 else None
    child = hmm.z(state, 1) if hmm.T > 1 else None
    out_sum = torch.empty((L, batch), dtype=torch.float32, device=dev)
    out_prod = torch.empty((L, batch), dtype=torch.float32, device=dev)
    root_out = torch.empty((1, batch), dtype=torch.float32, device=dev)
    flows = torch.rand((L, batch), dtype=torch.float32, device=dev)
    eflows = torch.zeros((L, batch), dtype=torch.float32, device=dev)
    pflows = torch.zeros_like(hmm.trans_params)
    grad_in = torch.zeros((2 * L, batch), dtype=torch.float32, device=dev)
    calls = {}
    if t is not None:
        calls["sum forward"] = lambda: hmm.trans_forward(child, plan, out=out_sum)
        calls["product forward"] = lambda: m.product_forward(
            state["bufs"][0], hmm.prod_cids, bs, plan.product, out=out_prod
        )

        def sum_bwd():
            eflows.zero_()
            hmm.trans_backward(flows, child, state["bufs"][0, L:], plan, eflows, pflows, atomics=True)

        def prod_bwd():
            grad_in.zero_()
            m.product_backward(flows, hmm.prod_cids, bs, 2 * L, plan.product, grad_in=grad_in)

        calls["sum backward"] = sum_bwd
        calls["product backward"] = prod_bwd
    calls["root forward"] = lambda: hmm.root_forward(hmm.z(state, 0), plan, out=root_out)
    calls["input gather"] = lambda: hmm.emissions(x)
    return calls


def layer_timings(hmm: HMM, batch: int, rep_ms: float = 100, graphs: bool = True) -> list[dict]:
    """Per layer: device kernel time (do_bench; interpreter wall on the CPU), eager host wall
    per synchronised call, and the wall of a CUDA-graph replay of the same call (CUDA only)."""
    dev = get_device(hmm.device)  # the tool's device: it has the timers
    rows = []
    for name, fn in layer_calls(hmm, batch).items():
        fn()
        kernel = dev.time(fn, rep_ms=rep_ms)
        wall = dev.wall_per_call(fn, rep_ms=min(rep_ms, 50)) if dev.kind != "cpu" else kernel
        graph_ms = None
        if graphs and dev.kind == "cuda" and name != "input gather":
            g = _graph_of(fn)
            graph_ms = dev.wall_per_call(g.replay, rep_ms=min(rep_ms, 50)).p50
        per_chain = {"sum forward": hmm.T - 1, "product forward": hmm.T - 1, "sum backward": hmm.T - 1}
        per_chain.update({"product backward": hmm.T - 1, "root forward": 1, "input gather": 1})
        rows.append(
            {
                "layer": name,
                "batch": batch,
                "kernel_ms": kernel.p50,
                "eager_wall_ms": wall.p50,
                "graph_wall_ms": graph_ms,
                "calls_per_chain": per_chain[name],
                "timing": kernel.method,
            }
        )
    return rows


def chain_timings(hmm: HMM, batch: int, rep_ms: float = 100, graphs: bool = True) -> list[dict]:
    """Whole chain, forward and forward+backward: device time (do_bench of the eager chain),
    eager host wall per call, and graph-replay wall (CUDA only); ``first_ms``: the mode's first
    call (its compiles, where they were not made ahead), and ``compiled_ahead``: whether a
    compile process compiled the chain at this batch (None: none was asked to)."""
    dev = get_device(hmm.device)  # the tool's device: it has the timers
    x = hmm.sample(batch)
    ahead = settled_chain(hmm, batch)
    rows = []
    for mode, fn in (("forward", lambda: hmm.forward(x)), ("forward+backward", lambda: hmm.forward_backward(x))):
        started = time.perf_counter()
        fn()
        dev.synchronize()
        first_ms = (time.perf_counter() - started) * 1e3
        device_t = dev.time(fn, rep_ms=rep_ms)
        wall = dev.wall_per_call(fn, rep_ms=min(rep_ms, 50)) if dev.kind != "cpu" else device_t
        graph_ms = None
        if graphs and dev.kind == "cuda":
            g = hmm.graphed(batch, backward=mode != "forward")
            g.x.copy_(x)
            graph_ms = dev.wall_per_call(g.replay, rep_ms=min(rep_ms, 50)).p50
        rows.append(
            {
                "mode": mode,
                "batch": batch,
                "T": hmm.T,
                "L": hmm.L,
                "block_size": hmm.block_size,
                "device_ms": device_t.p50,
                "eager_wall_ms": wall.p50,
                "graph_wall_ms": graph_ms,
                "timing": device_t.method,
                "first_ms": first_ms,
                "compiled_ahead": None if ahead is None else bool(ahead.get("ok")),
            }
        )
    return rows
