"""The correctness rule measured: every family's correct kernels and deliberately wrong copies of
them, over many random seeds and sizes on the CPU interpreter (or a GPU), so that its constants are
chosen by what they let through.

    python benchmarks/error_rule.py [--cases 1000] [--wrong-cases 60] [--edges] [--families a,b]
        [--device cpu] [--out results/error-rule]

Per family (the built-in ones and the SwiGLU of ``tests/fixtures/workbench_swiglu``):

- **correct**: each of our variants that runs on the device, in every dtype the family declares,
  forward+backward where it has a backward; ``--cases`` (seed, size) cases spread over them, each
  size drawn at random around the family's quick sizes (odd sizes and one row among them);
- **wrong**: its default variant with the outputs times 1.01 and 1.005, and with the gradient of
  its last differentiable input times 1.01 (``kernels.wrong``; for SwiGLU the fixture's own wrong
  families), ``--wrong-cases`` cases each, half of them with the plots' axis at 1,024 or more
  elements (the issue's "every size >= 1,024 elements per row"), half at the small sizes;
- ``--edges``: each correct variant's edge shapes (``workbench.edges``) in every dtype, once.

Each case is one measurement's check (``workbench.measure``, untimed): its worst error ratio
against the reference's own (``kernels.testing.judge``: max, RMS and bias, each against its
yardstick; independent of ``k``) and its verdict under the family's rule. Printed: a table per
family, kind and dtype (cases, failures, the largest ratio of a correct kernel and the smallest of
a wrong one), then for several ``k`` the false alarms (a correct case above ``k``) and the misses
(a wrong case at >= 1,024 elements per row at or below ``k``). Written to ``--out``:
``records.json`` (one row per case, written after each family) and ``summary.json``.
``--from FILE`` prints the tables of a records.json again (several, merged) without measuring.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "workbench_swiglu"))

KS = (1.5, 2.0, 3.0, 4.0, 8.0)
LARGE = 1024  # elements per row from which every wrong kernel must fail


def _families(names: list[str] | None) -> dict:
    import workbench_swiglu

    import kernels

    found = {name: kernels.get(name) for name in kernels.families() if name in kernels.spec.BUILTIN}
    found["swiglu"] = workbench_swiglu.spec
    if names:
        unknown = sorted(set(names) - set(found))
        if unknown:
            raise SystemExit(f"--families: no family {', '.join(unknown)}; choose from {', '.join(found)}")
        found = {n: found[n] for n in names}
    return found


def _ours(spec, device_kind: str) -> list:
    return [v for v in spec.variants if not v.is_peer and v.unavailable_reason(device_kind) is None]


def _mode(spec) -> str:
    return "full" if "full" in spec.modes else "forward"


def _wrong(spec, device_kind: str) -> list:
    """(label, spec, variant) of the deliberately wrong kernels of a family."""
    import dataclasses

    import workbench_swiglu

    from kernels import wrong

    if spec.name == "swiglu":
        return [
            ("out x1.01", workbench_swiglu.scaled_1_01, workbench_swiglu.scaled_1_01.variant("ours")),
            ("out x1.005", workbench_swiglu.scaled_1_005, workbench_swiglu.scaled_1_005.variant("ours")),
            ("db x1.01", workbench_swiglu.db_scaled_1_01, workbench_swiglu.db_scaled_1_01.variant("ours")),
        ]
    base = _ours(spec, device_kind)[0]
    out = [("out x1.01", wrong.scaled(base, 1.01)), ("out x1.005", wrong.scaled(base, 1.005))]
    probe = spec.make_inputs(spec.resolve_problem(quick=True), spec_dtype(spec), "cpu", 0)
    grads = [n for n, v in probe.items() if getattr(v, "requires_grad", False)]
    if grads and "full" in spec.modes:
        out.append((f"d{grads[-1]} x1.01", wrong.scaled_gradient(base, grads[-1], 1.01)))
    return [(label, dataclasses.replace(spec, variants=(v,)), v) for label, v in out]


def spec_dtype(spec):
    from kernels.spec import DTYPES

    return DTYPES[spec.dtypes[0]]


def _draw(spec, rng: random.Random, large: bool) -> dict:
    """A random problem around the family's quick sizes: each size knob log-uniform between 1 and
    its quick value (the axis between a quarter and four times it; with ``large``, 1,024 to 2,048)."""
    from workbench.edges import size_knobs

    quick = spec.resolve_problem(quick=True)
    problem = {}
    for knob in size_knobs(spec, quick):
        q = int(quick[knob.name])
        if knob.name == spec.axis:
            low, high = (LARGE, 2 * LARGE) if large else (max(1, q // 4), 4 * q)
        else:
            low, high = 1, max(1, q)
        if large and spec.name == "block_sparse" and knob.name != spec.axis:
            high = min(high, 8)  # out is nodes x batch: keep the interpreter's grid small
        value = int(round(math.exp(rng.uniform(math.log(low), math.log(high + 0.999)))))
        problem[knob.name] = max(low, min(high, value))
    return problem


def _case(spec, variant, dtype: str, problem: dict, seed: int, device) -> dict:
    from workbench.measure import measure_many

    config = dict(variant=variant, dtype=dtype, mode=_mode_of(spec, variant), problem=problem, seed=seed)
    (rec,) = measure_many(spec, [config], device=device, time_it=False, on_error="record")
    return {
        "passed": rec.passed,
        "error": rec.error,
        "err_ratio": rec.err_ratio,
        "mode": rec.mode,
        "problem": {k: problem[k] for k in problem},
        "k": spec.error_rule.k,
        "checks": [
            {k: c.get(k) for k in ("name", "err_ratio", "worst", "judged_by", "within_tolerance", "passed", "note")}
            for c in rec.checks
        ],
    }


def _mode_of(spec, variant) -> str:
    mode = _mode(spec)
    return mode if variant.modes is None or mode in variant.modes else "forward"


def _elements_per_row(spec, problem: dict) -> int:
    return int(problem.get(spec.axis, 0))


def run(args, out: Path) -> list[dict]:
    """Every case of every family; the records so far are written after each family (a run cut
    short keeps what it measured)."""
    from workbench.device import get_device

    device = get_device(args.device)
    rows = []
    started = time.monotonic()
    for name, spec in _families(args.families).items():
        rng = random.Random(f"{name}:{args.seed}")
        ours = _ours(spec, device.kind)
        combos = [(v, dt) for v in ours for dt in spec.dtypes]
        for i in range(args.cases):
            variant, dtype = combos[i % len(combos)]
            problem = _draw(spec, rng, large=False)
            row = _case(spec, variant, dtype, problem, args.seed + i, device)
            rows.append(
                {
                    "family": name,
                    "kernel": variant.name,
                    "kind": "correct",
                    "dtype": dtype,
                    "seed": args.seed + i,
                    **row,
                }
            )
        for label, wspec, variant in _wrong(spec, device.kind):
            for i in range(args.wrong_cases):
                dtype = wspec.dtypes[i % len(wspec.dtypes)]
                problem = _draw(wspec, rng, large=i % 2 == 0)
                row = _case(wspec, variant, dtype, problem, args.seed + i, device)
                rows.append({"family": name, "kernel": label, "kind": "wrong", "dtype": dtype, "seed": args.seed + i,
                             "large": _elements_per_row(wspec, problem) >= LARGE, **row})  # fmt: skip
        if args.edges:
            rows += _edges(name, spec, ours, device)
        (out / "records.json").write_text(json.dumps(rows, indent=1, default=str))
        print(f"{name}: done at {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return rows


def _edges(name, spec, ours, device) -> list[dict]:
    from workbench.edges import describe
    from workbench.measure import check_edges

    out = []
    for variant in ours:
        for dtype in spec.dtypes:
            problem = spec.resolve_problem(quick=True)
            for v in check_edges(
                spec, variant, device=device, dtype=dtype, mode=_mode_of(spec, variant), problem=problem
            ):
                if v["passed"] is None:
                    continue
                out.append({"family": name, "kernel": variant.name, "kind": "correct (edge)", "dtype": dtype,
                            "edge": describe(v), "passed": v["passed"], "error": v.get("error"),
                            "err_ratio": v["err_ratio"], "problem": v.get("sizes"), "k": spec.error_rule.k,
                            "checks": v.get("checks") or []})  # fmt: skip
    return out


def _q(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def table(rows: list[dict]) -> list[str]:
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["family"], r["kernel"], r["kind"], r["dtype"]), []).append(r)
    head = f"{'family':19s} {'kernel':24s} {'kind':15s} {'dtype':5s} {'cases':>5s} {'fail':>5s} {'errors':>6s}  ratio: {'max':>8s} {'p99':>8s} {'min':>8s}  worst statistic"
    lines = [head, "-" * len(head)]
    for (family, kernel, kind, dtype), rs in groups.items():
        ratios = [r["err_ratio"] for r in rs if r.get("err_ratio") is not None and not r.get("error")]
        fails = sum(1 for r in rs if r.get("passed") is False and not r.get("error"))
        errors = sum(1 for r in rs if r.get("error"))
        worst: dict = {}
        for r in rs:
            checks = [c for c in r.get("checks") or [] if c.get("err_ratio") is not None]
            if checks:
                top = max(checks, key=lambda c: c["err_ratio"])
                key = f"{top['name']}:{top.get('worst')}"
                worst[key] = worst.get(key, 0) + 1
        common = max(worst, key=worst.get) if worst else "-"
        lines.append(
            f"{family:19s} {kernel[:24]:24s} {kind:15s} {dtype:5s} {len(rs):5d} {fails:5d} {errors:6d}  "
            f"{'':6s} {max(ratios, default=float('nan')):8.3g} {_q(ratios, 0.99):8.3g} {min(ratios, default=float('nan')):8.3g}  {common}"
        )
    return lines


def passes_at(row: dict, k: float) -> bool:
    """Whether a case passes with every rule-judged tensor held to ``k`` (the others, judged by
    their tolerance alone, as they were); a case that could not run does not pass."""
    if row.get("error") or not row.get("checks"):
        return False
    for c in row["checks"]:
        if not (c.get("judged_by") or "").startswith("rule"):
            if not c.get("passed"):
                return False
        elif c.get("note") or not c.get("within_tolerance", True) or c.get("err_ratio") is None or c["err_ratio"] > k:
            return False
    return True


def k_table(rows: list[dict]) -> tuple[list[str], dict]:
    """False alarms and misses with every family held to the same k (a family's own looser k aside)."""
    correct = [r for r in rows if r["kind"].startswith("correct") and not r.get("error")]
    wrong_large = [r for r in rows if r["kind"] == "wrong" and r.get("large")]
    wrong_small = [r for r in rows if r["kind"] == "wrong" and not r.get("large")]
    head = f"{'k':>5s} {'false alarms (correct fail)':>28s} {'misses >= 1024/row (wrong pass)':>33s}"
    lines = [head + f" {'misses below 1024/row':>23s}"]
    summary = {}
    for k in KS:
        fa = sum(1 for r in correct if not passes_at(r, k))
        miss = sum(1 for r in wrong_large if passes_at(r, k))
        small = sum(1 for r in wrong_small if passes_at(r, k))
        summary[str(k)] = {"false_alarms": fa, "correct": len(correct), "misses_large": miss, "wrong_large": len(wrong_large),
                           "misses_small": small, "wrong_small": len(wrong_small)}  # fmt: skip
        lines.append(
            f"{k:5g} {fa:>15d} / {len(correct):<10d} {miss:>18d} / {len(wrong_large):<12d} {small:>10d} / {len(wrong_small):<10d}"
        )
    return lines, summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--cases", type=int, default=1000, help="correct-kernel cases per family (seeds x sizes)")
    p.add_argument("--wrong-cases", type=int, default=60, help="cases per wrong kernel")
    p.add_argument("--edges", action="store_true", help="also every correct variant's edge shapes in every dtype")
    p.add_argument("--families", default=None, help="comma list (default: the built-in ones and swiglu)")
    p.add_argument("--device", default="cpu", help="cpu (the interpreter) or cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/error-rule")
    p.add_argument("--from", dest="inputs", action="append", default=[], help="records.json to print again")
    args = p.parse_args(argv)
    args.families = [f for f in args.families.split(",") if f] if args.families else None
    if args.inputs:
        rows = [r for path in args.inputs for r in json.loads(Path(path).read_text())]
        print("\n".join(table(rows)) + "\n\n" + "\n".join(k_table(rows)[0]))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    rows = run(args, out)
    wall = time.monotonic() - started
    lines = table(rows)
    k_lines, summary = k_table(rows)
    correct_fail = [r for r in rows if r["kind"].startswith("correct") and r.get("passed") is False]
    wrong_pass = [r for r in rows if r["kind"] == "wrong" and r.get("large") and r.get("passed")]
    print("\n".join(lines))
    print()
    print("\n".join(k_lines))
    print(f"\nunder the rule as set (k=2 and the per-dtype atol/rtol): {len(correct_fail)} correct cases failed, "
          f"{len(wrong_pass)} wrong cases at >= {LARGE} elements per row passed; {len(rows)} cases in {wall:.0f} s")  # fmt: skip
    for r in correct_fail[:20]:
        print(
            "  FALSE ALARM",
            r["family"],
            r["kernel"],
            r["dtype"],
            r.get("edge") or r["problem"],
            r.get("error") or r["checks"],
        )
    for r in wrong_pass[:20]:
        print("  MISSED", r["family"], r["kernel"], r["dtype"], r["problem"], r["err_ratio"])
    (out / "records.json").write_text(json.dumps(rows, indent=1, default=str))
    body = {"command": " ".join(["python", "benchmarks/error_rule.py", *(argv or sys.argv[1:])]), "wall_s": round(wall, 1),
            "k": summary, "false_alarms": len(correct_fail), "missed": len(wrong_pass), "table": lines}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(body, indent=1))
    print(f"wrote {out / 'records.json'}, {out / 'summary.json'}")
    return 1 if correct_fail or wrong_pass else 0


if __name__ == "__main__":
    sys.exit(main())
