"""RMSNorm in plain PyTorch: the oracle every kernel is checked against.

    rstd = 1 / sqrt(mean(x^2, last axis) + eps)
    y    = x * rstd * (offset + w)            (y = x * rstd when weight is None)

Casting modes say where the arithmetic happens:

- ``llama``: rstd and x * rstd in fp32, cast back to x's dtype, then times (offset + w) in
  that dtype (Hugging Face's LlamaRMSNorm).
- ``gemma``: everything in fp32, cast once at the end (use offset=1.0, Gemma's ``1 + w``).
- ``none``: everything in x's dtype.

Called by the harness on inputs upcast to fp32/fp64, all three reduce to the exact math.
"""

from __future__ import annotations

import torch

CASTING_MODES = ("llama", "gemma", "none")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def rms_norm_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
) -> torch.Tensor:
    if casting_mode not in CASTING_MODES:
        raise ValueError(f"casting_mode={casting_mode!r} is not one of {', '.join(CASTING_MODES)}")
    if casting_mode == "none":
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return y if weight is None else y * (offset + weight)
    xf = x.to(_compute_dtype(x.dtype))
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if casting_mode == "llama":
        normed = normed.to(x.dtype)
        return normed if weight is None else normed * (offset + weight)
    if weight is not None:
        normed = normed * (offset + weight.to(normed.dtype))
    return normed.to(x.dtype)
