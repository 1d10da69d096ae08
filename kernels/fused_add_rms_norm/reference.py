"""Fused add + RMSNorm in plain PyTorch: the oracle every kernel is checked against.

A decoder layer adds the block's output to the residual stream and normalises the sum::

    s    = x + r                              (the new residual stream, kept for the next layer)
    rstd = 1 / sqrt(mean(s^2, last axis) + eps)
    y    = s * rstd * (offset + w)            (y = s * rstd when weight is None)

``s`` is rounded to the input dtype before it is normalised, exactly as the unfused
``s = x + r; y = norm(s)`` does, and the casting modes are those of
:func:`kernels.rms_norm.reference.rms_norm_reference` (llama / gemma / none).

Gradients, for an incoming ``dy`` and an incoming ``ds`` (the residual stream's own gradient)::

    ds_total = rstd * (m - shat * mean(m * shat)) + ds,   shat = s * rstd,  m = dy * (offset + w)
    dx = dr = ds_total
    dw = sum over rows of dy * shat

Autograd through this function gives them exactly; the kernels implement the formulas.
"""

from __future__ import annotations

import torch

from kernels.rms_norm.reference import CASTING_MODES, rms_norm_reference

__all__ = ["CASTING_MODES", "fused_add_rms_norm_reference"]


def fused_add_rms_norm_reference(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(y, s)`` with ``s = x + residual`` and ``y = RMSNorm(s)``."""
    s = x + residual
    return rms_norm_reference(s, weight, eps, offset, casting_mode), s
