"""RMSNorm's forward in other loop forms, beside the library's kernel and torch.compile's, on a GPU.

    python3 benchmarks/diagnostics/norm_forward_forms.py [--hidden 8192,32768] [--rows 4096] [--forms two_walks,one_row]
    bash benchmarks/gpu_run.sh run python3 benchmarks/diagnostics/norm_forward_forms.py   # GPU machine

Where the suite's RMSNorm forward trails torch.compile (hidden 32768 and 8192 on the H200,
``reports/h200-norms-same-size``), this times, bf16 with the L2 flushed before each call
(profiler device time, median of 30 calls):

- the library's forward at its default tiles (``kernels.rms_norm.gpu.rms_norm_forward``);
- torch.compile's forward of the same reference (the suite's peer), and the configuration its
  autotuner kept, read from Inductor's cache (the kernel's ``.best_config`` and its loop's loads);
- the library's forward reading each whole row twice (``FWD_WALKS=2``: the row loaded, summed and
  dropped, then loaded again from L2), one row a program, warps swept;
- a form written here, :func:`_forward_one_row`: a whole row per program on 1-D tensors as
  Inductor writes its persistent reductions (no mask where the row fills the tile, int32 or
  int64 offsets), warps swept.

A form that lost stays in git, not here: the row walked in chunks with the squares summed
element-wise and reduced once per row, and the same for the ``columns`` backward's first pass
(at e0d19f4; ``reports/h200-norm-long-rows`` has what they measured).

Every form's y and rstd are compared with the library's default's. Prints one table per size.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.peers import compiled  # noqa: E402
from kernels.rms_norm import gpu  # noqa: E402
from kernels.rms_norm.reference import rms_norm_reference  # noqa: E402
from workbench.device import get_device  # noqa: E402
from workbench.timing import median_kernel_us  # noqa: E402


@triton.jit
def _forward_one_row(
    Y_ptr, X_ptr, W_ptr, RSTD_ptr, row_stride, n_cols, eps, offset,
    BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr, INT64: tl.constexpr,
):  # fmt: skip
    """One whole row per program on 1-D tensors, as Inductor's persistent reductions are written:
    no row dimension, no mask where the row fills the tile (``EVEN``), int32 offsets unless
    ``INT64``; llama casting (x * rstd rounded to x's dtype, then times offset + w)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    base = row.to(tl.int64) * row_stride if INT64 else row * row_stride
    if EVEN:
        x = tl.load(X_ptr + base + cols)
        w = tl.load(W_ptr + cols, eviction_policy="evict_last")
    else:
        x = tl.load(X_ptr + base + cols, mask=cols < n_cols, other=0.0)
        w = tl.load(W_ptr + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, axis=0) / n_cols + eps)
    y = (xf * rstd).to(x.dtype).to(tl.float32) * (offset + w.to(tl.float32))
    tl.store(RSTD_ptr + row, rstd)
    if EVEN:
        tl.store(Y_ptr + base + cols, y.to(Y_ptr.dtype.element_ty))
    else:
        tl.store(Y_ptr + base + cols, y.to(Y_ptr.dtype.element_ty), mask=cols < n_cols)


def forward_one_row(x, w, eps, warps, even, int64):
    y = torch.empty_like(x)
    rstd = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    block = triton.next_power_of_2(x.shape[1])
    _forward_one_row[(x.shape[0],)](
        y, x, w, rstd, x.stride(0), x.shape[1], eps, 0.0,
        BLOCK_SIZE=block, EVEN=even and block == x.shape[1], INT64=int64, num_warps=warps,
    )  # fmt: skip
    return y, rstd


def inductor_choices(root: Path) -> list[str]:
    """The configurations Inductor's autotuner kept for the reductions under ``root``, with the
    loads of each kernel (their eviction hints), newest first."""
    lines = []
    for best in sorted(root.rglob("*.best_config"), key=lambda p: p.stat().st_mtime, reverse=True):
        lines.append(f"{best.name}: {json.loads(best.read_text())}")
        for source in best.parent.glob("*.py"):  # the kernel's source beside its kept configuration
            body = [ln for ln in source.read_text().splitlines() if ln.startswith("    ") or ln.startswith("def ")]
            lines += [f"    {ln[:170]}" for ln in body[:40]]
    return lines


def one_row_forms(hidden: int):
    for warps, (even, int64) in itertools.product((4, 8, 16, 32), ((True, False), (False, True), (True, True))):
        if 8 <= hidden // (32 * warps) <= 64:
            yield {"warps": warps, "even": even, "int64": int64}


def two_walk_forms(hidden: int):
    for warps in (8, 16, 32):
        if 8 <= hidden // (32 * warps) <= 64:
            yield {"warps": warps}


def forward_two_walks(x, w, eps, warps):
    """The library's forward reading each whole row twice (``FWD_WALKS=2``), one row a program."""
    width = triton.next_power_of_2(x.shape[1])
    tiles = gpu.tiles_for(x, FWD_WALKS=2, FWD_CHUNK=width, BLOCK_SIZE_M=1, num_warps=warps)
    return gpu.rms_norm_forward(x, w, eps, 0.0, "llama", tiles)


FORMS = {
    "two_walks": (two_walk_forms, forward_two_walks),
    "one_row": (one_row_forms, forward_one_row),
}


def same(y, rstd, ref_y, ref_rstd) -> bool:
    """Within one bf16 rounding of the library's y, and rstd to fp32 rounding."""
    return torch.allclose(y.float(), ref_y.float(), rtol=1e-2, atol=1e-2) and torch.allclose(rstd, ref_rstd, rtol=1e-5)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", default="2048,4096,8192,16384,32768")
    parser.add_argument("--forms", default="two_walks,one_row", help="two_walks, one_row (comma-separated)")
    parser.add_argument("--rows", type=int, default=4096)
    args = parser.parse_args(argv)
    device = get_device("cuda")
    bw = device.copy_bandwidth_gbps()
    eps = 1e-6
    for hidden in (int(h) for h in args.hidden.split(",")):
        torch.manual_seed(0)
        x = torch.randn(args.rows, hidden, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
        tiles = gpu.tiles_for(x)
        ref_y, ref_rstd = gpu.rms_norm_forward(x, w, eps, 0.0, "llama", tiles)
        min_bytes = 2 * x.numel() * x.element_size()
        library = lambda x=x, w=w, tiles=tiles: gpu.rms_norm_forward(x, w, eps, 0.0, "llama", tiles)  # noqa: E731
        rows = [("library default", median_kernel_us(library, device.flush_l2), "")]
        if tiles.fwd_chunk:  # the default walks chunks here: the library's whole row too
            whole = gpu.tiles_for(x, FWD_CHUNK=triton.next_power_of_2(hidden))
            call = lambda x=x, w=w, whole=whole: gpu.rms_norm_forward(x, w, eps, 0.0, "llama", whole)  # noqa: E731
            rows.append((f"library whole row ({whole.num_warps} warps)", median_kernel_us(call, device.flush_l2), ""))
        peer = compiled(rms_norm_reference)
        call = lambda: peer(x, w, eps, 0.0, "llama")  # noqa: E731, B023
        wrong = (call().float() - ref_y.float()).abs().max().item()
        peer_us = median_kernel_us(call, device.flush_l2)
        rows.append(("torch.compile", peer_us, f"max |dy| {wrong:.3g}"))
        for kind in args.forms.split(","):
            forms_of, run = FORMS[kind]
            for form in forms_of(hidden):
                c = lambda: run(x, w, eps, **form)  # noqa: E731, B023
                note = "" if same(*c(), ref_y, ref_rstd) else "WRONG"
                rows.append((f"{kind} {form}", median_kernel_us(c, device.flush_l2), note))
        print(f"== RMSNorm forward, {args.rows} x {hidden} bf16 (kernel time, L2 flushed; % of {bw:.0f} GB/s)")
        for name, us, note in sorted(rows, key=lambda r: r[1])[:14]:
            print(f"   {us:8.1f} us {100 * min_bytes / us / 1e3 / bw:5.1f}%  {name} {note}")
        print(f"   library default {rows[0][1]:.1f} us, torch.compile {peer_us:.1f} us")
    cache = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or f"/tmp/torchinductor_{os.environ.get('USER', 'root')}")
    print("== Inductor's kept configurations")
    for line in inductor_choices(cache):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
