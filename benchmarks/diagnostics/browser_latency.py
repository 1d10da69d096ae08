"""Relaunch latency as a person sees it: from a key press on a tile slider in JupyterLab to the
Explorer's speed figure redrawn with the new configuration, in headless Chromium.

    python benchmarks/diagnostics/browser_latency.py                       # rms_norm gpu_row, BLOCK_SIZE, CPU
    python benchmarks/diagnostics/browser_latency.py --values 2048,4096,8192,16384 --rounds 2

What it does: starts a throwaway JupyterLab (tests/browser/labkit.py), opens
notebooks/rms_norm.ipynb with device / quick parameters injected, runs all cells (Run > Run All
Cells), sets the variant, moves the slider to the first value, then presses the arrow key once
per change (adjacent values, one change each):
- cold: each value once, never measured before in this kernel: a new configuration is measured
  (on a GPU a new compile; on the CPU an interpreter run) — includes the Explorer's debounce;
- warm: back and forth over the same values: served from the Explorer's cache.
Browser time runs in the page, on performance.now(): from the keydown (a capture listener) to
the DOM mutation that makes the figure's title name the new configuration while the figure
holds a trace of the variant (Python draws the traces first and the title last). The kernel's
own figure ("relaunch … ms" in the status line: change callback to figures drawn, Python side)
is shown beside it. The Explorer's debounce is the notebook's (``s.explorer()``: 200 ms).

Needs Debian's chromium and Playwright's Python package (as the browser tests do). A machine
without them (e.g. one with only a GPU stack and no Debian packages) cannot run it.
"""

from __future__ import annotations

import argparse
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "browser"))
sys.path.insert(0, str(REPO))

import labkit  # noqa: E402

_ARM_JS = """
([variant, pairs]) => {
  const st = window.__wbLatency || (window.__wbLatency = {});
  if (!st.installed) {
    st.installed = true;
    document.addEventListener('keydown', () => { if (st.armed && st.t0 === null) st.t0 = performance.now(); }, true);
    const gd = document.querySelector('.wb-explorer .wb-speed');
    const check = () => {
      if (!st.armed || st.t0 === null || st.t1 !== null) return;
      const title = gd.querySelector('.gtitle');
      const text = title ? title.textContent : '';
      if (!st.want.every(re => re.test(text))) return;
      if (!(gd.data || []).some(t => t.name === st.variant && (t.x || []).length)) return;
      st.t1 = performance.now();
    };
    new MutationObserver(check).observe(gd, {subtree: true, childList: true, characterData: true, attributes: true});
    st.check = check;
  }
  const esc = s => s.replace(/[.*+?^${}()|[\\]\\\\]/g, '\\\\$&');
  st.variant = variant;
  st.want = [new RegExp(esc(variant) + ' at ')].concat(pairs.map(p => new RegExp('(^|[^\\\\w.])' + esc(p) + '(?![\\\\w.])')));
  st.t0 = null; st.t1 = null; st.armed = true;
}
"""


def _chromium_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        return out.strip() or "?"
    except Exception:
        return "?"


def _stats(values: list[float]) -> tuple[str, str, str]:
    if not values:
        return "-", "-", "-"
    return f"{statistics.median(values):.0f}", f"{min(values):.0f}", f"{max(values):.0f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="gpu_row")
    parser.add_argument("--param", default="BLOCK_SIZE", help="a SelectionSlider tile control")
    parser.add_argument(
        "--values",
        default="2048,4096,8192,16384",
        help="adjacent slider values, none measured by the notebook's own cells (cold changes)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="warm passes back and forth over the values")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--quick", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--timeout", type=float, default=300, help="seconds for one change to show")
    args = parser.parse_args(argv)

    missing = labkit.missing_pieces()
    if missing:
        print("cannot run: " + "; ".join(missing))
        return 2
    import jupyterlab
    from playwright.sync_api import sync_playwright

    import kernels

    spec = kernels.get("rms_norm")
    options = [str(v) for v in spec.variant(args.variant).param(args.param).values]
    values = [v.strip() for v in args.values.split(",") if v.strip()]
    idx = [options.index(v) for v in values]
    if any(b - a != 1 for a, b in zip(idx, idx[1:])):
        raise SystemExit(f"--values must be adjacent on the {args.param} slider: {options}")

    tmp = Path(tempfile.mkdtemp(prefix="wb-latency-"))
    nb_dir = tmp / "notebooks"
    nb_dir.mkdir()
    params = {"device": args.device, "dtype": args.dtype, "quick": args.quick, "headless": False}
    labkit.prepare_notebook(REPO / "notebooks" / "rms_norm.ipynb", nb_dir, {**params, "out_dir": str(tmp / "out")})
    lab = labkit.Lab(nb_dir, tmp / "server", env={"WORKBENCH_STORE": str(tmp / "store.sqlite")})
    samples: dict[str, list[tuple[float, float | None]]] = {"cold": [], "warm": []}
    t_start = time.monotonic()
    try:
        lab.start()
        with sync_playwright() as pw:
            browser = labkit.launch_chromium(pw)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                nb = labkit.NotebookPage(page, lab, "rms_norm.ipynb").open()
                nb.run_all()
                prompts = nb.wait_all_ran(timeout=600)
                if not all(p[1:-2].isdigit() for p in prompts):
                    raise SystemExit("the notebook did not run through:\n" + "\n".join(nb.tracebacks()))
                setup_s = time.monotonic() - t_start
                if nb.dropdown("variant")["value"] != args.variant:
                    nb.select("variant", args.variant)
                page.locator(".wb-explorer .wb-speed").first.scroll_into_view_if_needed()
                # start one step below the first value (settle there; not timed)
                start = options[idx[0] - 1]
                nb.slide_to(args.param, start, options)
                _settle(nb, args.variant, f"{args.param}={start}", args.timeout)
                handle = nb.control(args.param).locator(".noUi-handle").first
                handle.focus()

                def step(key: str, value: str, kind: str) -> None:
                    pair = f"{args.param}={value}"
                    page.evaluate(_ARM_JS, [args.variant, [pair]])
                    page.keyboard.press(key)
                    page.wait_for_function(
                        "() => window.__wbLatency.t1 !== null", timeout=args.timeout * 1000, polling=20
                    )
                    ms = page.evaluate("() => window.__wbLatency.t1 - window.__wbLatency.t0")
                    status = _settle(nb, args.variant, pair, args.timeout)
                    m = re.search(r"relaunch (\d+) ms", status)
                    cached = "cached" in status.split(" | ")
                    if cached != (kind == "warm"):
                        raise SystemExit(f"{pair}: expected a {kind} change, the status says: {status}")
                    if "pass" not in status.split(" | "):
                        raise SystemExit(f"{pair} did not pass: {status}")
                    samples[kind].append((ms, float(m.group(1)) if m else None))
                    print(f"  {kind:4s} {pair:22s} browser {ms:8.0f} ms   kernel {m.group(1) if m else '?':>6s} ms")

                for v in values:  # each a new configuration
                    step("ArrowRight", v, "cold")
                for _ in range(args.rounds):
                    for v in reversed(values[:-1]):
                        step("ArrowLeft", v, "warm")
                    for v in values[1:]:
                        step("ArrowRight", v, "warm")
            finally:
                browser.close()
    finally:
        lab.stop()

    dev = "cpu (Triton interpreter)" if args.device == "cpu" else args.device
    print()
    print(
        f"Browser relaunch latency: rms_norm {args.variant}, {args.param} over {values}, device {dev}, "
        f"dtype {args.dtype}, quick={args.quick}"
    )
    print(
        f"JupyterLab {jupyterlab.__version__}, {_chromium_version(labkit.find_chromium())} headless, "
        f"Python {platform.python_version()}, {platform.machine()}; notebook opened and run in {setup_s:.0f} s; "
        "Explorer debounce 200 ms"
    )
    print()
    header = f"{'change':24s} {'n':>3s} {'browser ms':>10s} {'min':>6s} {'max':>6s} {'kernel-side ms':>14s}"
    print(header)
    print("-" * len(header))
    for kind, label in (("cold", "cold (new config)"), ("warm", "warm (cached)")):
        rows = samples[kind]
        med, lo, hi = _stats([r[0] for r in rows])
        kern = [r[1] for r in rows if r[1] is not None]
        kmed = f"{statistics.median(kern):.0f}" if kern else "-"
        print(f"{label:24s} {len(rows):3d} {med:>10s} {lo:>6s} {hi:>6s} {kmed:>14s}")
    print()
    print("browser: keydown on the slider -> speed figure redrawn with the new configuration (in the page);")
    print("kernel-side: the Explorer's own figure, change callback -> figures drawn in Python (status line).")
    return 0


def _settle(nb, variant: str, pair: str, timeout: float) -> str:
    """Wait until the status line reports the configuration the controls ask for (a relaunch
    time is shown) and return it."""

    def done():
        caption = nb.checks()["caption"]
        status = nb.text_of(".wb-status")
        if not caption.startswith(f"correctness of {variant} ") or not re.search(
            rf"(?<![\w.]){re.escape(pair)}(?![\w.])", caption
        ):
            return None
        return status if "relaunch" in status else None

    return nb.wait_for(done, timeout, f"{variant} {pair}", poll=0.05)


if __name__ == "__main__":
    raise SystemExit(main())
