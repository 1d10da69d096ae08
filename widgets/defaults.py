"""A notebook's defaults, before any session exists: whether it runs small sizes
(:func:`quick_for`), where its store and records go (:func:`default_store_path`,
:func:`default_results_dir`), and the one-line note on families that cannot load
(:func:`note_broken_families`). :mod:`widgets.session` uses them and re-exports the public ones."""

from __future__ import annotations

import os
from pathlib import Path

from workbench.device import Device, get_device
from workbench.store import DEFAULT_PATH

_BROKEN_NOTED: set[str] = set()


def note_broken_families() -> None:
    """Say once per process which registered families cannot load (a stale entry point), each in
    one line: the others work as usual."""
    from kernels import broken_families

    for name, reason in broken_families().items():
        if name not in _BROKEN_NOTED:
            _BROKEN_NOTED.add(name)
            print(f"note: kernel family {name!r} cannot load ({reason}); the other families are unaffected")


def default_store_path() -> Path:
    """``$WORKBENCH_STORE``; else ``results/workbench.sqlite`` of the checkout the kernels
    package lives in (so notebooks opened in notebooks/ share the repository's store); else
    ``workbench.store.DEFAULT_PATH`` (relative to the working directory)."""
    env = os.environ.get("WORKBENCH_STORE")
    if env:
        return Path(env)
    import kernels

    root = Path(kernels.__file__).resolve().parent.parent
    if (root / "pyproject.toml").exists() and os.access(root, os.W_OK):
        return root / "results" / "workbench.sqlite"
    return DEFAULT_PATH


def quick_for(device: str | Device, quick: bool | None) -> bool:
    """Whether a notebook runs its small sizes: ``quick`` when given, else on the CPU (the Triton
    interpreter runs a kernel's programs one by one in Python: full sizes would take hours)."""
    if quick is not None:
        return bool(quick)
    return get_device(device).kind == "cpu"


def default_results_dir() -> Path:
    """Where a notebook's records go when it names no ``out_dir``: the folder of the default
    store (``results/`` of the checkout, which git ignores), never the notebooks' folder."""
    return default_store_path().parent
