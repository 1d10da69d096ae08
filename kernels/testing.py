"""The tolerance check every kernel is held to: outputs and gradients against a reference.

``compare(name, got, want, atol, rtol)`` passes when ``|got - want| <= atol + rtol * |want|``
everywhere and NaN / Inf appear in the same places (infinities with the same sign). The
measuring tool records these checks with every measurement; tests and workloads call it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class TensorCheck:
    """Correctness of one output or gradient against the reference."""

    name: str
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    nan_mismatch: int
    passed: bool
    note: str = ""  # why it failed where the numbers cannot say (another shape)


def compare(name: str, got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> TensorCheck:
    """Max abs / rel error and pass (``|got - want| <= atol + rtol * |want|`` everywhere)."""
    if got.shape != want.shape:  # a failed check that says why, not an error (a reference of another shape)
        return TensorCheck(name, math.inf, math.inf, atol, rtol, 0, False,
                           note=f"shape {tuple(got.shape)} differs from the reference's {tuple(want.shape)}")  # fmt: skip
    g = got.detach().to(want.dtype)
    w = want.detach()
    finite_g, finite_w = torch.isfinite(g), torch.isfinite(w)
    # NaN/Inf must appear in the same places (and infinities with the same sign).
    same_nonfinite = (g == w) | (torch.isnan(g) & torch.isnan(w))
    nan_mismatch = int(((~finite_g | ~finite_w) & ~same_nonfinite).sum())
    both = finite_g & finite_w
    diff = (g - w).abs().where(both, torch.zeros_like(w))
    max_abs = float(diff.max()) if diff.numel() else 0.0
    rel = diff / w.abs().clamp_min(1e-6)
    max_rel = float(rel.max()) if rel.numel() else 0.0
    within = bool((diff <= atol + rtol * w.abs().where(both, torch.zeros_like(w))).all())
    return TensorCheck(name, max_abs, max_rel, atol, rtol, nan_mismatch, within and nan_mismatch == 0)
