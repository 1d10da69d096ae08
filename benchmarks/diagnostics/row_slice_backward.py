"""Would the wide-row backward gain from running over row slices that fit the L2?

    python3 benchmarks/diagnostics/row_slice_backward.py
    bash benchmarks/gpu_run.sh run python3 benchmarks/diagnostics/row_slice_backward.py   # on the GPU machine

At hidden 16384 and 32768 (4096 bf16 rows) the chunked ``columns`` backward reads x and dy twice:
a first pass for each row's ``mean(m * xhat)``, a second for dx and dw. Called on slices of
64-512 rows instead of all rows at once, the second pass would find the slice's x and dy in the
L2. This times ``rms_norm_backward`` (kernels/rms_norm/gpu.py) once over all rows at the default
tiles, then once per slice with column chunks of 2048 and 4096, and prints per configuration the
kernel time (profiler sum, L2 flushed before each call, median of 30 calls) and a CUDA graph
replay of the same calls (events, L2 flushed before each replay, median of 30): the replay counts
the gaps between the slices' launches that the kernel sum leaves out.

Answered in reports/h200-norm-staged/README.md: slower at every slice size (the slices are too
little work for their two launches).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kernels.rms_norm import gpu  # noqa: E402
from workbench.device import get_device  # noqa: E402
from workbench.timing import median_kernel_us  # noqa: E402

ROWS = 4096
HIDDEN = (16384, 32768)
CHUNKS = (2048, 4096)
SLICES = (64, 128, 256, 512)


def graph_us(fn, device, reps: int = 30) -> float:
    """Median time of one CUDA graph replay of ``fn``, µs (L2 flushed before each replay)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(reps):
        device.flush_l2()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def backward_over(dy, x, w, rstd, tiles, rows_per_call: int):
    """A call of the backward over all rows, ``rows_per_call`` at a time."""

    def run():
        for start in range(0, x.shape[0], rows_per_call):
            end = start + rows_per_call
            gpu.rms_norm_backward(dy[start:end], x[start:end], w, rstd[start:end], 0.0, "llama", tiles)

    return run


def main() -> int:
    device = get_device("cuda")
    torch.manual_seed(0)
    bandwidth = device.copy_bandwidth_gbps()
    print(f"{torch.cuda.get_device_name()}: copy bandwidth {bandwidth:.0f} GB/s, {device.num_cores} SMs")
    for hidden in HIDDEN:
        x = torch.randn(ROWS, hidden, device="cuda", dtype=torch.bfloat16)
        dy, w = torch.randn_like(x), torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
        whole = gpu.resolve_tiles(ROWS, hidden, device.num_cores)
        _, rstd = gpu.rms_norm_forward(x, w, 1e-6, 0.0, "llama", whole)
        moved = 3 * x.numel() * x.element_size()  # x and dy read, dx written: the fewest bytes
        form = f"chunk {whole.BWD_CHUNK}" if whole.BWD_CHUNK else "whole rows"
        calls = [(f"default ({form})", backward_over(dy, x, w, rstd, whole, ROWS))]
        for chunk in CHUNKS:
            for rows in SLICES:
                tiles = gpu.resolve_tiles(rows, hidden, device.num_cores, BWD_CHUNK=chunk)
                label = f"chunk {chunk}, slices of {rows} rows (grid {tiles.GRID})"
                calls.append((label, backward_over(dy, x, w, rstd, tiles, rows)))
        for label, fn in calls:
            t = median_kernel_us(fn, device.flush_l2)
            share = moved / t / 1e3 / bandwidth
            print(
                f"{hidden} {label}: kernel {t:.1f} us ({share:.0%} of copy bandwidth), graph {graph_us(fn, device):.1f} us"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
