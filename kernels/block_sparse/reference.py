"""Block-sparse probabilistic-circuit layers in plain PyTorch: the oracle for every kernel.

Layout (docs/families.md): values are log-probabilities with the batch innermost. A sum layer has ``G``
blocks of ``block_size`` nodes; block ``g`` has ``K`` edges, edge ``k`` reads child row
``cids[g, k]`` of ``element_mars [M, B]`` and, for node ``i`` of the block, the linear weight
``params[pids[g, k] + i]``::

    out[g*bs + i, b] = log sum_k params[pids[g, k] + i] * exp(element_mars[cids[g, k], b])

computed stably by subtracting ``max_k element_mars[cids[g, k], b]``. A node whose weighted
children are all zero (every child -inf) is -inf, and its gradients are defined as zero: the
"double where" below keeps autograd from producing 0 * inf = NaN through ``log(0)``.

Autograd through :func:`sum_layer_reference` is the exact backward oracle. With ``C`` the edge
flows ``F * p * exp(em - out)`` (docs/families.md), for an incoming gradient ``F = d loss / d out``::

    d loss / d element_mars = C summed over nodes, scattered to the child rows   (= element flows)
    d loss / d params[j]    = sum_b F * exp(em - out)  over the edges using j    (= param flows / p)

:func:`sum_layer_backward_reference` turns that into the DESIGN's flows (multiplying the
parameter gradient by ``params``, i.e. flows are gradients with respect to log-parameters).

Product layer (sum in log space)::

    prod[g*bs + i, b] = sum_k node_mars[cids[g, k] + i, b]      (cids are block starts)
"""

from __future__ import annotations

import torch


def _edge_params(params: torch.Tensor, pids: torch.Tensor, block_size: int) -> torch.Tensor:
    """``[G, K, bs]``: the weight of edge k for node i of block g."""
    i = torch.arange(block_size, device=params.device)
    return params[pids.long()[:, :, None] + i]


def sum_layer_reference(
    element_mars: torch.Tensor,
    params: torch.Tensor,
    cids: torch.Tensor,
    pids: torch.Tensor,
    block_size: int,
) -> torch.Tensor:
    """``out [G*block_size, B]``; differentiable in element_mars and params."""
    n_blocks = cids.shape[0]
    em = element_mars[cids.long()]  # [G, K, B]
    p = _edge_params(params, pids, block_size)  # [G, K, bs]
    # Shift by the max over edges; the shift is a constant for autograd (the result does not
    # depend on it), so detaching it keeps the gradient exact.
    shift = em.detach().amax(dim=1, keepdim=True)  # [G, 1, B]
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    s = torch.einsum("gki,gkb->gib", p, torch.exp(em - shift))  # [G, bs, B]
    alive = s > 0
    logs = torch.log(torch.where(alive, s, torch.ones_like(s)))
    out = torch.where(alive, logs + shift, torch.full_like(s, float("-inf")))
    return out.reshape(n_blocks * block_size, -1)


def sum_layer_backward_reference(
    node_flows: torch.Tensor,
    element_mars: torch.Tensor,
    params: torch.Tensor,
    cids: torch.Tensor,
    pids: torch.Tensor,
    block_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DESIGN's (element flows ``[M, B]``, parameter flows ``[P]``) from autograd."""
    em = element_mars.detach().requires_grad_()
    p = params.detach().requires_grad_()
    with torch.enable_grad():
        out = sum_layer_reference(em, p, cids, pids, block_size)
        d_em, d_p = torch.autograd.grad(out, (em, p), node_flows.to(out.dtype))
    return d_em, d_p * p.detach()


def product_layer_reference(node_mars: torch.Tensor, cids: torch.Tensor, block_size: int) -> torch.Tensor:
    """``prod [G*block_size, B]``; differentiable in node_mars."""
    i = torch.arange(block_size, device=node_mars.device)
    rows = cids.long()[:, :, None] + i  # [G, K, bs]
    return node_mars[rows].sum(dim=1).reshape(cids.shape[0] * block_size, -1)
