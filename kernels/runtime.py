"""Which accelerator a kernel runs on, as plain facts: kind, index, name and core count.

Kernels and their host functions ask a :class:`DeviceInfo` (``device_of(tensor)``) instead of
``torch.cuda`` directly, so the same code runs on CUDA, on an Ascend NPU (``torch_npu`` +
triton-ascend) and on the CPU, where Triton kernels run in the Triton interpreter. Persistent
grids take ``num_cores``: SMs on CUDA, vector cores on an NPU.

This is the library's only device module. Timing, memory statistics and copy bandwidth belong
to the measuring tool (``workbench.device.Device`` extends this class with them).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import platform
from dataclasses import dataclass

import torch

KINDS = ("cuda", "npu", "cpu")


def npu_module():
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
    if npu_module() is not None:
        present.append("npu")
    present.append("cpu")
    return tuple(present)


@dataclass(eq=False)
class DeviceInfo:
    """One accelerator (or the CPU): identity, runtime module and core count."""

    kind: str
    index: int = 0

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.kind, self.index) if self.kind != "cpu" else torch.device("cpu")

    @property
    def backend(self):
        """The torch submodule with the device's runtime calls (torch.cuda / torch.npu)."""
        if self.kind == "cuda":
            return torch.cuda
        if self.kind == "npu":
            return npu_module()
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
    def shared_bytes_per_program(self) -> int | None:
        """The most shared memory one program (CUDA block) may ask for, in bytes (the opt-in
        limit, as Triton checks it at launch); None off CUDA or where torch does not say."""
        if self.kind != "cuda":
            return None
        return getattr(torch.cuda.get_device_properties(self.index), "shared_memory_per_block_optin", None)

    @functools.cached_property
    def l2_bytes(self) -> int | None:
        if self.kind == "cuda":
            return getattr(torch.cuda.get_device_properties(self.index), "L2_cache_size", None)
        return None

    def synchronize(self) -> None:
        if self.backend is not None:
            self.backend.synchronize(self.index)


def _npu_vector_cores(index: int) -> int:
    """Vector cores of an Ascend NPU from the triton-ascend driver, with a 910B fallback."""
    try:
        from triton.runtime import driver

        props = driver.active.utils.get_device_properties(index)
        return int(props.get("num_vectorcore") or props["num_aicore"])
    except Exception:
        return 48  # Ascend 910B: 24 AI cores x 2 vector cores


def parse_device(name: str | torch.device) -> tuple[str, int]:
    """``(kind, index)`` for ``"auto" | "cuda[:i]" | "npu[:i]" | "cpu"`` or a torch.device.

    ``auto`` prefers cuda, then npu, then cpu. A device that is not here is a ValueError naming
    the devices that are.
    """
    if isinstance(name, torch.device):
        kind, index = name.type, name.index or 0
    else:
        text = str(name).strip().lower()
        if text == "auto":
            text = kinds_present()[0]
        kind, _, idx = text.partition(":")
        try:
            index = int(idx) if idx else 0
        except ValueError:
            raise ValueError(f"device={name!r}: the index after ':' must be an integer, e.g. cuda:0") from None
    if kind not in KINDS:
        raise ValueError(f"device={name!r} is not a device kind; use one of auto, {', '.join(KINDS)}")
    if kind not in kinds_present():
        raise ValueError(
            f"device={name!r} is not available in this process; devices present: "
            f"{', '.join(kinds_present())} (or 'auto')"
        )
    return kind, index


class DeviceCache:
    """``name -> device object`` with the hot path a dict lookup: every launch asks for its
    tensor's device. ``factory(kind, index)`` builds the object once per (kind, index)."""

    def __init__(self, factory):
        self._factory = factory
        self._by_key: dict[tuple[str, int], object] = {}
        self._by_name: dict[object, object] = {}

    def get(self, name):
        cached = self._by_name.get(name)
        if cached is not None:
            return cached
        key = parse_device(name)
        if key not in self._by_key:
            self._by_key[key] = self._factory(*key)
        # "auto" is not remembered by name: what it means is decided once, by parse_device.
        if not (isinstance(name, str) and name.strip().lower() == "auto"):
            self._by_name[name] = self._by_key[key]
        return self._by_key[key]


_INFOS = DeviceCache(DeviceInfo)


def device_info(name: str | torch.device | DeviceInfo = "auto") -> DeviceInfo:
    """The :class:`DeviceInfo` for a name, a torch.device, or a DeviceInfo (returned as is)."""
    if isinstance(name, DeviceInfo):
        return name
    return _INFOS.get(name)


def current_stream_handle(index: int) -> int:
    """The raw handle of CUDA device ``index``'s current stream, as an integer: what a per-stream
    cache keys on. Read the way Triton's launch reads it (no ``torch.cuda.Stream`` object is
    built, which costs several microseconds on a launch path)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return torch.cuda.current_stream(index).cuda_stream


def auto_impl(tensor: torch.Tensor) -> str:
    """The kernels ``impl="auto"`` picks for a tensor: ``"npu"`` on an NPU, ``"gpu"`` elsewhere
    (the CPU runs the GPU kernels in the Triton interpreter)."""
    return "npu" if tensor.device.type == "npu" else "gpu"


def device_of(tensor: torch.Tensor) -> DeviceInfo:
    """The device a tensor lives on (a dict lookup after the first call)."""
    return _INFOS.get(tensor.device)


def described_device(kind: str, index: int = 0, **facts) -> DeviceInfo:
    """A :class:`DeviceInfo` whose facts (``name``, ``num_cores``, ``l2_bytes``, ``driver``,
    ``shared_bytes_per_program``) are given rather than asked of a runtime: a device this process
    cannot see (a compile-ahead process plans tiles for a GPU it never touches). Facts not given
    are asked as usual."""
    info = DeviceInfo(kind, index)
    info.__dict__.update(facts)  # what the cached properties would have cached
    return info


@contextlib.contextmanager
def standing_in(info: DeviceInfo, devices=("meta", "cpu")):
    """Inside the block, :func:`device_of` answers ``info`` for tensors on ``devices``: host
    functions called with stand-in tensors (meta, or CPU tensors holding real indices) plan
    tiles for ``info``'s device. Process-wide; the previous answers come back on leaving."""
    names = [torch.device(d) for d in devices]
    saved = {name: _INFOS._by_name.get(name) for name in names}
    for name in names:
        _INFOS._by_name[name] = info
    try:
        yield info
    finally:
        for name, before in saved.items():
            if before is None:
                _INFOS._by_name.pop(name, None)
            else:
                _INFOS._by_name[name] = before
