"""Three torch ways to combine a tensor with a Python number, and the cache one of them needs.

``materialized`` — the slow path, kept on purpose so its cost can be seen. Every call builds a
full-shape tensor of the scalar on the host (allocation + fill) and copies it to x's device,
then runs the tensor-tensor operator. A framework that does this for ``x / numel`` pays
``numel(x) x itemsize`` bytes of host fill and host-to-device copy per call. Each call is counted
(:func:`counting`), so a workload can report how many materialisations it really performed.

``cached`` — one persistent 0-d tensor of the scalar per (device, dtype, value), created once
(one tiny host-to-device copy) and kept in an LRU-bounded :class:`ScalarCache`; the operator
then broadcasts it. The scalar is rounded to x's dtype, as the framework's 0-d tensor is.

``python`` — torch's own tensor-scalar operator: ``torch.div(x, 2.0)``. The number goes to the
kernel as an argument (on CUDA in the operator's fp32 compute precision, not rounded to x's
dtype; torch's CPU kernels round it). Note that torch's two ``pow`` paths differ at edge inputs:
the Python-number path computes exponents 0.5 / -0.5 as sqrt / rsqrt (``(-inf) ** 0.5`` is nan,
``(-0.0) ** 0.5`` is -0.0), while the tensor-tensor path, which ``materialized`` and ``cached``
use, follows C ``pow`` (+inf, +0.0).

Graph capture. While a CUDA graph (or an NPU graph) is being captured, a host-to-device copy
must not be recorded: the graph would replay a copy from host memory that may be gone or
changed. So during capture the cached strategy never creates or fills a cache entry: an entry
made before capture is used as it is, otherwise the scalar is made by an on-device fill
(``torch.full`` on the device, a kernel the graph can replay) and not kept. The materialized
strategy cannot run during capture at all and says so.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from kernels.runtime import device_info

TORCH_OPS = {"div": torch.div, "sub": torch.sub, "pow": torch.pow}


# --- graph capture, asked of the device model ----------------------------------------------
def is_capturing(device: torch.device) -> bool:
    """True while a graph is being captured on the current stream of ``device``'s runtime
    (``torch.cuda`` / ``torch.npu``: ``is_current_stream_capturing``); always False on the CPU."""
    if device.type == "cpu":
        return False
    backend = device_info(device).backend  # a dict lookup after the first call
    check = getattr(backend, "is_current_stream_capturing", None)
    return bool(check()) if check is not None else False


# --- counting: what a block of code really did --------------------------------------------
@dataclass
class Counts:
    """Events inside a :func:`counting` block."""

    materializations: int = 0  # full-shape scalar tensors built on the host and copied over
    materialized_bytes: int = 0  # their bytes (filled on the host, then copied host -> device)
    uploads: int = 0  # cache entries created: one 0-d host -> device copy each
    capture_fills: int = 0  # on-device fills made during graph capture instead of an entry


_ACTIVE: list[Counts] = []
_ACTIVE_LOCK = threading.Lock()


@contextmanager
def counting():
    """``with counting() as c: ...`` — ``c`` holds what happened inside (nesting is fine)."""
    counts = Counts()
    with _ACTIVE_LOCK:
        _ACTIVE.append(counts)
    try:
        yield counts
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.remove(counts)


def _count(field: str, amount: int = 1) -> None:
    for counts in _ACTIVE:
        setattr(counts, field, getattr(counts, field) + amount)


# --- the cache ------------------------------------------------------------------------------
def _value_key(value: float) -> bytes:
    """The value's bits: keeps 0.0 and -0.0 apart (x / -0.0 is -inf) and lets nan be found again."""
    return struct.pack("<d", value)


class ScalarCache:
    """Persistent 0-d scalar tensors keyed by (device, dtype, value), least recently used evicted.

    ``get`` returns the same tensor object for the same key until it is evicted. Statistics:
    ``hits``, ``misses`` (each an upload), ``evictions``, ``capture_fills``.
    """

    def __init__(self, maxsize: int = 256):
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.maxsize = self._check_size(maxsize)
        self.hits = self.misses = self.evictions = self.capture_fills = 0

    @staticmethod
    def _check_size(maxsize) -> int:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize={maxsize!r} must be a positive integer (entries kept)")
        return maxsize

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key) -> bool:
        device, dtype, value = key
        return (torch.device(device), dtype, _value_key(float(value))) in self._entries

    def get(self, value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (device, dtype, _value_key(value))
        with self._lock:
            tensor = self._entries.get(key)
            if tensor is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return tensor
        if is_capturing(device):
            # No entry may be created now: that would record a host-to-device copy into the graph
            # (and keep a tensor from the graph's private memory pool). Fill one on the device.
            self.capture_fills += 1
            _count("capture_fills")
            return torch.full((), value, dtype=dtype, device=device)
        tensor = torch.tensor(value, dtype=dtype, device=device)  # the one host -> device copy
        _count("uploads")
        with self._lock:
            self.misses += 1
            self._entries[key] = tensor
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
                self.evictions += 1
        return tensor

    def resize(self, maxsize: int) -> None:
        with self._lock:
            self.maxsize = self._check_size(maxsize)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
                self.evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = self.evictions = self.capture_fills = 0

    def info(self) -> dict:
        return {
            "size": len(self._entries),
            "maxsize": self.maxsize,
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "capture_fills": self.capture_fills,
        }


SCALAR_CACHE = ScalarCache()


# --- the strategies -----------------------------------------------------------------------
def materialized(op: str, x: torch.Tensor, value: float) -> torch.Tensor:
    """Full-shape host tensor of the scalar, copied to x's device, then the tensor-tensor op."""
    if is_capturing(x.device):
        raise ValueError(
            "strategy='materialized' copies a host tensor to the device on every call, which cannot be "
            "recorded in a graph being captured; use strategy 'cached', 'python' or 'triton' inside capture"
        )
    host = torch.full(x.shape, value, dtype=x.dtype)  # host allocation + fill
    other = host.to(x.device, copy=True)  # host -> device copy (a memcpy when x is on the CPU)
    _count("materializations")
    _count("materialized_bytes", host.numel() * host.element_size())
    return TORCH_OPS[op](x, other)


def cached(op: str, x: torch.Tensor, value: float, cache: ScalarCache | None = None) -> torch.Tensor:
    """The tensor-tensor op against a persistent 0-d tensor of the scalar (see :class:`ScalarCache`)."""
    scalar = (cache if cache is not None else SCALAR_CACHE).get(value, x.dtype, x.device)
    return TORCH_OPS[op](x, scalar)


def python(op: str, x: torch.Tensor, value: float) -> torch.Tensor:
    """torch's tensor-scalar operator with the Python number."""
    return TORCH_OPS[op](x, value)
