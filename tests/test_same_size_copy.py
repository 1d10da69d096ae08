"""The same-size copy: a device copy of a cell's minimum bytes in as many launches as its call made,
timed as its kernel time was, kept per (device, bytes, launches) in a process; its launch count,
its bytes, the record's share of it, and what the CPU says instead of a number."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from workbench import device as device_module
from workbench import timing
from workbench.device import ChunkedCopy, Device
from workbench.measure import measure
from workbench.record import Record
from workbench.same_size_copy import NO_COPY_LAUNCHES, NO_COPY_ON_CPU, measure_same_size_copy


class _CountCopies(TorchDispatchMode):
    """Counts the copies torch runs inside the block and the bytes each writes."""

    def __init__(self):
        super().__init__()
        self.bytes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.copy_.default:
            self.bytes.append(args[0].numel() * args[0].element_size())
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(("n_bytes", "launches"), [(4096, 1), (4096, 3), (10_000, 7), (258, 2)])
def test_a_chunked_copy_moves_the_bytes_in_the_launches(n_bytes, launches):
    copy = ChunkedCopy(n_bytes, launches, "cpu")
    with _CountCopies() as seen:
        out = copy()
    assert len(seen.bytes) == launches == copy.launches
    assert 2 * sum(seen.bytes) == copy.bytes == n_bytes  # read + written, as min_bytes counts them
    assert torch.equal(out, copy.src)  # every chunk landed
    if n_bytes // 2 // launches >= ChunkedCopy.ALIGN:
        starts = [src.data_ptr() - copy.src.data_ptr() for src, _ in copy.chunks]
        assert all(s % ChunkedCopy.ALIGN == 0 for s in starts)


def test_a_chunked_copy_needs_a_launch():
    with pytest.raises(ValueError, match="at least one launch"):
        ChunkedCopy(1024, 0, "cpu")


def test_the_profiler_count_of_a_call_leaves_the_flush_out():
    # two calls, each a flush then three operations
    per_call, ops = timing.split_per_call([90.0, 1.0, 2.0, 3.0, 90.0, 4.0, 5.0, 6.0], calls=2, skip=1)
    assert ops == 3 and per_call == pytest.approx([0.006, 0.015])
    assert timing.split_per_call([1.0, 2.0, 3.0], calls=2, skip=0) == (None, 0)  # uneven: no count
    sampler = timing.ProfilerKernelSampler(lambda: None)  # built, not sampled: no GPU needed
    assert sampler.ops_per_call is None
    sampler.op_counts.update({3: 5, 4: 1})
    assert sampler.ops_per_call == 3  # the count most sessions saw


class _Counted:
    method = "profiler, L2 flushed"
    ops_per_call = 3

    def sample(self):
        return [1.0]


def test_device_timings_pass_on_the_kernel_timings_launch_count(monkeypatch):
    dev = Device("cpu")
    monkeypatch.setattr(Device, "samplers", lambda self, fn, which, l2: ({"kernel": _Counted()}, ""))
    out = dev.timings({"a": lambda: None}, which=("kernel",), budget_s=0.0)
    assert out["a"]["launches"] == 3 and out["a"]["kernel"].median == 1.0


class _StubDevice(Device):
    """A device that calls itself CUDA, keeps its tensors on the CPU and times by a stub: what
    ``same_size_copy`` does around the timing, without a GPU."""

    timed: list

    @property
    def torch_device(self):
        return torch.device("cpu")

    def timings(self, fns, *, which, rel_width, budget_s, l2):
        (fn,) = fns.values()
        with _CountCopies() as seen:
            fn()
        self.timed.append(dict(which=which, rel_width=rel_width, budget_s=budget_s, l2=l2, copies=seen.bytes))
        est = timing.Estimate(0.010, 0.009, 0.011, 40, "profiler, L2 flushed", True, 0.0095, 0.0105)
        return {0: {"kernel": est, "launches": len(seen.bytes)}}


@pytest.fixture
def stub_device(monkeypatch):
    monkeypatch.setattr(device_module, "_SAME_SIZE_COPY", {})
    dev = _StubDevice("cuda", 7)
    dev.timed = []
    return dev


def test_the_same_size_copy_is_timed_as_kernel_time_once_per_bytes_and_launches(stub_device):
    dev = stub_device
    first = dev.same_size_copy(8192, 2, l2="cold", rel_width=0.03, budget_s=0.2)
    assert len(dev.timed) == 1
    assert dev.timed[0]["which"] == ("kernel",) and dev.timed[0]["l2"] == "cold"
    assert dev.timed[0]["rel_width"] == 0.03 and dev.timed[0]["budget_s"] == 0.2
    assert dev.timed[0]["copies"] == [2048, 2048]  # two launches, 8192 bytes read + written
    assert first["launches"] == first["counted_launches"] == 2 and first["bytes"] == 8192
    assert first["ms"] == 0.010 and (first["lo_ms"], first["hi_ms"]) == (0.009, 0.011) and first["n"] == 40
    assert first["gbps"] == pytest.approx(8192 / 10e-6 / 1e9)
    assert first["method"] == "profiler, L2 flushed"
    assert dev.same_size_copy(8192, 2, l2="cold") is first and len(dev.timed) == 1  # kept
    dev.same_size_copy(8192, 3)  # other launches, other bytes, other L2 state: timed anew
    dev.same_size_copy(4096, 2)
    dev.same_size_copy(8192, 2, l2="warm")
    assert len(dev.timed) == 4 and dev.timed[-1]["l2"] == "warm"
    assert [len(t["copies"]) for t in dev.timed] == [2, 3, 2, 2]


def test_no_same_size_copy_on_the_cpu():
    assert Device("cpu").same_size_copy(8192, 2) is None


def _timed_record(**fields) -> Record:
    base = dict(kernel="rms_norm", variant="gpu_multirow", backend="gpu", mode="full", dtype="bf16",
                device_kind="cuda", device_name="stub", problem={}, params={}, axis="hidden", x_value=1024,
                kernel_ms=0.020, kernel_lo_ms=0.019, kernel_hi_ms=0.021, min_bytes=8192, launches=2)  # fmt: skip
    return Record(**{**base, **fields})


def test_a_record_gets_its_share_of_the_copy_of_its_own_bytes_and_launches(stub_device):
    rec = _timed_record()
    measure_same_size_copy(rec, stub_device, budget_s=0.1, rel_width=0.02, l2="cold")
    assert stub_device.timed[0]["copies"] == [2048, 2048]
    assert rec.same_size_copy_ms == 0.010 and rec.same_size_copy_n == 40
    assert rec.same_size_copy_gbps == pytest.approx(8192 / 10e-6 / 1e9)
    # copy 10 us [9, 11] against the kernel's 20 us [19, 21]: 50% [9/21, 11/19]
    assert rec.pct_same_size_copy == pytest.approx(50.0)
    assert rec.pct_same_size_copy_lo == pytest.approx(100 * 0.009 / 0.021)
    assert rec.pct_same_size_copy_hi == pytest.approx(100 * 0.011 / 0.019)
    assert rec.same_size_copy_method == "profiler, L2 flushed"


def test_a_record_without_launches_or_on_the_cpu_says_why_it_has_no_copy(stub_device):
    unknown = _timed_record(launches=None)
    measure_same_size_copy(unknown, stub_device, budget_s=0.1)
    assert unknown.same_size_copy_method == NO_COPY_LAUNCHES and unknown.pct_same_size_copy is None
    cpu = _timed_record()
    measure_same_size_copy(cpu, Device("cpu"), budget_s=0.1)
    assert cpu.same_size_copy_method == NO_COPY_ON_CPU and cpu.same_size_copy_ms is None
    no_bytes = _timed_record(min_bytes=None)
    measure_same_size_copy(no_bytes, stub_device, budget_s=0.1)
    assert no_bytes.same_size_copy_method == "" and not stub_device.timed


@pytest.mark.parametrize(("mode", "launches"), [("forward", 1), ("backward", 1), ("full", 2)])
def test_a_cells_launches_are_counted_and_the_cpu_has_no_same_size_copy(mode, launches):
    """On the CPU the launch path counts our kernels' launches (forward, backward, both for
    forward+backward); the copy is not measured and the record says so."""
    rec = measure("rms_norm", "gpu_multirow", device="cpu", mode=mode, quick=True, same_size_copy=True, rep_ms=1)
    assert rec.ok
    assert rec.launches == launches and rec.launches_source == "launch path"
    assert rec.same_size_copy_method.startswith("n/a (CPU)")
    assert rec.pct_same_size_copy is None and rec.same_size_copy_gbps is None


@pytest.mark.gpu
@pytest.mark.exclusive
def test_on_cuda_the_copy_launches_what_the_profiler_counted_for_the_cell():
    from workbench.device import get_device

    problem = {"rows": 4096, "hidden": 4096}
    rec = measure("rms_norm", "gpu_multirow", device="cuda", mode="full", problem=problem, same_size_copy=True)
    assert rec.ok and rec.launches_source == "profiler" and rec.launches >= 2
    assert rec.same_size_copy_method == "profiler, L2 flushed"  # no other count of the copy's operations
    facts = get_device("cuda").same_size_copy(rec.min_bytes, rec.launches)  # kept: the cell's own copy
    assert facts["counted_launches"] == rec.launches and facts["bytes"] == rec.min_bytes
    assert facts["ms"] == rec.same_size_copy_ms
    assert rec.pct_same_size_copy_lo <= rec.pct_same_size_copy <= rec.pct_same_size_copy_hi
    assert 20 < rec.pct_same_size_copy < 150, rec.pct_same_size_copy
