"""What a kernel family is, as data: problem knobs, variants, tile parameters, bytes, tolerances.

The measuring tool (``workbench``), its CLI and every widget work from a :class:`KernelSpec`
alone; a family registers one spec and needs nothing else from them (:func:`register`: a
built-in family's folder, an installed package's entry point, or a spec made at run time, for
example by :func:`kernels.custom.family`).

Why one module over 600 lines: a family's declaration reads these types together (a
:class:`KernelSpec` holds its :class:`Knob` s, :class:`Variant` s with their :class:`Param` s,
its :class:`Tuning` and error rule), and the registry at the end finds specs of exactly these
types by name; a family module imports all of it from here in one line.
"""

from __future__ import annotations

import collections.abc
import functools
import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    import torch

from kernels.testing import DEFAULT_RULE, ErrorRule


class _TorchDtypes(collections.abc.Mapping):
    """``"fp32"`` / ``"fp16"`` / ``"bf16"`` -> the torch dtype. The names are known without torch
    (a family's dtypes, the command line's checks and its help); torch is imported on the first
    lookup of a dtype, so ``workbench bench --help`` and a mistyped family answer at once."""

    _TORCH_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

    def __getitem__(self, name: str) -> torch.dtype:
        import torch

        return getattr(torch, self._TORCH_NAMES[name])

    def __iter__(self):
        return iter(self._TORCH_NAMES)

    def __len__(self) -> int:
        return len(self._TORCH_NAMES)


DTYPES: Mapping[str, torch.dtype] = _TorchDtypes()
MODES = ("forward", "backward", "full")
# Variant backends that are not ours: torch paths and peer libraries (compared against, never judged).
PEER_BACKENDS = ("torch", "peer")

# The usual per-dtype tolerances (atol, rtol) for a kernel against the float64 truth: the outer
# bound around the rule that judges a result by the reference's own error (kernels/testing.py).
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "fp32": (1e-4, 1e-5),
    "fp16": (2e-2, 1e-2),
    "bf16": (2e-1, 2e-2),
}


def dtype_name(dtype: str | torch.dtype) -> str:
    """``"bf16"`` for ``torch.bfloat16`` or ``"bf16"``/``"bfloat16"``; ValueError otherwise."""
    if not isinstance(dtype, str):  # a torch.dtype (or something else, refused below)
        for name, value in DTYPES.items():
            if value == dtype:
                return name
    else:
        text = str(dtype).lower().replace("torch.", "")
        aliases = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
        text = aliases.get(text, text)
        if text in DTYPES:
            return text
    raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}")


def elem_bytes(dtype: str | torch.dtype) -> int:
    """Bytes per element of a supported dtype (4 for fp32, 2 for fp16 / bf16)."""
    return DTYPES[dtype_name(dtype)].itemsize


@dataclass(frozen=True)
class Param:
    """A tile or launch parameter of a variant, limited to its allowed values.

    ``"auto"`` among the values means "let the host function choose from the problem".
    ``modes``: the modes whose kernels read this tile (a backward kernel's tiles: ``("backward",
    "full")``); None where every mode does. The Explorer shows a tile's control in those modes only.
    """

    name: str
    values: tuple
    default: Any
    doc: str = ""
    modes: tuple[str, ...] | None = None

    def used_in(self, mode: str) -> bool:
        """Whether a run in ``mode`` reads this tile."""
        return self.modes is None or mode in self.modes

    def __post_init__(self):
        if self.default not in self.values:
            raise ValueError(f"Param {self.name}: default {self.default!r} not in {self.values!r}")

    def validate(self, value):
        if value not in self.values:
            raise ValueError(
                f"{self.name}={value!r} is not allowed; allowed values: {', '.join(map(str, self.values))}"
            )
        return value


@dataclass(frozen=True)
class Knob:
    """A problem-size or problem-setting knob (rows, hidden, casting mode, batch …)."""

    name: str
    default: Any
    values: tuple | None = None  # allowed choices, or None for a free integer in [low, high]
    low: int | None = None
    high: int | None = None
    doc: str = ""
    sweep: tuple = ()  # values a default sweep over this knob visits

    def validate(self, value):
        if self.values is not None:
            if value not in self.values:
                raise ValueError(
                    f"{self.name}={value!r} is not allowed; allowed values: {', '.join(map(str, self.values))}"
                )
            return value
        if isinstance(self.default, bool):
            return bool(value)
        if isinstance(self.default, int):
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"{self.name}={value!r} must be an integer") from None
            if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
                raise ValueError(f"{self.name}={value} is out of range; allowed {self.low} … {self.high}")
            return value
        if isinstance(self.default, float):
            return float(value)
        return value

    def parse(self, text: str):
        """Value from command-line text, typed like the default; ValueError says what is expected."""
        if isinstance(self.default, bool):
            low = text.strip().lower()
            if low not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ValueError(f"{self.name}={text!r} must be true or false")
            return low in ("1", "true", "yes", "on")
        kind = None
        if isinstance(self.default, int) and not (self.values and isinstance(self.values[0], str)):
            kind = int
        elif isinstance(self.default, float):
            kind = float
        if kind is None:
            return text
        try:
            return kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise ValueError(f"{self.name}={text!r} must be {what}") from None


def run_of(bind: Callable[..., Callable[[], Any]]) -> Callable[..., Any]:
    """The ``run`` of a variant that has a ``bind`` (:class:`Variant`): the bound call, made."""

    def run(inputs, problem, **params):
        return bind(inputs, problem, **params)()

    return run


@dataclass(frozen=True)
class Variant:
    """One way of computing the family: our GPU or NPU kernel, a torch path, or a peer library.

    ``run(inputs, problem, **params)`` returns the outputs (a tensor or tuple of tensors) for
    the family's inputs; it must be differentiable through the inputs that require grad when
    the spec has backward modes. ``check(problem, params, dtype, device)`` raises ValueError
    for a configuration that cannot run (before anything is launched); ``available()`` returns
    None or the reason the variant cannot run in this process (e.g. a peer not installed).
    ``kernel(inputs, problem)``, for a peer whose ``run`` also stages our inputs into its own
    buffers, returns a zero-argument call of its bare kernel on the same problem, so a benchmark
    can time the kernel alone (``run`` still checks the result). ``prebuild()``, where given,
    starts without waiting the one-off work the variant's first call would otherwise do in the
    caller's thread (a peer's compiles, in background processes), so a benchmark can overlap
    it with measuring something else; calling it again does nothing. ``precision(problem)``
    names the arithmetic the variant uses on a problem where it does not follow the problem's
    ``precision`` knob (a peer whose matrix products run TF32, a path that is always fp32);
    see :meth:`KernelSpec.precision_of`. ``tiles_source(problem, params, device)``, for our
    kernels whose ``auto`` tiles may come from a tuned table, says where a configuration's tiles
    come from (:mod:`kernels.tuned_tables`: ``"tuned:<device key>@<bucket>"``, ``"heuristic
    (...)"`` with the reason, or ``"explicit"``; a part with a table of its own adds
    ``"; backward: ..."``, :func:`kernels.tuned_tables.joined_sources`); records carry it as
    ``tiles_source``. ``triton_peer``: a peer whose kernels are plain Triton JIT functions, which
    a compile process can compile ahead (:attr:`compiles_ahead`). ``inductor_peer``: a peer whose
    first call compiles torch.compile graphs (Inductor), which a process holding the GPU can
    compile ahead into Inductor's caches without running them. ``imports``: the modules its
    first call imports (a peer library, Inductor), which a process can import before measuring.
    ``bind(inputs, problem, **params)``, where given, returns the zero-argument call ``run`` would
    make, its arguments looked up once: the call a user writes (``rms_norm(x, w, eps)``),
    which :meth:`call` gives the measuring tool to time, so that host and call times count the
    variant and not the plumbing from a problem dict to its arguments; its ``run`` is then
    :func:`run_of` the bind.
    """

    name: str
    backend: str  # "gpu" | "npu" | "torch" | "peer"
    run: Callable[..., Any]
    params: tuple[Param, ...] = ()
    devices: tuple[str, ...] = ("cuda", "npu", "cpu")
    check: Callable[..., None] | None = None
    available: Callable[[], str | None] | None = None
    modes: tuple[str, ...] | None = None  # None: the spec's modes
    doc: str = ""
    kernel: Callable[..., Callable[[], Any]] | None = None
    prebuild: Callable[[], None] | None = None
    precision: Callable[[Mapping[str, Any]], str] | None = None
    tiles_source: Callable[..., str] | None = None
    bind: Callable[..., Callable[[], Any]] | None = None
    # A peer whose kernels are plain Triton JIT functions its own code launches (Liger-Kernel's):
    # a compile process can compile its first call ahead, as it does ours (:attr:`compiles_ahead`).
    triton_peer: bool = False
    # A peer whose first call compiles torch.compile graphs (kernels.peers.compiled): their
    # compile can be made ahead in another process, into Inductor's disk caches.
    inductor_peer: bool = False
    # The modules its first call imports (a peer library, Inductor): a process about to measure
    # it may import them beforehand, off the measurement (KernelSpec.first_call_imports).
    imports: tuple[str, ...] = ()

    def call(
        self, inputs: Mapping[str, Any], problem: Mapping[str, Any], params: Mapping[str, Any]
    ) -> Callable[[], Any]:
        """The zero-argument call of this variant on ``inputs`` that the measuring tool times:
        ``bind``'s where the variant has one, else ``run`` with these arguments."""
        if self.bind is not None:
            return self.bind(inputs, problem, **params)
        return functools.partial(self.run, inputs, problem, **params)

    @property
    def is_peer(self) -> bool:
        """A torch path or a peer library: measured beside ours, never one of our kernels."""
        return self.backend in PEER_BACKENDS

    @property
    def compiles_ahead(self) -> bool:
        """Whether a compile process can compile this variant's first call ahead of the measuring
        process: ours, and a peer whose kernels are plain Triton (``triton_peer``); not a torch
        path (torch.compile keeps its own compile workers and caches)."""
        return not self.is_peer or self.triton_peer

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def resolve_params(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Defaults merged with overrides; unknown names and disallowed values are ValueErrors."""
        overrides = dict(overrides or {})
        known = {p.name for p in self.params}
        unknown = sorted(set(overrides) - known)
        if unknown:
            allowed = ", ".join(sorted(known)) or "none"
            raise ValueError(f"variant {self.name!r} has no parameter {', '.join(unknown)}; its parameters: {allowed}")
        return {p.name: p.validate(overrides.get(p.name, p.default)) for p in self.params}

    def refused_values(
        self, name: str, problem: Mapping[str, Any], params: Mapping[str, Any], dtype: str, device
    ) -> dict[Any, str]:
        """``{value: reason}`` for each value of the tile ``name`` that the variant's ``check``
        refuses on ``problem`` (a resolved problem) with its other tiles as in ``params`` (or, where
        those are refused whatever this tile is, at their defaults): what a control should mark
        before anything is launched. {} for a variant without a check."""
        if self.check is None:
            return {}
        param = self.param(name)

        def refusal(tiles: dict) -> str | None:
            try:
                self.check(problem, tiles, dtype, device)
            except ValueError as exc:
                return str(exc)
            return None

        for others in (self.resolve_params({k: v for k, v in params.items() if k != name}), self.resolve_params()):
            refused = {v: reason for v in param.values if (reason := refusal({**others, name: v})) is not None}
            if len(refused) < len(param.values):
                return refused
        return refused

    def unavailable_reason(self, device_kind: str | None = None) -> str | None:
        if device_kind is not None and device_kind not in self.devices:
            return f"variant {self.name!r} does not run on {device_kind}; it runs on {', '.join(self.devices)}"
        return self.available() if self.available else None


@dataclass(frozen=True)
class Tuning:
    """What ``workbench tune`` searches for a family, and what its tuned tables hold.

    The tune measures ``variant`` in ``mode`` / ``dtype`` on ``problem`` at each of ``sizes``
    (values of the problem knob ``knob``: the suites' sizes and the shapes models use) over the
    grid of ``params`` (tile name -> values; every combination that ``keep(size, params)``
    accepts and the variant's ``check`` allows), and writes per size the chosen tiles into the
    family's table (:mod:`kernels.tuned_tables`), which ``impl="auto"`` then reads for the
    nearest size. ``quick_*``: the same at interpreter sizes (``--device cpu``). ``simpler``:
    the tile names whose smaller values make a configuration simpler (fewer warps, stages,
    splits), in the order a tie within noise is broken. ``part``: which of the family's tiles the
    table sets, each part in a table of its own (``"forward"``, or ``"backward"`` for a family
    whose backward kernel has tiles of its own, timed in ``mode="full"``). ``dtypes``: the dtypes
    a tune may time in instead of ``dtype`` (``workbench tune --dtype``); whichever it times in,
    the chosen tiles are checked in every dtype the family declares before a table is installed.
    """

    variant: str
    knob: str
    sizes: tuple
    params: Mapping[str, tuple]
    problem: Mapping[str, Any] = field(default_factory=dict)
    mode: str = "forward"
    dtype: str = "bf16"
    quick_sizes: tuple = ()
    quick_params: Mapping[str, tuple] | None = None
    quick_problem: Mapping[str, Any] | None = None
    keep: Callable[[int, Mapping[str, Any]], bool] | None = None
    simpler: tuple[str, ...] = ("num_warps", "num_stages", "SPLITS")
    part: str = "forward"
    dtypes: tuple[str, ...] = ()  # the dtypes a tune may time in (``--dtype``); () for ``(dtype,)``

    @property
    def timed_dtypes(self) -> tuple[str, ...]:
        """The dtypes a tune may time in, the default (``dtype``) first."""
        return tuple(dict.fromkeys((self.dtype, *self.dtypes)))


@dataclass(frozen=True)
class KernelSpec:
    """Everything the harness and the Explorer need to know about one kernel family.

    - ``knobs``: problem knobs with defaults (``quick`` overrides make CPU runs small).
    - ``make_inputs(problem, dtype, device, seed)``: a dict of fresh random tensors (never
      zeros); tensors that should receive gradients have ``requires_grad`` set.
    - ``reference(inputs, problem)``: the PyTorch oracle; the harness calls it twice on the same
      inputs: upcast to float64 (the truth; float32 on a device without float64) and in the
      measured dtype (its own rounding, the yardstick of :class:`~kernels.testing.ErrorRule`).
    - ``output_names``: names of the outputs, in the order ``run`` returns them.
    - ``min_bytes(problem, mode, dtype)``: the fewest bytes the mode must move (None: not known,
      so no bandwidth figures).
    - ``axis``: the knob plots put on the x axis by default.
    - ``memory_bound``: the work is bound by memory traffic (reports chart GB/s against copy bandwidth).
    - ``error_rule``: how far a result may err as a multiple of the reference's own error
      (:class:`~kernels.testing.ErrorRule`; a looser ``k`` names its reason); ``tolerances``
      stay as the outer bound.
    - ``strided``: our variants take non-contiguous inputs (a row-padded view), so the edge
      checks (``workbench.edges``) run them too.
    """

    name: str
    title: str
    knobs: tuple[Knob, ...]
    make_inputs: Callable[..., dict[str, torch.Tensor]]
    reference: Callable[..., Any]
    output_names: tuple[str, ...]
    variants: tuple[Variant, ...]
    min_bytes: Callable[[Mapping[str, Any], str, str], int | None]
    axis: str
    modes: tuple[str, ...] = MODES
    dtypes: tuple[str, ...] = tuple(DTYPES)
    tolerances: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    quick: Mapping[str, Any] = field(default_factory=dict)
    doc: str = ""
    # Optional: an estimate of on-chip buffer use for a configuration (issue: UB model).
    ub_estimate: Callable[..., int | None] | None = None
    # True when the work is bound by memory traffic: reports chart its achieved GB/s against the
    # device's measured copy bandwidth.
    memory_bound: bool = False
    # Optional: the floating-point operations a mode must do, ``flops(problem, mode) -> int``,
    # for a family that computes (the roofline puts its FLOP/s against the device's peak).
    flops: Callable[[Mapping[str, Any], str], int] | None = None
    # What ``workbench tune`` searches and the tuned tables hold (None: the family is not tuned);
    # ``backward_tuning``: the same for a backward kernel's own tiles (``workbench tune --part
    # backward``), in tables of their own.
    tuning: Tuning | None = None
    backward_tuning: Tuning | None = None
    # Optional: the seconds a configuration's compile is expected to take on a GPU's host,
    # ``compile_s(problem, params) -> float`` (None where unknown); a sweep's compile-ahead
    # starts the longest first, so a configuration that compiles for ten seconds is not the last
    # one a measuring GPU waits for.
    compile_s: Callable[[Mapping[str, Any], Mapping[str, Any]], float | None] | None = None
    # The module that defines the spec, which a worker process imports to find it (None: defined in
    # a notebook cell or a script, so its sweeps run on the local executor only). A module path
    # registered for the family (the built-ins', an entry point's) stands for it.
    module: str | None = None
    error_rule: ErrorRule = DEFAULT_RULE
    strided: bool = False

    @property
    def tuned_parts(self) -> tuple[str, ...]:
        """The parts ``workbench tune`` can tune for this family (``--part``)."""
        return tuple(t.part for t in (self.tuning, self.backward_tuning) if t is not None)

    def tuning_of(self, part: str = "forward") -> Tuning:
        """The :class:`Tuning` of ``part``; ValueError names the parts this family tunes."""
        for t in (self.tuning, self.backward_tuning):
            if t is not None and t.part == part:
                return t
        if not self.tuned_parts:
            raise ValueError(f"{self.name} has no tune space (its KernelSpec sets no tuning)")
        raise ValueError(f"{self.name} tunes no {part!r} tiles; it tunes: {', '.join(self.tuned_parts)}")

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ValueError(f"{self.name} has no variant {name!r}; variants: {', '.join(v.name for v in self.variants)}")

    def start_prebuilds(self, device_kind: str) -> list[str]:
        """Start the ``prebuild`` of every variant that can run on ``device_kind`` (a peer's
        compiles, in background processes) and return their names; a second call starts nothing
        new. A suite, a report or a notebook's Session calls it first, so that work overlaps
        whatever is measured before the peer's first call instead of stalling it."""
        started = []
        for var in self.variants:
            if var.prebuild is not None and var.unavailable_reason(device_kind) is None:
                var.prebuild()
                started.append(var.name)
        return started

    def first_call_imports(self, device_kind: str) -> list[str]:
        """The modules the first calls of the variants that can run on ``device_kind`` import
        (each variant's ``imports``), each once: what a notebook's kernel started ahead imports
        before its turn (``workbench/reports/warm_kernels.py``)."""
        names = [m for var in self.variants if var.unavailable_reason(device_kind) is None for m in var.imports]
        return list(dict.fromkeys(names))

    def has_graph_peers(self, device_kind: str) -> bool:
        """Whether a variant that can run on ``device_kind`` compiles torch.compile graphs at its
        first call (``inductor_peer``): a process about to measure the family starts the graph
        processes that compile them ahead (workbench/compiling/graphs.py)."""
        return any(var.inductor_peer and var.unavailable_reason(device_kind) is None for var in self.variants)

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    def resolve_problem(self, overrides: Mapping[str, Any] | None = None, quick: bool = False) -> dict[str, Any]:
        """Knob defaults (small ones with ``quick``) merged with overrides, validated."""
        overrides = dict(overrides or {})
        known = {k.name for k in self.knobs}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"{self.name} has no problem knob {', '.join(unknown)}; knobs: {', '.join(sorted(known))}")
        base = {k.name: k.default for k in self.knobs}
        if quick:
            base.update(self.quick)
        base.update(overrides)
        return {k.name: k.validate(base[k.name]) for k in self.knobs}

    def tolerance(self, dtype: str, precision: str = "ieee") -> tuple[float, float]:
        """(atol, rtol) for ``dtype`` computed at ``precision``: the ``"<dtype>/<precision>"`` entry
        where the family has one (``"fp32/tf32"``), else the dtype's."""
        name = dtype_name(dtype)
        return tuple(self.tolerances.get(f"{name}/{precision}", self.tolerances[name]))

    def precision_of(self, variant: Variant, problem: Mapping[str, Any]) -> str:
        """The arithmetic precision ``variant`` computes ``problem`` at: its own rule where it has
        one, else the problem's ``precision`` knob, else "ieee" (plain fp32 arithmetic). Records
        carry it; a result is checked at its tolerance, and suites compare like with like."""
        if variant.precision is not None:
            return variant.precision(problem)
        return str(problem.get("precision", "ieee"))


# --- registry ----------------------------------------------------------------------------
# A family is a KernelSpec registered under its name, found by a module path: "package.module"
# (its ``spec``, or its ``spec`` submodule's) or "package.module:attribute". The four built-in
# families are registered that way, as an installed package's families are (its entry points in
# the group ENTRY_POINTS) and as a spec made at run time is (:func:`register`). Modules are
# imported lazily, so a broken family cannot break the rest.
ENTRY_POINTS = "kernel_workbench.families"
BUILTIN: dict[str, str] = {
    "rms_norm": "kernels.rms_norm",
    "fused_add_rms_norm": "kernels.fused_add_rms_norm",
    "scalar_ops": "kernels.scalar_ops",
    "block_sparse": "kernels.block_sparse",
}
_REGISTRY: dict[str, str | KernelSpec] = {}  # name -> module path, or the spec registered at run time
_FROM_ENTRY_POINTS: set[str] = set()
_ENTRY_POINTS_READ = False
_BROKEN: dict[str, str] = {}  # name -> why its module failed when get() imported it (tried again next time)


def register(family: KernelSpec | str, name: str | None = None) -> str:
    """Make ``family`` a registered family and return its name: a :class:`KernelSpec` (made in a
    notebook cell or a module: :func:`kernels.custom.family`) or a module path
    (``"pkg.module"`` or ``"pkg.module:attribute"``, the form an entry point gives).

    A name held by a built-in family or an installed package's is refused (ValueError naming
    who holds it); a spec registered at run time under a name registered at run time before
    replaces it (a notebook cell run again)."""
    _read_entry_points()
    if isinstance(family, KernelSpec):
        name = name or family.name
    elif isinstance(family, str) and family.strip():
        name = name or family.rpartition(":")[2].rpartition(".")[2]
    else:
        raise ValueError(f"register() takes a KernelSpec or a module path, not {type(family).__name__}")
    held = _REGISTRY.get(name)
    if held is not None and held is not family and held != family:
        if name in BUILTIN or name in _FROM_ENTRY_POINTS or not isinstance(family, KernelSpec):
            who = held if isinstance(held, str) else f"a spec registered at run time ({held.module or 'a notebook'})"
            raise ValueError(f"family name {name!r} is already registered ({who}); give yours another name")
    _REGISTRY[name] = family
    _BROKEN.pop(name, None)
    return name


def unregister(name: str) -> None:
    """Forget a family registered at run time (tests; a notebook that is done with one)."""
    if name in BUILTIN:
        raise ValueError(f"{name!r} is a built-in family; it cannot be unregistered")
    _REGISTRY.pop(name, None)
    _BROKEN.pop(name, None)


def _read_entry_points() -> None:
    """Register the families installed packages declare (group :data:`ENTRY_POINTS`), once."""
    global _ENTRY_POINTS_READ
    if _ENTRY_POINTS_READ:
        return
    _ENTRY_POINTS_READ = True
    for name, path in BUILTIN.items():
        _REGISTRY.setdefault(name, path)
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        if ep.name in _REGISTRY:
            continue  # a built-in (this project's own entry points) or a duplicate: the first stands
        _REGISTRY[ep.name] = ep.value
        _FROM_ENTRY_POINTS.add(ep.name)


def families() -> list[str]:
    """Registered families whose code is present, in registration order (the built-ins first).
    A family whose module cannot be found is left out and listed by :func:`broken_families`
    (so is one whose module fails when :func:`get` imports it, which stays here)."""
    _read_entry_points()
    return [name for name, entry in _REGISTRY.items() if _missing(entry) is None]


def broken_families() -> dict[str, str]:
    """Registered families that cannot load, each with why in one line: an entry point whose module
    is not installed (a package removed while its metadata stayed, a typo), or a module that failed
    when :func:`get` imported it. Every other family stays usable."""
    _read_entry_points()
    found = {}
    for name, entry in _REGISTRY.items():
        reason = _BROKEN.get(name) or _missing(entry)
        if reason is not None:
            found[name] = reason
    return found


def _missing(entry: str | KernelSpec) -> str | None:
    """Why a registered module path cannot be imported without importing it (None: it can be found)."""
    if isinstance(entry, KernelSpec):
        return None
    module = entry.partition(":")[0]
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:  # a parent package missing: find_spec raises
        return f"{entry}: {type(exc).__name__}: {exc}"
    return None if found is not None else f"{entry}: ModuleNotFoundError: No module named {module!r}"


def get(name: str) -> KernelSpec:
    """The registered family's KernelSpec; ValueError in one line for an unknown family or one
    that cannot load (:func:`broken_families`)."""
    _read_entry_points()
    entry = _REGISTRY.get(name)
    if entry is None:
        raise ValueError(f"unknown kernel family {name!r}; families: {', '.join(families())}")
    if isinstance(entry, KernelSpec):
        return entry
    reason = _missing(entry)
    if reason is not None:
        raise ValueError(
            f"kernel family {name!r} cannot load ({reason}); the others are usable: {', '.join(families())}"
        )
    try:
        spec = _load(name, entry)
    except Exception as exc:
        _BROKEN[name] = f"{entry}: {type(exc).__name__}: {_one_line(exc)}"
        raise ValueError(f"kernel family {name!r} cannot load ({_BROKEN[name]})") from exc
    _BROKEN.pop(name, None)
    return spec


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def module_path(name: str) -> str | None:
    """The module path a worker process imports to find family ``name`` (sweeps on ``isolate``
    or Ray); None for a spec defined in a notebook cell or a script's ``__main__``, whose sweeps
    run in the process that defined it (``executor="local"``)."""
    _read_entry_points()
    entry = _REGISTRY.get(name)
    if isinstance(entry, KernelSpec):
        return entry.module
    return entry


def worker_module(spec: KernelSpec) -> str | None:
    """The module a worker process imports for ``spec``: its registered module path, else the
    module it was declared in; None where it lives in a notebook cell or a script."""
    return module_path(spec.name) or spec.module


def _load(name: str, path: str) -> KernelSpec:
    module_name, _, attr = path.partition(":")
    if attr:
        found = getattr(importlib.import_module(module_name), attr)
    else:
        sub = module_name + ".spec"
        module = importlib.import_module(
            sub if importlib.util.find_spec(module_name) and _has_submodule(sub) else module_name
        )
        found = getattr(module, "spec", None)
        if not isinstance(found, KernelSpec) or found.name != name:  # a module holding several: the one named
            found = next((v for v in vars(module).values() if isinstance(v, KernelSpec) and v.name == name), found)
    if not isinstance(found, KernelSpec):
        raise ValueError(f"family {name!r}: {path} holds no KernelSpec (found {type(found).__name__})")
    return found


def _has_submodule(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def as_tuple(outputs: Any) -> tuple:
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def ensure_sequence(values: Any) -> Sequence:
    return values if isinstance(values, (list, tuple)) else [values]


@dataclass(frozen=True)
class NpuCompileCase:
    """One NPU kernel at one configuration, for ``workbench npu-check``.

    Each family's ``npu.py`` offers ``npu_compile_cases() -> list[NpuCompileCase]``; the checker
    compiles every case with triton-ascend for Ascend910B and classifies the result.
    """

    family: str
    name: str  # readable, e.g. "forward untiled hidden=1024 bf16 M=2"
    kernel: Any  # the @triton.jit function from npu.py
    signature: Mapping[str, str]  # runtime args -> Triton types ("*bf16", "*fp32", "i32", "fp32")
    constants: Mapping[str, Any]  # constexpr args -> values
    default: bool = False  # one of the family's default configurations (must compile)
    ub_bytes: int | None = None  # the family's UB model estimate for this case
