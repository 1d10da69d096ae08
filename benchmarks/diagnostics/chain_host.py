"""The eager HMM chain's host cost: its launches replayed from addresses against the long way.

    python benchmarks/diagnostics/chain_host.py                          # T=32, L=1024, batches 1 4 16 64
    python benchmarks/diagnostics/chain_host.py --batches 1 --rounds 5 --out /tmp/res/chain-host

Per batch size, one forward+backward of the chain (kernels/block_sparse/hmm.py) four ways, in
one process, in interleaved rounds:

- ``long way``: every launch through the layer functions (``HMM(replays=False)``), as the chain
  ran before kernels/block_sparse/chain_replay.py;
- ``replayed``: the steps' launches replayed from the buffers' addresses (the default);
- ``graph``: the same chain captured once as a CUDA graph and replayed (the device's floor);
- ``PyJuice eager``: PyJuice's own HMM on the same parameters, where PyJuice is installed.

Columns: the synchronised wall of one call (what the suite's ``hmm_chain_eager`` cells time,
``host-wall``) and the host time to issue it (``workbench.timing.HostSampler``: the call without
its final synchronisation), as medians over the rounds of each round's median, in microseconds,
with the rounds' range. The table ends with each batch's ratios. ``--out`` writes
``chain_host.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def chains(T: int, L: int, batch: int) -> dict:
    """The four calls of one batch size (PyJuice's left out where it is not installed)."""
    import torch

    from kernels.block_sparse import peer
    from kernels.block_sparse.hmm import HMM

    replayed = HMM(T=T, L=L, device="cuda", seed=0)
    long_way = HMM(T=T, L=L, device="cuda", seed=0, replays=False)
    x = replayed.sample(batch)
    graph = replayed.graphed(batch)
    graph.x.copy_(x)
    calls = {
        "long way": lambda: long_way.forward_backward(x),
        "replayed": lambda: replayed.forward_backward(x),
        "graph": graph.replay,
    }
    if peer.available() is None:
        pj = peer.PyJuiceHMM.like(replayed)

        def pyjuice():
            with torch.no_grad():
                return pj.forward_backward(x, graph=False)

        calls["PyJuice eager"] = pyjuice
    for fn in calls.values():  # compile, plan, capture
        fn()
        fn()
    return calls


def measure(T: int, L: int, batches, rounds: int, rep_ms: float) -> dict:
    """Every batch's rows, each batch's table printed as soon as it is measured."""
    from workbench.device import get_device
    from workbench.timing import HostSampler

    dev = get_device("cuda")
    out = {}
    for batch in batches:
        calls = chains(T, L, batch)
        walls = {name: [] for name in calls}
        issues = {name: [] for name in calls}
        for _ in range(rounds):
            for name, fn in calls.items():
                walls[name].append(dev.wall_per_call(fn, rep_ms=rep_ms).p50 * 1e3)
                issues[name].append(statistics.median(HostSampler(fn, dev.synchronize, batch=20).sample()) * 1e3)
        out[batch] = {
            name: {
                "wall_us": statistics.median(walls[name]),
                "wall_range_us": [min(walls[name]), max(walls[name])],
                "issue_us": statistics.median(issues[name]),
            }
            for name in calls
        }
        print_rows(batch, out[batch])
    return out


def print_rows(batch: int, rows: dict) -> None:
    for name, r in rows.items():
        lo, hi = r["wall_range_us"]
        print(f"{batch:5d} {name:16s} {r['wall_us']:9.1f} {f'[{lo:.1f}, {hi:.1f}]':>21s} {r['issue_us']:9.1f}")
    ratios = [f"long way / replayed {rows['long way']['wall_us'] / rows['replayed']['wall_us']:.2f}"]
    if "PyJuice eager" in rows:
        ratios.append(f"PyJuice eager / replayed {rows['PyJuice eager']['wall_us'] / rows['replayed']['wall_us']:.2f}")
        ratios.append(f"PyJuice eager / long way {rows['PyJuice eager']['wall_us'] / rows['long way']['wall_us']:.2f}")
    print(f"{'':5s} {'; '.join(ratios)}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=32, help="steps of the chain (default: the suite's, 32)")
    ap.add_argument("--L", type=int, default=1024, help="latent states (default: the suite's, 1024)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per batch (default 3)")
    ap.add_argument("--rep-ms", type=float, default=50, help="wall-timing budget per call and round")
    ap.add_argument("--out", type=Path, help="directory for chain_host.json")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("chain_host.py needs a CUDA device: the replays and the graph are CUDA only", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"\n== eager HMM chain, T={args.T}, L={args.L}, forward+backward (µs; median over rounds [range])")
    print(f"{'batch':>5s} {'call':16s} {'wall':>9s} {'range':>21s} {'issue':>9s}", flush=True)
    results = measure(args.T, args.L, args.batches, args.rounds, args.rep_ms)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        payload = {"T": args.T, "L": args.L, "device": torch.cuda.get_device_name(), "batches": results}
        (args.out / "chain_host.json").write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
