"""Device model: detection, errors, timing labels, and one kernel in two forms in one process."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from kernels.launch import launcher
from workbench.device import get_device, kinds_present


@triton.jit
def _scale_rows_kernel(Y, X, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n, other=0.0)
    # tl.sum / tl.max are themselves @triton.jit helpers: they must interpret too.
    total = tl.sum(x, axis=0) + tl.max(x, axis=0) * 0.0
    tl.store(Y + offs, x * 2.0 + total * 0.0, mask=offs < n)


def _run(x):
    y = torch.empty_like(x)
    launcher(_scale_rows_kernel, x)[(triton.cdiv(x.numel(), 64),)](y, x, x.numel(), BLOCK=64)
    return y


def test_auto_prefers_an_accelerator_and_cpu_is_always_present():
    present = kinds_present()
    assert present[-1] == "cpu"
    assert get_device("auto").kind == present[0]
    assert get_device("cpu").interpreted


@pytest.mark.parametrize("name", ["tpu", "gpu0"])
def test_unknown_device_kind_is_a_clear_error(name):
    with pytest.raises(ValueError, match="is not a device kind; use one of auto, cuda, npu, cpu"):
        get_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_absent_device_names_what_is_present():
    with pytest.raises(ValueError, match=r"device='cuda' is not available in this process; devices present: cpu"):
        get_device("cuda")


def test_cpu_timing_is_labelled_interpreter_and_memory_unavailable():
    dev = get_device("cpu")
    timing = dev.time(lambda: _run(torch.randn(100)), rep_ms=1)
    assert timing.method == "interpreter-wall" and timing.n >= 3
    assert timing.p20 <= timing.p50 <= timing.p80
    assert dev.reset_peak_memory() is None and dev.peak_memory_above(None) is None
    assert dev.copy_bandwidth_gbps() is None
    assert dev.num_cores >= 1


def test_interpreter_restores_triton_language_after_a_launch():
    before = tl.sum
    _run(torch.randn(10))
    assert tl.sum is before and type(tl.sum).__name__ == "JITFunction"


def test_interpreter_runs_one_kernel_on_cpu_tensors():
    x = torch.randn(130)
    torch.testing.assert_close(_run(x), 2 * x)


@pytest.mark.gpu
def test_switch_between_cuda_and_interpreter_in_one_session():
    x = torch.randn(1000)
    for _ in range(2):  # cuda -> cpu -> cuda -> cpu, same kernel object
        torch.testing.assert_close(_run(x.cuda()).cpu(), 2 * x)
        torch.testing.assert_close(_run(x), 2 * x)
    dev = get_device("cuda")
    assert dev.num_cores > 0 and dev.copy_bandwidth_gbps() > 100
    baseline = dev.reset_peak_memory()
    big = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
    assert dev.peak_memory_above(baseline) >= 64 * 2**20
    del big


def test_interpreter_leaves_triton_language_exactly_as_it_was():
    """The interpreter patches triton.language (and nested helper calls never restore their
    patches); a later JIT compile for a GPU needs the originals back, every one of them."""
    from kernels.launch import _patchable_objects

    before = [(obj, dict(vars(obj))) for obj in _patchable_objects()]
    _run(torch.randn(70))
    for obj, attrs in before:
        now = dict(vars(obj))
        changed = [n for n in attrs if now.get(n) is not attrs[n]]
        if isinstance(obj, type):
            changed += sorted(now.keys() - attrs.keys())
        assert not changed, f"{obj!r}: {changed[:5]}"
