"""A kernel family declared where its code lives: a notebook cell or a package of one's own.

The four built-in families write a :class:`~kernels.spec.KernelSpec` by hand (140-280 lines in
their ``spec.py``). :func:`family` builds one from what a kernel engineer already has: the host
function that launches the ``@triton.jit`` kernel, how to make inputs for a problem size, the
tile values to explore and the PyTorch reference. Sensible defaults fill the rest: per-dtype
tolerances, the modes, the axis plots use, the tune space. Then :func:`kernels.register` makes
it a family like the others: ``workbench list``, ``bench``, ``sweep``, ``tune``, ``report``, the
Explorer, the heatmaps and the why-view all work on it.

::

    @triton.jit
    def softmax_kernel(X, Y, n_cols, BLOCK_SIZE: tl.constexpr): ...

    def softmax(x, BLOCK_SIZE=1024, num_warps=4):
        y = torch.empty_like(x)
        launch(softmax_kernel, x)[(x.shape[0],)](x, y, x.shape[1], BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
        return y

    spec = family("row_softmax", run=softmax, reference=lambda x: torch.softmax(x, -1),
                  inputs=lambda rows, cols: {"x": torch.randn(rows, cols)},
                  sizes={"rows": 4096, "cols": 1024},
                  tiles={"BLOCK_SIZE": [256, 512, 1024, 2048, 4096], "num_warps": [1, 2, 4, 8]})
    kernels.register(spec)

What the pieces take:

- ``run(**inputs, **tiles)`` returns the output (or a tuple of outputs). Launching through
  :func:`launch` (``kernels.launch.launcher``) runs the kernel in the Triton interpreter on CPU
  tensors and records each launch, so the why-view sees registers, spills and occupancy.
- ``inputs(**sizes)`` returns a dict of tensors (on the CPU, in fp32 or any dtype): the harness
  seeds the random generator first, then moves floating tensors to the device and dtype measured.
  It may name only the sizes it uses. ``grads`` names the inputs that get a gradient (their
  backward is checked against the reference's, through autograd; ``run`` must be differentiable).
- ``reference(**inputs)`` is PyTorch on the same inputs. The harness runs it twice: upcast to
  float64 (the truth) and in the dtype measured (its own rounding error, the yardstick a result is
  judged by: :mod:`kernels.testing`).
- ``sizes`` are the problem knobs (integers) and their defaults; ``quick`` their small values for
  the CPU interpreter (default: the first size capped at 64, the others at 8, since the
  interpreter runs a grid's programs one after another); the first size is the plots' x axis.
- ``tiles``: each tile's values. A tile also takes ``"auto"``, its default: the entry of a tuned
  table for this device and size where one was written by ``workbench tune --write`` or
  ``Session.tune(install=True)`` (the nearest tuned size, within the table's range), else
  ``defaults`` (else the keyword default of ``run`` where it is one of the values, else the first
  value); where ``check`` refuses those, the combination it accepts
  that changes the fewest of them, each as near its start as the declared values allow (a
  power-of-two ratio away for numbers; ties: the smaller). Records name the tiles that ran and
  why in ``tiles_source``.
- ``check(**sizes, **tiles)``: return a string (or raise ValueError) for a configuration that
  cannot run, saying why; it becomes a failed cell, never an exception.
- ``bytes(**sizes, itemsize)``: the fewest bytes the forward must move (GB/s and % of the copy
  bandwidth). Where it also takes ``mode`` it is asked for each mode (``"forward"``,
  ``"backward"``, ``"full"``); otherwise a backward moves the incoming gradients, the inputs again
  and the gradients it writes (element counts from ``inputs`` and ``reference`` on the meta
  device), and ``full`` both. ``flops(**sizes)`` the floating-point operations (the roofline).
- ``peers``: other implementations to measure beside it (name -> function of the inputs, called
  with them in the order ``inputs`` makes them: ``LigerSoftmaxFunction.apply`` works as it is).
- ``tolerances``: ``{dtype: (atol, rtol)}`` over :data:`TOLERANCES`, the outer bound; inside it
  a result is judged by the reference's own error (``error_rule``: :class:`ErrorRule`, ``k`` times
  the reference's maximum, RMS and bias errors plus a floor; a looser ``k`` names its reason).
- ``strided``: ``run`` takes non-contiguous inputs (a view of every row inside a wider buffer),
  so the edge checks run them too (default False: inputs are always contiguous).
- ``tune_dtypes``: the dtypes ``workbench tune --dtype`` / ``Session.tune(dtype=)`` may time in,
  the first the default (default: bf16 where declared, else the first dtype). Whatever dtype it
  times in, a tune installs no table unless the chosen tiles pass in every declared dtype.
- ``tables``: the folder of the family's tuned tables. Default: ``tuned/<name>/`` beside the
  module that declared the family (a folder per family, so the families one module declares keep
  their tables apart); for a notebook cell, ``tuned/<name>/`` in the notebook's working folder.
  ``$KERNELS_TUNED_DIR`` (``<dir>/<name>/``) overrides both.

A declaration that cannot work says so in one line (a :class:`ValueError`) when it is made: a
tile the host function does not take, inputs that cannot be made, a reference that fails on them.
A reference that returns the wrong shape is a failed check of every configuration, not a crash.
"""

from __future__ import annotations

import inspect
import itertools
import math
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from kernels import tuned_tables
from kernels.launch import launcher as launch
from kernels.plans import cached_plan
from kernels.spec import MODES, KernelSpec, Knob, Param, Tuning, Variant, as_tuple, dtype_name, elem_bytes
from kernels.testing import DEFAULT_RULE, ErrorRule

__all__ = ["ErrorRule", "family", "launch"]

OURS = "ours"  # the variant of the declared kernel

# (atol, rtol) per dtype: each output against the fp32 reference may differ by a few units in the
# last place of its dtype (fp32: a reduction in another order). A family whose outputs reach the
# tens, or that accumulates in its dtype, passes looser ones (``tolerances=``).
TOLERANCES: dict[str, tuple[float, float]] = {"fp32": (1e-5, 1e-4), "fp16": (1e-3, 2e-3), "bf16": (1e-2, 1.6e-2)}


def family(
    name: str,
    *,
    run: Callable,
    inputs: Callable[..., Mapping[str, torch.Tensor]],
    reference: Callable,
    sizes: Mapping[str, int],
    tiles: Mapping[str, Sequence] | None = None,
    defaults: Mapping[str, Any] | None = None,
    quick: Mapping[str, int] | None = None,
    check: Callable[..., Any] | None = None,
    bytes: Callable[..., int] | None = None,  # noqa: A002 - the word a user writes
    flops: Callable[..., int] | None = None,
    peers: Mapping[str, Callable] | None = None,
    grads: Sequence[str] = (),
    outputs: Sequence[str] | None = None,
    dtypes: Sequence[str] = ("fp32", "fp16", "bf16"),
    tolerances: Mapping[str, tuple[float, float]] | None = None,
    title: str | None = None,
    doc: str = "",
    tune_sizes: Sequence[int] | None = None,
    tune_dtypes: Sequence[str] | None = None,
    tables: str | os.PathLike | None = None,
    error_rule: ErrorRule = DEFAULT_RULE,
    strided: bool = False,
) -> KernelSpec:
    """A :class:`KernelSpec` for a kernel of one's own (the module docstring says what each piece
    takes); ValueError, in one line, for a declaration that cannot work."""
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"family name {name!r}: use letters, digits and underscores")
    if not sizes:
        raise ValueError(f"{name}: sizes names no problem knob; give at least one, e.g. sizes={{'rows': 4096}}")
    tiles = {k: tuple(v) for k, v in (tiles or {}).items()}
    _check_takes(name, "run", run, list(tiles))
    # A tile's default: as declared, else the host function's own keyword default where it is
    # one of the tile's values, else the first value.
    defaults = {**_keyword_defaults(run, tiles), **dict(defaults or {})}
    for tile, values in tiles.items():
        if not values:
            raise ValueError(f"{name}: tile {tile} has no values")
        if tile in defaults and defaults[tile] not in values:
            raise ValueError(f"{name}: default {tile}={defaults[tile]!r} is not among its values {list(values)}")
    quick = dict(quick or {k: min(int(v), 8 if i else 64) for i, (k, v) in enumerate(sizes.items())})
    dtypes = tuple(dtype_name(d) for d in dtypes)
    tune_dtypes = tuple(dtype_name(d) for d in (tune_dtypes or ["bf16" if "bf16" in dtypes else dtypes[0]]))
    if not set(tune_dtypes) <= set(dtypes):
        raise ValueError(f"{name}: tune_dtypes {list(tune_dtypes)} must be among its dtypes {list(dtypes)}")
    if not isinstance(error_rule, ErrorRule):
        raise ValueError(f"{name}: error_rule must be a kernels.custom.ErrorRule, not {type(error_rule).__name__}")
    knobs = tuple(Knob(k, int(v), low=1, high=1 << 40, doc=f"{k} (a problem size)") for k, v in sizes.items())
    grads = tuple(grads)
    modes = ("forward", "backward", "full") if grads else ("forward",)
    made = _sample(name, inputs, reference, {**dict(sizes), **quick}, grads)
    output_names = tuple(outputs or [f"out{i}" if i else "out" for i in range(len(made))])
    where, module = _declared_in()
    params = tuple(Param(t, ("auto",) + v, "auto", doc=f"{t} (auto: the tuned table's, else {_first(t, v, defaults)})")
                   for t, v in tiles.items())  # fmt: skip

    def make_inputs(problem, dtype, device, seed):
        torch.manual_seed(seed)
        values = dict(_call_with(inputs, problem))
        out = {}
        for key, tensor in values.items():
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                tensor = tensor.to(device=device, dtype=_torch_dtype(dtype))
            elif isinstance(tensor, torch.Tensor):
                tensor = tensor.to(device=device)
            if key in grads:
                tensor = tensor.detach().requires_grad_(True)
            out[key] = tensor
        return out

    resolved_plans: dict = {}  # one answer per configuration: a timed call pays a dict lookup

    def resolved(problem, params, device) -> tuple[dict, str]:
        """The tiles a configuration runs with, and where they came from (remembered per
        configuration, forgotten when a table is installed: kernels.plans.cached_plan)."""
        settings = (tuple(problem.items()), tuple(params.items()), device)
        return cached_plan(resolved_plans, lambda: _resolve(problem, params, device), (), settings)

    def _resolve(problem, params, device) -> tuple[dict, str]:
        explicit = {k: v for k, v in params.items() if v != "auto"}
        auto = [k for k, v in params.items() if v == "auto"]
        if not auto:
            return explicit, "explicit"
        table = _table_choice(name, problem, device, {k: params[k] for k in tiles}, knobs[0].name) or {}
        tuned = {k: v for k, v in table.items() if k != "_source"}  # empty: the tune confirmed the rule
        start = {k: tuned.get(k, _first(k, tiles[k], defaults)) for k in auto}
        chosen = _nearest_accepted(auto, explicit, problem, start)
        source = table.get("_source", "declared defaults")
        if chosen != start:
            # The start does not fit this size (a row longer than its tile): the nearest that does.
            refused = _refusal({**problem, **explicit, **start})
            source += f" adjusted to fit ({refused})" if refused else " adjusted to fit"
        return {**explicit, **chosen}, f"{source}: {_items(chosen)}"

    def _nearest_accepted(auto: list[str], explicit: dict, problem, start: dict) -> dict:
        """``start`` for the ``auto`` tiles; where ``check`` refuses it, the combination check
        accepts that changes the fewest of its tiles, each as near its start as the declared
        values allow (:func:`_distance`; ties: the smaller value)."""
        first = start
        if check is None or _refusal({**problem, **explicit, **first}) is None:
            return first
        orders = [sorted(tiles[k], key=lambda v, k=k: _distance(v, first[k], tiles[k])) for k in auto]
        best = None
        for values in itertools.islice(itertools.product(*orders), 4096):
            candidate = dict(zip(auto, values))
            rank = (
                sum(candidate[k] != first[k] for k in auto),
                sum(_distance(candidate[k], first[k], tiles[k])[0] for k in auto),
            )
            if (best is None or rank < best[0]) and _refusal({**problem, **explicit, **candidate}) is None:
                best = (rank, candidate)
        return first if best is None else best[1]  # none passes: the check says why when measured

    def _refusal(values: Mapping) -> str | None:
        """Why ``check`` refuses a configuration, or None."""
        try:
            verdict = _call_with(check, values)
        except ValueError as exc:
            return str(exc)
        except Exception as exc:  # a check that breaks is the declaration's fault: say so
            return f"{name}: check(...) raised {type(exc).__name__}: {exc}"
        if isinstance(verdict, str):
            return verdict
        if verdict is False:
            return f"{name}: check(...) refused {_items(values)}"
        return None

    def run_ours(inputs_, problem, **params):
        device = next((t.device for t in inputs_.values() if isinstance(t, torch.Tensor)), torch.device("cpu"))
        chosen, _ = resolved(problem, params, device)
        return run(**inputs_, **chosen)

    def check_ours(problem, params, dtype, device):
        if check is None:
            return
        chosen, _ = resolved(problem, params, getattr(device, "torch_device", device))
        reason = _refusal({**problem, **chosen})
        if reason is not None:
            raise ValueError(reason)

    def source(problem, params, device):
        return resolved(problem, params, getattr(device, "torch_device", device))[1]

    variants = [
        Variant(
            OURS,
            "gpu",
            run_ours,
            params=params,
            devices=("cuda", "npu", "cpu"),
            check=check_ours,
            doc=f"{name}: the declared kernel ({getattr(run, '__name__', 'run')})",
            tiles_source=source,
        )
    ]
    for peer, fn in (peers or {}).items():
        variants.append(
            # Positional, in the order inputs() makes them: an autograd Function's apply takes no keywords.
            Variant(
                peer, "torch", lambda inputs_, problem, _fn=fn: _fn(*inputs_.values()), doc=f"{peer} (a peer of {name})"
            )
        )

    traffic: dict = {}  # problem -> element counts of the inputs, the gradients and the outputs

    def min_bytes(problem, mode, dtype):
        if bytes is None:
            return None
        values = {**problem, "itemsize": elem_bytes(dtype)}
        if _takes(bytes, "mode"):
            moved = _call_with(bytes, {**values, "mode": mode})
            return None if moved is None else int(moved)
        forward = int(_call_with(bytes, values))
        if mode == "forward":
            return forward
        key = tuple(sorted(problem.items()))
        if key not in traffic:
            traffic[key] = _elements(inputs, reference, problem, grads)
        counts = traffic[key]
        if counts is None:
            return None  # shapes not known without making the inputs: no bandwidth figure
        backward = (counts["outputs"] + counts["inputs"] + counts["grads"]) * elem_bytes(dtype)
        return backward if mode == "backward" else forward + backward

    spec = KernelSpec(
        name=name,
        title=title or name.replace("_", " "),
        knobs=knobs,
        make_inputs=make_inputs,
        reference=lambda inputs_, problem: reference(**inputs_),
        output_names=output_names,
        variants=tuple(variants),
        min_bytes=min_bytes,
        axis=knobs[0].name,
        modes=tuple(m for m in MODES if m in modes),
        dtypes=dtypes,
        tolerances={**TOLERANCES, **dict(tolerances or {})},
        error_rule=error_rule,
        strided=bool(strided),
        quick=quick,
        doc=doc or (inspect.getdoc(run) or "").split("\n\n")[0],
        memory_bound=bytes is not None and flops is None,
        flops=None if flops is None else (lambda problem, mode: int(_call_with(flops, problem))),
        module=module,
        tuning=Tuning(
            variant=OURS,
            knob=knobs[0].name,
            sizes=tuple(tune_sizes or _tune_sizes(int(knobs[0].default))),
            params={t: v for t, v in tiles.items()},
            mode="forward",
            dtype=tune_dtypes[0],
            dtypes=tune_dtypes,
            quick_sizes=(quick[knobs[0].name],),
            quick_problem=quick,
        )
        if tiles
        else None,
    )
    # Installed tables go beside the declaring code, never into this repository's kernels/; one
    # folder per family, since a table's file is named by the device alone.
    tuned_tables.place(name, Path(tables) if tables is not None else (where or Path.cwd()) / "tuned" / name)
    return spec


# --- helpers ------------------------------------------------------------------------------------
def _check_takes(name: str, what: str, fn: Callable, keywords: list[str]) -> None:
    """``fn`` accepts each of ``keywords`` (or ``**kwargs``); ValueError naming what it takes."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C function: trust it
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return
    missing = [k for k in keywords if k not in sig.parameters]
    if missing:
        raise ValueError(
            f"{name}: {what} does not take the tile {', '.join(missing)}; its parameters: {', '.join(sig.parameters)}"
        )


def _call_with(fn: Callable, values: Mapping[str, Any]):
    """``fn`` called with the values it names (all of them where it takes ``**kwargs``)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn(**values)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return fn(**values)
    return fn(**{k: v for k, v in values.items() if k in sig.parameters})


def _sample(name, inputs, reference, problem, grads) -> tuple:
    """Inputs and the reference's outputs at the quick sizes on the CPU: a declaration that cannot
    make them fails here, in one line, rather than in every measurement."""
    torch.manual_seed(0)
    try:
        made = _call_with(inputs, problem)
    except Exception as exc:
        raise ValueError(f"{name}: inputs({_items(problem)}) failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(made, Mapping) or not all(isinstance(v, torch.Tensor) for v in made.values()):
        raise ValueError(f"{name}: inputs(...) must return a dict of tensors, got {type(made).__name__}")
    missing = [g for g in grads if g not in made]
    if missing:
        raise ValueError(f"{name}: grads names {', '.join(missing)}, which inputs(...) does not make")
    try:
        out = reference(**{k: v.float() if v.is_floating_point() else v for k, v in made.items()})
    except Exception as exc:
        raise ValueError(f"{name}: reference(...) failed on the inputs: {type(exc).__name__}: {exc}") from exc
    return as_tuple(out)


def _items(values: Mapping) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _takes(fn: Callable, keyword: str) -> bool:
    """Whether ``fn`` names ``keyword`` among its parameters (``**kwargs`` does not count)."""
    try:
        return keyword in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _distance(value, start, values: Sequence) -> tuple:
    """How far a tile value is from its start: the log2 ratio for positive numbers, else the
    places between them in the declared values; the smaller value first where two are as far."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in (value, start))
    if numbers:
        return abs(math.log2(value / start)), value
    order = list(values)
    return abs(order.index(value) - order.index(start)), order.index(value)


def _elements(inputs, reference, problem, grads) -> dict | None:
    """Element counts of the floating inputs, of the gradients' inputs and of the reference's
    outputs at ``problem``, made on the meta device (no memory); None where that cannot be done."""
    try:
        with torch.device("meta"):
            made = dict(_call_with(inputs, problem))
            floating = {k: v for k, v in made.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
            outs = as_tuple(reference(**made))
    except Exception:  # noqa: BLE001 - a maker or reference the meta device cannot run
        return None
    return {
        "inputs": sum(v.numel() for v in floating.values()),
        "grads": sum(floating[g].numel() for g in grads if g in floating),
        "outputs": sum(o.numel() for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point()),
    }


def _keyword_defaults(fn: Callable, tiles: Mapping[str, Sequence]) -> dict:
    """The keyword defaults of ``fn`` that are among the values of the tile of that name."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {
        k: params[k].default
        for k, values in tiles.items()
        if k in params and params[k].default is not inspect.Parameter.empty and params[k].default in values
    }


def _first(tile: str, values: Sequence, defaults: Mapping) -> Any:
    return defaults.get(tile, values[0])


def _torch_dtype(dtype) -> torch.dtype:
    from kernels.spec import DTYPES, dtype_name

    return DTYPES[dtype_name(dtype)]


def _tune_sizes(default: int) -> list[int]:
    """Four sizes around the default, a power of two apart each side."""
    return sorted({max(1, default // 4), max(1, default // 2), default, default * 2})


def _declared_in() -> tuple[Path | None, str | None]:
    """The folder and the module of the code that called :func:`family`: the folder keeps its
    tuned tables, a worker process imports the module. (None, None) for a notebook cell or an
    interactive session (the tables then go to the working folder's ``tuned/<name>/``); a script's folder
    with no module (its ``__main__`` cannot be imported)."""
    frame = inspect.currentframe()
    try:
        caller = frame.f_back.f_back if frame and frame.f_back else None
        if caller is None:
            return None, None
        path, module = caller.f_code.co_filename, caller.f_globals.get("__name__")
    finally:
        del frame
    folder = Path(path).resolve().parent if path and not path.startswith("<") and os.path.exists(path) else None
    if folder is not None and "ipykernel" in path:  # a notebook cell's code lives in a temporary file
        folder = None
    return folder, (None if module in (None, "__main__") else module)


def _table_choice(name, problem, device, tiles, axis) -> dict:
    """The tuned table's tiles for this device and size ({} when there is none), with '_source'."""
    from kernels.runtime import device_info

    found = tuned_tables.choose(name, tuned_tables.device_key(device_info(device)), problem[axis], tiles, list(tiles))
    if found.tiles is None:
        return {}
    return {**found.tiles, "_source": found.source}
