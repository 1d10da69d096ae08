"""How many measurements the random and bayes strategies need, replayed offline against a full grid.

    python benchmarks/search_efficiency.py RES/grid/records.json --family block_sparse \\
        --where batch=16 --seeds 5 --batch 8 [--out RES/search_efficiency.json]

Input: the records of a full grid (``records.json`` or ``records.sqlite`` of a ``workbench
sweep`` or ``workbench tune --strategy grid`` out folder), filtered to one family and problem
(``--where k=v,...``) and, by default, to the family's tuned variant. The search space is the
set of configurations in those records: the tile params and problem knobs that vary among them
(for block-sparse at batch 16: TILE_M x TILE_K x BLOCK_B x SPLITS x num_warps x precision, as
far as the grid had them); a configuration's value is its kernel time, a failed or wrong one
has none. The grid's best is the lowest kernel time.

Each strategy (``workbench.tune.search``, the objects ``workbench tune`` drives) then runs
against that table instead of a device, over ``--seeds`` seeds, asking ``--batch``
configurations at a time as a tune with that many workers would: it counts the evaluations
until one within ``--within`` (2%) of the grid's best has been measured. Printed and written:
per strategy the evaluations per seed, their median, the median's share of the grid, and
whether it meets the target (``--target`` 30% of the grid). Nothing here needs a device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def load_records(path: Path) -> list[dict]:
    if path.suffix == ".sqlite":
        from workbench.store import Store

        store = Store(path)
        try:
            return store.records()
        finally:
            store.close()
    return json.loads(path.read_text())


def value_of(r: dict) -> float | None:
    if r.get("error") or not r.get("passed"):
        return None
    ms = r.get("kernel_ms") if r.get("kernel_ms") is not None else r.get("ms_p50")
    return None if ms is None else float(ms)


def grid_table(records: list[dict], family: str, variant: str | None, where: dict) -> tuple[list[str], dict]:
    """(dimension names, {configuration key: kernel time or None}) of the matching records; the
    dimensions are the params and problem knobs whose values differ among them."""
    rows = []
    for r in records:
        problem = r.get("problem") or {}
        if r.get("kernel") != family or (variant and r.get("variant") != variant):
            continue
        if any(str(problem.get(k)) != str(v) for k, v in where.items()):
            continue
        rows.append(({**(r.get("params") or {}), **{f"problem.{k}": v for k, v in problem.items()}}, r))
    if not rows:
        raise ValueError(f"no {family} records match {where or 'the filter'}; check --family / --variant / --where")
    names = sorted({k for point, _ in rows for k in point})
    dims = [n for n in names if len({json.dumps(point.get(n), default=str) for point, _ in rows}) > 1]
    table: dict = {}
    for point, r in rows:  # the last record of a configuration wins (a resumed grid)
        table[tuple((n, point.get(n)) for n in dims)] = value_of(r)
    return dims, table


def evaluations_to_target(strategy: str, table: dict, seed: int, batch: int, within: float) -> int | None:
    """Evaluations until a configuration within ``within`` of the grid's best is measured (None:
    never, the whole grid measured)."""
    from workbench.tune.search import make_search

    goal = min(v for v in table.values() if v is not None) * (1 + within)
    search = make_search(strategy, [dict(k) for k in table], seed)
    count = 0
    while True:
        asked = search.ask(batch)
        if not asked:
            return None
        values = [table[tuple(sorted(c.items()))] for c in asked]  # keys: (name, value) pairs by name
        for config, value in zip(asked, values):
            count += 1
            search.tell(config, value)
        if any(v is not None and v <= goal for v in values):
            return count


def replay(table: dict, strategies, seeds: int, batch: int, within: float, target: float) -> dict:
    size = len(table)
    out = {"grid": size, "best_ms": min(v for v in table.values() if v is not None), "strategies": {}}
    for strategy in strategies:
        per_seed = [evaluations_to_target(strategy, table, s, batch, within) for s in range(seeds)]
        counts = [size if c is None else c for c in per_seed]
        median = statistics.median(counts)
        out["strategies"][strategy] = {
            "evaluations": per_seed,
            "median": median,
            "share": median / size,
            "meets_target": median / size <= target,
        }
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records", type=Path, help="records.json or records.sqlite of a full grid")
    p.add_argument("--family", default="block_sparse")
    p.add_argument("--variant", default=None, help="default: the family's tuned variant")
    p.add_argument("--where", default="", help="problem filter k=v,... (e.g. batch=16)")
    p.add_argument("--strategies", default="random,bayes")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--batch", type=int, default=8, help="configurations asked at a time (workers x 2)")
    p.add_argument("--within", type=float, default=0.02, help="how close to the grid's best counts as found")
    p.add_argument("--target", type=float, default=0.30, help="share of the grid the median may use")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.seeds < 1 or args.batch < 1:
        p.error("--seeds and --batch must be at least 1")
    import kernels

    variant = args.variant or (kernels.get(args.family).tuning.variant if kernels.get(args.family).tuning else None)
    where = dict(item.split("=", 1) for item in args.where.split(",") if "=" in item)
    try:
        dims, table = grid_table(load_records(args.records), args.family, variant, where)
    except ValueError as exc:
        print(f"search_efficiency: {exc}", file=sys.stderr)
        return 2
    if all(v is None for v in table.values()):
        print("search_efficiency: no configuration of the grid passed; nothing to find", file=sys.stderr)
        return 2
    result = replay(table, args.strategies.split(","), args.seeds, args.batch, args.within, args.target)
    result.update(dimensions=dims, source=str(args.records), where=where, variant=variant, batch=args.batch)
    print(f"{args.family} {variant} {where}: grid of {result['grid']} over {', '.join(dims)}")
    print(
        f"best kernel time {result['best_ms'] * 1e3:.2f} us; target: within {args.within:.0%} using <= {args.target:.0%}"
    )
    for name, r in result["strategies"].items():
        verdict = "meets" if r["meets_target"] else "misses"
        print(
            f"  {name:7s} median {r['median']:.0f} evaluations = {r['share']:.0%} of the grid ({verdict} the target); "
            f"per seed: {r['evaluations']}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, default=str))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
