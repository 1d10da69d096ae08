"""Devices: which accelerator is here, and how to time, sync and measure memory on it.

Every kernel and the harness ask a :class:`Device` instead of ``torch.cuda`` directly, so the
same code runs on CUDA, on an Ascend NPU (through ``torch_npu`` and triton-ascend) and on the
CPU, where Triton kernels run in the Triton interpreter.

Interpreter vs. JIT in one process: Triton picks the interpreter when ``TRITON_INTERPRET=1``
is set at decoration time, which would force one choice per process. :func:`launch` keeps
both forms of every kernel: the ``@triton.jit`` object for device tensors and an
``InterpretedFunction`` over the same Python function for CPU tensors. The interpreter patches
``triton.language`` while it runs, so interpreted launches and JIT compiles never overlap:
both go through one process-wide lock.
"""

from __future__ import annotations

import functools
import importlib
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

KINDS = ("cuda", "npu", "cpu")

_TRITON_LOCK = threading.RLock()


def _npu_module():
    """``torch.npu`` when torch_npu is importable and an NPU is present, else None."""
    try:
        importlib.import_module("torch_npu")
    except Exception:  # ImportError, or a broken CANN install: treat as "no NPU"
        return None
    npu = getattr(torch, "npu", None)
    try:
        return npu if npu is not None and npu.is_available() else None
    except Exception:
        return None


def kinds_present() -> list[str]:
    """Device kinds usable in this process, in the order ``auto`` prefers them (probed once)."""
    return list(_kinds_present())


@functools.lru_cache(maxsize=1)
def _kinds_present() -> tuple[str, ...]:
    present = []
    if torch.cuda.is_available():
        present.append("cuda")
    if _npu_module() is not None:
        present.append("npu")
    present.append("cpu")
    return tuple(present)


@dataclass(frozen=True)
class Timing:
    """Per-call times in milliseconds: median with p20/p80, and how they were taken."""

    p50: float
    p20: float
    p80: float
    n: int
    method: str  # "device-events" | "interpreter-wall" | "cpu-wall"


@dataclass
class Device:
    """One accelerator (or the CPU) with the few operations the harness needs."""

    kind: str
    index: int = 0
    _copy_gbps: float | None = field(default=None, repr=False)

    # --- identity -------------------------------------------------------------------------
    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.kind, self.index) if self.kind != "cpu" else torch.device("cpu")

    @property
    def backend(self):
        """The torch submodule with the device's runtime calls (torch.cuda / torch.npu)."""
        if self.kind == "cuda":
            return torch.cuda
        if self.kind == "npu":
            return _npu_module()
        return None

    @property
    def interpreted(self) -> bool:
        """True when Triton kernels on this device run in the Triton interpreter."""
        return self.kind == "cpu"

    @functools.cached_property
    def name(self) -> str:
        if self.kind == "cpu":
            return platform.processor() or platform.machine() or "cpu"
        return self.backend.get_device_name(self.index)

    @functools.cached_property
    def driver(self) -> str:
        if self.kind == "cuda":
            return f"CUDA {torch.version.cuda}"
        if self.kind == "npu":
            return f"CANN via torch_npu {getattr(importlib.import_module('torch_npu'), '__version__', '?')}"
        return "Triton interpreter"

    @functools.cached_property
    def num_cores(self) -> int:
        """Programs a persistent grid should launch: SMs on CUDA, vector cores on an NPU."""
        if self.kind == "cuda":
            return torch.cuda.get_device_properties(self.index).multi_processor_count
        if self.kind == "npu":
            return _npu_vector_cores(self.index)
        # The interpreter runs programs one after another; a handful keeps grid-stride loops honest.
        return min(os.cpu_count() or 1, 8)

    @functools.cached_property
    def l2_bytes(self) -> int | None:
        if self.kind == "cuda":
            return getattr(torch.cuda.get_device_properties(self.index), "L2_cache_size", None)
        return None

    # --- runtime ---------------------------------------------------------------------------
    def synchronize(self) -> None:
        if self.backend is not None:
            self.backend.synchronize(self.index)

    def reset_peak_memory(self) -> int | None:
        """Start a peak-memory window; returns the baseline (bytes allocated now)."""
        if self.backend is None:
            return None
        self.synchronize()
        self.backend.reset_peak_memory_stats(self.index)
        return self.backend.memory_allocated(self.index)

    def peak_memory_above(self, baseline: int | None) -> int | None:
        """Peak bytes allocated since :meth:`reset_peak_memory`, above its baseline.

        None on the CPU: torch keeps no allocator statistics there, and the harness shows the
        value as unavailable rather than guessing.
        """
        if self.backend is None or baseline is None:
            return None
        self.synchronize()
        return max(0, self.backend.max_memory_allocated(self.index) - baseline)

    def time(self, fn: Callable[[], object], warmup_ms: float = 25, rep_ms: float = 100) -> Timing:
        """Per-call time of ``fn``. On devices: ``triton.testing.do_bench`` (device events, L2
        flushed between calls). On the CPU: wall time of whole calls."""
        if self.kind == "cpu":
            return _wall_timing(fn, rep_ms, method="interpreter-wall")
        import triton.testing

        # No Triton lock here: autograd runs CUDA backward on its own thread, whose launches
        # take the lock; holding it around do_bench would deadlock a backward timing.
        p50, p20, p80 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
        return Timing(p50=p50, p20=p20, p80=p80, n=0, method="device-events")

    def wall_per_call(self, fn: Callable[[], object], rep_ms: float = 50, max_calls: int = 200) -> Timing:
        """Host wall time of one synchronised call (issue + run + sync), median of many."""
        return _wall_timing(fn, rep_ms, method="host-wall", sync=self.synchronize, max_calls=max_calls)

    def copy_bandwidth_gbps(self) -> float | None:
        """Measured device-to-device copy bandwidth in GB/s (bytes read + written).

        Measured once per device per process (a 512 MiB copy timed with do_bench); None on the
        CPU, where kernel times are interpreter times and no bandwidth share is meaningful.
        """
        if self.kind == "cpu":
            return None
        key = (self.kind, self.index)
        if key not in _COPY_BW:
            n_bytes = 512 * 2**20
            src = torch.empty(n_bytes, dtype=torch.uint8, device=self.torch_device).random_(0, 255)
            dst = torch.empty_like(src)
            timing = self.time(lambda: dst.copy_(src), warmup_ms=25, rep_ms=200)
            _COPY_BW[key] = 2 * n_bytes / (timing.p50 * 1e-3) / 1e9
            del src, dst
        return _COPY_BW[key]

    def describe(self) -> dict:
        """Environment facts recorded with every measurement."""
        return {
            "device_kind": self.kind,
            "device_name": self.name,
            "driver": self.driver,
            "num_cores": self.num_cores,
            "l2_bytes": self.l2_bytes,
        }


_COPY_BW: dict[tuple[str, int], float] = {}


def _wall_timing(fn, rep_ms, method, sync=None, max_calls=200) -> Timing:
    """Median / p20 / p80 wall time of whole calls; at least 3 calls, until rep_ms is spent."""
    sync = sync or (lambda: None)
    times = []
    budget = rep_ms / 1e3
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget and len(times) < max_calls):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles(times, n=10, method="inclusive") if len(times) > 1 else times * 9
    return Timing(p50=statistics.median(times), p20=q[1], p80=q[7], n=len(times), method=method)


def _npu_vector_cores(index: int) -> int:
    """Vector cores of an Ascend NPU from the triton-ascend driver, with a 910B fallback."""
    try:
        from triton.runtime import driver

        props = driver.active.utils.get_device_properties(index)
        return int(props.get("num_vectorcore") or props["num_aicore"])
    except Exception:
        return 48  # Ascend 910B: 24 AI cores x 2 vector cores


# --- detection ---------------------------------------------------------------------------
_DEVICES: dict[str, Device] = {}
_BY_NAME: dict[object, Device] = {}  # what callers pass (str or torch.device) -> Device


def get_device(name: str | torch.device | Device = "auto") -> Device:
    """Resolve ``"auto" | "cuda" | "npu" | "cpu"`` (or a torch.device) to a :class:`Device`.

    ``auto`` prefers cuda, then npu, then cpu. Asking for a device that is not here is a
    ValueError naming the devices that are.
    """
    if isinstance(name, Device):
        return name
    # Hot path (every kernel launch asks for its tensor's device): a dict lookup.
    cached = _BY_NAME.get(name)
    if cached is not None:
        return cached
    if isinstance(name, torch.device):
        kind, index = name.type, name.index or 0
    else:
        text = str(name).strip().lower()
        if text == "auto":
            text = kinds_present()[0]
        kind, _, idx = text.partition(":")
        index = int(idx) if idx else 0
    if kind not in KINDS:
        raise ValueError(f"device={name!r} is not a device kind; use one of auto, {', '.join(KINDS)}")
    if kind not in kinds_present():
        raise ValueError(
            f"device={name!r} is not available in this process; devices present: "
            f"{', '.join(kinds_present())} (or 'auto')"
        )
    key = f"{kind}:{index}"
    if key not in _DEVICES:
        _DEVICES[key] = Device(kind, index)
    if not (isinstance(name, str) and name.strip().lower() == "auto"):
        _BY_NAME[name] = _DEVICES[key]
    return _DEVICES[key]


def device_of(tensor: torch.Tensor) -> Device:
    return get_device(tensor.device)


# --- one kernel, two forms ---------------------------------------------------------------
class _Launcher:
    """``launcher(kernel, tensor)[grid](*args)``: :func:`launch` in Triton's indexing style."""

    __slots__ = ("_kernel", "_like")

    def __init__(self, kernel, like: torch.Tensor):
        self._kernel = kernel
        self._like = like

    def __getitem__(self, grid):
        return functools.partial(launch, self._kernel, self._like, grid)


_TWINS: dict[int, object] = {}


def _twin(jit_fn):
    """The InterpretedFunction over a JITFunction's Python function (cached)."""
    twin = _TWINS.get(id(jit_fn))
    if twin is None:
        from triton.runtime.interpreter import InterpretedFunction

        twin = InterpretedFunction(jit_fn.fn)
        _TWINS[id(jit_fn)] = twin
    return twin


class _interpreter_scope:
    """Run an interpreted kernel without leaving the interpreter's traces behind.

    On entry: every ``@triton.jit`` function the kernel can reach (``tl.sum`` and friends in
    triton.language, and the globals of the kernel's module and of every module its helpers come
    from) is swapped for its interpreted twin, as
    ``TRITON_INTERPRET=1`` would have decorated it. While running, the interpreter patches
    triton.language's builtins; nested helper calls patch ``triton.language.core`` and never
    restore it (Triton 3.6-3.9), which would break the next JIT compile for a GPU. On exit every
    attribute of triton.language's modules and classes, and of those modules, is put back as it
    was (module globals the interpreter adds for its rewritten functions are kept). Runs under
    the Triton lock, so no JIT compile sees the swapped names.
    """

    def __init__(self, kernel_fn):
        self.kernel_fn = kernel_fn
        self.saved: list[tuple[object, dict]] = []

    def __enter__(self):
        from triton.runtime.jit import JITFunction

        _preload_lazy_triton_modules()
        helper_modules = _helper_modules(sys.modules.get(self.kernel_fn.__module__), JITFunction)
        self.saved = [(obj, dict(vars(obj))) for obj in _patchable_objects() + helper_modules]
        for module in [sys.modules.get(m) for m in _TRITON_LANG_MODULES] + helper_modules:
            if module is None:
                continue
            for name, value in list(vars(module).items()):
                if isinstance(value, JITFunction):
                    setattr(module, name, _twin(value))
        return self

    def __exit__(self, *exc):
        for obj, before in self.saved:
            now = dict(vars(obj))
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    setattr(obj, name, value)
            if isinstance(obj, type):
                # Attributes the interpreter added to a class (tensor.__index__ …) go; names it
                # added to a module's globals stay, as its cached rewritten functions need them.
                for name in now.keys() - before.keys():
                    delattr(obj, name)
        self.saved = []
        return False


_MISSING = object()


def _helper_modules(kernel_module, jit_type) -> list:
    """The kernel's module and every module whose ``@triton.jit`` helpers it can reach (a helper
    imported from another family calls helpers of its own module): all get interpreted twins."""
    found, todo = [], [kernel_module]
    while todo:
        module = todo.pop()
        if module is None or any(module is m for m in found) or module.__name__.startswith("triton."):
            continue
        found.append(module)
        for value in list(vars(module).values()):
            if isinstance(value, jit_type):
                todo.append(sys.modules.get(value.fn.__module__))
    return found


def _patchable_objects() -> list:
    """triton.language's modules and the classes they define: what the interpreter patches."""
    key = len(sys.modules)  # recomputed only when modules were imported since
    if _PATCHABLE[0] != key:
        _PATCHABLE[:] = [key, _find_patchable_objects()]
    return list(_PATCHABLE[1])


_PATCHABLE: list = [None, []]


def _find_patchable_objects() -> list:
    modules = [m for n, m in list(sys.modules.items()) if n.startswith("triton.language") and m is not None]
    objects, seen = [], set()
    for module in modules:
        for obj in [module] + [v for v in vars(module).values() if isinstance(v, type)]:
            if id(obj) in seen or (isinstance(obj, type) and not obj.__module__.startswith("triton.language")):
                continue
            seen.add(id(obj))
            objects.append(obj)
    return objects


@functools.lru_cache(maxsize=1)
def _preload_lazy_triton_modules() -> None:
    """Modules Triton imports on first launch copy helpers from triton.language and insist they
    are JITFunctions; import them before any swap so they see the real objects. Also make
    Triton 3.6's interpreter work with NumPy >= 2.4 (see :func:`_index_scalar`)."""
    for name in ("triton.experimental.gluon", "triton.experimental.gluon.language"):
        try:
            importlib.import_module(name)
        except Exception:
            pass
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is not None and not getattr(original, "_workbench_wrapped", False):

        def patch_lang_tensor(tensor, scope):
            original(tensor, scope)
            scope.set_attr(tensor, "__index__", _index_scalar)

        patch_lang_tensor._workbench_wrapped = True
        interpreter._patch_lang_tensor = patch_lang_tensor


def _index_scalar(self):
    """``int(t)`` for an interpreter scalar tensor held as a one-element array. Triton 3.6 calls
    ``int()`` on the 1-d array, which NumPy >= 2.4 refuses; e.g. ``range(pid, n, num_programs)``."""
    return int(self.handle.data.reshape(-1)[0])


_TRITON_LANG_MODULES = ("triton.language", "triton.language.standard", "triton.language.random")


def launch(kernel, like: torch.Tensor, grid, *args, **kwargs):
    """Launch ``kernel`` over ``grid`` in the form ``like``'s device needs; the hot path.

    Same as ``launcher(kernel, like)[grid](*args, **kwargs)`` with fewer Python layers: on a
    device tensor it calls ``JITFunction.run`` directly (each layer of ``*args`` repacking costs
    about a microsecond on a slow host, and a small kernel's call is mostly host time).
    """
    if like.device.type != "cpu" or _is_interpreted(kernel):
        with _TRITON_LOCK:
            return kernel.run(*args, grid=grid, warmup=False, **kwargs)
    twin = _twin(kernel)
    with _TRITON_LOCK, _interpreter_scope(twin.fn):
        return twin.run(*args, grid=grid, warmup=False, **kwargs)


def launcher(kernel, tensor: torch.Tensor) -> _Launcher:
    """The compiled kernel for device tensors, its interpreted twin for CPU tensors."""
    return _Launcher(kernel, tensor)


def _is_interpreted(kernel) -> bool:
    return type(kernel).__name__ == "InterpretedFunction"
