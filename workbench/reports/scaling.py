"""The sweep-scaling comparison: the same sweep on 1 GPU and on several, read from its runs' folders.

``benchmarks/sweep_scaling.py`` runs the sweep into ``OUT/gpus<N>[-nodes<M>]/`` (``run.json``:
the run's wall times, ``records.json``, gzipped in committed reports) and ``--compare OUT`` calls
:func:`compare`: per run its configurations, failures, sweep time and speed-up over the run on
the fewest GPUs of one node; whether two runs recorded the same configurations; and per shape
whether their best configurations agree (the same one, or the two bests' kernel-time intervals
overlap in either run: "within noise"). :func:`page` is the comparison's HTML page (that table,
then the sweep report of every run's records), which ``workbench report --render`` rebuilds.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from workbench.compiling.note import first_call_cached, note_of
from workbench.reports import reader
from workbench.reports.sweep import config_of, record_ms, render, shape_of
from workbench.store import kept_path, read_json, read_records

TITLE = "Sweep scaling: 1 GPU vs all GPUs (Ray)"
_RUN_FOLDER = re.compile(r"gpus(\d+)(?:-nodes(\d+))?")


def run_folders(root: str | Path) -> dict[tuple[int, int], Path]:
    """(GPUs, nodes) -> the run's folder, for every ``gpus<N>[-nodes<M>]`` under ``root`` that holds
    a ``run.json`` and its records."""
    out = {}
    for d in sorted(Path(root).glob("gpus*")):
        named = _RUN_FOLDER.fullmatch(d.name)
        if named and kept_path(d, "run.json") and kept_path(d, "records.json"):
            out[(int(named[1]), int(named[2] or 1))] = d
    return out


def load_runs(root: str | Path) -> dict[tuple[int, int], dict]:
    """Each run under ``root``: its parts (``run.json``'s ``runs``: a run cut short and resumed has
    several), records, sweep and session seconds (summed over the parts)."""
    runs = {}
    for key, d in run_folders(root).items():
        info = read_json(kept_path(d, "run.json"))["runs"]
        runs[key] = {
            "runs": info,
            "records": read_records(kept_path(d, "records.json")),
            "wall_s": sum(r["sweep_s"] for r in info),
            "session_s": sum(r.get("session_s") or 0.0 for r in info) or None,
        }
    return runs


def best_per_shape(records):
    """shape -> (its fastest passing configuration's name, {configuration: record})."""
    by_shape = {}
    for r in records:
        if r.get("error") or not r.get("passed") or record_ms(r) is None:
            continue
        by_shape.setdefault(shape_of(r), {})[config_of(r)] = r
    return {s: (min(c.items(), key=lambda kv: record_ms(kv[1]))[0], c) for s, c in by_shape.items()}


def overlap(a: dict, b: dict) -> bool:
    """Whether two records' kernel-time intervals overlap (a record without one is its point)."""
    lo_a, hi_a = a.get("kernel_lo_ms") or record_ms(a), a.get("kernel_hi_ms") or record_ms(a)
    lo_b, hi_b = b.get("kernel_lo_ms") or record_ms(b), b.get("kernel_hi_ms") or record_ms(b)
    return lo_a <= hi_b and lo_b <= hi_a


def order(runs: dict) -> list[tuple[int, int]]:
    """One node first, fewest GPUs first: the first is the baseline of every speed-up."""
    return sorted(runs, key=lambda k: (k[1], k[0]))


def kernel_compiles(records, store_stats: dict | None = None) -> dict:
    """How many times each distinct kernel was compiled in the cluster, counted from the records
    (:func:`workbench.compiling.note.compiles_per_kernel`): ``distinct`` kernels, ``compiles``,
    ``more_than_once`` (kernels compiled by two processes or more), ``never`` (kernels the records
    name whose compile no record saw: compiled by a warm-up or a process whose record failed),
    and ``store``: the cluster cache's own count (kernels, compiles), where given."""
    from workbench.compiling.note import compiles_per_kernel

    counted = compiles_per_kernel(records)
    out = {
        "distinct": len(counted),
        "compiles": sum(entry["compiles"] for entry in counted.values()),
        "more_than_once": sum(1 for entry in counted.values() if entry["compiles"] > 1),
        "never": sum(1 for entry in counted.values() if entry["compiles"] == 0),
    }
    if store_stats:
        out["store"] = {"kernels": store_stats.get("kernels"), "compiles": store_stats.get("compiles")}
    return out


def compare(runs: dict) -> dict:
    """{"table": a row per run, "against": per run after the first, how its records and best
    configurations agree with the first's} (what ``scaling.json`` holds)."""
    keys = order(runs)
    base = runs[keys[0]]
    table = []
    for n, nodes in keys:
        r = runs[(n, nodes)]
        recs = r["records"]
        session = r["session_s"]
        ahead = r["runs"][-1].get("compile_ahead") or {}
        table.append(
            dict(
                gpus=n,
                nodes=nodes,
                configs=len(recs),
                # a tile the family's check refuses cannot run: not a failure
                failed=sum(1 for x in recs if (x.get("error") or not x.get("passed")) and not x.get("cannot_run")),
                cannot_run=sum(1 for x in recs if x.get("cannot_run")),
                warm=all(x.get("warm") for x in r["runs"]),
                sweep_s=r["wall_s"],
                speedup=base["wall_s"] / r["wall_s"] if r["wall_s"] else None,
                session_s=session,
                session_speedup=base["session_s"] / session if session and base["session_s"] else None,
                parts=len(r["runs"]),
                first_calls_compiled_ahead=sum(1 for x in recs if first_call_cached(x)),
                # first calls that could find a kernel: configurations whose kernels compile at all
                # (from the records: on several nodes each node's compile-ahead counts failures again)
                compilable=sum(1 for x in recs if x.get("passed") or note_of(x).get("ok")),
                found_on_node=ahead.get("found_on_node"),
                kernel_compiles=kernel_compiles(recs),
            )
        )
    result = {"table": table, "against": []}
    keys_a = {x["sweep_key"] for x in base["records"]}
    best_a = best_per_shape(base["records"])
    for key in keys[1:]:
        b = runs[key]
        keys_b = {x["sweep_key"] for x in b["records"]}
        best_b = best_per_shape(b["records"])
        agree, differ = 0, []
        for shape in sorted(set(best_a) | set(best_b)):
            if shape not in best_a or shape not in best_b:
                differ.append({"shape": shape, "why": "no passing configuration in one run"})
                continue
            (ca, cfg_a), (cb, cfg_b) = best_a[shape], best_b[shape]
            noise = (cb in cfg_a and overlap(cfg_a[ca], cfg_a[cb])) or (ca in cfg_b and overlap(cfg_b[cb], cfg_b[ca]))
            if ca == cb or noise:
                agree += 1
            else:
                differ.append({"shape": shape, "best_1": ca, "best_n": cb})
        result["against"].append(
            dict(
                gpus=key[0],
                nodes=key[1],
                same_configurations=keys_a == keys_b,
                only_in_first=len(keys_a - keys_b),
                only_in_second=len(keys_b - keys_a),
                each_once=len(b["records"]) == len(keys_b),
                best_agree=agree,
                shapes=len(set(best_a) | set(best_b)),
                best_differ=differ,
            )
        )
    return result


def table_lines(result: dict, base: tuple[int, int]) -> list[str]:
    """The comparison as the text ``sweep_scaling.py --compare`` prints."""
    lines = [
        f"{'GPUs':>4} {'nodes':>5} {'configs':>8} {'failed':>7} {'sweep s':>9} {'cfg/s':>7} {'speedup':>8} "
        f"{'session s':>10} {'speedup':>8}  (parts)"
    ]
    for row in result["table"]:
        speed = row["session_speedup"]
        session = f"{row['session_s']:>10.1f} {speed:>7.2f}x" if speed else f"{'-':>10} {'-':>8}"
        lines.append(
            f"{row['gpus']:>4} {row['nodes']:>5} {row['configs']:>8} {row['failed']:>7} {row['sweep_s']:>9.1f} "
            f"{row['configs'] / row['sweep_s']:>7.2f} {row['speedup']:>7.2f}x {session}  ({row['parts']}; "
            f"{row['first_calls_compiled_ahead']} first calls compiled ahead of {row['compilable']} that compile; "
            f"{row['kernel_compiles']['compiles']} compiles of {row['kernel_compiles']['distinct']} distinct kernels "
            f"counted from the records{'; workers started before the sweep' if row['warm'] else ''})"
        )
    for a in result["against"]:
        lines.append(
            f"{a['gpus']} GPUs on {a['nodes']} node(s) against {base[0]}: same configurations recorded "
            f"{a['same_configurations']} (only in the first {a['only_in_first']}, only here {a['only_in_second']}), "
            f"each once {a['each_once']}; best configuration per shape agrees (same, or within noise) "
            f"{a['best_agree']}/{a['shapes']}"
        )
        lines += [f"  differs: {d}" for d in a["best_differ"]]
    return lines


def labelled_records(runs: dict) -> list[dict]:
    """Every run's records, each device named with its run (the sweep report's columns)."""
    return [
        dict(
            x,
            device_name=f"{x.get('device_name') or x.get('device_kind')} ({n} GPU{'' if nodes == 1 else f', {nodes} node'} run)",
        )
        for (n, nodes), r in runs.items()
        for x in r["records"]
    ]


def page(root: str | Path, plotly_src: str | None = None) -> str:
    """The comparison's page: the table, then the sweep report of every run's records."""
    runs = load_runs(root)
    if not runs:
        raise ValueError(f"{root}: no gpus<N>/ run with run.json and records under it")
    text = "\n".join(table_lines(compare(runs), order(runs)[0]))
    head = [f"<h2>The runs compared</h2><pre>{html.escape(text)}</pre>"]
    return reader.scrub_paths(render(labelled_records(runs), TITLE, plotly_src, head), [Path(root)])
