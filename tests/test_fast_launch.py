"""The fast launch path (kernels/fast_launch.py).

CPU tests drive :func:`fast_launch.launch` with a fake CUDA driver and a fake stock launch that
stands in for ``JITFunction.run``: it keys each call the way Triton does (Triton's own
``native_specialize_impl`` on every argument, constexpr values, options) and returns one
stand-in ``CompiledKernel`` per Triton key, whose runner records what a hit replays into it. So
"the key changes" reads as "the second call misses", and every hit is checked to replay a kernel
compiled for the same Triton key as the call's.

GPU tests (``@pytest.mark.gpu``) launch the project's kernels through ``kernels.launch.launch``
with the path on and off and compare the outputs bit for bit.

Why one long module: one test module per subject, as in the rest of tests/; the CPU tests share
the fake driver and stand-in launch defined at the top.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import random
import re

import pytest
import torch
import triton
import triton.language as tl
from triton.compiler.compiler import CompiledKernel

from kernels import fast_launch


@triton.jit
def _scale_kernel(Y_ptr, X_ptr, W_ptr, alpha, n, stride, BLOCK: tl.constexpr, SQUARE: tl.constexpr = False):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(X_ptr + offsets * stride, mask=mask, other=0.0)
    if W_ptr is not None:
        x = x * tl.load(W_ptr + offsets, mask=mask, other=0.0)
    if SQUARE:
        x = x * x
    tl.store(Y_ptr + offsets, x * alpha, mask=mask)


_LIMIT = tl.constexpr(3)


@triton.jit
def _limited_kernel(Y_ptr):
    tl.store(Y_ptr, _LIMIT)


# --- fakes: a CUDA driver, what Triton compiles, and Triton's own launch ---------------------
class FakeCudaDriver:
    """The two calls ``JITFunction.run`` makes on ``driver.active``."""

    def __init__(self):
        self.device = 0
        self.stream_base = 1000

    def get_current_device(self):
        return self.device

    def get_current_stream(self, device):
        return self.stream_base + device


class FakeDriverConfig:
    def __init__(self):
        self.active = FakeCudaDriver()


class ReplayLog(list):
    """The runner of a stand-in compiled kernel: records each call, or raises when told to."""

    fail_next = False

    def record(self, *call):
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the launcher refused the arguments")
        self.append(call)


class FakeCompiled(CompiledKernel):
    """What Triton compiled for one Triton key (CompiledKernel's own __init__ needs a real
    compile; the attributes the fast path reads are set here)."""

    def __init__(self, triton_key):
        self.module = None  # CompiledKernel.__del__ (3.8+) unloads only a loaded module
        self._module_pid = None
        self.function = object()
        self.packed_metadata = (4, 1, 0)
        self.triton_key = triton_key
        self.replays = ReplayLog()
        self._run = self.replays.record


def triton_key(kernel, args, kwargs, device):
    """What ``JITFunction.run`` keys its cache by: bind like its binder (TypeError when an
    argument is missing), specialise every non-constexpr argument with Triton's own
    specialiser, add the options, and format it all as a string, as ``compute_cache_key`` does."""
    from triton import knobs
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.jit import native_specialize_impl

    names = [p.name for p in kernel.params]
    if len(args) > len(names):
        raise TypeError("too many arguments")
    bound = dict(zip(names, args))
    for param in kernel.params[len(args) :]:
        if param.name in kwargs:
            bound[param.name] = kwargs[param.name]
        elif param.has_default:
            bound[param.name] = param.default
        else:
            raise TypeError(f"missing a required argument: {param.name!r}")
    specialization = []
    for param in kernel.params:
        value = bound[param.name]
        if param.is_constexpr:
            specialization.append(("constexpr", value))
        else:
            specialization.append(
                native_specialize_impl(
                    CUDABackend,
                    value,
                    param.is_const,
                    not param.do_not_specialize,
                    not param.do_not_specialize_on_alignment,
                )
            )
    options = {name: value for name, value in kwargs.items() if name not in names}
    options["debug"] = options.get("debug", kernel.debug) or knobs.runtime.debug
    options["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    if hasattr(knobs.compilation, "fpsan_homomorphic_casts"):
        options["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    return f"{device}:{specialization}{options}"


class StockLaunch:
    """Stands in for Triton's own launch: one compiled kernel per Triton key, like its cache."""

    def __init__(self, driver: FakeCudaDriver):
        self.driver = driver
        self.calls = 0
        self.compiled: dict[str, FakeCompiled] = {}

    def __call__(self, kernel, grid, args, kwargs):
        self.calls += 1
        key = triton_key(kernel, args, kwargs, self.driver.device)
        if key not in self.compiled:
            assert kernel.cache_key  # Triton's compile hashes the kernel: it records the globals read
            self.compiled[key] = FakeCompiled(key)
        return self.compiled[key]


@pytest.fixture
def fake_cuda(monkeypatch):
    """The path turned on against the fake driver; yields (driver, stock launch)."""
    monkeypatch.delenv(fast_launch.ENV_SWITCH, raising=False)
    config = FakeDriverConfig()
    monkeypatch.setattr(fast_launch, "_find_driver", lambda: (config, None))
    fast_launch.reset()
    yield config.active, StockLaunch(config.active)
    fast_launch.reset()


def launch(stock, kernel, args, kwargs, grid=(4,)):
    """One launch through the path; returns "hit", "miss" or "fallback", after checking that a
    hit replayed a kernel compiled for this call's Triton key, with this call's arguments."""
    before = fast_launch.status()
    replays_before = {id(c): len(c.replays) for c in stock.compiled.values()}
    result = fast_launch.launch(kernel, grid, args, kwargs, stock)
    after = fast_launch.status()
    if after["hits"] == before["hits"] + 1:
        assert result.triton_key == triton_key(kernel, args, kwargs, stock.driver.device)
        assert len(result.replays) == replays_before[id(result)] + 1
        replayed = result.replays[-1]
        n = len(grid)
        expected_grid = (grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1)
        assert replayed[:3] == expected_grid
        assert replayed[3] == stock.driver.get_current_stream(stock.driver.device)
        assert replayed[4] is result.function and replayed[5] is result.packed_metadata
        assert replayed[6:9] == (None, None, None)
        assert all(_same_launch_argument(a, b) for a, b in zip(replayed[9:], args)), (
            "positional arguments are passed as given, tensors as their addresses"
        )
        assert len(replayed[9:]) == len(kernel.params)
        return "hit"
    if after["misses"] == before["misses"] + 1:
        return "miss"
    return "fallback"


def _same_launch_argument(replayed, given) -> bool:
    if isinstance(given, torch.Tensor):
        return type(replayed) is int and replayed == given.data_ptr()
    return replayed is given


def _launched(args):
    return tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)


# --- the key ------------------------------------------------------------------------------
def _buffer(dtype=torch.float32, n=4096):
    """A CPU buffer whose first element is 64-byte aligned (the CPU allocator's alignment)."""
    buf = torch.randn(n + 64).to(dtype)
    assert buf.data_ptr() % 64 == 0
    return buf


def _base_call():
    buf = _buffer()
    y, x, w = torch.empty(1024), buf[:1024], torch.randn(1024)
    return [y, x, w, 2.5, 1000, 64], {"BLOCK": 128, "num_warps": 4}


def _variant(change):
    args, kwargs = _base_call()
    change(args, kwargs)
    return args, kwargs


def _set(index, value):
    def change(args, kwargs):
        args[index] = value(args) if callable(value) else value

    return change


def _set_kw(name, value):
    def change(args, kwargs):
        kwargs[name] = value

    return change


def _drop_kw(name):
    def change(args, kwargs):
        del kwargs[name]

    return change


KEY_CHANGES = {
    "constexpr value": _set_kw("BLOCK", 256),
    "constexpr default given": _set_kw("SQUARE", True),
    "tensor dtype": _set(1, lambda a: _buffer(torch.float16)[:1024]),
    "tensor alignment class": _set(1, lambda a: _buffer()[1:1025]),  # 4 bytes past 16-byte alignment
    "int value": _set(4, 1001),
    "int value to 1": _set(4, 1),  # Triton makes an int equal to 1 a constexpr
    "int divisible by 16 to not": _set(5, 63),
    "float value": _set(3, 3.5),
    "None vs tensor": _set(2, None),
    "num_warps": _set_kw("num_warps", 8),
    "num_stages added": _set_kw("num_stages", 3),
    "num_warps dropped": _drop_kw("num_warps"),
    "launch option value": _set_kw("maxnreg", 128),
}

KEY_KEEPS = {
    "new tensors, same dtype and alignment": _set(0, lambda a: torch.empty(1024)),
    "pointer moved within the aligned class": _set(1, lambda a: _buffer()[8:1032]),  # +32 bytes
    "different data": _set(1, lambda a: torch.randn(4096)[:1024]),
}


@pytest.mark.parametrize("change", list(KEY_CHANGES.values()), ids=list(KEY_CHANGES))
def test_the_key_changes_with_what_triton_specialises_on(fake_cuda, change):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    assert launch(stock, _scale_kernel, args, kwargs) == "miss"
    assert launch(stock, _scale_kernel, args, kwargs) == "hit"
    changed_args, changed_kwargs = _variant(change)
    assert launch(stock, _scale_kernel, changed_args, changed_kwargs) == "miss"
    assert launch(stock, _scale_kernel, changed_args, changed_kwargs) == "hit"
    assert launch(stock, _scale_kernel, args, kwargs) == "hit", "the first entry is still there"


@pytest.mark.parametrize("where", ["positional", "keyword"])
@pytest.mark.parametrize("first, second", [(1, True), (True, 1), (1, 1.0), (0, False), (2, 2.0)])
def test_equal_values_of_other_types_do_not_share_a_key(fake_cuda, first, second, where):
    """``True == 1 == 1.0`` in Python; Triton tells them apart (1 is a constexpr, True a u1)."""
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    for value in (first, second):
        if where == "positional":
            args[4] = value
        else:
            kwargs["SQUARE"] = value
        assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(2)] == ["miss", "hit"]


def test_the_key_changes_with_the_device(fake_cuda):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(2)] == ["miss", "hit"]
    driver.device = 1
    assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(2)] == ["miss", "hit"]


def test_the_key_changes_with_the_knobs_triton_adds_to_the_options(fake_cuda, monkeypatch):
    from triton import knobs

    driver, stock = fake_cuda
    args, kwargs = _base_call()
    assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(2)] == ["miss", "hit"]
    monkeypatch.setattr(knobs.runtime, "debug", True)
    assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(2)] == ["miss", "hit"]
    monkeypatch.setattr(_scale_kernel, "debug", True)
    assert launch(stock, _scale_kernel, args, kwargs) == "miss"


@pytest.mark.parametrize("change", list(KEY_KEEPS.values()), ids=list(KEY_KEEPS))
def test_the_key_stays_when_only_data_or_pointers_within_a_class_change(fake_cuda, change):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    assert launch(stock, _scale_kernel, args, kwargs) == "miss"
    assert launch(stock, _scale_kernel, *_variant(change)) == "hit"


def test_unaligned_pointers_share_one_class(fake_cuda):
    driver, stock = fake_cuda
    buf = _buffer()
    args, kwargs = _base_call()
    results = []
    for offset in (1, 2, 3, 5, 6, 7):  # 4 to 28 bytes past a 16-byte boundary
        args[1] = buf[offset : offset + 1024]
        results.append(launch(stock, _scale_kernel, list(args), kwargs))
    assert results == ["miss"] + ["hit"] * 5


def test_grid_and_stream_are_not_in_the_key_but_reach_the_runner(fake_cuda):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    assert launch(stock, _scale_kernel, args, kwargs, grid=(4,)) == "miss"
    assert launch(stock, _scale_kernel, args, kwargs, grid=(8, 2)) == "hit"
    driver.stream_base = 5000
    assert launch(stock, _scale_kernel, args, kwargs, grid=[3, 2, 5]) == "hit"


def test_keyword_arguments_and_defaults_are_replayed_in_parameter_order(fake_cuda):
    driver, stock = fake_cuda
    args, _ = _base_call()
    kwargs = {"num_warps": 2, "SQUARE": True, "BLOCK": 64}  # not in parameter order
    launch(stock, _scale_kernel, args, kwargs)
    compiled = fast_launch.launch(_scale_kernel, (1,), args, kwargs, stock)
    assert compiled.replays[-1][9:] == (*_launched(args), 64, True)
    short = {"BLOCK": 64}  # SQUARE from its default
    launch(stock, _scale_kernel, args, short)
    compiled = fast_launch.launch(_scale_kernel, (1,), args, short, stock)
    assert compiled.replays[-1][9:] == (*_launched(args), 64, False)
    # a non-constexpr parameter given by keyword (by value: its value is in the key)
    launch(stock, _scale_kernel, args[:5], {"stride": 64, "BLOCK": 64})
    assert launch(stock, _scale_kernel, args[:5], {"stride": 64, "BLOCK": 64}) == "hit"
    assert launch(stock, _scale_kernel, args[:5], {"stride": 32, "BLOCK": 64}) == "miss"


def test_every_hit_replays_a_kernel_of_the_calls_triton_key(fake_cuda):
    """Random calls over every dimension the key covers; ``launch`` checks each hit against
    Triton's own key for the call, and a configuration met again must hit."""
    driver, stock = fake_cuda
    rng = random.Random(0)
    buffers = {dtype: _buffer(dtype) for dtype in (torch.float32, torch.float16, torch.bfloat16)}
    choices = {
        "dtype": list(buffers),
        "offset": [0, 1, 2, 8, 16],
        "w": [None, "tensor"],
        "alpha": [2.5, 1.0, -3.0],
        "n": [1, 16, 17, 1000, 2**31],
        "stride": [1, 64, 63],
        "BLOCK": [64, 128],
        "SQUARE": [None, True, False, 1],
        "num_warps": [None, 4, 8],
        "device": [0, 1],
    }
    pool = [{name: rng.choice(values) for name, values in choices.items()} for _ in range(60)]
    outcomes = []
    for _ in range(600):  # fresh tensors each call, from a pool of configurations
        pick = rng.choice(pool)
        x = buffers[pick["dtype"]][pick["offset"] : pick["offset"] + 1024]
        w = torch.randn(1024) if pick["w"] else None
        args = [torch.empty(1024, dtype=pick["dtype"]), x, w, pick["alpha"], pick["n"], pick["stride"]]
        kwargs = {"BLOCK": pick["BLOCK"]}
        for name in ("SQUARE", "num_warps"):
            if pick[name] is not None:
                kwargs[name] = pick[name]
        driver.device = pick["device"]
        outcomes.append(launch(stock, _scale_kernel, args, kwargs))
    assert outcomes.count("hit") >= 600 - len(pool) and "fallback" not in outcomes


def test_float_zero_and_nan_constexprs_are_never_replayed(fake_cuda):
    """-0.0 == 0.0 in Python while Triton keys them apart; nan never equals itself."""

    @triton.jit
    def _scaled_by_constexpr(Y_ptr, SCALE: tl.constexpr):
        tl.store(Y_ptr, SCALE)

    driver, stock = fake_cuda
    y = torch.empty(1)
    for scale in (0.0, -0.0, float("nan")):
        assert [launch(stock, _scaled_by_constexpr, [y], {"SCALE": scale}) for _ in range(2)] == ["miss", "miss"]
    assert [launch(stock, _scaled_by_constexpr, [y], {"SCALE": 0.5}) for _ in range(2)] == ["miss", "hit"]
    # a float that is not a constexpr is passed live: its zero sign cannot pick a wrong kernel
    args, kwargs = _base_call()
    args[3] = 0.0
    assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(2)] == ["miss", "hit"]
    args[3] = -0.0
    assert launch(stock, _scale_kernel, args, kwargs) == "hit"  # and -0.0 itself reaches the runner


# --- replays: an eager plan launches from addresses alone -----------------------------------------
def _replay_for(stock, args, kwargs, grid=(4,)):
    assert launch(stock, _scale_kernel, args, kwargs, grid=grid) == "miss"
    replay = fast_launch.replay_of(_scale_kernel, grid, args, kwargs)
    assert replay is not None
    return replay


def test_a_replay_launches_what_the_launch_would(fake_cuda):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    kwargs["SQUARE"] = True
    replay = _replay_for(stock, args, kwargs, grid=(8, 2))
    fresh = [torch.empty(1024), _buffer()[8:1032], torch.randn(1024)]  # same dtypes and alignment
    before = fast_launch.status()["hits"]
    assert replay(*(t.data_ptr() for t in fresh)) is True
    (compiled,) = stock.compiled.values()
    assert compiled.triton_key == triton_key(_scale_kernel, fresh + args[3:], kwargs, driver.device)
    assert compiled.replays[-1] == (
        8, 2, 1, driver.get_current_stream(0), compiled.function, compiled.packed_metadata, None, None, None,
        *_launched(fresh), *args[3:], 128, True,
    )  # fmt: skip
    assert fast_launch.status()["hits"] == before + 1
    driver.stream_base = 7000  # the stream is read at each replay
    assert replay(*(t.data_ptr() for t in fresh)) and compiled.replays[-1][3] == 7000


def test_a_replay_refuses_what_would_change_the_kernel_or_its_launch(fake_cuda, monkeypatch):
    from triton import knobs

    driver, stock = fake_cuda
    args, kwargs = _base_call()
    replay = _replay_for(stock, args, kwargs)
    addresses = [t.data_ptr() for t in args[:3]]
    assert replay(*addresses)
    unaligned = list(addresses)
    unaligned[1] += 4  # another alignment class: another compile
    assert replay(*unaligned) is False
    driver.device = 1
    assert replay(*addresses) is False
    driver.device = 0
    with fast_launch.replays_paused():
        assert replay(*addresses) is False
        with fast_launch.replays_paused():
            assert replay(*addresses) is False
        assert replay(*addresses) is False
    assert replay(*addresses)

    def hook(metadata):
        pass

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert replay(*addresses) is False
        assert fast_launch.replay_of(_scale_kernel, (4,), args, kwargs) is None
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert replay(*addresses)
    (compiled,) = stock.compiled.values()
    launched = len(compiled.replays)
    fast_launch.reset()  # retires every replay
    assert replay(*addresses) is False and len(compiled.replays) == launched


def test_a_replay_reads_torchs_current_device_inline(fake_cuda, monkeypatch):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    assert launch(stock, _scale_kernel, args, kwargs) == "miss"
    reads = []

    def torch_getter():
        reads.append(driver.device)
        return driver.device

    def current_device(active):  # the general reader: not what a replay of `driver` calls
        return driver.device

    current_device.torch_getter = (driver, torch_getter)  # as _device_reader marks torch's getter
    monkeypatch.setattr(fast_launch, "_current_device", current_device)
    replay = fast_launch.replay_of(_scale_kernel, (4,), args, kwargs)
    addresses = [t.data_ptr() for t in args[:3]]
    assert replay(*addresses) is True and reads == [0]
    driver.device = 1
    assert replay(*addresses) is False and reads == [0, 1]


def test_a_replay_refuses_a_changed_global(fake_cuda, monkeypatch):
    driver, stock = fake_cuda
    y = torch.empty(1)
    assert launch(stock, _limited_kernel, [y], {}) == "miss"
    replay = fast_launch.replay_of(_limited_kernel, (1,), [y], {})
    assert replay(y.data_ptr())
    monkeypatch.setitem(_limited_kernel.fn.__globals__, "_LIMIT", tl.constexpr(4))
    assert replay(y.data_ptr()) is False


def test_no_replay_without_an_entry(fake_cuda, monkeypatch):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    assert fast_launch.replay_of(_scale_kernel, (4,), args, kwargs) is None  # never launched
    launch(stock, _scale_kernel, args, kwargs)
    assert fast_launch.replay_of(_scale_kernel, lambda meta: (4,), args, kwargs) is None  # a callable grid
    other = dict(kwargs, BLOCK=256)
    assert fast_launch.replay_of(_scale_kernel, (4,), args, other) is None  # another signature
    monkeypatch.setenv(fast_launch.ENV_SWITCH, "0")
    fast_launch.reset()
    launch(stock, _scale_kernel, args, kwargs)
    assert fast_launch.replay_of(_scale_kernel, (4,), args, kwargs) is None  # the path off


# --- fallbacks ---------------------------------------------------------------------------------
def _unfilled(reason_part):
    return sum(n for reason, n in fast_launch.status()["unfilled"].items() if reason_part in reason)


def _fallbacks(reason_part):
    return sum(n for reason, n in fast_launch.status()["fallbacks"].items() if reason_part in reason)


def test_a_callable_grid_falls_back(fake_cuda):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    launch(stock, _scale_kernel, args, kwargs)
    assert launch(stock, _scale_kernel, args, kwargs, grid=lambda meta: (4,)) == "fallback"
    assert stock.calls == 2 and _fallbacks("callable grid") == 1


def test_an_unknown_keyword_makes_no_entry(fake_cuda):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    kwargs["not_an_option"] = 1
    assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(3)] == ["miss"] * 3
    assert stock.calls == 3 and _unfilled("unknown keyword") == 3 and fast_launch.status()["entries"] == 0


def test_a_missing_argument_goes_to_triton_which_raises_once(fake_cuda):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    del kwargs["BLOCK"]
    with pytest.raises(TypeError, match="missing a required argument: 'BLOCK'"):
        fast_launch.launch(_scale_kernel, (4,), args, kwargs, stock)
    assert stock.calls == 1 and fast_launch.status()["entries"] == 0


def test_a_tensor_by_keyword_makes_no_entry(fake_cuda):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    kwargs["stride"] = torch.empty(1)
    launch(stock, _scale_kernel, args[:5], kwargs)
    assert launch(stock, _scale_kernel, args[:5], kwargs) == "miss" and _unfilled("keyword argument") == 2


def test_an_argument_of_another_type_makes_no_entry(fake_cuda):
    driver, stock = fake_cuda
    args, kwargs = _base_call()

    class Strided(int):  # an int subclass: not a type whose value this path keys
        pass

    args[5] = Strided(64)
    assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(2)] == ["miss", "miss"]


def test_launch_hooks_and_pre_run_hooks_fall_back(fake_cuda, monkeypatch):
    from triton import knobs

    driver, stock = fake_cuda
    args, kwargs = _base_call()
    assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(2)] == ["miss", "hit"]

    def hook(metadata):
        pass

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert launch(stock, _scale_kernel, args, kwargs) == "fallback"
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert launch(stock, _scale_kernel, args, kwargs) == "hit"
    monkeypatch.setattr(_scale_kernel, "pre_run_hooks", [lambda *a, **k: None])
    assert launch(stock, _scale_kernel, args, kwargs) == "fallback"
    assert _fallbacks("launch hooks") == 1 and _fallbacks("pre-run hooks") == 1


def test_a_changed_global_falls_back(fake_cuda, monkeypatch):
    """Triton raises when a global the kernel read at compile time has changed since; a hit must
    not replay the old kernel instead."""
    driver, stock = fake_cuda
    y = torch.empty(1)
    assert [launch(stock, _limited_kernel, [y], {}) for _ in range(2)] == ["miss", "hit"]
    monkeypatch.setitem(_limited_kernel.fn.__globals__, "_LIMIT", tl.constexpr(4))
    assert launch(stock, _limited_kernel, [y], {}) == "fallback"
    assert _fallbacks("global") == 1


def test_an_exception_while_replaying_goes_to_triton(fake_cuda):
    driver, stock = fake_cuda
    args, kwargs = _base_call()
    assert launch(stock, _scale_kernel, args, kwargs) == "miss"
    (compiled,) = stock.compiled.values()
    compiled.replays.fail_next = True
    assert fast_launch.launch(_scale_kernel, (4,), args, kwargs, stock) is compiled
    assert stock.calls == 2 and _fallbacks("RuntimeError") == 1
    assert launch(stock, _scale_kernel, args, kwargs) == "hit"


def test_a_result_that_is_not_a_compiled_kernel_makes_no_entry(fake_cuda):
    driver, stock = fake_cuda
    args, kwargs = _base_call()

    class Future:  # what 3.7+ return from run() while an asynchronous compile is pending
        pass

    assert fast_launch.launch(_scale_kernel, (4,), args, kwargs, lambda *call: Future()).__class__ is Future
    assert _unfilled("no CompiledKernel") == 1 and fast_launch.status()["entries"] == 0


def test_a_kernel_that_is_not_a_jit_function_makes_no_entry(fake_cuda):
    driver, stock = fake_cuda

    class Tuner:  # an autotuner-like object with its own run
        pre_run_hooks = []
        debug = None

    args, kwargs = _base_call()
    compiled = FakeCompiled("tuned")
    for _ in range(2):
        assert fast_launch.launch(Tuner(), (4,), args, kwargs, lambda *call: compiled) is compiled
    assert _unfilled("not a JITFunction") == 2


def test_the_cache_starts_over_when_full(fake_cuda, monkeypatch):
    driver, stock = fake_cuda
    monkeypatch.setattr(fast_launch, "MAX_ENTRIES", 3)
    args, kwargs = _base_call()
    for n in range(5):
        args[4] = 1000 + n
        launch(stock, _scale_kernel, args, kwargs)
    assert fast_launch.status()["entries"] <= 3


# --- turning it on and off -------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "false", "off"])
def test_the_environment_switch_turns_it_off(fake_cuda, monkeypatch, value):
    driver, stock = fake_cuda
    monkeypatch.setenv(fast_launch.ENV_SWITCH, value)
    fast_launch.reset()
    args, kwargs = _base_call()
    assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(3)] == ["fallback"] * 3
    status = fast_launch.status()
    assert status["enabled"] is False and fast_launch.ENV_SWITCH in status["reason"]
    assert stock.calls == 3 and status["entries"] == 0
    monkeypatch.setenv(fast_launch.ENV_SWITCH, "1")
    fast_launch.reset()
    assert [launch(stock, _scale_kernel, args, kwargs) for _ in range(2)] == ["miss", "hit"]


def test_an_unmodelled_triton_version_turns_it_off(fake_cuda, monkeypatch):
    driver, stock = fake_cuda
    monkeypatch.setattr(triton, "__version__", "3.10.0")
    fast_launch.reset()
    args, kwargs = _base_call()
    assert launch(stock, _scale_kernel, args, kwargs) == "fallback"
    assert "3.6 to 3.9" in fast_launch.status()["reason"]


def test_the_installed_triton_matches_its_rules_and_no_others():
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction

    version = fast_launch._major_minor(triton.__version__)
    assert version in fast_launch.RULES, f"Triton {triton.__version__} is outside the modelled 3.6-3.9"
    rules = fast_launch.RULES[version]
    assert fast_launch._launch_protocol_mismatch(rules, JITFunction, CompiledKernel) is None
    for other in set(fast_launch.RULES.values()) - {rules}:
        assert fast_launch._launch_protocol_mismatch(other, JITFunction, CompiledKernel) is not None


# --- the runner called bare ------------------------------------------------------------------
class ScratchAwareLauncher:
    """A runner shaped like Triton 3.6.0's ``CudaLauncher``: ``__call__`` passes its arguments to
    the C launcher (``launch``) with the kernel's flags and its scratch buffers, which only a
    kernel with scratch memory has. It counts the calls that went through ``__call__``."""

    def __init__(self, global_scratch_size=0):
        self.global_scratch_size, self.profile_scratch_size = global_scratch_size, 0
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.through_call = 0
        self.launched = []

    def launch(self, *args):
        self.launched.append(args)

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        self.through_call += 1
        scratch = bytearray(self.global_scratch_size) if self.global_scratch_size else None
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl, scratch,
                    None, *args)  # fmt: skip


def _source_digest(cls) -> str:
    return hashlib.sha256(re.sub(r"\s+", "", inspect.getsource(cls.__call__)).encode()).hexdigest()


@pytest.mark.parametrize("scratch", [0, 256])
def test_a_checked_runner_is_called_bare_unless_its_kernel_needs_scratch(fake_cuda, monkeypatch, scratch):
    driver, stock = fake_cuda
    driver.launcher_cls = ScratchAwareLauncher
    monkeypatch.setattr(fast_launch, "BARE_CALL_SOURCES", {_source_digest(ScratchAwareLauncher): "the test's"})
    fast_launch.reset()
    runners = []

    def stock_with_runner(kernel, grid, args, kwargs):
        compiled = stock(kernel, grid, args, kwargs)
        if not isinstance(compiled._run, ScratchAwareLauncher):
            compiled._run = ScratchAwareLauncher(scratch)
            runners.append(compiled._run)
        return compiled

    args, kwargs = _base_call()
    fast_launch.launch(_scale_kernel, (8, 2), args, kwargs, stock_with_runner)  # miss: fills the entry
    assert fast_launch.status()["bare_launcher"].startswith("on (the test's")
    compiled = fast_launch.launch(_scale_kernel, (8, 2), args, kwargs, stock_with_runner)  # hit
    replay = fast_launch.replay_of(_scale_kernel, (8, 2), args, kwargs)
    assert replay(*(a.data_ptr() for a in args[:3])) is True
    (runner,) = runners
    assert runner.through_call == (0 if scratch == 0 else 2)
    scratch_buffer = None if scratch == 0 else runner.launched[0][7]
    expected = (
        8, 2, 1, driver.get_current_stream(0), compiled.function, False, True, scratch_buffer, None,
        compiled.packed_metadata, None, None, None, *_launched(args), 128, False,
    )  # fmt: skip
    assert runner.launched == [expected, expected]
    assert fast_launch.status()["hits"] == 2


def test_only_a_checked_launcher_source_is_called_bare():
    from triton.backends.nvidia.driver import CudaLauncher

    reader, why = fast_launch._bare_launcher_reader(CudaLauncher)
    if _source_digest(CudaLauncher) in fast_launch.BARE_CALL_SOURCES:
        assert why.startswith("on (Triton 3.6.0")
    else:
        assert "is not one this path checked" in why
        assert reader(object()) is None

    class Patched(ScratchAwareLauncher):  # one statement more than the checked source
        def __call__(self, *args):
            print("patched")
            return ScratchAwareLauncher.__call__(self, *args)

    reader, why = fast_launch._bare_launcher_reader(Patched, {_source_digest(ScratchAwareLauncher): "the test's"})
    assert "not one this path checked" in why and reader(Patched()) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA driver is present here")
def test_without_a_gpu_driver_it_stays_off(monkeypatch):
    monkeypatch.delenv(fast_launch.ENV_SWITCH, raising=False)
    fast_launch.reset()
    calls = []
    fast_launch.launch(_scale_kernel, (1,), (), {}, lambda *call: calls.append(call))
    status = fast_launch.status()
    assert status["enabled"] is False and "driver" in status["reason"] and len(calls) == 1
    fast_launch.reset()


def test_cpu_tensors_never_reach_the_fast_path():
    from kernels.launch import launch as device_launch

    fast_launch.reset()
    x = torch.randn(100)
    y = torch.empty(100)
    device_launch(_scale_kernel, x, (1,), y, x, None, 2.0, 100, 1, BLOCK=128)
    assert torch.allclose(y, 2.0 * x)
    status = fast_launch.status()
    assert status["enabled"] is None and status["hits"] == status["misses"] == 0 and not status["fallbacks"]


# --- GPU: the project's kernels, fast path against Triton's own launch, bit for bit ------------
def _fast_and_stock(monkeypatch, run_all):
    """``run_all()`` returns a list of outputs; run it with the path off, then on twice (misses,
    then hits). Returns the three lists of outputs and the status counts of the last run."""
    monkeypatch.setenv(fast_launch.ENV_SWITCH, "0")
    fast_launch.reset()
    stock = run_all()
    assert fast_launch.status()["enabled"] is False
    monkeypatch.setenv(fast_launch.ENV_SWITCH, "1")
    fast_launch.reset()
    first = run_all()
    before = fast_launch.status()
    assert before["enabled"] is True, before
    second = run_all()
    torch.cuda.synchronize()
    after = fast_launch.status()
    counts = {name: after[name] - before[name] for name in ("hits", "misses")}
    assert not after["fallbacks"] and not after["unfilled"], after
    return stock, first, second, counts


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers: equal bits, NaN payloads included."""
    return t.contiguous().view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _assert_identical(stock, *fast_runs):
    for run in fast_runs:
        assert len(run) == len(stock)
        for i, (want, got) in enumerate(zip(stock, run)):
            assert want.dtype == got.dtype and want.shape == got.shape, f"output {i}"
            assert torch.equal(_bits(want), _bits(got)), f"output {i} differs"


def _offset_view(shape, dtype, offset, seed, positive=False):
    """A contiguous CUDA tensor of ``shape`` that starts ``offset`` elements into a buffer, so its
    data_ptr % 16 varies with the offset and the element size."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    numel = 1
    for size in shape:
        numel *= size
    buf = torch.randn(numel + 16, generator=gen)
    if positive:
        buf = buf.abs() + 0.5
    buf = buf.to("cuda", dtype)
    view = buf[offset : offset + numel].view(shape)
    assert view.data_ptr() % 16 == (offset * buf.element_size()) % 16
    return view


@pytest.mark.gpu
@pytest.mark.long_gpu
def test_rms_norm_forward_is_bit_identical_on_the_fast_path(monkeypatch):
    from kernels.rms_norm.gpu import rms_norm_forward, tiles_for

    configs = list(
        itertools.product(
            (torch.float32, torch.float16, torch.bfloat16),
            (0, 1, 3, 8),  # element offsets: 16-byte aligned or not, per dtype
            ((1, 64), (3, 1000), (64, 1024), (7, 4096)),  # one row (an int equal to 1), odd and x16 sizes
            (None, "weight"),
            ("llama", "gemma"),
            ({}, {"BLOCK_SIZE_M": 1}),
        )
    )

    def run_all():
        outputs = []
        for seed, (dtype, offset, shape, weight, casting, tiles) in enumerate(configs):
            x = _offset_view(shape, dtype, offset, seed)
            w = _offset_view(shape[-1:], dtype, (offset + 1) % 8, seed + 1) if weight else None
            eps = (1e-6, 1e-5)[seed % 2]
            y, rstd = rms_norm_forward(x, w, eps, 0.0, casting, tiles_for(x, **tiles))
            outputs += [y, rstd]
        return outputs

    stock, first, second, counts = _fast_and_stock(monkeypatch, run_all)
    _assert_identical(stock, first, second)
    assert counts == {"hits": len(configs), "misses": 0}, "every second-run launch replays from the cache"


@pytest.mark.gpu
@pytest.mark.long_gpu
def test_scalar_op_kernel_is_bit_identical_on_the_fast_path(monkeypatch):
    from kernels.scalar_ops import scalar_op

    values = {"div": (3.0, -0.0, 0.0, 0.1), "sub": (1.5, -2.0), "pow": (2.0, 0.5, -1.0, 3.0, 1.7)}
    configs = [
        (op, value, dtype, offset, n)
        for op, op_values in values.items()
        for value in op_values
        for dtype in (torch.float32, torch.float16, torch.bfloat16)
        for offset in (0, 1, 5)
        for n in (1, 17, 1024, 4099)
    ]

    def run_all():
        outputs = []
        with torch.no_grad():
            for seed, (op, value, dtype, offset, n) in enumerate(configs):
                x = _offset_view((n,), dtype, offset, seed, positive=True)
                outputs.append(scalar_op(op, x, value, strategy="triton", impl="gpu"))
        return outputs

    stock, first, second, counts = _fast_and_stock(monkeypatch, run_all)
    _assert_identical(stock, first, second)
    assert counts == {"hits": len(configs), "misses": 0}


@pytest.mark.gpu
def test_block_sparse_layers_are_bit_identical_on_the_fast_path(monkeypatch):
    from kernels.block_sparse import make_layer, product_layer, sum_layer

    configs = [
        (nodes, block_size, batch, heuristic, offset)
        for nodes, block_size in ((64, 16), (128, 32), (96, 32))
        for batch in (1, 2, 3, 8, 17)
        for heuristic in ("large", "small")
        for offset in (0, 1)
    ]

    def shifted(t, offset):
        """``t``'s values in a view ``offset`` elements into a larger buffer."""
        view = torch.empty(t.numel() + 4, dtype=t.dtype, device=t.device)[offset : offset + t.numel()]
        return view.view_as(t).copy_(t)

    def run_all():
        outputs = []
        with torch.no_grad():
            for seed, (nodes, block_size, batch, heuristic, offset) in enumerate(configs):
                problem = {"layer": "sum", "nodes": nodes, "block_size": block_size, "K": 0, "batch": batch}
                layer = make_layer({**problem, "tied": False}, "cuda", seed)
                element_mars = shifted(layer["element_mars"], offset)
                outputs.append(
                    sum_layer(
                        element_mars,
                        layer["params"],
                        layer["cids"],
                        layer["pids"],
                        block_size,
                        impl="gpu",
                        heuristic=heuristic,
                    )
                )
                product = make_layer({**problem, "layer": "product", "K": 2, "tied": False}, "cuda", seed)
                node_mars = shifted(product["node_mars"], offset)
                outputs.append(product_layer(node_mars, product["cids"], block_size, impl="gpu"))
        return outputs

    stock, first, second, counts = _fast_and_stock(monkeypatch, run_all)
    _assert_identical(stock, first, second)
    assert counts["hits"] >= 2 * len(configs) and counts["misses"] == 0


@pytest.mark.gpu
def test_repeat_launches_take_the_fast_path(monkeypatch):
    from kernels.rms_norm import rms_norm

    monkeypatch.delenv(fast_launch.ENV_SWITCH, raising=False)
    fast_launch.reset()
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = rms_norm(x, w, impl="gpu")
        for _ in range(20):
            assert torch.equal(rms_norm(x, w, impl="gpu"), want)
    status = fast_launch.status()
    assert status["enabled"] is True and status["hits"] == 20 and status["misses"] == 1, status
    assert not status["fallbacks"] and not status["unfilled"], status
    if triton.__version__ == "3.6.0":  # the release whose CudaLauncher.__call__ the path checked
        assert status["bare_launcher"].startswith("on (Triton 3.6.0"), status
    fast_launch.reset()


@pytest.mark.gpu
def test_a_cpu_tensor_after_cuda_launches_gets_tritons_error(monkeypatch):
    """The fast path gives the runner addresses, not tensors, so the driver's pointer check is
    Triton's alone: a CPU tensor where CUDA launches put a CUDA one must miss and reach Triton,
    which raises, instead of handing a host address to the device."""
    monkeypatch.delenv(fast_launch.ENV_SWITCH, raising=False)
    fast_launch.reset()
    x = torch.randn(100, device="cuda")
    y = torch.empty(100, device="cuda")
    for _ in range(2):
        fast_launch.launch(_scale_kernel, (1,), (y, x, None, 2.0, 100, 1), {"BLOCK": 128}, _stock_launch)
    assert fast_launch.status()["hits"] == 1
    with pytest.raises(ValueError, match="cpu tensor"):
        fast_launch.launch(_scale_kernel, (1,), (y, x.cpu(), None, 2.0, 100, 1), {"BLOCK": 128}, _stock_launch)
    torch.testing.assert_close(y, 2.0 * x)
    assert fast_launch.status()["hits"] == 1 and fast_launch.status()["misses"] == 2
    fast_launch.reset()


def _stock_launch(kernel, grid, args, kwargs):
    return kernel.run(*args, grid=grid, warmup=False, **kwargs)


@pytest.mark.gpu
@pytest.mark.long_gpu
def test_strided_launches_match_jit_function_run_bit_for_bit(monkeypatch):
    """A kernel with a stride argument, launched through kernels.launch with the path on (misses,
    then hits) against Triton's own ``JITFunction.run`` on the same inputs: strides that are 1
    (an int Triton compiles in), multiples of 16 or neither, pointers at every 16-byte class,
    every float dtype, constexprs and launch options varied, an optional pointer None."""
    from kernels.launch import launch as kernels_launch

    monkeypatch.delenv(fast_launch.ENV_SWITCH, raising=False)
    fast_launch.reset()
    configs = list(
        itertools.product(
            (torch.float32, torch.float16, torch.bfloat16),
            (0, 1, 2, 5, 8),  # element offsets of x
            (1, 2, 3, 16, 17),  # strides
            (1, 17, 1000),  # n
            (None, "w"),
            ((64, False, 4), (128, True, 2), (128, False, 8)),  # BLOCK, SQUARE, num_warps
        )
    )

    def run(launcher):
        outputs = []
        for seed, (dtype, offset, stride, n, weight, (block, square, warps)) in enumerate(configs):
            x = _offset_view((n * stride,), dtype, offset, seed)
            w = _offset_view((n,), dtype, (offset + 3) % 8, seed + 1) if weight else None
            y = torch.full((n,), float("nan"), device="cuda", dtype=dtype)
            grid = ((n + block - 1) // block,)
            launcher(grid, y, x, w, 1.5 + seed % 3, n, stride, BLOCK=block, SQUARE=square, num_warps=warps)
            outputs.append(y)
        torch.cuda.synchronize()
        return outputs

    def stock(grid, *args, **kwargs):
        _scale_kernel.run(*args, grid=grid, warmup=False, **kwargs)

    def ours(grid, *args, **kwargs):
        kernels_launch(_scale_kernel, args[0], grid, *args, **kwargs)

    want = run(stock)
    first = run(ours)
    before = fast_launch.status()
    second = run(ours)
    after = fast_launch.status()
    _assert_identical(want, first, second)
    assert after["hits"] - before["hits"] == len(configs) and after["misses"] == before["misses"], after
    assert not after["fallbacks"] and not after["unfilled"], after
    fast_launch.reset()


@pytest.mark.gpu
@pytest.mark.long_gpu
def test_norm_backwards_are_bit_identical_on_the_fast_path(monkeypatch):
    """Every backward form (whole rows, column chunks, re-read chunks; the fused one with a
    residual gradient) with the deterministic dw reduction, unaligned inputs included."""
    from kernels.fused_add_rms_norm.gpu import fused_add_rms_norm_backward
    from kernels.fused_add_rms_norm.gpu import tiles_for as fused_tiles_for
    from kernels.rms_norm.gpu import rms_norm_backward, rms_norm_forward, tiles_for

    forms = ({}, {"BWD_CHUNK": 256}, {"BWD_CHUNK": 256, "BWD_WIDE": "reread"})
    configs = list(
        itertools.product(
            (torch.float32, torch.bfloat16), (0, 1, 8), ((1, 64), (9, 1000), (33, 2048)), forms, ("llama", "gemma")
        )
    )

    def run_all():
        outputs = []
        for seed, (dtype, offset, shape, form, casting) in enumerate(configs):
            x = _offset_view(shape, dtype, offset, seed)
            w = _offset_view(shape[-1:], dtype, offset, seed + 1)
            dy = _offset_view(shape, dtype, (offset + 1) % 8, seed + 2)
            tiles = tiles_for(x, DW_REDUCE="partials", **form)
            _, rstd = rms_norm_forward(x, w, 1e-6, 0.0, casting, tiles)
            outputs += list(rms_norm_backward(dy, x, w, rstd, 0.0, casting, tiles))
            if not form:
                ds = _offset_view(shape, dtype, offset, seed + 3)
                fused = fused_tiles_for(x, DW_REDUCE="partials")
                outputs += list(fused_add_rms_norm_backward(dy, ds, x, w, rstd, 0.0, casting, fused))
        return outputs

    stock, first, second, counts = _fast_and_stock(monkeypatch, run_all)
    _assert_identical(stock, first, second)
    assert counts["misses"] == 0 and counts["hits"] > len(configs)


def test_reset_empties_the_registered_replay_caches(fake_cuda):
    """A family's eager plans (kernels.plans.eager_plans) go with the path's reset: replays it
    retires and layouts planned while the path was off plan again."""
    from kernels.plans import eager_plans

    plans = eager_plans()
    plans["layout"] = False
    fast_launch.reset()
    assert plans == {}
