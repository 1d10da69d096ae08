"""Where a notebook cell's time goes: the notebook's code cells run in order in this process, as
papermill runs them headless, and the chosen cells under cProfile.

    python benchmarks/diagnostics/cell_profile.py notebooks/rms_norm.ipynb --cells 14 -p device=cuda
    bash benchmarks/gpu_run.sh run python3 benchmarks/diagnostics/cell_profile.py notebooks/fused_add_rms_norm.ipynb --cells 20

Cells are numbered as in the notebook file (markdown cells count). The parameters cell runs first
with ``headless = True``; ``-p name=value`` sets a parameter after it (a Python literal, or a
string). ``--setup 2`` runs only cell 2 before the profiled ones (the session) instead of every
cell before them. Displayed figures and tables are dropped. Every code cell's wall time is printed; for each profiled cell, the functions with the
most cumulative and the most own time. Python 3.12's cProfile sees every thread (the compile
service's and the timing's helpers included); on 3.11 only this one.
"""

from __future__ import annotations

import argparse
import ast
import cProfile
import io
import json
import linecache
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _quiet_display() -> None:
    """A figure or table a cell displays is dropped: outside a notebook IPython prints its whole
    mime bundle."""
    try:
        from IPython import display
        from IPython.core import display_functions
    except ImportError:
        return
    display_functions.display = display.display = lambda *objs, **kwargs: None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--cells", default="", help="comma-separated cell numbers to profile")
    parser.add_argument("-p", "--param", action="append", default=[], help="name=value after the parameters cell")
    parser.add_argument("--top", type=int, default=35, help="functions listed per table")
    parser.add_argument("--setup", default=None, help="comma-separated cells to run before (default: every one before)")
    args = parser.parse_args(argv)

    cells = json.loads(args.notebook.read_text())["cells"]
    profiled = {int(c) for c in args.cells.split(",") if c.strip()}
    last = max(profiled, default=len(cells) - 1)
    setup = None if args.setup is None else {int(c) for c in args.setup.split(",") if c.strip()}
    _quiet_display()
    overrides = {"headless": True} | {k: _literal(v) for k, v in (p.split("=", 1) for p in args.param)}
    namespace: dict = {"__name__": "__main__"}
    for number, cell in enumerate(cells[: last + 1]):
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] != "code":
            continue
        if setup is not None and number not in setup | profiled and "parameters" not in tags:
            continue
        source = "".join(cell["source"])
        filename = f"{args.notebook.name}#cell{number}"
        # as IPython does: a cell's source where inspect finds it (Triton's @jit reads its function's source)
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        code = compile(source, filename, "exec")
        profile = cProfile.Profile() if number in profiled else None
        start = time.perf_counter()
        if profile:
            profile.enable()
        try:
            exec(code, namespace)
        finally:
            if profile:
                profile.disable()
        wall = time.perf_counter() - start
        first_line = source.strip().splitlines()[0][:70] if source.strip() else ""
        print(f"cell {number:3d}: {wall:8.2f} s  {first_line}", flush=True)
        if "parameters" in tags:
            namespace.update(overrides)
        if profile:
            for order in ("cumulative", "tottime"):
                text = io.StringIO()
                pstats.Stats(profile, stream=text).sort_stats(order).print_stats(args.top)
                print(f"--- cell {number}, by {order}")
                print("\n".join(line[:180] for line in text.getvalue().splitlines()[4:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
