"""Deliberately wrong copies of a variant, to prove that a check calls them wrong.

:func:`scaled` multiplies a variant's outputs by a factor (1.01, 1.005: in bf16 each element of
such a result stays within about one unit in the last place), and :func:`scaled_gradient`
multiplies the gradient of one input by a factor while the forward stays right (``dw`` times
1.01). ``benchmarks/error_rule.py`` measures them beside the correct kernels to choose the
correctness rule's constants, and the tests use them to prove both verdicts.
"""

from __future__ import annotations

import dataclasses

import torch

from kernels.spec import Variant, as_tuple


class _GradScale(torch.autograd.Function):
    """The identity forward; the incoming gradient times ``factor`` backward."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


def scaled(variant: Variant, factor: float) -> Variant:
    """``variant`` with every output multiplied by ``factor`` (its gradients follow)."""

    def run(inputs, problem, **params):
        outs = tuple(
            o * factor if isinstance(o, torch.Tensor) else o for o in as_tuple(variant.run(inputs, problem, **params))
        )
        return outs if len(outs) > 1 else outs[0]

    return dataclasses.replace(variant, name=f"{variant.name} x{factor:g}", run=run, bind=None, kernel=None,
                               doc=f"{variant.name} with its outputs times {factor:g} (wrong on purpose)")  # fmt: skip


def scaled_gradient(variant: Variant, name: str, factor: float) -> Variant:
    """``variant`` whose gradient of input ``name`` is multiplied by ``factor`` (the forward right)."""

    def run(inputs, problem, **params):
        wrapped = dict(inputs)
        wrapped[name] = _GradScale.apply(inputs[name], factor)
        return variant.run(wrapped, problem, **params)

    return dataclasses.replace(variant, name=f"{variant.name} d{name} x{factor:g}", run=run, bind=None, kernel=None,
                               doc=f"{variant.name} with d{name} times {factor:g} (wrong on purpose)")  # fmt: skip
