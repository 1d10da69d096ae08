"""Where the host time of one eager RMSNorm forward+backward goes, stamp by stamp.

    python3 benchmarks/diagnostics/backward_timeline.py [--rows 4096] [--hidden 1024] [--calls 300]
    bash benchmarks/gpu_run.sh run python3 benchmarks/diagnostics/backward_timeline.py   # on the GPU machine

``call_breakdown.py`` says how long a call takes; this says where inside it. Each call of
``torch.autograd.grad(f(x, w), (x, w), dy)`` is stamped (``perf_counter_ns``) before the
forward, after it, at the backward's entry (on the autograd engine's device thread), after
the saved tensors are read, after the backward's kernels are issued, and after ``grad``
returns; the table gives the median of each gap over many calls, in µs, the functions taking turns call by
call. The functions:

- ``ours``: an ``autograd.Function`` over the library's host functions
  (``gpu.rms_norm_forward`` / ``gpu.rms_norm_backward``), the library's own call shape;
- ``ours partials``: the same with ``DW_REDUCE="partials"`` (no zero-filled buffer, a host sum);
- ``allocations``: a backward that only allocates what ours allocates (dx, the fp32 dw and
  counter zero-filled, dw) and launches nothing;
- ``allocations + no-op launch``: the same plus one launch, through the library's launch path,
  of a kernel with our backward kernel's arguments whose body does nothing: the floor of a
  Python backward that issues one Triton kernel, the kernel's work left out;
- ``empty``: a backward that returns its gradient (the floor of a Python backward).

The same functions run again with the engine's device threads off
(``torch.autograd.set_multithreading_enabled(False)``: the backward runs on the calling thread),
and the backward host function is timed alone on the main thread and on a second Python thread.
Every row also gives the whole call's median; the library's ``rms_norm`` and ``F.rms_norm`` give
the calls the suite compares.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.launch import launch  # noqa: E402
from kernels.rms_norm import gpu, rms_norm  # noqa: E402

_STAMPS: dict[str, int] = {}


def stamp(name: str) -> None:
    _STAMPS[name] = time.perf_counter_ns()


def make_function(tiles, backward_body):
    """An autograd.Function whose forward is the library's GPU forward and whose backward is
    ``backward_body(ctx, dy)``, with stamps at its entry."""

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            y, rstd = gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", tiles)
            ctx.save_for_backward(x, w, rstd)
            return y

        @staticmethod
        def backward(ctx, dy):
            stamp("bwd entry")
            return backward_body(ctx, dy)

    return Probe


def ours_backward(tiles):
    def body(ctx, dy):
        x, w, rstd = ctx.saved_tensors
        stamp("saved read")
        dx, dw = gpu.rms_norm_backward(dy, x, w, rstd, 0.0, "llama", tiles)
        stamp("bwd issued")
        return dx, dw

    return body


def allocations_backward(ctx, dy):
    x, w, rstd = ctx.saved_tensors
    stamp("saved read")
    dx = torch.empty_like(x)
    zeros = torch.zeros(x.shape[1] + 1, dtype=torch.float32, device=x.device)
    dw = torch.empty_like(w)
    del zeros
    stamp("bwd issued")
    return dx, dw


@triton.jit
def _no_op_kernel(
    DX_ptr, DY_ptr, DS_ptr, X_ptr, W_ptr, RSTD_ptr, DW_partial_ptr, DW32_ptr, DW_ptr, COUNTER_ptr, row_stride,
    n_rows, n_cols, offset, CASTING_MODE: tl.constexpr, HAS_WEIGHT: tl.constexpr, DW_ATOMIC: tl.constexpr,
    HAS_DS: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_SIZE_M: tl.constexpr,
):  # fmt: skip
    """Our backward kernel's signature with nothing inside: the launch alone."""
    pass


def no_op_launch_backward(tiles):
    def body(ctx, dy):
        x, w, rstd = ctx.saved_tensors
        stamp("saved read")
        n_rows, n_cols = x.shape
        dx = torch.empty_like(x)
        dw32 = gpu.dw_accumulator(w, n_cols)
        dw = torch.empty_like(w)
        launch(
            _no_op_kernel, x, (tiles.GRID,), dx, dy, dy, x, w, rstd, rstd, dw32, dw, dw32[n_cols:], x.stride(0),
            n_rows, n_cols, 0.0, CASTING_MODE=0, HAS_WEIGHT=True, DW_ATOMIC=True, HAS_DS=False,
            BLOCK_SIZE=tiles.BLOCK_SIZE, BLOCK_SIZE_M=tiles.bwd_block_size_m, num_warps=tiles.bwd_num_warps,
        )  # fmt: skip
        stamp("bwd issued")
        return dx, dw

    return body


def empty_backward(ctx, dy):
    stamp("saved read")
    stamp("bwd issued")
    return dy, None


SEGMENTS = (
    ("start", "fwd done", "forward"),
    ("fwd done", "bwd entry", "to bwd entry"),
    ("bwd entry", "saved read", "saved read"),
    ("saved read", "bwd issued", "bwd body"),
    ("bwd issued", "grad done", "bwd exit to return"),
    ("start", "grad done", "whole call"),
)


def _sync(x) -> None:
    if x.device.type == "cuda":
        torch.cuda.synchronize()


def timelines(probes: dict, x, w, dy, calls: int) -> dict:
    """Median µs of each stamped gap per probe over ``calls`` calls each, the probes taking turns
    call by call (A B C A B C ...: a drift of the host's state reaches them all alike); the device
    is drained before each call."""
    for forward in probes.values():
        for _ in range(20):
            torch.autograd.grad(forward(x, w), (x, w), dy, allow_unused=True)
    gaps = {name: {label: [] for *_, label in SEGMENTS} for name in probes}
    for _ in range(calls):
        for name, forward in probes.items():
            _sync(x)
            _STAMPS.clear()
            stamp("start")
            y = forward(x, w)
            stamp("fwd done")
            torch.autograd.grad(y, (x, w), dy, allow_unused=True)
            stamp("grad done")
            for a, b, label in SEGMENTS:
                if a in _STAMPS and b in _STAMPS:
                    gaps[name][label].append((_STAMPS[b] - _STAMPS[a]) / 1e3)
    return {
        name: {label: round(statistics.median(v), 1) if v else None for label, v in per.items()}
        for name, per in gaps.items()
    }


def loop_us(fn, like, calls: int) -> float:
    for _ in range(20):
        fn()
    _sync(like)
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    _sync(like)
    return round(statistics.median(samples), 1)


def in_thread(fn):
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("v", fn()))
    thread.start()
    thread.join()
    return out["v"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--device", default="cuda", help="cuda; cpu runs the kernels interpreted (a smoke test)")
    ap.add_argument("--out", default="/tmp/res")
    args = ap.parse_args(argv)
    x = torch.randn(args.rows, args.hidden, device=args.device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(args.hidden, device=args.device, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    tiles = gpu.tiles_for(x)
    partial_tiles = gpu.tiles_for(x, DW_REDUCE="partials")
    probes = {
        "ours": make_function(tiles, ours_backward(tiles)).apply,
        "ours partials": make_function(partial_tiles, ours_backward(partial_tiles)).apply,
        "allocations": make_function(tiles, allocations_backward).apply,
        "alloc + no-op launch": make_function(tiles, no_op_launch_backward(tiles)).apply,
        "empty": make_function(tiles, empty_backward).apply,
        "library rms_norm": lambda a, b: rms_norm(a, b),
        "F.rms_norm": lambda a, b: torch.nn.functional.rms_norm(a, (args.hidden,), b, 1e-6),
    }
    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"{name}, torch {torch.__version__}; rows {args.rows}, hidden {args.hidden}, bf16")
    results = {}
    labels = [label for *_, label in SEGMENTS]
    for threads in (True, False):
        title = "engine device threads on (default)" if threads else "engine device threads off"
        print(f"\n== {title}: median µs per gap")
        print(f"{'':22s}" + "".join(f"{label:>20s}" for label in labels))
        with torch.autograd.set_multithreading_enabled(threads):
            rows = timelines(probes, x, w, dy, args.calls)
        for name, row in rows.items():
            results[f"{name} / threads {'on' if threads else 'off'}"] = row
            print(f"{name:22s}" + "".join(f"{'-' if row[k] is None else row[k]:>20}" for k in labels))
        floor = rows["F.rms_norm"]["whole call"]
        print("whole call / F.rms_norm's: " + ", ".join(f"{n} {r['whole call'] / floor:.2f}x" for n, r in rows.items()))
    y, rstd = gpu.rms_norm_forward(x.detach(), w.detach(), 1e-6, 0.0, "llama", tiles)

    def backward_alone():
        return gpu.rms_norm_backward(dy, x.detach(), w.detach(), rstd, 0.0, "llama", tiles)

    def empty_like_alone():
        return torch.empty_like(x)

    def zeros_alone():
        return torch.zeros(args.hidden + 1, dtype=torch.float32, device=x.device)

    print("\n== host functions alone, median µs per call (main thread / a second Python thread)")
    for name, fn in (
        ("gpu.rms_norm_backward", backward_alone),
        ("empty_like", empty_like_alone),
        ("zeros", zeros_alone),
    ):
        main_us = loop_us(fn, x, args.calls)
        thread_us = in_thread(lambda fn=fn: loop_us(fn, x, args.calls))
        results[f"alone {name}"] = {"main": main_us, "thread": thread_us}
        print(f"{name:24s} {main_us:8.1f} {thread_us:8.1f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "backward_timeline.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
