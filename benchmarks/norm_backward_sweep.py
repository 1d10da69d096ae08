"""Where the norms' backward loses bandwidth: a sweep of its tiles and forms at the suite's sizes.

    python3 benchmarks/norm_backward_sweep.py --out /tmp/res [--family rms_norm,fused_add_rms_norm]
        [--hidden 1024,4096] [--rows 4096] [--budget 500]
    bash benchmarks/gpu_run.sh run python3 benchmarks/norm_backward_sweep.py --out /tmp/res/nbs   # GPU machine

For each hidden size (bf16, 4096 rows by default) it times the forward at its default tiles and
the backward (``rms_norm_backward``; the fused family's with the residual gradient ``ds``) over
its forms and tiles: the whole-row kernel's rows per program, warps, programs per SM (``GRID``) and
the one-tile-ahead loads (``BWD_PREFETCH``), w loaded per tile (``BWD_RELOAD_W``), and for wide
rows the ``columns`` form's chunks.
Times are medians of the kernels' device time (``torch.profiler``, L2 cleared before each call;
30 calls). Each form's registers and spills are printed beside its time. Each form's dx and dw are compared with the
default tiles' (a form that is fast and wrong is reported as wrong). Percentages are of the copy
bandwidth the measuring tool uses (``Device.copy_bandwidth_gbps``: a 512 MiB copy, kept per device
per host).

Prints, per size, the default, the best six and the forward+backward's share of copy bandwidth
with the best backward; writes ``norm_backward_sweep.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernels.fused_add_rms_norm import gpu as fused_gpu  # noqa: E402
from kernels.launch import recording  # noqa: E402
from kernels.rms_norm import gpu  # noqa: E402
from workbench.device import get_device  # noqa: E402
from workbench.timing import ProfilerKernelSampler  # noqa: E402

HIDDEN = {
    "rms_norm": (1024, 2048, 4096, 8192, 16384, 32768),
    "fused_add_rms_norm": (512, 1024, 2048, 4096, 8192, 16384),
}


def median_us(fn, device) -> float:
    """Median device time of one call's kernels (profiler, L2 flushed before each call), 30 calls."""
    fn()
    sampler = ProfilerKernelSampler(fn, calls=10, flush=device.flush_l2)
    return statistics.median(ms for _ in range(3) for ms in sampler.sample()) * 1e3


def compiled_facts(launches) -> str:
    """Registers per thread and spills of each kernel a call launched."""
    facts = []
    for launch in launches:
        c = launch.compiled
        name = launch.name.split("_kernel")[0].removeprefix("_rms_norm_")
        facts.append(f"{name}: {getattr(c, 'n_regs', '?')} regs, {getattr(c, 'n_spills', '?')} spills")
    return "; ".join(facts)


# (programs per SM, prefetch, reload w) of the whole-row backward's loop
LOOPS = ((1, False, False), (1, True, False), (1, False, True), (1, True, True), (2, False, True), (4, False, True))


def whole_row_configs(hidden: int, n_cores: int):
    """Rows per program x warps x LOOPS, kept to tiles of 8-64 elements a thread."""
    width = 1 << (hidden - 1).bit_length()
    for rows, warps, (per_sm, prefetch, reload_w) in itertools.product((1, 2, 4, 8, 16), (2, 4, 8, 16, 32), LOOPS):
        per_thread = rows * width // (32 * warps)
        if not 8 <= per_thread <= 64 or rows * width > gpu.MAX_TILE_ELEMENTS:
            continue
        yield {
            "BWD_ROWS": rows,
            "BWD_WARPS": warps,
            "GRID": per_sm * n_cores,
            "BWD_PREFETCH": prefetch,
            "BWD_RELOAD_W": reload_w,
            "BWD_CHUNK": 65536,
        }


def wide_configs(hidden: int, forms):
    """The chunked forms for rows too wide for one program's registers."""
    for chunk, rows, warps in itertools.product((2048, 4096, 8192, 16384), (1, 2), (4, 8, 16, 32)):
        if chunk >= hidden or not 8 <= rows * chunk // (32 * warps) <= 64:
            continue
        for prefetch in (False, True) if "columns" in forms else ():
            yield {
                "BWD_CHUNK": chunk,
                "BWD_WIDE": "columns",
                "BWD_ROWS": rows,
                "BWD_WARPS": warps,
                "BWD_PREFETCH": prefetch,
                "BWD_RELOAD_W": True,
            }


def sweep_size(family: str, hidden: int, n_rows: int, device, deadline: float, bw: float, forms) -> dict:
    n_cores = device.num_cores
    gen = torch.Generator(device="cuda").manual_seed(hidden)
    x = torch.randn(n_rows, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
    r = torch.randn_like(x) if family == "fused_add_rms_norm" else None
    w = (1 + 0.1 * torch.randn(hidden, device="cuda", generator=gen)).to(torch.bfloat16)
    dy = torch.randn_like(x)
    ds = torch.randn_like(x) if r is not None else None
    base = gpu.resolve_tiles(n_rows, hidden, n_cores)
    if r is not None:
        forward = lambda: fused_gpu.fused_add_rms_norm_forward(x, r, w, 1e-6, 0.0, "llama", base)  # noqa: E731
        _, v, rstd = forward()
    else:
        forward = lambda: gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", base)  # noqa: E731
        v, (_, rstd) = x, forward()
    fwd_us = median_us(forward, device)
    e = x.element_size()
    fwd_bytes = ((4 if r is not None else 2) * x.numel() + hidden) * e
    bwd_bytes = ((4 if r is not None else 3) * x.numel() + 2 * hidden) * e
    ref_dx, ref_dw = gpu.rms_norm_backward(dy, v, w, rstd, 0.0, "llama", base, ds2d=ds)
    # The floor a backward could reach: elementwise passes moving its bytes (2 reads and a write;
    # the fused family's 3 and 1, in two passes).
    out = torch.empty_like(x)
    if ds is not None:
        floor = lambda: torch.add(torch.add(v, dy), ds, out=out)  # noqa: E731
    else:
        floor = lambda: torch.add(v, dy, out=out)  # noqa: E731
    floor_us = median_us(floor, device)

    configs = [{}] + (list(whole_row_configs(hidden, n_cores)) if "whole" in forms else [])
    if r is None and hidden > 4096:
        configs += list(wide_configs(hidden, forms))
    rows = []
    for cfg in configs:
        if time.time() > deadline:
            rows.append({"config": cfg, "skipped": "budget"})
            continue
        try:
            tiles = gpu.resolve_tiles(n_rows, hidden, n_cores, **cfg)
            if r is not None and tiles.BWD_CHUNK:
                continue
            call = lambda: gpu.rms_norm_backward(dy, v, w, rstd, 0.0, "llama", tiles, ds2d=ds)  # noqa: E731, B023
            with recording() as launches:
                dx, dw = call()
            torch.cuda.synchronize()
            wrong = not (
                torch.allclose(dx.float(), ref_dx.float(), atol=2e-2, rtol=2e-2)
                and torch.allclose(dw.float(), ref_dw.float(), atol=0.5, rtol=2e-2)
            )
            t = median_us(call, device)
        except Exception as exc:  # a tile that cannot compile or run is a finding, not a crash
            rows.append({"config": cfg, "error": f"{type(exc).__name__}: {str(exc)[:160]}"})
            continue
        pct = 100 * bwd_bytes / t / 1e3 / bw
        facts = compiled_facts(launches)
        rows.append({"config": cfg, "us": t, "pct_bw": pct, "wrong": wrong, "tiles": str(tiles), "facts": facts})
    timed = sorted((row for row in rows if "us" in row and not row["wrong"]), key=lambda row: row["us"])
    default = rows[0]
    print(
        f"== {family} hidden {hidden} x {n_rows} bf16: forward {fwd_us:.1f} us ({100 * fwd_bytes / fwd_us / 1e3 / bw:.0f}%)"
    )
    print(
        f"   floor: elementwise passes over the backward's bytes {floor_us:.1f} us ({100 * bwd_bytes / floor_us / 1e3 / bw:.0f}%)"
    )
    if "us" in default:
        print(f"   backward default {default['us']:8.1f} us {default['pct_bw']:5.1f}%  {default['facts']}")
    for row in timed[:6]:
        print(f"   backward         {row['us']:8.1f} us {row['pct_bw']:5.1f}%  {row['config']}  {row['facts']}")
    for row in rows:
        if row.get("wrong") or "error" in row:
            print(f"   !! {row['config']}: {row.get('error', 'WRONG dx/dw')}")
    if timed:
        total = 100 * (fwd_bytes + bwd_bytes) / (fwd_us + timed[0]["us"]) / 1e3 / bw
        print(f"   forward+backward with the best: {fwd_us + timed[0]['us']:.1f} us = {total:.1f}% of copy BW")
    return {
        "family": family,
        "hidden": hidden,
        "rows": n_rows,
        "forward_us": fwd_us,
        "fwd_bytes": fwd_bytes,
        "bwd_bytes": bwd_bytes,
        "floor_us": floor_us,
        "configs": rows,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for norm_backward_sweep.json")
    ap.add_argument("--family", default="rms_norm,fused_add_rms_norm", help="comma-separated families")
    ap.add_argument("--hidden", default="", help="comma-separated hidden sizes (default: the suite's)")
    ap.add_argument("--rows", type=int, default=4096, help="rows of the problem")
    ap.add_argument("--budget", type=float, default=500.0, help="seconds for the whole sweep")
    ap.add_argument("--forms", default="whole,columns", help="backward forms to sweep (whole, columns)")
    ap.add_argument("--name", default="norm_backward_sweep", help="the JSON file's name (without .json)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("norm_backward_sweep.py needs a CUDA GPU", file=sys.stderr)
        return 2
    start = time.time()
    device = get_device("cuda")
    bw = device.copy_bandwidth_gbps()  # the measuring tool's figure (kept per device per host)
    print(f"{device.name}: copy bandwidth {bw:.0f} GB/s, {device.num_cores} SMs")
    sizes = [(f, h) for f in args.family.split(",") for h in HIDDEN[f]]
    if args.hidden:
        wanted = {int(h) for h in args.hidden.split(",")}
        sizes = [(f, h) for f, h in sizes if h in wanted]
    results = []
    args.out.mkdir(parents=True, exist_ok=True)
    for i, (family, hidden) in enumerate(sizes):
        deadline = time.time() + (start + args.budget - time.time()) / (len(sizes) - i)
        results.append(sweep_size(family, hidden, args.rows, device, deadline, bw, args.forms.split(",")))
        (args.out / f"{args.name}.json").write_text(json.dumps({"copy_bw_gbps": bw, "sizes": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
