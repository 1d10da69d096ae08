"""Block-sparse table for the issue's closing note (issue 6; targets in issue 8).

    python3 benchmarks/block_sparse_h100.py --device cuda --out /tmp/block_sparse      # on the H100
    python3 benchmarks/block_sparse_h100.py --device cpu --quick                        # smoke run here

1. Sum-layer forward per layer at L = 1024 (one block of 1024 nodes, K = 1024 edges), batch
   1 … 64: our kernels with the large- and the small-batch tiling and ``auto``, the NPU kernels
   (run as Triton on the same device), the PyTorch reference path, and PyJuice's own kernel on
   the same layer shape (the transition layer of PyJuice's HMM, when PyJuice is installed).
   Device µs (do_bench, L2 flushed). Also our backward (element + parameter flows) per heuristic.
2. Per-layer kernel time vs host wall per call, eager and CUDA-graph replayed (batch 1 and 16).
3. HMM chain (T = 32, L = 1024): forward and forward+backward host wall per call, eager and with
   CUDA graph replay, plus the eager chain's device time; PyJuice's ``pc(x)`` / ``pc.backward``
   beside it, eager and with its own ``record_cudagraph``. Our log-likelihoods are checked
   against the classical recursion and against PyJuice's.

Writes block_sparse_layer.csv, block_sparse_layers_wall.csv and block_sparse_hmm.csv into --out.
Exit status 1 if a result was wrong. ``--quick`` shrinks everything for the CPU interpreter
(whose times are interpreter wall times, never comparable with device numbers).
"""

from __future__ import annotations

import argparse
import csv
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernels.block_sparse import (  # noqa: E402
    _shape,
    largest_block_size,
    make_layer,
    peer,
    sum_layer,
    sum_layer_backward,
    sum_layer_reference,
)
from kernels.block_sparse.hmm import HMM  # noqa: E402
from workbench.device import get_device  # noqa: E402
from workbench.suites.chain import chain_timings, layer_timings  # noqa: E402

FAILURES: list[str] = []


def us(ms):
    return None if ms is None else ms * 1e3


def fmt(v, width=9):
    return f"{'-' if v is None else f'{v:.1f}':>{width}s}"


def write_csv(rows, path):
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print(f"-> {path}")


def layer_table(dev, L, batches, rep_ms):
    """Sum-layer forward (and our backward) per batch; rows of µs."""
    rows = []
    for batch in batches:
        row = _layer_row(dev, L, batch, rep_ms)
        rows.append(row)
        print(
            f"  batch {batch:3d}: "
            + " ".join(f"{k[:-7]}={fmt(v, 1).strip()}" for k, v in row.items() if k.endswith("_fwd_us"))
        )
    return rows


def _layer_row(dev, L, batch, rep_ms):
    problem = {"layer": "sum", "nodes": L, "block_size": 0, "K": 0, "tied": False, "batch": batch}
    x = make_layer(problem, dev.torch_device, seed=batch)
    em, p, cids, pids = x["element_mars"], x["params"], x["cids"], x["pids"]
    bs = largest_block_size(L)
    want = sum_layer_reference(em.double().cpu(), p.double().cpu(), cids.cpu(), pids.cpu(), bs)
    flows = torch.rand(L, batch, device=dev.torch_device)
    row = {"L": L, "block_size": bs, "batch": batch}
    candidates = {
        "gpu_large": lambda: sum_layer(em, p, cids, pids, bs, impl="gpu", heuristic="large"),
        "gpu_small": lambda: sum_layer(em, p, cids, pids, bs, impl="gpu", heuristic="small"),
        "gpu_auto": lambda: sum_layer(em, p, cids, pids, bs, impl="gpu"),
        "npu_kernels": lambda: sum_layer(em, p, cids, pids, bs, impl="npu"),
        "torch_reference": lambda: sum_layer_reference(em, p, cids, pids, bs),
    }
    if dev.kind == "cuda" and peer.available() is None:
        try:
            pj = peer.PyJuiceHMM(2, L, 2, _trans(x, bs), _uniform(L, 2), _uniform(L, 1)[:, 0], bs, "cuda")
            candidates["pyjuice"] = pj.sum_layer(torch.zeros((batch, 2), dtype=torch.long, device="cuda"))
            # The peer on our inputs checks its layout assumption: reported, not fatal.
            theirs = peer.pyjuice_sum_layer(x, _shape(problem), problem)
            row["pyjuice_max_err"] = (theirs.double().cpu() - want).abs().max().item()
        except Exception as exc:  # noqa: BLE001 - a peer that fails to build is reported, not fatal
            print(f"  pyjuice: not measured ({type(exc).__name__}: {exc})")
    for name, fn in candidates.items():
        with torch.no_grad():
            out = fn()
        if name != "pyjuice":
            err = (out.double().cpu() - want).abs().max().item()
            row[f"{name}_max_err"] = err
            if not err <= 1e-3:
                FAILURES.append(f"layer {name} batch {batch}: max error {err:.3g}")
        row[f"{name}_fwd_us"] = us(dev.time(fn, rep_ms=rep_ms).p50)
    out = sum_layer(em, p, cids, pids, bs)
    for h in ("large", "small"):
        fn = lambda h=h: sum_layer_backward(flows, em, p, out, cids, pids, bs, impl="gpu", heuristic=h)  # noqa: E731
        row[f"gpu_{h}_bwd_us"] = us(dev.time(fn, rep_ms=rep_ms).p50)
    return row


def _trans(x, bs):
    """Our layer's weights as PyJuice's ``alpha [L, L]`` (node n, child k)."""
    i = torch.arange(bs, device=x["params"].device)
    w = x["params"][x["pids"].long()[:, :, None] + i]  # [G, K, bs]
    return w.permute(0, 2, 1).reshape(-1, w.shape[1])


def _uniform(L, V):
    return torch.full((L, V), 1.0 / V)


def print_layer_table(rows):
    names = ["gpu_large", "gpu_small", "gpu_auto", "npu_kernels", "torch_reference", "pyjuice"]
    print("\nSum-layer forward per layer (µs, do_bench median)" + ("" if rows else ": no rows"))
    head = f"{'batch':>5s} " + " ".join(f"{n:>15s}" for n in names) + f" {'bwd large':>10s} {'bwd small':>10s}"
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = " ".join(fmt(r.get(f"{n}_fwd_us"), 15) for n in names)
        print(f"{r['batch']:5d} {cells} {fmt(r.get('gpu_large_bwd_us'), 10)} {fmt(r.get('gpu_small_bwd_us'), 10)}")


def hmm_tables(dev, T, L, batches, rep_ms):
    """Per-layer kernel vs wall, then chain totals (ours and PyJuice's)."""
    layer_rows, chain_rows = [], []
    for heuristic in ("auto", "large", "small"):
        hmm = HMM(T=T, L=L, V=64, device=dev, heuristic=heuristic)
        for batch in batches:
            x = hmm.sample(batch)
            ll = hmm.forward(x)["ll"]
            err = (ll.double() - hmm.reference_loglik(x)).abs().max().item()
            if not err <= 1e-2:
                FAILURES.append(f"HMM {heuristic} batch {batch}: log-likelihood error {err:.3g}")
            if heuristic == "auto" and batch in (batches[0], batches[-1]):
                for r in layer_timings(hmm, batch, rep_ms=rep_ms):
                    layer_rows.append({"heuristic": heuristic, **r})
            for r in chain_timings(hmm, batch, rep_ms=rep_ms):
                chain_rows.append({"impl": f"ours ({heuristic})", "ll_err_vs_recursion": err, **r})
    if dev.kind == "cuda" and peer.available() is None:
        hmm = HMM(T=T, L=L, V=64, device=dev)
        try:
            pj = peer.PyJuiceHMM.like(hmm)
        except Exception as exc:  # noqa: BLE001
            print(f"PyJuice HMM: not built ({type(exc).__name__}: {exc})")
            pj = None
        for batch in batches if pj is not None else ():
            for mode in ("forward", "forward+backward"):
                chain_rows.append(_pyjuice_row(dev, hmm, pj, batch, mode, rep_ms))
    return layer_rows, chain_rows


def _pyjuice_row(dev, hmm, pj, batch, mode, rep_ms):
    x = hmm.sample(batch)
    ours = hmm.forward(x)["ll"]
    fn = pj.forward if mode == "forward" else pj.forward_backward
    row = {"impl": "pyjuice", "mode": mode, "batch": batch, "T": hmm.T, "L": hmm.L, "block_size": hmm.block_size}
    try:
        theirs = fn(x)
        row["ll_err_vs_ours"] = (theirs.double() - ours.double()).abs().max().item()
        row["eager_wall_ms"] = dev.wall_per_call(lambda: fn(x), rep_ms=rep_ms).p50
        row["device_ms"] = dev.time(lambda: fn(x), rep_ms=rep_ms).p50
        fn(x, graph=True)  # PyJuice records its graph on the first call, replays afterwards
        row["graph_wall_ms"] = dev.wall_per_call(lambda: fn(x, graph=True), rep_ms=rep_ms).p50
    except Exception as exc:  # noqa: BLE001 - reported in the table
        row["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    return row


def print_hmm_tables(layer_rows, chain_rows):
    print("\nPer-layer kernel time vs host wall per call (µs); graph = CUDA-graph replay of that one call")
    head = f"{'batch':>5s} {'layer':18s} {'kernel':>9s} {'eager':>9s} {'graph':>9s} {'calls':>6s}"
    print(head)
    print("-" * len(head))
    for r in layer_rows:
        print(
            f"{r['batch']:5d} {r['layer']:18s} {fmt(us(r['kernel_ms']))} {fmt(us(r['eager_wall_ms']))} "
            f"{fmt(us(r['graph_wall_ms']))} {r['calls_per_chain']:6d}"
        )
    print("\nHMM chain (ms): device = do_bench of the eager chain; eager / graph = host wall per call")
    head = f"{'impl':16s} {'mode':17s} {'batch':>5s} {'device':>9s} {'eager':>9s} {'graph':>9s}  check"
    print(head)
    print("-" * len(head))
    for r in chain_rows:
        check = r.get("error") or (
            f"vs recursion {r['ll_err_vs_recursion']:.1e}"
            if "ll_err_vs_recursion" in r
            else f"vs ours {r.get('ll_err_vs_ours', float('nan')):.1e}"
        )
        print(
            f"{r['impl']:16s} {r['mode']:17s} {r['batch']:5d} {fmt(r.get('device_ms'), 9)} "
            f"{fmt(r.get('eager_wall_ms'), 9)} {fmt(r.get('graph_wall_ms'), 9)}  {check}"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--quick", action="store_true", help="tiny sizes for the CPU interpreter")
    ap.add_argument("--out", default=".", help="folder for the CSV files")
    ap.add_argument("--rep-ms", type=float, default=None)
    args = ap.parse_args(argv)
    dev = get_device(args.device)
    if args.quick:
        L, T, layer_batches, chain_batches, rep = 32, 3, (1, 3), (1, 2), 1.0
    else:
        L, T, layer_batches, chain_batches, rep = 1024, 32, (1, 2, 4, 8, 16, 32, 64), (1, 2, 4, 8, 16), 100.0
    rep = args.rep_ms or rep
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"device: {dev.name} ({dev.kind}); PyJuice: {peer.available() or 'installed'}")
    if dev.kind == "cpu":
        print("note: CPU times are Triton-interpreter wall times, not comparable with device numbers")

    rows = layer_table(dev, L, layer_batches, rep)
    print_layer_table(rows)
    write_csv(rows, out / "block_sparse_layer.csv")
    layer_rows, chain_rows = hmm_tables(dev, T, L, chain_batches, rep)
    print_hmm_tables(layer_rows, chain_rows)
    write_csv(layer_rows, out / "block_sparse_layers_wall.csv")
    write_csv(chain_rows, out / "block_sparse_hmm.csv")
    if FAILURES:
        print("\nWRONG RESULTS:\n  " + "\n  ".join(FAILURES))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
