"""``workbench sweep``: a tile / shape sweep of one family, local or on Ray, resumable.

    workbench sweep rms_norm --param BLOCK_SIZE=1024,2048,4096 --param num_warps=4,8 \\
        --problem hidden=1024,4096,rows=4096 --executor ray [--address ADDR] [--gpus-per-task 1] \\
        [--timeout-s 120] [--out results/sweeps/rms_norm]
    workbench sweep rms_norm --param BLOCK_SIZE=64,128 --quick --device cpu --isolate --timeout-s 60

``--param NAME=V1,V2,…`` (repeatable) sweeps a tile parameter of the variants having it;
``--problem k=v,…`` sets problem knobs, and a knob followed by several values sweeps them
(``hidden=1024,4096,rows=256``: hidden over two values, rows fixed). Every combination is one
configuration. The records go to ``OUT/records.sqlite`` as they arrive; re-running into the same
``--out`` skips the configurations already recorded. At the end: records.csv, records.json and
report.html in OUT. Bad input: one line on stderr, exit 2. Exit 1 when a configuration ran and
gave a wrong result; configurations that could not run, crashed or timed out are results (exit 0).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from workbench.cli import Parser, UsageError, _split


def parse_assignments(text: str, option: str) -> dict[str, list[str]]:
    """``"A=1,2,B=3"`` -> ``{"A": ["1", "2"], "B": ["3"]}`` (values as text)."""
    out: dict[str, list[str]] = {}
    current = None
    for token in _split(text):
        if "=" in token:
            name, _, value = token.partition("=")
            name = name.strip()
            if not name:
                raise UsageError(f"{option} expects NAME=V1,V2,… got {text!r}")
            current = name
            out.setdefault(name, [])
            if value.strip():
                out[name].append(value.strip())
        elif current is None:
            raise UsageError(f"{option} expects NAME=V1,V2,… (e.g. {option} BLOCK_SIZE=512,1024), got {text!r}")
        else:
            out[current].append(token)
    for name, values in out.items():
        if not values:
            raise UsageError(f"{option} {name}= needs at least one value")
    return out


def typed_value(text: str):
    """A tile value given as text: an int, a float, a bool (true / false) or the text itself."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


# --- the configuration options every command that names configurations shares --------------
# (``workbench sweep`` takes several values per name, ``workbench profile`` one)
def problem_axes(spec, texts) -> dict[str, list]:
    """``--problem k=v,…`` options: each named knob's values, parsed and checked by the knob;
    UsageError names an unknown knob or a bad value."""
    knob_names = {k.name for k in spec.knobs}
    axes: dict[str, list] = {}
    for text in texts:
        for name, values in parse_assignments(text, "--problem").items():
            if name not in knob_names:
                raise UsageError(
                    f"--problem {name}: {spec.name} has no such knob; knobs: {', '.join(sorted(knob_names))}"
                )
            knob = spec.knob(name)
            axes[name] = [knob.validate(knob.parse(v)) for v in values]
    return axes


def param_axes(texts) -> dict[str, list]:
    """``--param NAME=V1,V2,…`` options: each tile's values, typed (:func:`typed_value`), not yet
    checked against a variant (:func:`checked_param` does that)."""
    axes: dict[str, list] = {}
    for text in texts:
        for name, values in parse_assignments(text, "--param").items():
            axes[name] = [typed_value(v) for v in values]
    return axes


def checked_param(variant, name: str, value):
    """``value`` checked as the tile ``name`` of ``variant``; UsageError names the variant's tiles."""
    try:
        param = variant.param(name)
    except KeyError:
        known = ", ".join(p.name for p in variant.params) or "none"
        raise UsageError(f"--param {name}: variant {variant.name} has no such tile; its tiles: {known}") from None
    return param.validate(value)


def checked_dtypes(spec, text: str | None) -> list[str]:
    """``--dtype A,B`` as canonical names (default: bf16 where the family has it, else its first);
    UsageError for one the family does not support."""
    from kernels.spec import dtype_name

    dtypes = [dtype_name(d) for d in _split(text or ("bf16" if "bf16" in spec.dtypes else spec.dtypes[0]))]
    for d in dtypes:
        if d not in spec.dtypes:
            raise UsageError(f"--dtype {d} is not supported by {spec.name}; use one of {', '.join(spec.dtypes)}")
    return dtypes


def add_executor_options(p: argparse.ArgumentParser, isolate: bool) -> None:
    """The options that choose where configurations run (``workbench sweep`` and ``workbench tune``);
    ``isolate``: offer local runs in a subprocess per configuration."""
    p.add_argument("--executor", default="local", help="local | ray")
    p.add_argument("--address", default=None, help="join this Ray cluster (default: an embedded local Ray)")
    p.add_argument("--gpus-per-task", type=float, default=1.0)
    p.add_argument("--num-cpus", type=int, default=None, help="CPU workers of an embedded Ray (interpreter runs)")
    where = "ray, or local --isolate" if isolate else "ray"
    p.add_argument("--timeout-s", type=float, default=None, help=f"per configuration ({where})")
    if isolate:
        p.add_argument("--isolate", action="store_true", help="local: a subprocess per configuration")


def executor_of(args):
    """The executor :func:`add_executor_options`' arguments ask for; UsageError for another name."""
    from workbench.sweep.engine import make_executor

    if args.executor not in ("local", "ray"):
        raise UsageError(f"--executor {args.executor}: use local or ray")
    return make_executor(
        args.executor,
        isolate=getattr(args, "isolate", False),
        address=args.address,
        gpus_per_task=args.gpus_per_task,
        timeout_s=args.timeout_s,
        num_cpus=args.num_cpus,
    )


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="workbench sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("family")
    p.add_argument("--param", action="append", default=[], help="tile parameter values NAME=V1,V2,… (repeatable)")
    p.add_argument("--problem", action="append", default=[], help="problem knobs k=v,… (several values sweep)")
    p.add_argument("--variants", default="", help="comma list (default: our variants having every --param)")
    p.add_argument("--device", default="auto", help="auto | cuda | cpu (the interpreter) | npu")
    p.add_argument("--dtype", default=None, help="comma list")
    p.add_argument("--mode", default="forward", help="comma list")
    add_executor_options(p, isolate=True)
    p.add_argument(
        "--out", default=None, help="folder for records.sqlite and the report (default results/sweeps/FAMILY)"
    )
    p.add_argument("--no-resume", action="store_true", help="measure every configuration again")
    p.add_argument("--quick", action="store_true", help="small problem sizes (CPU interpreter)")
    p.add_argument("--rep-ms", type=float, default=None, help="timing budget per configuration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--l2",
        default="cold",
        choices=("cold", "warm"),
        help="kernel timing with the L2 flushed before each call (cold) or left as the last call left it (warm)",
    )
    return p


def build_plan(spec, args, device_kind: str):
    """(variants, [(variant, problem, params)]) from the parsed options; UsageError on bad input."""
    problems = problem_axes(spec, args.problem)
    params = param_axes(args.param)
    if args.variants:
        variants = [spec.variant(n) for n in _split(args.variants)]
    else:
        having = [
            v
            for v in spec.variants
            if v.unavailable_reason(device_kind) is None and all(any(p.name == n for p in v.params) for n in params)
        ]
        variants = [v for v in having if not v.is_peer] or having
        if not variants:
            tiles = sorted({p.name for v in spec.variants for p in v.params})
            raise UsageError(
                f"--param {', '.join(params)}: no variant of {spec.name} that runs on {device_kind} has such a "
                f"tile; tiles: {', '.join(tiles) or 'none'}"
            )
    for v in variants:
        reason = v.unavailable_reason(device_kind)
        if reason:
            raise UsageError(reason)
        for name, values in params.items():
            for value in values:
                checked_param(v, name, value)
    dtypes = checked_dtypes(spec, args.dtype)
    modes = _split(args.mode)
    for m in modes:
        if m not in spec.modes:
            raise UsageError(f"--mode {m} is not a mode of {spec.name}; use one of {', '.join(spec.modes)}")
    pnames, knames = list(params), list(problems)
    items = []
    for dtype, mode in itertools.product(dtypes, modes):
        for kvals in itertools.product(*[problems[n] for n in knames]):
            problem = dict(zip(knames, kvals))
            for v in variants:
                for pvals in itertools.product(*[params[n] for n in pnames]):
                    items.append((dtype, mode, v, problem, dict(zip(pnames, pvals))))
    return variants, items


def sweep_main(argv) -> int:
    import kernels
    from workbench.store import Store
    from workbench.sweep.engine import STORE_NAME, TerminalBar, run_sweep, write_outputs
    from workbench.sweep.tasks import make_task

    args = build_parser().parse_args(argv)
    if args.family not in kernels.families():
        raise UsageError(f"unknown kernel family {args.family!r}; families: {', '.join(kernels.families())}")
    spec = kernels.get(args.family)
    if args.rep_ms is not None and not args.rep_ms > 0:
        raise UsageError(f"--rep-ms {args.rep_ms:g}: the timing budget must be a positive number of milliseconds")
    executor = executor_of(args)
    device_kind = _device_kind(args.device, args.executor, args.address)
    variants, items = build_plan(spec, args, device_kind)
    rep_ms = args.rep_ms if args.rep_ms is not None else (20.0 if device_kind == "cpu" else 100.0)
    tasks, seen = [], set()
    for dtype, mode, var, problem, params in items:
        t = make_task(
            spec,
            var,
            device=device_kind,
            dtype=dtype,
            mode=mode,
            problem=problem,
            params=params,
            seed=args.seed,
            quick=args.quick,
            rep_ms=rep_ms,
            warmup_ms=min(25.0, rep_ms),
            l2=args.l2,
        )
        if t.key not in seen:
            seen.add(t.key)
            tasks.append(t)
    out = Path(args.out or f"results/sweeps/{spec.name}")
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out / STORE_NAME)
    print(
        f"sweep {spec.name}: {len(tasks)} configurations ({', '.join(v.name for v in variants)}) on {device_kind}, "
        f"executor {executor.describe()} -> {out}",
        flush=True,
    )
    try:
        result = run_sweep(tasks, executor, store, resume=not args.no_resume, progress=TerminalBar())
    except KeyboardInterrupt:
        print(f"interrupted: {len(store)} records in {out / STORE_NAME}; run again to resume", flush=True)
        raise
    recs = result.records
    wrong = [r for r in recs if not r.get("error") and r.get("passed") is False]
    errors = [r for r in recs if r.get("error")]
    print(
        f"{len(recs)} measured, {len(result.skipped)} already recorded, {len(errors)} could not run / crashed / "
        f"timed out, {len(wrong)} wrong results; {result.progress.elapsed_s:.1f} s"
    )
    for r in errors[:20]:
        print(f"  {r['variant']} {r.get('params')} {r.get('problem')}: {r['error'][:200]}")
    paths = write_outputs(out, store, title=f"Sweep {spec.name}")
    store.close()
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 1 if wrong else 0


def _device_kind(device: str, executor: str, address: str | None) -> str:
    if device not in ("auto", "cuda", "cpu", "npu"):
        raise UsageError(f"--device {device}: use auto, cuda, npu or cpu")
    if device != "auto":
        return device
    if executor == "ray" and address:
        return "cuda"  # a cluster is joined for its GPUs; --device cpu for the interpreter
    from workbench.device import get_device

    return get_device("auto").kind
