"""The Triton strategy of ``scalar_op`` as a ``torch.library.triton_op``
(``torch.ops.kwb.scalar_op``): what :func:`kernels.scalar_ops.scalar_op` calls under
torch.compile with ``strategy="triton"``.

    z = torch.ops.kwb.scalar_op(x, op, value, impl, tiles)

No autograd is registered: the Triton strategy has none in the public API either (it refuses
inputs that require grad).
"""

from __future__ import annotations

import torch
from torch.library import triton_op

from kernels.torch_ops import NAMESPACE, decode_tiles


@triton_op(f"{NAMESPACE}::scalar_op", mutates_args=())
def scalar_op(x: torch.Tensor, op: str, value: float, impl: str, tiles: str) -> torch.Tensor:
    from kernels.scalar_ops import run_triton

    return run_triton(op, x, value, impl, dict(decode_tiles(tiles)))
