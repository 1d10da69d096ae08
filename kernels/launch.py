"""The one launch path: every family's kernels go through :func:`launch`.

Interpreter vs. JIT in one process: Triton picks the interpreter when ``TRITON_INTERPRET=1``
is set at decoration time, which would force one choice per process. :func:`launch` keeps
both forms of every kernel: the ``@triton.jit`` object for device tensors and an
``InterpretedFunction`` over the same Python function for CPU tensors. The interpreter patches
``triton.language`` while it runs, so interpreted launches and JIT compiles never overlap:
both go through one process-wide lock.

The interpreter is the CPU twin of a GPU, so where it rounds otherwise it is made to round as
the GPU does: its fp32 -> bf16 conversion truncates, where the GPU (``cvt.rn.bf16.f32``) and
torch round to nearest even; truncation gives every bf16 result a bias toward zero that the
correctness rule (kernels/testing.py) rightly calls wrong (:func:`_round_bf16_to_nearest`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
import time
from dataclasses import dataclass

import torch

from kernels import fast_launch, tuned_tables
from kernels.runtime import DeviceInfo, standing_in

_TRITON_LOCK = threading.RLock()


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
        self.outer_patched: set | None = None

    def __enter__(self):
        from triton.runtime.jit import JITFunction

        _preload_lazy_triton_modules()
        self.outer_patched, _PATCHED_LANGS[0] = _PATCHED_LANGS[0], set()
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
        _PATCHED_LANGS[0] = self.outer_patched
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
# Inside an _interpreter_scope: the ids of the triton.language modules the running launch has
# patched (see _patch_lang_once); None outside, where the interpreter patches as it always does.
_PATCHED_LANGS: list[set | None] = [None]


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
    _round_bf16_to_nearest(interpreter)
    _patch_lang_once(interpreter)


def _patch_lang_once(interpreter) -> None:
    """Patch triton.language once per launch, not once per helper call. The interpreter patches
    the triton.language modules a function sees when the kernel starts (and restores them when
    it ends), and again at every call of a ``@triton.jit`` helper, never restoring those: each
    time a walk over every builtin with ``inspect.getmembers``, 40% of an interpreted rms_norm
    sweep on the CPU. Inside :class:`_interpreter_scope` (under the Triton lock, every attribute
    put back on exit) a helper whose modules the launch has already patched is not patched
    again: the patches it would make are the ones in place. Elsewhere the interpreter patches
    as it always does."""
    import triton.language as tl

    original = getattr(interpreter, "_patch_lang", None)
    empty_scope = getattr(interpreter, "_LangPatchScope", None)
    if original is None or empty_scope is None or getattr(original, "_workbench_wrapped", False):
        return

    def patch_lang(fn):
        patched = _PATCHED_LANGS[0]
        if patched is None:
            return original(fn)
        langs = {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}
        if langs and langs <= patched:
            return empty_scope()
        scope = original(fn)
        if not patched:  # the launch's own patching: once it is restored, nothing is patched
            restore = scope.restore

            def restore_and_forget():
                patched.clear()
                restore()

            scope.restore = restore_and_forget
        patched.update(langs)
        return scope

    patch_lang._workbench_wrapped = True
    interpreter._patch_lang = patch_lang


def _round_bf16_to_nearest(interpreter) -> None:
    """Make the interpreter's fp32 -> bf16 casts round to nearest even, as the GPU's do (it
    truncates: a correct kernel's bf16 outputs then carry a bias of half a unit in the last place
    toward zero, which a GPU never shows). Explicit round-toward-zero casts keep truncating."""
    import numpy as np
    import triton.language as tl

    builder = getattr(interpreter, "InterpreterBuilder", None)
    handle = getattr(interpreter, "TensorHandle", None)
    cast, to_fp = getattr(builder, "cast_impl", None), getattr(builder, "create_fp_to_fp", None)
    if handle is None or cast is None or getattr(cast, "_workbench_wrapped", False):
        return

    def to_bf16(data):
        bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
        rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(
            np.uint16
        )
        quiet_nan = ((bits >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
        return np.where(np.isnan(data), quiet_nan, rounded).reshape(np.shape(data))

    def rounds_to_bf16(src, dst_type) -> bool:
        return src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16

    def cast_impl(self, src, dst_type):
        if rounds_to_bf16(src, dst_type):
            return handle(to_bf16(src.data), dst_type.scalar)
        return cast(self, src, dst_type)

    cast_impl._workbench_wrapped = True
    builder.cast_impl = cast_impl
    if to_fp is not None:
        rtne = getattr(getattr(interpreter, "_ir", None), "ROUNDING_MODE", None)
        rtne = getattr(rtne, "RTNE", None)

        def create_fp_to_fp(self, src, dst_type, rounding_mode):
            if rounds_to_bf16(src, dst_type) and rounding_mode in (None, rtne):
                return handle(to_bf16(src.data), dst_type.scalar)
            return to_fp(self, src, dst_type, rounding_mode)

        builder.create_fp_to_fp = create_fp_to_fp


def _index_scalar(self):
    """``int(t)`` for an interpreter scalar tensor held as a one-element array. Triton 3.6 calls
    ``int()`` on the 1-d array, which NumPy >= 2.4 refuses; e.g. ``range(pid, n, num_programs)``."""
    return int(self.handle.data.reshape(-1)[0])


_TRITON_LANG_MODULES = ("triton.language", "triton.language.standard", "triton.language.random")


def launch(kernel, like: torch.Tensor, grid, *args, **kwargs):
    """Launch ``kernel`` over ``grid`` in the form ``like``'s device needs; the hot path.

    Same as ``launcher(kernel, like)[grid](*args, **kwargs)`` with fewer Python layers: on CUDA
    through :mod:`kernels.fast_launch` (Triton's own launch on a miss or anything unexpected), on
    other devices through ``JITFunction.run`` directly (each layer of ``*args`` repacking costs
    about a microsecond on a slow host, and a small kernel's call is mostly host time). CPU
    tensors run the interpreted twin, never the fast path. Fake or functional tensors (a
    ``triton_op`` traced by torch.compile or opcheck) record the launch with ``wrap_triton``.
    Inside :func:`compile_only`, every launch compiles and nothing runs.
    """
    if _recordings and not getattr(_inside_recorded, "active", False):
        return _recorded_launch(kernel, like, grid, args, kwargs)
    if _compiling:
        return _compile_instead(kernel, grid, args, kwargs)
    if type(like) is not torch.Tensor and _is_traced(like):
        return _launch_traced(kernel, grid, args, kwargs)
    kind = like.device.type
    if kind == "cuda":
        return fast_launch.launch(kernel, grid, args, kwargs, _stock_launch)
    if kind != "cpu" or _is_interpreted(kernel):
        return _stock_launch(kernel, grid, args, kwargs)
    twin = _twin(kernel)
    with _TRITON_LOCK, _interpreter_scope(twin.fn):
        return twin.run(*args, grid=grid, warmup=False, **kwargs)


def replay_of(kernel, like: torch.Tensor, grid, *args, **kwargs):
    """After ``launch(kernel, like, grid, *args, **kwargs)`` on CUDA: the same launch as a
    replay that takes only the tensor arguments' addresses (:func:`kernels.fast_launch.replay_of`),
    for a family's eager plan; None on other devices, while a launch is recorded or compiled, or
    where the fast path made no entry."""
    if observed() or type(like) is not torch.Tensor or not like.is_cuda:
        return None
    return fast_launch.replay_of(kernel, grid, args, kwargs)


def observed() -> bool:
    """Whether every launch must go through :func:`launch` now: a :func:`recording` or a
    :func:`compile_only` block is open. A family plans no replay for a call made meanwhile (the
    measuring tool records a configuration's first call) and plans on the next one."""
    return bool(_recordings or _compiling)


def _stock_launch(kernel, grid, args, kwargs):
    """Triton's own launch, under the Triton lock (the fast path's misses and fallbacks)."""
    with _TRITON_LOCK:
        return kernel.run(*args, grid=grid, warmup=False, **kwargs)


def _is_traced(tensor) -> bool:
    """True for the stand-ins torch.compile and opcheck trace with (fake or functional tensors)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    return isinstance(tensor, (FakeTensor, FunctionalTensor))


def _launch_traced(kernel, grid, args, kwargs):
    """Inside a ``torch.library.triton_op`` being traced: record the launch in the graph through
    ``wrap_triton`` (Inductor then compiles and launches the kernel itself)."""
    from torch.library import wrap_triton

    return wrap_triton(kernel)[grid](*args, **kwargs)


def launcher(kernel, tensor: torch.Tensor) -> _Launcher:
    """The compiled kernel for device tensors, its interpreted twin for CPU tensors."""
    return _Launcher(kernel, tensor)


def _is_interpreted(kernel) -> bool:
    return type(kernel).__name__ == "InterpretedFunction"


# --- recording what was launched (compile facts) ---------------------------------------------
@dataclass
class Launch:
    """One launch seen by :func:`recording`: the kernel's name, its grid, the device kind, and
    what the launch returned: on CUDA (and an NPU) the compiled kernel, whose registers, spills
    and shared memory the measuring tool reads; None in the interpreter, which compiles nothing."""

    name: str
    grid: tuple
    device_kind: str
    compiled: object | None


# The launch lists of the recordings open now. Empty (the usual case), the hot path pays one
# truth test of a module global.
_recordings: list[list[Launch]] = []


@contextlib.contextmanager
def recording():
    """Collect every :func:`launch` made inside the block, in order::

        with recording() as launches:
            rms_norm(x, w)
        launches[0].name, launches[0].grid, launches[0].compiled

    Process-wide, not per thread: on CUDA autograd runs a backward's launches on its own device
    thread. So a launch another thread makes meanwhile is recorded too; the measuring tool runs
    one configuration at a time. Recordings may overlap: each open one sees every launch."""
    launches: list[Launch] = []
    with _RECORDING_LOCK:
        _recordings.append(launches)
    try:
        with fast_launch.replays_paused():  # an eager plan's replay would launch unseen
            yield launches
    finally:
        with _RECORDING_LOCK:
            _recordings[:] = [r for r in _recordings if r is not launches]


_RECORDING_LOCK = threading.Lock()


_inside_recorded = threading.local()  # this thread is in _recorded_launch: launch as usual


def _recorded_launch(kernel, like, grid, args, kwargs):
    _inside_recorded.active = True
    try:
        result = launch(kernel, like, grid, *args, **kwargs)
    finally:
        _inside_recorded.active = False
    kind = "traced" if type(like) is not torch.Tensor and _is_traced(like) else like.device.type
    compiled = result if kind in ("cuda", "npu") else None
    seen = Launch(_kernel_name(kernel), _grid_tuple(grid), kind, compiled)
    with _RECORDING_LOCK:
        for launches in _recordings:
            launches.append(seen)
    return result


def _kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", None)
    return getattr(fn, "__name__", None) or getattr(kernel, "__name__", None) or type(kernel).__name__


def _grid_tuple(grid) -> tuple:
    """The grid as three ints; a callable grid (none of ours) as an empty tuple: not known here."""
    if callable(grid):
        return ()
    dims = tuple(int(g) for g in grid)
    return dims + (1,) * (3 - len(dims))


# --- compiling without running (compile-ahead) ---------------------------------------------
@dataclass
class Compiled:
    """One kernel :func:`compile_only` compiled: its name, Triton's cache hash (the name of its
    folder in the Triton cache; None where the compile returned no kernel) and the keyword
    arguments it was launched with (constexprs and options such as ``num_warps``)."""

    name: str
    hash: str | None
    constants: dict
    launcher_ms: float | None = None  # its host launcher built too (launchers=True; None: none to build)


@dataclass
class _CompileBlock:
    """One open :func:`compile_only` block: its target, what it compiled, whether it builds launchers."""

    target: object
    compiled: list
    launchers: bool


# The open compile_only() blocks, innermost last.
_compiling: list[_CompileBlock] = []


@contextlib.contextmanager
def compile_only(target=None, device: DeviceInfo | None = None, launchers: bool = False, every_jit: bool = False):
    """Inside the block, :func:`launch` compiles each kernel it is given and runs nothing::

        with compile_only(GPUTarget("cuda", 90, 32), described_device("cuda", name=..., num_cores=132)) as done:
            rms_norm(x_meta, w_meta, BLOCK_SIZE_M=2)      # tensors on the meta device
        done[0].name, done[0].hash

    ``target``: the Triton ``GPUTarget`` to compile for, with no device needed at all (the compile
    is Triton's own, through ``JITFunction.run(..., warmup=True)``, and lands in the Triton disk
    cache as a real launch's would); None: the current device's target (a GPU must be visible).
    ``device``: what :func:`kernels.runtime.device_of` answers for meta and CPU tensors inside
    the block, so host functions resolve tiles for the device that will run the kernels
    (:func:`kernels.runtime.standing_in`). Meta tensors make the host functions do no device
    work; Triton specialises pointers on ``data_ptr() % 16``, and a meta tensor's ``data_ptr``
    is its byte offset from 0, so aligned meta tensors key the cache as aligned device tensors do.
    A host function that needs values (``.item()``, a range check) fails on meta tensors: call it
    with CPU tensors instead, which compile here too rather than run in the interpreter.

    ``launchers``: also build each kernel's host launcher into the Triton cache
    (:func:`build_launcher`), so the measuring process's first launch loads it too.

    ``every_jit``: also take every Triton JIT launch made in the block that does not go through
    :func:`launch` (a peer library launching its own ``@triton.jit`` kernels) as a compile.

    Process-wide (every thread's launches compile): meant for a process that only compiles. On
    leaving, the families' remembered plans are dropped (:func:`kernels.tuned_tables.reload`),
    so tiles planned for ``device`` never answer a later CPU call."""
    block = _CompileBlock(target, [], launchers)
    _compiling.append(block)
    try:
        with (
            standing_in(device) if device is not None else contextlib.nullcontext(),
            fast_launch.replays_paused(),
            _jit_launches_compile() if every_jit else contextlib.nullcontext(),
        ):
            yield block.compiled
    finally:
        _compiling.remove(block)
        if device is not None:
            tuned_tables.reload()


@contextlib.contextmanager
def _jit_launches_compile():
    """Within the block, a ``kernel[grid](...)`` launch of any Triton JIT function compiles for the
    innermost :func:`compile_only` block's target and runs nothing (Triton 3.6 to 3.9 launch
    through ``JITFunction.run(*args, grid=..., warmup=False, ...)``)."""
    from triton.runtime.jit import JITFunction

    original = JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        if warmup or not _compiling:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        return _compile_instead(self, grid, args, kwargs)

    JITFunction.run = run
    try:
        yield
    finally:
        JITFunction.run = original


def _compile_instead(kernel, grid, args, kwargs):
    """:func:`launch` inside :func:`compile_only`: compile for the block's target, run nothing."""
    block = _compiling[-1]
    if _is_interpreted(kernel):
        raise ValueError(f"{_kernel_name(kernel)} is an interpreted kernel: there is nothing to compile")
    with _TRITON_LOCK, _target_driver(block.target):
        result = _warmup(kernel, grid, args, kwargs)
    constants = {k: v for k, v in kwargs.items() if isinstance(v, (bool, int, float, str))}
    launcher_ms = None
    if block.launchers:
        try:
            launcher_ms = build_launcher(result)
        except Exception:  # noqa: BLE001 - the measuring process builds it on first load, as before
            pass
    block.compiled.append(Compiled(_kernel_name(kernel), getattr(result, "hash", None), constants, launcher_ms))
    return result


def build_launcher(compiled_kernel) -> float | None:
    """Build the host launcher of a kernel compiled for CUDA into the Triton cache, touching no
    device; the milliseconds it took, or None where there is none to build.

    Why: Triton 3.6 generates a C launcher per kernel signature and builds it with the system C
    compiler when the compiled kernel is first loaded (a fraction of a second each, in the
    measuring process's first call). Built here, that load finds it in the cache. From Triton 3.7
    on, kernels share one launcher, so there is nothing to build (None); nor for another backend.
    A failed build raises (the kernel's own compile stands)."""
    metadata = getattr(compiled_kernel, "metadata", None)
    src = getattr(compiled_kernel, "src", None)
    target = getattr(metadata, "target", None)
    if src is None or getattr(target, "backend", None) != "cuda":
        return None
    from triton.backends.nvidia import driver as nvidia

    if not hasattr(nvidia, "make_launcher"):  # Triton 3.7+: no launcher per signature
        return None
    started = time.perf_counter()
    nvidia.CudaLauncher(src, metadata)
    return (time.perf_counter() - started) * 1e3


def _warmup(kernel, grid, args, kwargs):
    """Triton's compile of one launch, without the launch (its kernel, from the disk cache when
    it is there)."""
    return kernel.run(*args, grid=grid, warmup=True, **kwargs)


@contextlib.contextmanager
def _target_driver(target):
    """Triton's active driver answering ``target`` (None: left as it is). ``JITFunction.run``
    asks the driver for the current device, stream and target only; with ``warmup`` nothing
    launches, so no device is touched (Triton 3.6 to 3.9)."""
    if target is None:
        yield
        return
    from triton.runtime import driver

    previous = getattr(driver, "_active", None)  # reading driver.active would start a real driver
    driver.set_active(_TargetOnlyDriver(target))
    try:
        yield
    finally:
        driver.set_active(previous)


class _TargetOnlyDriver:
    """The part of a Triton driver that compiling needs: a target, and a device key of its own
    (``JITFunction`` keeps its compiled kernels per device key: these never mix with a real
    device's)."""

    def __init__(self, target):
        self.target = target
        self.device = ("compile-only", target.backend, target.arch, target.warp_size)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return self.device

    def get_current_stream(self, device=None):
        return 0
