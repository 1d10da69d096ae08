"""How long an Explorer relaunch takes, cold (a new configuration: interpreter run on the CPU, JIT
compile + measurement on a GPU) and warm (a configuration seen before: served from the cache).

    python benchmarks/diagnostics/explorer_latency.py                      # device auto, rms_norm gpu_row, BLOCK_SIZE
    python benchmarks/diagnostics/explorer_latency.py --device cpu --param num_warps

The Explorer is driven as a person drives it: a control's value is set, which runs its callback.
Times per change:
- callback: how long setting the control blocked (the notebook is free again after this);
- shown: from the change to the figures and status showing a number for it, drawn (debounce included):
  on a GPU the first launch shows a CUDA-graph number before the profiler has started;
- settled: until the Explorer is idle again (the first launch's number refined with the
  profiler, whose first session runs on the main thread's event loop, as in a notebook);
- measure: the record's own compile + first call time, for reference.
It runs inside an event loop on the main thread, as a notebook's kernel does, and ends with the
number of Kineto "registerClient" error lines written to standard error.
Cold changes visit every value once (each a new kernel configuration); warm changes revisit them.
``--look-ms`` pauses after each result settles, as a person reads it before the next move: the
Explorer compiles the configurations one step away meanwhile, so a one-notch move then finds its
kernel compiled; without it (the default) the next move comes at once, and may wait for that
compile.

Compile facts (registers, spills, occupancy; the why panel) are read once per new configuration
after its first call: the "facts ms" column is what reading them took per cold change, and the
last line what drawing the why panel costs a warm relaunch. ``--facts off`` sets
``WORKBENCH_COMPILE_FACTS=0`` to run the same changes without reading them, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _valid_values(session, variant, param, problem, limit):
    """Values of ``param`` that the variant accepts for ``problem`` (its check passes)."""
    var = session.spec.variant(variant)
    out = []
    for value in var.param(param).values:
        if value == "auto":
            continue
        params = var.resolve_params({param: value})
        try:
            if var.check is not None:
                var.check(problem, params, session.dtype, session.device)
        except ValueError:
            continue
        out.append(value)
    return out[:limit]


def _stats(values):
    if not values:
        return "-", "-", "-"
    return (
        f"{statistics.median(values) * 1e3:9.1f}",
        f"{min(values) * 1e3:9.1f}",
        f"{max(values) * 1e3:9.1f}",
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="rms_norm")
    parser.add_argument("--variant", default="gpu_row")
    parser.add_argument("--param", default="BLOCK_SIZE", help="the tile control to move")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--values", type=int, default=4, help="how many distinct values to visit")
    parser.add_argument("--debounce", type=float, default=0.2, help="Explorer debounce (s)")
    parser.add_argument(
        "--look-ms",
        type=float,
        default=0.0,
        help="pause after a result settles before the next change, as a person reads it (the Explorer "
        "compiles the next configurations meanwhile); 0: move at once",
    )
    parser.add_argument("--quick", choices=("auto", "yes", "no"), default="auto", help="auto: quick on the CPU")
    parser.add_argument("--facts", choices=("on", "off"), default="on", help="read compile facts (off: to compare)")
    args = parser.parse_args(argv)
    os.environ["WORKBENCH_COMPILE_FACTS"] = "1" if args.facts == "on" else "0"

    with _stderr_kept() as stderr_text:
        code = asyncio.run(_run(args))
    errors = [line for line in stderr_text().splitlines() if "registerClient" in line]
    print(f"Kineto's registerClient error lines on stderr: {len(errors)}")
    return code


@contextlib.contextmanager
def _stderr_kept():
    """Standard error (file descriptor 2: Kineto writes there from C++) into a file for the run;
    written back after it; yields a function returning what was written."""
    sys.stderr.flush()
    keep = os.dup(2)
    tmp = tempfile.TemporaryFile(mode="w+b")
    os.dup2(tmp.fileno(), 2)
    text = {"value": ""}
    try:
        yield lambda: text["value"]
    finally:
        sys.stderr.flush()
        os.dup2(keep, 2)
        os.close(keep)
        tmp.seek(0)
        text["value"] = tmp.read().decode(errors="replace")
        sys.stderr.write(text["value"])
        tmp.close()


async def _run(args) -> int:
    """Everything inside the main thread's event loop, as in a notebook's kernel: the Explorer
    starts the profiler's first session there, and waiting yields to the loop."""
    from widgets import Explorer, Session

    t0 = time.perf_counter()
    probe = Session(args.family, device=args.device, dtype=args.dtype, store=False)
    quick = probe.device.kind == "cpu" if args.quick == "auto" else args.quick == "yes"
    session = Session(args.family, device=args.device, dtype=args.dtype, quick=quick, store=False)
    ex = Explorer(session, variant=args.variant, debounce_s=args.debounce, peers=False, autostart=False)
    built = time.perf_counter() - t0
    values = _valid_values(session, args.variant, args.param, session.problem, args.values)
    if len(values) < 2:
        print(f"need two valid values of {args.param} for {args.variant} at {session.problem}; got {values}")
        return 2

    async def change(value):
        t = time.perf_counter()
        ex.controls[args.param].value = value
        callback = time.perf_counter() - t
        # its first number on screen: the record shown and its figures drawn, as the Explorer's
        # worker stamps it (first_shown_s; this loop may wake late, behind the profiler's start
        # that the first launch queues on this event loop)
        while ex.record is None or ex.record.params.get(args.param) != value or ex.first_shown_s is None:
            if time.perf_counter() - t > 600:
                raise SystemExit("timed out waiting for the Explorer")
            await asyncio.sleep(0.002)
        shown = ex.first_shown_s
        shown_method = ex.record.kernel_method
        while ex.busy:  # refined (the first launch's profiler number), neighbours submitted
            await asyncio.sleep(0.005)
        settled = time.perf_counter() - t
        rec = ex.record
        if rec.error:
            raise SystemExit(f"{args.param}={value} failed: {rec.error}")
        facts_ms = (rec.compile_facts or {}).get("collect_ms")
        compile_s = rec.compile_ms / 1e3 if rec.compile_ms else None
        await asyncio.sleep(args.look_ms / 1e3)
        return callback, shown, compile_s, ex.last_cached, facts_ms, settled, shown_method, rec.kernel_method

    # the first launch of the variant pays one-off costs (imports, first compile of helpers): apart
    first = await change(values[0])
    cold = [await change(v) for v in values[1:]]
    warm = [await change(v) for v in values] + [await change(v) for v in reversed(values)]
    assert not any(c[3] for c in cold) and all(w[3] for w in warm)

    dev = session.device
    print(f"Explorer relaunch latency: {args.family}/{args.variant}, moving {args.param} over {values}")
    print(
        f"device {dev.kind} ({dev.name}, {dev.driver}), dtype {session.dtype}, problem "
        + ", ".join(f"{k}={v}" for k, v in session.problem.items())
        + f", debounce {args.debounce * 1e3:.0f} ms, a look of {args.look_ms:.0f} ms between changes, timing budget {session.rep_ms:.0f} ms per config"
    )
    print(f"Explorer built in {built:.2f} s (imports, session, widgets)")
    print(f"the first launch's first number timed by: {first[6]}; once settled: {first[7]}")
    print()
    print(f"compile facts {args.facts}")
    header = (
        f"{'change':28s} {'n':>3s} {'shown ms':>9s} {'min':>9s} {'max':>9s} {'settled ms':>10s} {'callback ms':>11s} "
        f"{'measure ms':>10s} {'facts ms':>9s}"
    )
    print(header)
    print("-" * len(header))
    rows = [
        ("first launch of the variant", [first]),
        ("cold (new config)", cold),
        ("warm (cached)", warm),
    ]
    for label, samples in rows:
        med, lo, hi = _stats([s[1] for s in samples])
        settled = statistics.median(s[5] for s in samples) * 1e3
        cb = statistics.median(s[0] for s in samples) * 1e3
        meas = [s[2] for s in samples if s[2] is not None and not s[3]]
        meas_txt = f"{statistics.median(meas) * 1e3:10.1f}" if meas else f"{'(cache)':>10s}"
        facts = [s[4] for s in samples if s[4] is not None and not s[3]]
        facts_txt = f"{statistics.median(facts):9.3f}" if facts else f"{'(cache)' if samples[0][3] else '-':>9s}"
        print(
            f"{label:28s} {len(samples):3d} {med:>9s} {lo:>9s} {hi:>9s} {settled:10.1f} {cb:11.2f} {meas_txt} {facts_txt}"
        )
    from workbench.compile_facts import brief
    from workbench.reports.why import why_html

    t = time.perf_counter()
    for _ in range(100):
        why_html(ex.record)
    panel_ms = (time.perf_counter() - t) / 100 * 1e3
    print(
        f"why panel: {panel_ms:.3f} ms to draw per relaunch (warm included); facts of the last: {brief(ex.record.compile_facts)}"
    )
    ex.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
