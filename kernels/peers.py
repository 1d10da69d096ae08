"""Shared plumbing for peer variants (torch.compile, optional libraries).

``compiled(fn)`` is the one place that configures torch.compile for benchmarking: many shapes
in one process (raise the recompile limit so a sweep never silently falls back to eager) and
backward timing with ``retain_graph=True`` (turn off donated buffers, which forbid it).
``torch_compile_variant(bind, doc)`` is a family's ``torch_compile`` variant of such a call, and
``liger_variant(bind, doc, module=..., available=...)`` its ``liger`` variant (Liger-Kernel's function).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any, Callable

from kernels.spec import Variant, run_of

# What torch.compile's first call imports (Dynamo, then Inductor's lowerings and code generators:
# 1.6 s on a CPU host): a torch.compile variant's ``imports``.
TORCH_COMPILE_IMPORTS = ("torch._inductor.compile_fx",)


@functools.cache
def _configure_dynamo() -> None:
    import torch._dynamo

    cfg = torch._dynamo.config
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), 256))
    try:
        import torch._functorch.config as functorch_config

        if hasattr(functorch_config, "donated_buffer"):
            functorch_config.donated_buffer = False
    except ImportError:
        pass


@functools.cache
def compiled(fn):
    """``torch.compile(fn, dynamic=False)``, configured for sweeps; one compiled wrapper per fn."""
    import torch

    _configure_dynamo()
    return torch.compile(fn, dynamic=False)


def missing(module: str, pip_name: str) -> str | None:
    """None when ``module`` is importable, else the reason a peer variant is unavailable."""
    return None if importlib.util.find_spec(module) else f"{pip_name} is not installed (pip install {pip_name})"


def torch_compile_variant(bind: Callable[..., Callable[[], Any]], doc: str) -> Variant:
    """A family's ``torch_compile`` variant: ``bind(inputs, problem)`` returns a call of a
    :func:`compiled` function. It runs on a device only, and it is marked ``inductor_peer`` with
    :data:`TORCH_COMPILE_IMPORTS` so that its graphs and imports can be made ahead of measuring."""
    return Variant(
        "torch_compile",
        "torch",
        run_of(bind),
        devices=("cuda", "npu"),
        doc=doc,
        bind=bind,
        imports=TORCH_COMPILE_IMPORTS,
        inductor_peer=True,
    )


def liger_variant(
    bind: Callable[..., Callable[[], Any]], doc: str, *, module: str, available: Callable[[], str | None]
) -> Variant:
    """A family's ``liger`` variant: ``bind(inputs, problem)`` returns a call of a Liger-Kernel
    function from ``module``, which the variant lists in its ``imports`` (Liger's package imports
    transformers: seconds, better spent before measuring). It runs on CUDA only, and its kernels
    are plain Triton (``triton_peer``): compiled ahead like ours."""
    return Variant(
        "liger",
        "peer",
        run_of(bind),
        devices=("cuda",),
        available=available,
        doc=doc,
        bind=bind,
        triton_peer=True,
        imports=(module,),
    )
