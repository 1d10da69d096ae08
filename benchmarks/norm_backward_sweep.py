"""Where the norms' backward loses bandwidth: a sweep of its tiles and forms at the suite's sizes.

    python3 benchmarks/norm_backward_sweep.py --out /tmp/res [--family rms_norm,fused_add_rms_norm]
        [--hidden 1024,4096] [--rows 4096] [--budget 500] [--loops plain,staged] [--warm 8]
    bash benchmarks/gpu_run.sh run python3 benchmarks/norm_backward_sweep.py --out /tmp/res/nbs   # GPU machine

For each hidden size (bf16, 4096 rows by default) it times the forward at its default tiles and
the backward (``rms_norm_backward``; the fused family's with the residual gradient ``ds``) over
its forms and tiles: the whole-row kernel's rows per program, warps, programs per SM (``GRID``) and
its loop (``--loops``: ``plain``, the loop as written or with the one-tile-ahead loads in
registers, ``BWD_PREFETCH``; ``staged``, tiles staged ahead in shared memory by Triton's
pipeline, ``BWD_STAGES``), w loaded per tile (``BWD_RELOAD_W``), for wide rows the ``columns``
form's chunks, and from hidden 4096 the Gluon ``onchip`` form's (kernels/rms_norm/onchip.py;
both families). ``--forms ...,forward`` also times RMSNorm's forward in column chunks
(``FWD_CHUNK``) beside its whole-row default. ``--warm`` processes first compile every configuration into Triton's
cache, each running a share of them once, so the timing process spends its budget timing.
``--after-forward`` times each backward behind the forward, the pair from one flushed L2, as the
suite's forward+backward cells time a training step: the backward then finds x in the L2 (at
hidden 1024 the RMSNorm backward alone took 15.2 us cold and about 13.3 behind the forward).
Times are medians of the kernels' device time (``torch.profiler``, L2 cleared before each call;
30 calls). Each form's registers, spills and shared memory are printed beside its time. Each form's dx and dw are compared with the
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
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernels.fused_add_rms_norm import gpu as fused_gpu  # noqa: E402
from kernels.launch import recording  # noqa: E402
from kernels.rms_norm import gpu  # noqa: E402
from workbench.device import get_device  # noqa: E402
from workbench.timing import median_kernel_us  # noqa: E402

HIDDEN = {
    "rms_norm": (1024, 2048, 4096, 8192, 16384, 32768),
    "fused_add_rms_norm": (512, 1024, 2048, 4096, 8192, 16384),
}


def compiled_facts(launches) -> str:
    """Registers per thread and spills of each kernel a call launched."""
    facts = []
    for launch in launches:
        c = launch.compiled
        name = launch.name.split("_kernel")[0].removeprefix("_rms_norm_")
        shared = getattr(getattr(c, "metadata", None), "shared", "?")
        facts.append(
            f"{name}: {getattr(c, 'n_regs', '?')} regs, {getattr(c, 'n_spills', '?')} spills, {shared} B shared"
        )
    return "; ".join(facts)


# (programs per SM, prefetch, reload w, stages) of the whole-row backward's loop: the plain loop
# and the one-tile-ahead loads in registers, then tiles staged ahead in shared memory (BWD_STAGES).
LOOPS = {
    "plain": ((1, False, False, 1), (1, True, False, 1), (1, False, True, 1), (1, True, True, 1), (2, False, True, 1),
              (4, False, True, 1)),
    "staged": ((1, False, False, 3), (1, False, True, 3), (1, False, False, 4), (1, False, True, 4),
               (2, False, False, 3)),
}  # fmt: skip


def whole_row_configs(hidden: int, n_cores: int, loops):
    """Rows per program x warps x ``loops``, kept to tiles of 8-64 elements a thread."""
    width = 1 << (hidden - 1).bit_length()
    for rows, warps, (per_sm, prefetch, reload_w, stages) in itertools.product(
        (1, 2, 4, 8, 16), (2, 4, 8, 16, 32), loops
    ):
        per_thread = rows * width // (32 * warps)
        if not 8 <= per_thread <= 64 or rows * width > gpu.MAX_TILE_ELEMENTS:
            continue
        yield {
            "BWD_ROWS": rows,
            "BWD_WARPS": warps,
            "GRID": per_sm * n_cores,
            "BWD_PREFETCH": prefetch,
            "BWD_RELOAD_W": reload_w,
            "BWD_STAGES": stages,
            "BWD_CHUNK": 65536,
        }


def onchip_configs(hidden: int, n_cores: int, shared_bytes: int):
    """The Gluon backward with the partial dw in shared memory (``BWD_WIDE="onchip"``): its chunk,
    warps and programs per SM, as many as the partials fit in one SM's shared memory."""
    width = 1 << (hidden - 1).bit_length()
    for chunk, warps, per_sm, prefetch in itertools.product((2048, 4096, 8192), (8, 16, 32), (1, 2, 3), (False, True)):
        if chunk >= width or per_sm * 4 * width > shared_bytes or chunk // (32 * warps) < 4:
            continue
        yield {
            "BWD_CHUNK": chunk,
            "BWD_WIDE": "onchip",
            "BWD_WARPS": warps,
            "GRID": per_sm * n_cores,
            "BWD_PREFETCH": prefetch,
        }


def forward_configs(hidden: int):
    """The RMSNorm forward in column chunks (``FWD_CHUNK``), beside its whole-row default."""
    width = 1 << (hidden - 1).bit_length()
    for chunk, rows, warps in itertools.product((1024, 2048, 4096, 8192), (1, 2, 4), (4, 8, 16)):
        if chunk < width and 4 <= rows * chunk // (32 * warps) <= 64 and rows * chunk <= gpu.MAX_TILE_ELEMENTS:
            yield {"FWD_CHUNK": chunk, "BLOCK_SIZE_M": rows, "num_warps": warps}


def wide_configs(hidden: int, forms, loops):
    """The chunked forms for rows too wide for one program's registers (``loops``' loads ahead)."""
    ahead = sorted({(prefetch, stages) for _, prefetch, _, stages in loops})
    for chunk, rows, warps in itertools.product((2048, 4096, 8192, 16384), (1, 2), (4, 8, 16, 32)):
        if chunk >= hidden or not 8 <= rows * chunk // (32 * warps) <= 64:
            continue
        for prefetch, stages in ahead if "columns" in forms else ():
            yield {
                "BWD_CHUNK": chunk,
                "BWD_WIDE": "columns",
                "BWD_ROWS": rows,
                "BWD_WARPS": warps,
                "BWD_PREFETCH": prefetch,
                "BWD_RELOAD_W": True,
                "BWD_STAGES": stages,
            }


class Problem:
    """One size's inputs (bf16, fixed seed: every process that builds it gets the same) and the
    backward at given tiles."""

    def __init__(self, family: str, hidden: int, n_rows: int, n_cores: int):
        self.family, self.hidden, self.n_rows, self.n_cores = family, hidden, n_rows, n_cores
        gen = torch.Generator(device="cuda").manual_seed(hidden)
        self.x = torch.randn(n_rows, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.r = torch.randn_like(self.x) if family == "fused_add_rms_norm" else None
        self.w = (1 + 0.1 * torch.randn(hidden, device="cuda", generator=gen)).to(torch.bfloat16)
        self.dy = torch.randn_like(self.x)
        self.ds = torch.randn_like(self.x) if self.r is not None else None
        self.base = gpu.resolve_tiles(n_rows, hidden, n_cores)
        if self.r is not None:
            _, self.v, self.rstd = self.forward()
        else:
            self.v, (_, self.rstd) = self.x, self.forward()

    def forward(self):
        if self.r is not None:
            return fused_gpu.fused_add_rms_norm_forward(self.x, self.r, self.w, 1e-6, 0.0, "llama", self.base)
        return gpu.rms_norm_forward(self.x, self.w, 1e-6, 0.0, "llama", self.base)

    def backward(self, tiles):
        return gpu.rms_norm_backward(self.dy, self.v, self.w, self.rstd, 0.0, "llama", tiles, ds2d=self.ds)

    def configs(self, forms, loops) -> list[dict]:
        """The default ({}) first, then the forms' tiles this family can run."""
        configs = [{}] + (list(whole_row_configs(self.hidden, self.n_cores, loops)) if "whole" in forms else [])
        if self.r is None and self.hidden > 4096:
            configs += list(wide_configs(self.hidden, forms, loops))
        if "onchip" in forms and self.hidden >= 4096:
            shared = torch.cuda.get_device_properties(0).shared_memory_per_multiprocessor
            configs += list(onchip_configs(self.hidden, self.n_cores, shared))
        return configs

    def tiles(self, cfg):
        """The resolved tiles of ``cfg``, or None where this family cannot run them (the fused
        backward keeps whole rows, or the on-chip form's); ValueError for tiles the device
        cannot hold."""
        tiles = gpu.resolve_tiles(self.n_rows, self.hidden, self.n_cores, **cfg)
        if self.r is not None and tiles.BWD_CHUNK and tiles.BWD_WIDE != "onchip":
            return None
        if tiles.bwd_stages > 1:
            gpu.check_staged_tiles(tiles, self.v, self.dy, self.ds, self.w)
        return tiles


def warm_shard(sizes, n_rows: int, forms, loops, shard: int, shards: int) -> None:
    """Compile (by running once) every ``shards``-th configuration from ``shard`` into Triton's
    cache on disk, so the timing process finds them compiled."""
    n_cores = torch.cuda.get_device_properties(0).multi_processor_count
    for family, hidden in sizes:
        problem = Problem(family, hidden, n_rows, n_cores)
        for cfg in problem.configs(forms, loops)[shard::shards]:
            try:
                tiles = problem.tiles(cfg)
                if tiles is not None:
                    problem.backward(tiles)
            except Exception:  # noqa: BLE001 - the timing process reports it
                pass
        if problem.r is None and "forward" in forms:
            for cfg in list(forward_configs(hidden))[shard::shards]:
                tiles = gpu.resolve_tiles(n_rows, hidden, n_cores, **cfg)
                gpu.rms_norm_forward(problem.x, problem.w, 1e-6, 0.0, "llama", tiles)
    torch.cuda.synchronize()


def warm(argv, shards: int) -> float:
    """Run :func:`warm_shard` in ``shards`` processes at once (Triton compiles one kernel at a
    time per process); seconds taken."""
    started = time.time()
    script = str(Path(__file__).resolve())
    procs = [subprocess.Popen([sys.executable, script, *argv, "--warm-shard", f"{i}/{shards}"]) for i in range(shards)]
    for proc in procs:
        proc.wait()
    return time.time() - started


def sweep_size(
    family: str, hidden: int, n_rows: int, device, deadline: float, bw: float, forms, loops, after_forward=False
) -> dict:
    """One size's sweep. ``after_forward``: each timed call is the forward then the backward, the
    L2 flushed before the pair as the suite's forward+backward cells have it (the backward then
    finds what the forward left in the L2), and times and shares are the pair's."""
    problem = Problem(family, hidden, n_rows, device.num_cores)
    x, r, dy, ds, v = problem.x, problem.r, problem.dy, problem.ds, problem.v
    fwd_us = median_kernel_us(problem.forward, device.flush_l2)
    forward_rows = []
    if r is None and "forward" in forms:
        ref_y = problem.forward()[0]
        for cfg in forward_configs(hidden):
            tiles = gpu.resolve_tiles(n_rows, hidden, device.num_cores, **cfg)
            call = lambda: gpu.rms_norm_forward(x, problem.w, 1e-6, 0.0, "llama", tiles)  # noqa: E731, B023
            wrong = not torch.allclose(call()[0].float(), ref_y.float(), atol=2e-2, rtol=2e-2)
            forward_rows.append({"config": cfg, "us": median_kernel_us(call, device.flush_l2), "wrong": wrong})
    e = x.element_size()
    fwd_bytes = ((4 if r is not None else 2) * x.numel() + hidden) * e
    bwd_bytes = ((4 if r is not None else 3) * x.numel() + 2 * hidden) * e
    ref_dx, ref_dw = problem.backward(problem.base)
    # The floor a backward could reach: elementwise passes moving its bytes (2 reads and a write;
    # the fused family's 3 and 1, in two passes).
    out = torch.empty_like(x)
    if ds is not None:
        floor = lambda: torch.add(torch.add(v, dy), ds, out=out)  # noqa: E731
    else:
        floor = lambda: torch.add(v, dy, out=out)  # noqa: E731
    floor_us = median_kernel_us(floor, device.flush_l2)

    configs = problem.configs(forms, loops)
    rows = []
    for cfg in configs:
        if time.time() > deadline:
            rows.append({"config": cfg, "skipped": "budget"})
            continue
        try:
            tiles = problem.tiles(cfg)
        except ValueError as exc:  # staged tiles over the device's shared memory: not run
            rows.append({"config": cfg, "skipped": str(exc)[:200]})
            continue
        if tiles is None:
            continue
        try:
            call = lambda: problem.backward(tiles)  # noqa: E731, B023
            with recording() as launches:
                dx, dw = call()
            if after_forward:
                call = lambda: (problem.forward(), problem.backward(tiles))  # noqa: E731, B023
            torch.cuda.synchronize()
            wrong = not (
                torch.allclose(dx.float(), ref_dx.float(), atol=2e-2, rtol=2e-2)
                and torch.allclose(dw.float(), ref_dw.float(), atol=0.5, rtol=2e-2)
            )
            t = median_kernel_us(call, device.flush_l2)
        except Exception as exc:  # a tile that cannot compile or run is a finding, not a crash
            rows.append({"config": cfg, "error": f"{type(exc).__name__}: {str(exc)[:160]}"})
            continue
        pct = 100 * (bwd_bytes + (fwd_bytes if after_forward else 0)) / t / 1e3 / bw
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
    for row in sorted(forward_rows, key=lambda row: row["us"])[:4]:
        flag = "  WRONG" if row["wrong"] else ""
        print(f"   forward  {row['us']:8.1f} us {100 * fwd_bytes / row['us'] / 1e3 / bw:5.1f}%  {row['config']}{flag}")
    timed_as = "fwd+bwd " if after_forward else "backward"
    if "us" in default:
        print(f"   {timed_as} default {default['us']:8.1f} us {default['pct_bw']:5.1f}%  {default['facts']}")
    for row in timed[:6]:
        print(f"   {timed_as}         {row['us']:8.1f} us {row['pct_bw']:5.1f}%  {row['config']}  {row['facts']}")
    for row in rows:
        if row.get("wrong") or "error" in row:
            print(f"   !! {row['config']}: {row.get('error', 'WRONG dx/dw')}")
    if timed and not after_forward:
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
        "forward_chunks": forward_rows,
        "after_forward": after_forward,
        "configs": rows,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for norm_backward_sweep.json")
    ap.add_argument("--family", default="rms_norm,fused_add_rms_norm", help="comma-separated families")
    ap.add_argument("--hidden", default="", help="comma-separated hidden sizes (default: the suite's)")
    ap.add_argument("--rows", type=int, default=4096, help="rows of the problem")
    ap.add_argument("--budget", type=float, default=500.0, help="seconds for the whole sweep")
    ap.add_argument(
        "--forms",
        default="whole,columns,onchip",
        help="forms to sweep: whole, columns, onchip (the backward's); forward (RMSNorm's forward in column chunks)",
    )
    ap.add_argument("--name", default="norm_backward_sweep", help="the JSON file's name (without .json)")
    ap.add_argument("--loops", default="plain,staged", help=f"loop kinds to sweep ({', '.join(LOOPS)})")
    ap.add_argument("--warm", type=int, default=8, help="processes compiling the tiles first (0: none)")
    ap.add_argument(
        "--after-forward", action="store_true", help="time each backward after the forward, as a training step"
    )
    ap.add_argument("--warm-shard", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("norm_backward_sweep.py needs a CUDA GPU", file=sys.stderr)
        return 2
    start = time.time()
    sizes = [(f, h) for f in args.family.split(",") for h in HIDDEN[f]]
    if args.hidden:
        wanted = {int(h) for h in args.hidden.split(",")}
        sizes = [(f, h) for f, h in sizes if h in wanted]
    forms = args.forms.split(",")
    loops = [loop for kind in args.loops.split(",") for loop in LOOPS[kind]]
    if args.warm_shard:
        shard, shards = map(int, args.warm_shard.split("/"))
        warm_shard(sizes, args.rows, forms, loops, shard, shards)
        return 0
    if args.warm:
        print(
            f"compiled in {warm(argv if argv is not None else sys.argv[1:], args.warm):.0f} s by {args.warm} processes"
        )
    device = get_device("cuda")
    bw = device.copy_bandwidth_gbps()  # the measuring tool's figure (kept per device per host)
    print(f"{device.name}: copy bandwidth {bw:.0f} GB/s, {device.num_cores} SMs")
    results = []
    args.out.mkdir(parents=True, exist_ok=True)
    for i, (family, hidden) in enumerate(sizes):
        deadline = time.time() + (start + args.budget - time.time()) / (len(sizes) - i)
        results.append(sweep_size(family, hidden, args.rows, device, deadline, bw, forms, loops, args.after_forward))
        (args.out / f"{args.name}.json").write_text(json.dumps({"copy_bw_gbps": bw, "sizes": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
