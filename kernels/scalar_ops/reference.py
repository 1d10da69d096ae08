"""Tensor-with-scalar operations in plain PyTorch: the oracle every strategy is checked against.

    div:  z = x / value
    sub:  z = x - value
    pow:  z = x ** value

The harness calls the reference on x upcast to fp32 (fp64 on the CPU) with the exact Python
value, so it is the mathematically exact answer up to that precision; every strategy's result,
in x's dtype, is compared with it under the family's per-dtype tolerances.
"""

from __future__ import annotations

import torch

OPS = ("div", "sub", "pow")


def scalar_op_reference(op: str, x: torch.Tensor, value: float) -> torch.Tensor:
    if op == "div":
        return x / value
    if op == "sub":
        return x - value
    if op == "pow":
        return torch.pow(x, value)
    raise ValueError(f"op={op!r} is not allowed; use one of {', '.join(OPS)}")
