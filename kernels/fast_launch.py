"""A fast launch path for ``@triton.jit`` kernels on CUDA, Triton 3.6 to 3.9.

Why. A small kernel's call is mostly host time. On every call Triton's ``JITFunction.run`` binds
the arguments, specialises each of them and builds a string cache key before it can launch
(about 16.8 us per launch on the H100 host), while the compiled kernel's own runner costs about
8.5 us. This module remembers, per call signature, the ``CompiledKernel`` that ``JITFunction.run``
launched, and on later calls with the same signature calls that kernel's runner directly.

How a call goes (:func:`launch`):

- *hit*: a key built from the call (below) finds an entry; the entry's runner is called with the
  grid, the current stream, the kernel's function handle and packed metadata and every argument
  in parameter order, as ``JITFunction.run`` calls it, except that a tensor goes as its address
  (:func:`_describer` says why).
- *miss*: Triton's own launch runs (it compiles if it must, and launches), then the
  ``CompiledKernel`` it returns fills an entry for the key. A call this path cannot replay
  exactly (a tensor or an unknown name passed by keyword, an argument of another type, a missing
  argument...) makes no entry and keeps going to Triton.
- *replay*: :func:`replay_of`, after a launch, gives a function that launches the same entry
  from the tensors' addresses alone, skipping the key; a family's eager plan keys everything
  else (kernels/rms_norm/__init__.py) and the replay checks what can change under it.
- *bare runner*: where the driver's ``CudaLauncher.__call__`` is a source this path checked
  (:data:`BARE_CALL_SOURCES`, Triton 3.6.0's) and the kernel needs no scratch memory, hits and
  replays call the compiled C launcher behind it with what that ``__call__`` would pass;
  :func:`status` says whether it is on (``bare_launcher``).
- *fallback*: a callable grid, launch or pre-run hooks installed, a global the kernel reads that
  changed since, an exception while building the key or replaying, an unsupported Triton, or
  ``WORKBENCH_FAST_LAUNCH=0``: Triton's own launch. A result is never wrong; at worst it is not
  faster. :func:`status` counts hits, misses and fallbacks, with reasons.

The key is a superset of what Triton specialises a compile on, so a hit replays a kernel Triton
would have chosen itself:

============================================  ===================================================================================
3.6   ``run`` adds ``debug`` and ``instrumentation_mode`` to the options and resolves an
      asynchronous compile's future (``kernel.result()``) before launching; the runner is a
      ``CudaLauncher`` over a C launcher compiled per signature
3.7   ``knobs.runtime.add_stages_inspection_hook`` appears: when set it adds a
      "custom_pipeline" part to Triton's key, so this path falls back; ``run`` returns the
      future itself under an asynchronous compile (no entry until it has resolved); the
      ``CudaLauncher`` calls one shared ``driver.active.utils.launch``, same call from ``run``
3.8   as 3.7; ``CompiledKernel.__del__`` unloads its module, so an entry holds its kernel
3.9   as 3.8, and ``run`` also adds ``fpsan_homomorphic_casts`` (a knob read from the
      environment on each call) to the options
====  ===================================================================================

Other versions, or a 3.6-3.9 whose ``run`` does not read as expected, turn the path off, with the
reason in :func:`status`. So do a non-NVIDIA driver and no driver at all.

``WORKBENCH_FAST_LAUNCH=0`` turns the path off. The variable is read when the first launch turns
the path on; :func:`reset` reads it again (and empties the cache and the counters).

Checked against the sources of Triton 3.6.0 (the GPU machine's) and 3.9.0: ``JITFunction.run``
reads what ``_RUN_MUST_READ`` lists; ``native_specialize_impl`` keys pointers by dtype and
``data_ptr() % 16 == 0``, ints by ``== 1`` / ``% 16 == 0`` / 32 vs 64 bit, floats not by value;
both runners (3.6's and 3.9's ``CudaLauncher.__call__``) take ``grid x3, stream, function,
packed metadata, launch metadata, enter hook, exit hook, *args``.

Why one module over 400 lines: the key, the replay, the fill, every fallback and the version
checks are one contract with Triton's launch; split, a reader could not check that a miss always
falls back to Triton's own launch.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from torch import Tensor

ENV_SWITCH = "WORKBENCH_FAST_LAUNCH"
MAX_ENTRIES = 4096  # a sweep over many sizes starts over rather than growing without bound


# --- what differs between Triton versions ---------------------------------------------------
@dataclass(frozen=True)
class TritonRules:
    """What one Triton release's ``JITFunction.run`` does that this path must repeat or detect."""

    knob_options: tuple[str, ...]  # the options run() fills from knobs on every call (its kwargs["..."])
    has_stage_hook: bool  # knobs.runtime.add_stages_inspection_hook exists (a set hook changes the key)


_BASE_OPTIONS = ("debug", "instrumentation_mode")
RULES = {
    (3, 6): TritonRules(_BASE_OPTIONS, has_stage_hook=False),
    (3, 7): TritonRules(_BASE_OPTIONS, has_stage_hook=True),
    (3, 8): TritonRules(_BASE_OPTIONS, has_stage_hook=True),
    (3, 9): TritonRules(_BASE_OPTIONS + ("fpsan_homomorphic_casts",), has_stage_hook=True),
}


def _knob_state_reader(rules: TritonRules, knobs) -> Callable[[], tuple | None]:
    """A function giving the knob options Triton adds to this call's key, or None when a launch
    hook (or 3.7+'s stage-inspection hook) is installed and the call must go to Triton. It reads
    ``knobs.runtime`` and ``knobs.compilation`` on every call, as ``JITFunction.run`` does. Launch
    hooks count as quiet only as the empty ``HookChain`` Triton starts with: a hook set some
    other way (None included) sends the call to Triton."""
    chain = knobs.HookChain

    if rules.knob_options == _BASE_OPTIONS and not rules.has_stage_hook:  # 3.6

        def knob_state():
            runtime = knobs.runtime
            enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
            if type(enter) is chain and type(leave) is chain and not enter.calls and not leave.calls:
                return runtime.debug, knobs.compilation.instrumentation_mode
            return None

    elif rules.knob_options == _BASE_OPTIONS:  # 3.7, 3.8

        def knob_state():
            runtime = knobs.runtime
            enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
            if (
                type(enter) is chain
                and type(leave) is chain
                and not enter.calls
                and not leave.calls
                and runtime.add_stages_inspection_hook is None
            ):
                return runtime.debug, knobs.compilation.instrumentation_mode
            return None

    else:  # 3.9: fpsan_homomorphic_casts is read from the environment on each call (~0.25 us)

        def knob_state():
            runtime = knobs.runtime
            enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
            if (
                type(enter) is chain
                and type(leave) is chain
                and not enter.calls
                and not leave.calls
                and runtime.add_stages_inspection_hook is None
            ):
                compilation = knobs.compilation
                return runtime.debug, compilation.instrumentation_mode, compilation.fpsan_homomorphic_casts
            return None

    return knob_state


# --- state ---------------------------------------------------------------------------------
class _Counts:
    __slots__ = ("hits", "misses", "fallbacks", "unfilled")

    def __init__(self):
        self.hits = 0
        self.misses = 0
        self.fallbacks: Counter[str] = Counter()  # calls handed to Triton's launch, by reason
        self.unfilled: Counter[str] = Counter()  # misses that could make no entry, by reason


_CACHE: dict[tuple, tuple] = {}
_counts = _Counts()
_enabled: bool | None = None  # None: decided by the first launch (or the first after reset())
_off_reason: str | None = None
_triton_version = ""
_driver_config = None  # triton.runtime.driver.driver: its .active is the driver Triton launches with
_knob_state: Callable[[], tuple | None] = lambda: None
_option_names: frozenset[str] = frozenset()
_current_device: Callable = lambda driver: driver.get_current_device()
_JITFunction: type | None = None
_CompiledKernel: type | None = None
_bare_launcher: Callable[[object], tuple | None] = lambda runner: None
_bare_reason = "the path is off"
_GRID_TYPES = (tuple, list)
_PLAIN_TYPES = (int, float, bool, str, type(None))  # argument types whose value keys exactly
_MISSING = object()


def status() -> dict:
    """Whether the path is on (and why not), and what it did since the last :func:`reset`."""
    return {
        "enabled": _enabled,
        "reason": _off_reason,
        "triton": _triton_version,
        "entries": len(_CACHE),
        "hits": _counts.hits,
        "misses": _counts.misses,
        "fallbacks": dict(_counts.fallbacks),
        "unfilled": dict(_counts.unfilled),
        "bare_launcher": _bare_reason,
    }


def reset() -> None:
    """Empty the cache and the counters; the next launch decides again whether the path is on
    (reading ``WORKBENCH_FAST_LAUNCH`` again)."""
    global _enabled, _off_reason, _counts
    _CACHE.clear()
    _counts = _Counts()
    _enabled = None
    _off_reason = None
    _unbind_bare_launcher()
    _gate.renew()
    for clear in _ON_RESET:
        clear()


_ON_RESET: list[Callable[[], None]] = []


def _unbind_bare_launcher() -> None:
    global _bare_launcher, _bare_reason
    _bare_launcher, _bare_reason = (lambda runner: None), "the path is off"


def on_reset(clear: Callable[[], None]) -> None:
    """Register a cache of replays (a family's eager plans), emptied by :func:`reset`: its
    replays are retired then, and a layout planned while the path was off plans again."""
    _ON_RESET.append(clear)


# --- the launch ----------------------------------------------------------------------------
def launch(kernel, grid, args: tuple, kwargs: dict, stock_launch):
    """Launch ``kernel[grid](*args, **kwargs)`` on the current CUDA device; returns what Triton's
    launch returns (the ``CompiledKernel``).

    ``stock_launch(kernel, grid, args, kwargs)`` is Triton's own launch (``kernel.run(*args,
    grid=grid, warmup=False, **kwargs)`` under the caller's locks): misses and fallbacks go there.
    """
    if _enabled is not True:
        return _launch_while_off(kernel, grid, args, kwargs, stock_launch)
    reason = None
    try:
        if type(grid) not in _GRID_TYPES:
            reason = "grid is not a tuple or list (a callable grid)"
        elif (knob_state := _knob_state()) is None:
            reason = "launch hooks installed"
        elif kernel.pre_run_hooks:
            reason = "pre-run hooks installed"
        else:
            driver = _driver_config.active
            device = _current_device(driver)
            key, addressed = _key(kernel, args, kwargs, device, knob_state)
            entry = _CACHE.get(key)
            if entry is not None:
                runner, function, packed_metadata, tail, globals_read, compiled, _ = entry
                if globals_read and _globals_changed(globals_read):
                    reason = "a global the kernel reads changed (Triton raises)"
                else:
                    n = len(grid)
                    runner(
                        grid[0],
                        grid[1] if n > 1 else 1,
                        grid[2] if n > 2 else 1,
                        driver.get_current_stream(device),
                        function,
                        packed_metadata,
                        None,  # launch metadata: read only by launch hooks, and none are installed
                        None,
                        None,
                        *addressed,
                        *tail,
                    )
                    _counts.hits += 1
                    return compiled
    except Exception as error:  # anything unforeseen: Triton's own launch decides
        reason = f"{type(error).__name__} on the fast path"
    if reason is not None:
        _counts.fallbacks[reason] += 1
        return stock_launch(kernel, grid, args, kwargs)
    return _miss(kernel, grid, args, kwargs, key, stock_launch)


def _key(kernel, args: tuple, kwargs: dict, device, knob_state) -> tuple[tuple, tuple]:
    """(the cache key of this call, its positional arguments with tensors as addresses)."""
    types = tuple(map(type, args))
    describe = _DESCRIBERS.get(types) or _describer(types)
    described, addressed = describe(*args)
    # id(kernel), not the kernel: JITFunction hashes its source hash under a lock (~0.5 us).
    # The entry holds the kernel, so the id stays its own while the entry lives.
    key = (
        id(kernel),
        device,
        knob_state,
        kernel.debug,
        types,
        described,
        tuple(kwargs.items()),
        tuple(map(type, kwargs.values())),
    )
    return key, addressed


_DESCRIBERS: dict[tuple, Callable] = {}


def _describer(types: tuple) -> Callable:
    """The function giving, for positional arguments of these types, the key's part and the
    arguments the runner is given.

    The key's part: each tensor's dtype, whether it is a CUDA tensor and whether it is 16-byte
    aligned, then every other argument's value (its type is in the key already). The runner gets
    each tensor as its address (an int): given a tensor, Triton's C launcher asks the driver to
    check the pointer (``cuPointerGetAttribute``, once per tensor per launch), a driver call that
    CUPTI instruments; given an int it takes the address as it is. The check it skips is kept in
    the key: a tensor not on CUDA has a key no CUDA launch made, so it misses and goes to Triton,
    which raises its own error. Generated per tuple of types, as straight-line code: a loop with
    a branch per argument costs about 2.5x more, and this is most of the key's cost."""
    names = [f"a{i}" for i in range(len(types))]
    is_tensor = [issubclass(kind, Tensor) for kind in types]
    tensors = [name for name, tensor in zip(names, is_tensor) if tensor]
    others = [name for name, tensor in zip(names, is_tensor) if not tensor]
    addresses = "".join(f"    p{t} = {t}.data_ptr()\n" for t in tensors)
    parts = [f"{t}.dtype" for t in tensors] + [f"{t}.is_cuda" for t in tensors]
    parts += [f"not p{t} & 15" for t in tensors] + others
    launched = [f"p{name}" if tensor else name for name, tensor in zip(names, is_tensor)]
    source = (
        f"def describe({', '.join(names)}):\n{addresses}"
        f"    return ({''.join(part + ', ' for part in parts)}), ({''.join(a + ', ' for a in launched)})\n"
    )
    namespace: dict = {}
    exec(source, namespace)  # source built above from argument positions only
    if len(_DESCRIBERS) >= MAX_ENTRIES:
        _DESCRIBERS.clear()
    _DESCRIBERS[types] = namespace["describe"]
    return namespace["describe"]


def _launch_while_off(kernel, grid, args, kwargs, stock_launch):
    if _enabled is None:
        _turn_on_or_off()
        return launch(kernel, grid, args, kwargs, stock_launch)
    _counts.fallbacks[f"off: {_off_reason}"] += 1
    return stock_launch(kernel, grid, args, kwargs)


def _globals_changed(globals_read) -> bool:
    for scope, name, value in globals_read:
        now = scope.get(name, _MISSING)
        if now is not value and now != value:
            return True
    return False


# --- a replay: one call signature, launched from its tensors' addresses alone ----------------
class _ReplayGate:
    """Whether replays may launch: ``token`` is the live token, or None while paused. Each replay
    holds the token live when it was made, so :func:`reset` (a new token) retires every replay."""

    __slots__ = ("token", "_live", "_pauses")

    def __init__(self):
        self._live = object()
        self.token = self._live
        self._pauses = 0

    def renew(self) -> None:
        self._live = object()
        self.token = None if self._pauses else self._live

    def pause(self) -> None:
        self._pauses += 1
        self.token = None

    def resume(self) -> None:
        self._pauses -= 1
        if not self._pauses:
            self.token = self._live


_gate = _ReplayGate()


@contextlib.contextmanager
def replays_paused():
    """Inside the block every replay answers False, so its caller takes :func:`launch` (the
    launch recorder and the compile-only mode of ``kernels/launch.py`` must see each launch)."""
    _gate.pause()
    try:
        yield
    finally:
        _gate.resume()


def replay_of(kernel, grid, args: tuple, kwargs: dict) -> Callable | None:
    """After a :func:`launch` of this call: a function that launches the same kernel with the
    same grid and the same non-tensor arguments, given only each tensor argument's address, in
    order, and returns True; or returns False, launching nothing, when the call must go to
    :func:`launch` instead (the path reset or turned off, replays paused, launch hooks set, another
    current device, a pointer of another 16-byte alignment class than the first call's, a global
    the kernel reads changed). None when this call has no entry to replay.

    What the replay does not check is its caller's to key: the tensors' dtypes and devices and
    every non-tensor argument are the first call's (a family keys its eager plan by the inputs'
    shapes, strides, dtypes, device and settings, which decide all of them). It skips the
    key :func:`launch` builds on every call, which is most of this path's own cost."""
    try:
        if _enabled is not True or type(grid) not in _GRID_TYPES or kernel.pre_run_hooks:
            return None
        knob_state = _knob_state()
        if knob_state is None:
            return None
        driver = _driver_config.active
        device = _current_device(driver)
        key, addressed = _key(kernel, tuple(args), kwargs, device, knob_state)
        entry = _CACHE.get(key)
        if entry is None:
            return None
        return _replay_function(entry, grid, args, addressed, driver, device, knob_state)
    except Exception:  # a replay is an optimisation: without one the caller keeps launch()
        return None


def _replay_function(entry, grid, args, addressed, driver, device, knob_state) -> Callable:
    """Generated per call signature as straight-line code, like :func:`_describer`."""
    runner, function, packed_metadata, tail, globals_read, compiled, _ = entry
    n = len(grid)
    bare = _bare_launcher(compiled.run)  # the entry's runner may be _thin_runner's
    namespace = {
        "gate": _gate,
        "TOKEN": _gate.token,
        "config": _driver_config,
        "ACTIVE": driver,
        "current_device": _current_device,
        "DEVICE": device,
        "knob_state": _knob_state,
        "KNOBS": knob_state,
        "globals_changed": _globals_changed,
        "GLOBALS": globals_read,
        "runner": runner,
        "get_stream": driver.get_current_stream,
        "FUNCTION": function,
        "PACKED": packed_metadata,
        "counts": _counts,
        "COMPILED": compiled,  # held: Triton 3.8+ unloads a kernel's module when it is freed
        "G0": grid[0],
        "G1": grid[1] if n > 1 else 1,
        "G2": grid[2] if n > 2 else 1,
    }
    pointers, launched, aligned, unaligned = [], [], [], []
    for i, (arg, value) in enumerate(zip(args, addressed)):
        if isinstance(arg, Tensor):
            name = f"p{len(pointers)}"
            pointers.append(name)
            (unaligned if value & 15 else aligned).append(name)
            launched.append(name)
        else:
            namespace[f"c{i}"] = value
            launched.append(f"c{i}")
    for i, value in enumerate(tail):
        namespace[f"t{i}"] = value
        launched.append(f"t{i}")
    inline = getattr(_current_device, "torch_getter", None)
    if inline is not None and inline[0] is driver:  # checked after "config.active is not ACTIVE"
        namespace["get_device"] = inline[1]
        device_check = "get_device() != DEVICE"
    else:
        device_check = "current_device(ACTIVE) != DEVICE"
    checks = ["gate.token is not TOKEN", "config.active is not ACTIVE", device_check, "knob_state() != KNOBS"]
    if aligned:
        checks.append(f"({' | '.join(aligned)}) & 15")
    checks += [f"not {name} & 15" for name in unaligned]
    if globals_read:
        checks.append("globals_changed(GLOBALS)")
    if bare:  # the C launcher itself (:func:`_bare_launcher_reader`)
        namespace["LAUNCH"], namespace["COOPERATIVE"], namespace["PDL"] = bare
        head = "LAUNCH(G0, G1, G2, get_stream(DEVICE), FUNCTION, COOPERATIVE, PDL, None, None, "
    else:
        head = "runner(G0, G1, G2, get_stream(DEVICE), FUNCTION, "
    source = (
        f"def replay({', '.join(pointers)}):\n"
        f"    if {' or '.join(checks)}:\n"
        "        return False\n"
        f"    {head}PACKED, None, None, None, {', '.join(launched)})\n"
        "    counts.hits += 1\n"
        "    return True\n"
    )
    exec(source, namespace)  # source built above from argument positions only
    return namespace["replay"]


# --- Triton's runner without its Python layer, where that layer does nothing ----------------
# Sources of ``CudaLauncher.__call__`` (whitespace removed, sha256) checked to do, for a kernel
# that needs neither global nor profile scratch memory, nothing but call its compiled C launcher
# (``self.launch``) with the grid, stream and function, the kernel's cooperative-grid and PDL
# flags, None for both scratch buffers, then the arguments it was given. 3.7+ pass the
# arguments on in another form (and 3.9 may add a sanitiser's), so they keep the runner.
BARE_CALL_SOURCES = {"0ff2b3219ec9f5067def7f5b72cf4ed0f1b544e98655c5e548c7e933e3ab3a19": "Triton 3.6.0"}


def _bare_launcher_reader(launcher_cls, accepted: dict | None = None):
    """``(reader, why)``: ``reader(runner)`` is ``(C launcher, cooperative flag, PDL flag)`` for a
    runner of ``launcher_cls`` whose kernel needs no scratch memory, else None; ``why`` says for
    :func:`status` whether and why runners are called bare. Calling the C launcher straight skips
    ``__call__``'s Python (two scratch closures and a frame: about 1.5 us of a replay's host time
    on the H100 host, by cProfile)."""
    accepted = BARE_CALL_SOURCES if accepted is None else accepted
    try:
        flat = re.sub(r"\s+", "", inspect.getsource(launcher_cls.__call__))
    except (OSError, TypeError, AttributeError):
        return (lambda runner: None), "the driver's launcher has no readable __call__"
    release = accepted.get(hashlib.sha256(flat.encode()).hexdigest())
    if release is None:
        return (lambda runner: None), f"{launcher_cls.__qualname__}.__call__ is not one this path checked"

    def reader(runner):
        if type(runner) is launcher_cls and runner.global_scratch_size == 0 and runner.profile_scratch_size == 0:
            return runner.launch, runner.launch_cooperative_grid, runner.launch_pdl
        return None

    return reader, f"on ({release}'s {launcher_cls.__qualname__}.__call__, kernels without scratch memory)"


def _thin_runner(runner) -> Callable:
    """The runner a hit calls: the C launcher behind one argument-inserting frame where
    :func:`_bare_launcher` allows it, else ``runner`` itself."""
    bare = _bare_launcher(runner)
    if not bare:
        return runner
    launch_c, cooperative, pdl = bare

    def thin(grid_x, grid_y, grid_z, stream, function, *args):
        launch_c(grid_x, grid_y, grid_z, stream, function, cooperative, pdl, None, None, *args)

    return thin


# --- a miss: Triton launches, its compiled kernel fills an entry ------------------------------
def _miss(kernel, grid, args, kwargs, key, stock_launch):
    _counts.misses += 1
    compiled = stock_launch(kernel, grid, args, kwargs)
    try:
        refusal = _fill(kernel, key, args, kwargs, compiled)
    except Exception as error:  # the launch happened; a failed fill only costs speed
        refusal = f"{type(error).__name__} while filling the cache"
    if refusal is not None:
        _counts.unfilled[refusal] += 1
    return compiled


def _fill(kernel, key, args, kwargs, compiled) -> str | None:
    """Make the entry that replays this call; returns why not when the call cannot be replayed
    exactly from its key."""
    if not isinstance(compiled, _CompiledKernel):
        return "Triton returned no CompiledKernel (an asynchronous compile not resolved yet?)"
    if not isinstance(kernel, _JITFunction):
        return "not a JITFunction"
    params = kernel.params
    if len(args) > len(params):
        return "more arguments than parameters"
    for arg, param in zip(args, params):
        if not isinstance(arg, Tensor) and not _keys_exactly(arg, compiled_in=param.is_constexpr):
            return "a positional argument of a type or value this path does not key"
    tail = []  # parameters after the positional ones: keyword values and defaults, in order
    for param in params[len(args) :]:
        if param.name in kwargs:
            value = kwargs[param.name]
        elif param.has_default:
            value = param.default
        else:
            return "missing argument"
        if not _keys_exactly(value, compiled_in=True):
            return "a keyword argument of a type or value this path does not key (a tensor?)"
        tail.append(value)
    names = set(kernel.arg_names)
    for name, value in kwargs.items():
        if name in names:
            continue
        if name not in _option_names:
            return "unknown keyword argument"
        if not _keys_exactly(value, compiled_in=True):
            return "a launch option of a type or value this path does not key"
    globals_read = tuple((scope, name, value) for (name, _), (value, scope) in kernel.used_global_vals.items())
    runner = _thin_runner(compiled.run)
    entry = (runner, compiled.function, compiled.packed_metadata, tuple(tail), globals_read, compiled, kernel)
    if len(_CACHE) >= MAX_ENTRIES:
        _CACHE.clear()
    _CACHE[key] = entry
    return None


def _keys_exactly(value, compiled_in: bool) -> bool:
    """Whether a later call with an equal key gets the same behaviour from this value. A NaN
    never equals itself, so its key never hits again; a value compiled in or replayed from the
    entry must be the very value, and ``-0.0 == 0.0``."""
    if type(value) not in _PLAIN_TYPES:
        return False
    if type(value) is float:
        if value != value:
            return False
        if compiled_in and value == 0.0:
            return False
    return True


# --- turning the path on ---------------------------------------------------------------------
def _turn_on_or_off() -> None:
    global _enabled, _off_reason
    try:
        reason = _why_off()
    except Exception as error:
        reason = f"{type(error).__name__} while checking Triton: {error}"
    _enabled = reason is None
    _off_reason = reason


def _why_off() -> str | None:
    """None when this process can use the path; else the reason it is off. Binds the Triton
    pieces the launch uses."""
    global _triton_version, _knob_state, _option_names, _JITFunction, _CompiledKernel, _driver_config, _current_device
    global _bare_launcher, _bare_reason
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return f"{ENV_SWITCH}={os.environ[ENV_SWITCH]}"
    import triton
    from triton import knobs
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction

    _triton_version = triton.__version__
    rules = RULES.get(_major_minor(triton.__version__))
    if rules is None:
        return f"Triton {triton.__version__}: this path models the launch of Triton 3.6 to 3.9 only"
    mismatch = _launch_protocol_mismatch(rules, JITFunction, CompiledKernel)
    if mismatch:
        return f"Triton {triton.__version__}: {mismatch}"
    config, reason = _find_driver()
    if reason:
        return reason
    from triton.backends.nvidia.compiler import CUDAOptions

    _driver_config = config
    _current_device = _device_reader(config.active)
    _knob_state = _knob_state_reader(rules, knobs)
    _option_names = frozenset(CUDAOptions.__dataclass_fields__)
    _JITFunction, _CompiledKernel = JITFunction, CompiledKernel
    _bare_launcher, _bare_reason = _bare_launcher_reader(getattr(config.active, "launcher_cls", None))
    return None


def _device_reader(active) -> Callable:
    """What ``driver.active.get_current_device()`` returns, read for less: Triton's driver asks
    ``torch.cuda.current_device``, whose lazy-initialisation check costs about a microsecond per
    launch; a launch of a CUDA tensor has initialised CUDA already, so torch's own getter answers
    the same. Any other getter is kept as it is."""
    import torch

    getter = getattr(torch._C, "_cuda_getDevice", None)
    if getter is not None and active.get_current_device is torch.cuda.current_device:

        def current_device(driver):
            return getter() if driver is active else driver.get_current_device()

        current_device.torch_getter = (active, getter)  # a replay of ``active`` calls the getter inline
        return current_device
    return lambda driver: driver.get_current_device()


def _major_minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


# What JITFunction.run must contain (whitespace removed) for the replay to be what it does.
_RUN_MUST_READ = (
    "device=driver.active.get_current_device()",
    "stream=driver.active.get_current_stream(device)",
    "forhookinself.pre_run_hooks:",
    "self.used_global_vals.items()",
    "ifcallable(grid):",
    "kernel.run(grid_0,grid_1,grid_2,stream,kernel.function,kernel.packed_metadata,launch_metadata,"
    "knobs.runtime.launch_enter_hook,knobs.runtime.launch_exit_hook,*bound_args.values())",
)


def _launch_protocol_mismatch(rules: TritonRules, jit_function, compiled_kernel) -> str | None:
    """Compare the installed Triton's launch with what the rules say: a patch release that moved
    things turns the path off instead of replaying the wrong call."""
    source = inspect.getsource(jit_function.run)
    flat = re.sub(r"\s+", "", source)
    for needed in _RUN_MUST_READ:
        if needed not in flat:
            return f"JITFunction.run no longer reads {needed!r}"
    added = tuple(re.findall(r'kwargs\["(\w+)"\]\s*=', source))
    if added != rules.knob_options:
        return f"JITFunction.run adds options {added}, expected {rules.knob_options}"
    if ("add_stages_inspection_hook" in source) != rules.has_stage_hook:
        return "JITFunction.run's stage-inspection hook is not where the rules expect it"
    if not isinstance(inspect.getattr_static(compiled_kernel, "run", None), property):
        return "CompiledKernel.run is not the lazily initialising property"
    if "self.packed_metadata" not in inspect.getsource(compiled_kernel.__init__):
        return "CompiledKernel no longer packs its metadata"
    return _specialisation_mismatch()


def _specialisation_mismatch() -> str | None:
    """Ask Triton's own specialiser the questions the key relies on: pointers specialise on
    dtype and 16-byte alignment only, and floats are not specialised by value."""
    import torch
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.jit import native_specialize_impl

    class PointerAt:
        dtype = torch.float16

        def __init__(self, address):
            self.address = address

        def data_ptr(self):
            return self.address

    def spec(arg):
        return tuple(native_specialize_impl(CUDABackend, arg, False, True, True))

    aligned = {spec(PointerAt(a)) for a in (0x1000, 0x1010, 0x1040, 0x7F00)}
    unaligned = {spec(PointerAt(a)) for a in (0x1002, 0x1004, 0x1008, 0x100E)}
    floats = {spec(x) for x in (0.0, -0.0, 1.0, 3.5)}
    if len(aligned) != 1 or len(unaligned) != 1 or aligned == unaligned or len(floats) != 1:
        return "its argument specialisation is not by dtype and 16-byte alignment"
    return None


def _find_driver():
    """(Triton's driver config, None), or (None, reason) when no NVIDIA driver is active."""
    from triton.runtime.driver import driver

    try:
        active = driver.active
    except Exception as error:
        return None, f"no active Triton driver ({error})"
    if type(active).__module__ != "triton.backends.nvidia.driver":
        return None, f"the active Triton driver is {type(active).__name__}, not NVIDIA's"
    return driver, None
