"""One configuration to compile ahead, as plain data, and the compile itself.

A :class:`CompileJob` names a configuration the way the measuring process will run it: the
family (and the module that defines it, so another process finds it), the variant, dtype, mode,
the problem and the tiles as resolved against the family's spec, and the tuned tables' state.
Its :attr:`~CompileJob.key` is what the measuring process's first call looks up
(:func:`workbench.compiling.service.settle`), so both sides build jobs with :func:`job_of`.

:func:`compile_job` makes the variant's call (and its backward where the mode has one) under
:func:`kernels.launch.compile_only` on stand-in inputs: the family's own inputs on the meta device
(the host functions do no work at all), or, where a host function needs values, on CPU tensors
holding the same values (still nothing runs: inside ``compile_only`` CPU launches compile too).
Every kernel lands in the Triton disk cache as a real launch's would, with its host launcher
where Triton builds one per signature (3.6). A peer whose variant declares ``compiles_ahead``
(its kernels are plain Triton JIT functions launched by the peer's own code, Liger-Kernel's) is
compiled the same way, every Triton launch in the process taken as a compile.

First calls that are not one variant's call on one problem are a job too (:func:`call_job`,
kind "call"): a module-level function, named by its module and name so another process imports
it, builds what it needs on the CPU and makes its calls, which the compile process runs under
``compile_only`` with every Triton launch taken as a compile. An HMM chain of block-sparse
layers is one (``kernels.block_sparse.hmm.chain_first_calls``, submitted by
``workbench/suites/chain.py``): the same HMM built on the CPU, its tiles planned for the
measuring device.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class CompileJob:
    """One configuration to compile ahead (plain, picklable data)."""

    family: str
    family_module: str | None
    variant: str
    dtype: str
    mode: str
    problem: dict
    params: dict
    seed: int = 0
    # True: the tuned tables as installed; False: every table off; a part's name: that part's off
    # (kernels.tuned_tables.disabled): "auto" tiles resolve from them
    tables: bool | str = True
    # "triton": kernels compiled under compile_only (a compile process); "graphs": torch.compile's
    # graphs compiled into Inductor's caches (a graph process, workbench.compiling.graphs);
    # "call": the first calls a named function makes (a compile process, call_job: family_module
    # and variant name the function, problem holds its keyword arguments)
    kind: str = "triton"
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def key(self) -> str:
        """What the measuring process's first call of this configuration looks up."""
        parts = [self.family, self.variant, self.dtype, self.mode, sorted(self.problem.items()),
                 sorted(self.params.items()), self.tables]  # fmt: skip
        if self.kind != "triton":
            parts.append(self.kind)
        return json.dumps(parts, default=str)


def job_of(
    spec,
    variant,
    *,
    dtype: str,
    mode: str,
    problem: Mapping[str, Any] | None,
    params: Mapping[str, Any] | None,
    quick: bool = False,
    seed: int = 0,
    tables: bool | str | None = None,
    resolved: bool = False,
) -> CompileJob | None:
    """The job of a configuration as :func:`workbench.measure.measure_many` runs it (problem and
    tiles resolved against ``spec``; ``resolved``: they already are), or None where none can be
    compiled ahead: a variant that is not ours and declares nothing to compile ahead (a peer's
    Triton kernels, ``triton_peer``; torch.compile's graphs, ``inductor_peer``: a "graphs" job), a family
    another process cannot import (defined in a notebook cell), a configuration the spec refuses
    (the measuring process says why). ``tables``: the tables' state (None: as they are now in
    this process, :func:`tables_now`)."""
    from kernels.spec import dtype_name, worker_module

    try:
        var = spec.variant(variant) if isinstance(variant, str) else variant
        kind = kind_of(var)
        if kind is None:
            return None
        module = worker_module(spec)
        if module is None:
            return None
        prob = dict(problem or {}) if resolved else spec.resolve_problem(problem, quick=quick)
        prm = dict(params or {}) if resolved else var.resolve_params(params)
        dt = dtype_name(dtype)
    except (ValueError, KeyError):
        return None
    return CompileJob(
        spec.name, module, var.name, dt, mode, prob, prm, seed, tables_now() if tables is None else tables, kind
    )


def kind_of(var) -> str | None:
    """What of variant ``var``'s first call is compiled ahead: "triton" (ours, a Triton peer's
    kernels: a compile process), "graphs" (torch.compile's: a graph process), None (nothing)."""
    if var.compiles_ahead:
        return "triton"
    return "graphs" if var.inductor_peer else None


def call_job(function, arguments: Mapping[str, Any], *, family: str, dtype: str, mode: str) -> CompileJob:
    """The job whose first calls are ``function(**arguments)``: ``function`` is a module-level
    function another process imports by its module and name, which builds what it needs on the
    CPU and makes the calls whose kernels are to be compiled; ``family``, ``dtype`` and ``mode``
    name the job in the logs and its key."""
    return CompileJob(family, function.__module__, function.__name__, dtype, mode, dict(arguments), {}, kind="call")


def tables_now() -> bool | str:
    """The tuned tables' state in this process now, as a job records it: True (as installed),
    False (every table off) or the one part that is off."""
    from kernels.tuned_tables import disabled_parts

    off = disabled_parts()
    if not off:
        return True
    if None in off:
        return False
    return sorted(off)[0] if len(off) == 1 else False


def tables_state(tables: bool | str):
    """The context a job (or a sweep task) with ``tables`` runs in: the tables as installed
    (True), every table off (False), or one part's tables off (its name)."""
    from kernels import tuned_tables

    if tables is True:
        return contextlib.nullcontext()
    return tuned_tables.disabled(None if tables is False else tables)


def register_module(family: str, module: str | None) -> None:
    """Make ``family`` known to this process from the module that defines it (a family registered
    only in the process that sent the job: a plugin, a test family)."""
    from kernels.spec import families, register

    if family not in families() and module:
        register(module, name=family)


def compile_job(job: CompileJob, facts: dict) -> dict:
    """Compile ``job``'s kernels for the device ``facts`` describe
    (:func:`workbench.compiling.target.device_facts`), running nothing.

    ``{"ok", "inputs": "meta" | "cpu" | None, "kernels": [{"name", "hash", "launcher_ms"}], "ms",
    "error", "worker"}``; a configuration that cannot be compiled ahead gives ``ok`` False and why
    (never raises)."""
    started = time.perf_counter()
    result = {"ok": False, "inputs": None, "kernels": [], "ms": 0.0, "error": None, "worker": worker_info()}
    try:
        result.update(_COMPILERS[job.kind](job, facts))
        result["ok"] = True
    except Exception as exc:  # noqa: BLE001 - best effort: the measuring process compiles it itself
        result["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
    result["ms"] = (time.perf_counter() - started) * 1e3
    return result


def worker_info() -> dict:
    """Where a job ran: host, pid and the GPUs the process may use (none for a compile process)."""
    import socket

    return {"host": socket.gethostname(), "pid": os.getpid(), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}


def _compile(job: CompileJob, facts: dict) -> dict:
    import torch

    from kernels.spec import DTYPES, get
    from workbench.compiling.target import compile_target

    register_module(job.family, job.family_module)
    spec = get(job.family)
    var = spec.variant(job.variant)
    if not var.compiles_ahead:
        raise ValueError(f"{var.name} declares nothing to compile ahead")
    target, device = compile_target(facts)
    with tables_state(job.tables):
        if var.check is not None:
            var.check(job.problem, job.params, job.dtype, device)
        inputs = spec.make_inputs(job.problem, DTYPES[job.dtype], torch.device("cpu"), job.seed)
        failed = []
        for where in ("meta", "cpu"):
            stand_ins = {name: _stand_in(value, where) for name, value in inputs.items()}
            try:
                kernels = compile_call(var, job.problem, job.params, job.mode, stand_ins, target, device)
                return {"inputs": where, "kernels": kernels}
            except Exception as exc:  # noqa: BLE001 - meta tensors cannot answer every host function
                failed.append(f"on {where}: {type(exc).__name__}: {exc}")
        raise RuntimeError("; ".join(failed))


def _compile_named_call(job: CompileJob, facts: dict) -> dict:
    """A call job: its function imported by name and called with its arguments under
    ``compile_only``, every Triton launch taken as a compile (inside the block, tiles planned
    from a tensor's device are planned for the device ``facts`` describe)."""
    from kernels.launch import compile_only
    from workbench.compiling.target import compile_target

    target, device = compile_target(facts)
    function = getattr(importlib.import_module(job.family_module), job.variant)
    with compile_only(target, device, launchers=True, every_jit=True) as compiled:
        function(**job.problem)
    if not compiled:
        raise ValueError(f"{job.variant} launched no Triton kernel here")
    return {"inputs": "cpu", "kernels": _listed(compiled)}


def _listed(compiled) -> list[dict]:
    return [{"name": c.name, "hash": c.hash, "launcher_ms": c.launcher_ms} for c in compiled]


# How a compile process compiles a job of each kind ("graphs" jobs go to a graph process:
# workbench/compiling/graphs.py).
_COMPILERS = {"triton": _compile, "call": _compile_named_call}


def compile_call(var, problem: dict, params: dict, mode: str, inputs: dict, target, device) -> list[dict]:
    """The variant's call (and its backward where ``mode`` has one) on ``inputs`` under
    :func:`kernels.launch.compile_only` (host launchers built too; a peer's own Triton launches
    compiled too); ``[{"name", "hash", "launcher_ms"}]`` of the kernels it compiled
    (``launcher_ms`` None: no launcher to build)."""
    import torch

    from kernels.launch import compile_only
    from kernels.spec import as_tuple

    backward = mode in ("backward", "full")
    every_jit = var.is_peer  # a peer launches its kernels itself, not through kernels.launch
    with (
        torch.set_grad_enabled(backward),
        compile_only(target, device, launchers=True, every_jit=every_jit) as compiled,
    ):
        outputs = as_tuple(var.run(inputs, problem, **params))
        if backward:
            outs = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
            wrt = [v for v in inputs.values() if isinstance(v, torch.Tensor) and v.requires_grad]
            if outs and wrt:
                torch.autograd.grad(outs, wrt, [torch.ones_like(o) for o in outs], allow_unused=True)
    if not compiled:
        raise ValueError(f"{var.name} launched no Triton kernel here")
    return _listed(compiled)


def _stand_in(value, where: str):
    """A tensor's copy on ``where`` (meta: shape, dtype and strides only), its grad flag kept."""
    import torch

    if not isinstance(value, torch.Tensor):
        return value
    copy = value.detach().to("meta") if where == "meta" else value.detach().clone()
    return copy.requires_grad_(value.requires_grad)
