"""A notebook's kernel started, and its imports made, while the notebook before it runs.

A headless notebook on a GPU spends its first seconds on work no measurement needs: the kernel
process starting, then its imports (torch, pandas, plotly, the workbench), and inside its
first sweep a peer's imports (Liger-Kernel's pulls in transformers; torch.compile's first call
imports Inductor). ``workbench report`` runs the notebooks one after another, so while one
measures, :class:`WarmKernel` starts the next one's kernel in a background thread and imports
there the modules the notebook will import (:func:`notebook_modules`: its top-level ``import``
statements, modules only, no name bound in its namespace) and those its family's variants
import at their first call (``KernelSpec.first_call_imports``), and starts the compile
processes its Session would start (for a family with a torch.compile peer, the graph processes
too). The notebook then runs in that kernel (papermill's ``km``). Nothing in the warm-up
launches work on the GPU: it imports, so the notebook measuring meanwhile is disturbed no more
than by its own compile processes.
"""

from __future__ import annotations

import ast
import json
import threading
import time
from pathlib import Path

# A kernel that has not started and imported in this long is dropped; the notebook gets a new one.
WARM_UP_TIMEOUT_S = 300

# Run in the warm kernel: each module imported by name; a module that fails to import is left
# for the notebook to meet (and report) itself. Then the compile (and graph) processes a
# notebook's Session starts on a GPU (workbench.compiling.service; their own imports take
# seconds; nothing on the CPU). The helper deletes itself, so the notebook's namespace holds
# nothing it did not define.
_WARM_UP_CODE = """\
def _workbench_warm_up(names, device_kind, graphs):
    import importlib
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    from workbench.compiling import service
    service.start(device_kind, graphs=graphs)
_workbench_warm_up({names!r}, {device_kind!r}, {graphs!r})
del _workbench_warm_up
"""


def notebook_modules(path: Path) -> list[str]:
    """The modules a notebook's code cells import at their top level (inside a top-level
    ``try`` too: an optional peer), in order, each once: ``import a.b`` gives ``a.b``, ``from
    a import b`` gives ``a`` and ``a.b`` (``b`` may be a submodule). Relative imports and cells
    that are not plain Python (IPython magics) are skipped."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    names: list[str] = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        try:
            tree = ast.parse("".join(cell.get("source") or ""))
        except SyntaxError:
            continue
        for node in tree.body:
            for stmt in [node, *(node.body if isinstance(node, ast.Try) else ())]:
                if isinstance(stmt, ast.Import):
                    names.extend(alias.name for alias in stmt.names)
                elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
                    names.append(stmt.module)
                    names.extend(f"{stmt.module}.{alias.name}" for alias in stmt.names if alias.name != "*")
    return list(dict.fromkeys(names))


def _spec_of(family: str | None):
    """``family``'s KernelSpec, or None (no family, or one not registered here)."""
    import kernels

    return kernels.get(family) if family and family in kernels.families() else None


def warm_up_modules(path: Path, family: str | None, device_kind: str) -> list[str]:
    """What the warm kernel of notebook ``path`` imports: the notebook's modules, then the
    first-call imports of ``family``'s variants that can run on ``device_kind``."""
    spec = _spec_of(family)
    names = notebook_modules(path) + (spec.first_call_imports(device_kind) if spec else [])
    return list(dict.fromkeys(names))


def warm_kernel_for(path: Path, family: str | None, cwd: Path, kernel_name: str, device_kind: str) -> "WarmKernel":
    """Notebook ``path``'s warm kernel: its :func:`warm_up_modules`, and the graph processes too
    where ``family`` has a torch.compile peer on ``device_kind``."""
    spec = _spec_of(family)
    graphs = spec is not None and spec.has_graph_peers(device_kind)
    return WarmKernel(warm_up_modules(path, family, device_kind), cwd, kernel_name, device_kind, graphs)


class WarmKernel:
    """One notebook's kernel, started with ``cwd``, importing ``modules`` and starting the compile
    processes for ``device_kind``, in a background thread from construction. :meth:`take` waits
    for it and hands over its kernel manager (None where the start failed: :attr:`error` says
    why, and the notebook starts a kernel of its own); :meth:`release` shuts it down after, in
    the background."""

    def __init__(
        self, modules: list[str], cwd: Path, kernel_name: str, device_kind: str = "cpu", graphs: bool = False
    ) -> None:
        self.modules = list(modules)
        self.device_kind = device_kind
        self.graphs = graphs  # start the graph processes too (a family with a torch.compile peer)
        self.cwd = Path(cwd)
        self.kernel_name = kernel_name
        self.seconds: float | None = None  # start + imports, wall
        self.waited_s: float | None = None  # how long :meth:`take` waited for it
        self.error: str | None = None
        self._km = None
        self._release: threading.Thread | None = None
        self._thread = threading.Thread(target=self._start, name="warm-kernel", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        from jupyter_client.manager import KernelManager

        started = time.perf_counter()
        km = None
        try:
            km = KernelManager(kernel_name=self.kernel_name)
            km.start_kernel(cwd=str(self.cwd))
            client = km.client()
            client.start_channels()
            try:
                client.wait_for_ready(timeout=60)
                reply = client.execute_interactive(
                    _WARM_UP_CODE.format(names=self.modules, device_kind=self.device_kind, graphs=self.graphs),
                    store_history=False,
                    timeout=WARM_UP_TIMEOUT_S,
                    output_hook=lambda msg: None,
                )
            finally:
                client.stop_channels()
            if reply["content"].get("status") != "ok":
                raise RuntimeError(f"the warm-up cell ended with {reply['content'].get('status')!r}")
            self._km = km
        except Exception as exc:  # noqa: BLE001 - a warm-up that fails costs the notebook nothing
            self.error = f"{type(exc).__name__}: {exc}"
            if km is not None and km.has_kernel:
                km.shutdown_kernel(now=True)
        finally:
            self.seconds = time.perf_counter() - started

    def take(self):
        """The started kernel's manager once its imports are done (None where they failed)."""
        asked = time.perf_counter()
        self._thread.join(WARM_UP_TIMEOUT_S + 90)
        self.waited_s = time.perf_counter() - asked
        if self._thread.is_alive():
            self.error = self.error or f"not ready after {self.waited_s:.0f} s"
            return None
        return self._km

    def release(self, km) -> None:
        """Shut down ``km`` (the kernel :meth:`take` gave, its notebook done) in the background,
        as papermill ends a kernel, politely: its process's exit (its compile processes', CUDA's
        teardown) then runs beside the next notebook instead of before it."""
        if km is not None and km.has_kernel:
            self._release = threading.Thread(target=km.shutdown_kernel, name="warm-kernel-shutdown", daemon=True)
            self._release.start()

    def wait_released(self, timeout: float = 120) -> None:
        """Wait for :meth:`release`'s shutdown to end."""
        if self._release is not None:
            self._release.join(timeout)

    def facts(self) -> dict:
        """What the report keeps of it: seconds, the wait, the modules' count, an error."""
        return {
            "seconds": None if self.seconds is None else round(self.seconds, 1),
            "waited_s": None if self.waited_s is None else round(self.waited_s, 1),
            "modules": len(self.modules),
            "error": self.error,
        }
