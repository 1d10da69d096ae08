"""The correctness check: a configuration's outputs and gradients against the truth.

The truth is the family's reference run on the same inputs upcast to float64 (:func:`truth_dtype`:
float32 on a device without float64). Each output, and for backward modes each gradient for the
seeded incoming gradient, is judged by how far the same reference errs in the measured dtype
(the reference run on the inputs as they are, :func:`_low_reference`; :func:`kernels.testing.judge`
with the family's ``error_rule``) inside the dtype's atol / rtol; a variant computing at TF32 is
judged by its tolerance alone. :func:`check_outputs` fills a record's checks: max abs / max rel
error, the error ratio against the reference's, NaN/Inf mismatches, pass per tensor and the
record's verdict. :func:`workbench.prepare.prepare` calls it after a configuration's first call;
it needs nothing of the measuring pipeline itself.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Mapping

import torch

from kernels.spec import as_tuple
from kernels.testing import TensorCheck, judge
from workbench.device import Device


def truth_dtype(device: Device) -> torch.dtype:
    """The dtype the truth is computed in: float64, or float32 on a device without it (an NPU)."""
    return torch.float32 if device.kind in ("npu", "mps") else torch.float64


def _upcast(inputs: Mapping[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    out = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            copy = value.detach().to(dtype)
            out[name] = copy.requires_grad_(value.requires_grad)
        else:
            out[name] = value
    return out


def check_outputs(spec, dev, dt, prob, inputs, outputs, grads, grad_names, grad_outs, record):
    """Every output (and gradient) against the truth, judged by the reference's own error in
    ``dt`` (:func:`kernels.testing.judge`); fills the record's checks, errors and verdict."""
    truth_dt = truth_dtype(dev)
    truth_inputs = _upcast(inputs, truth_dt)
    backward_needed = grads is not None
    with torch.set_grad_enabled(backward_needed):
        truth_outputs = as_tuple(spec.reference(truth_inputs, prob))
    low_inputs, low_outputs, why_not = _low_reference(spec, inputs, prob, backward_needed)
    atol, rtol = spec.tolerance(dt, record.precision)
    by_rule = record.precision == "ieee"
    if not by_rule:
        why_not = f"computed at {record.precision}: judged by its tolerance"

    def judged(name, got, truth, low, atol_):
        return judge(name, got, truth, low, atol=atol_, rtol=rtol, rule=spec.error_rule, by_rule=by_rule,
                     why_not=why_not)  # fmt: skip

    checks: list[TensorCheck] = []
    names = list(spec.output_names)
    if len(names) != len(outputs) or len(truth_outputs) != len(outputs):
        raise AssertionError(
            f"{spec.name}: variant returned {len(outputs)} outputs, reference {len(truth_outputs)}, names {names}"
        )
    lows = list(low_outputs) if low_outputs is not None and len(low_outputs) == len(outputs) else [None] * len(outputs)
    if record.mode in ("forward", "full"):
        for name, got, want, low in zip(names, outputs, truth_outputs, lows):
            if isinstance(got, torch.Tensor):
                checks.append(judged(name, got, want, low if isinstance(low, torch.Tensor) else None, atol))
    if backward_needed:
        truth_grads = _grads(truth_outputs, [truth_inputs[n] for n in grad_names], grad_outs, truth_dt)
        low_grads = [None] * len(grad_names)
        if low_outputs is not None:
            try:
                low_grads = _grads(low_outputs, [low_inputs[n] for n in grad_names], grad_outs, None)
            except Exception:  # noqa: BLE001 - no backward in this dtype: the rounding alone judges
                why_not = why_not or f"the reference's backward does not run in {dt}"
        for name, got, want, low in zip(grad_names, grads, truth_grads, low_grads):
            if want is None:
                want = torch.zeros_like(truth_inputs[name])
            if got is None:
                got = torch.zeros_like(inputs[name])
            # Gradients sum over rows: the outer bound's atol scales with the truth's magnitude.
            scale = max(1.0, float(want.detach().abs().max())) if want.numel() else 1.0
            checks.append(judged(f"d{name}", got, want, low, atol * scale))
    record.checks = [asdict(c) for c in checks]
    record.max_abs_err = max((c.max_abs for c in checks), default=0.0)
    record.max_rel_err = max((c.max_rel for c in checks), default=0.0)
    # The worst ratio of the tensors the rule judged (None where it judged none: a TF32 peer's, a
    # handful of elements; each check still keeps its own).
    judged = [c.err_ratio for c in checks if c.err_ratio is not None and c.judged_by.startswith("rule")]
    record.err_ratio = max(judged) if judged else None
    record.passed = all(c.passed for c in checks) and not any(math.isnan(c.max_abs) for c in checks)


def _low_reference(spec, inputs, prob, backward_needed) -> tuple[dict, tuple | None, str]:
    """The reference run on the inputs in their own dtype (its rounding is the yardstick): the
    inputs it ran on, its outputs (None where it cannot run in this dtype) and why not."""
    low_inputs = {
        n: v.detach().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for n, v in inputs.items()
    }
    try:
        with torch.set_grad_enabled(backward_needed):
            return low_inputs, as_tuple(spec.reference(low_inputs, prob)), ""
    except Exception as exc:  # noqa: BLE001 - an op without this dtype: judged by the rounding alone
        return low_inputs, None, f"the reference does not run in this dtype ({type(exc).__name__})"


def _grads(outputs, tensors, grad_outs, dtype) -> list:
    """Gradients of ``outputs``' differentiable tensors for ``grad_outs`` (cast to ``dtype``
    where given, else to each output's), None for an input they do not reach."""
    diff = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
    cast = [g.to(dtype if dtype is not None else o.dtype) for g, o in zip(grad_outs, diff)]
    return list(torch.autograd.grad(diff, tensors, cast, allow_unused=True))
