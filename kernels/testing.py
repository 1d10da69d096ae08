"""The check every kernel is held to: each output and gradient against a float64 truth, judged by
how far the PyTorch reference itself errs in the kernel's dtype.

``judge(name, got, truth, ref, ...)`` takes the result (``got``), the reference computed from the
same inputs in float64 (``truth``; float32 on a device without float64) and the reference computed
in the kernel's own dtype (``ref``, None where it could not run). It measures three statistics of
the error ``got - truth`` and of the reference's error ``ref - truth``:

- the **maximum** absolute error;
- the **RMS** error;
- the **bias**: the mean signed error, both plain (a shifted result) and signed by the truth's sign
  (a scaled result: ``1.005 * y`` errs away from zero everywhere). Rounding to nearest leaves a
  correct result's bias near zero, within the noise ``rms / sqrt(n)`` of a mean of ``n`` errors;
  a result scaled by 1.005 carries a bias far above that, even in bf16 where each element stays
  within one unit in the last place (where the maximum alone cannot tell it from a correct one).

The yardstick of each statistic is the reference's own error, or the error of the truth rounded to
the result's dtype where that is larger (no result in that dtype can do better), plus a small
floor (hundredths of a unit in the last place of the result's dtype for bf16 / fp16, a few units
for fp32, so that a reference that happens to be exact does not make an ulp a failure); the
bias's yardstick adds ``bias_z`` standard errors of the reference's noise. ``err_ratio`` is the
worst statistic as a multiple of its yardstick, and a result passes the rule
(:class:`ErrorRule`) when it is at most ``k``.

Two more conditions stay: the per-dtype ``|got - truth| <= atol + rtol * |truth|`` everywhere (an
outer bound), and NaN / Inf only where the truth, rounded to the result's dtype, has them (a NaN or
Inf where the reference has none is a failure). A result computed at another precision than its
dtype's own arithmetic (TF32 matrix products: ``judge(..., by_rule=False)``) is held to its
precision's tolerance only; its ratio is still recorded. So is a tensor of fewer than
``min_elements`` finite elements (a one-element gradient that is all cancellation).

docs/measuring.md ("Correctness") gives the constants and the measurements they were chosen by
(``benchmarks/error_rule.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    import torch

# Floors of the rule in units in the last place of the result's dtype (its machine epsilon times
# the truth's scale: max |truth| for the maximum, RMS for the RMS, mean |truth| for the bias).
# fp32 results differ from an fp32 reference by a few ulps through the order of a sum or a
# fused multiply-add, which no wrong kernel hides behind (a 1.001 scale is 8,400 fp32 ulps);
# bf16 / fp16 floors stay well under the 0.64 ulp of bias a 1.005 scale carries in bf16.
# Keyed by the dtype's name (``torch.float32`` -> "float32"), so the rule is declared without
# torch: a family module, and the command line's help, load before torch does.
FLOOR_ULPS: dict[str, tuple[float, float, float]] = {
    "float32": (4.0, 1.0, 0.5),
    "float16": (0.5, 0.125, 0.05),
    "bfloat16": (0.5, 0.125, 0.05),
    "float64": (4.0, 1.0, 0.5),
}


# Beyond this many times the final rounding's RMS, a reference's error counts as carried by shared
# intermediates (above: the bias's yardstick).
SHARED_ABOVE_ROUNDING = 2.0


@dataclass(frozen=True)
class ErrorRule:
    """How far a result may err, as a multiple of the reference's own error (module docstring).

    ``k``: the multiple of the reference's maximum, RMS and bias errors (each with its floor) a
    result may reach (2, as FlashAttention's tests use). ``bias_z``: standard errors of the
    reference's noise added to its bias (a mean of ``n`` rounding errors is not exactly zero).
    ``min_elements``: a tensor with fewer finite elements is judged by the outer bound alone (the
    errors of a handful of elements, each a cancellation's luck, say nothing about a rule).
    ``floor_ulps``: per result dtype's name (``"bfloat16"``), the (max, RMS, bias) floors in units in the
    last place.
    ``reason``: why a family's ``k`` is looser than the default (required then; records and
    reports show it)."""

    k: float = 2.0
    bias_z: float = 4.0
    min_elements: int = 16
    floor_ulps: Mapping[str, tuple[float, float, float]] = field(default_factory=lambda: dict(FLOOR_ULPS))
    reason: str = ""

    def __post_init__(self):
        if not self.k >= 1:
            raise ValueError(f"ErrorRule k={self.k!r}: a result may err at least as much as the reference (k >= 1)")
        if self.k > DEFAULT_K and not self.reason.strip():
            raise ValueError(
                f"ErrorRule k={self.k:g} is looser than the default {DEFAULT_K:g}: give the reason "
                "(reason='split-K sums in another order', for example)"
            )

    def floors(self, dtype: torch.dtype) -> tuple[float, float, float]:
        """The (max, RMS, bias) floors of results in ``dtype`` (a torch dtype or its name)."""
        return tuple(self.floor_ulps.get(str(dtype).removeprefix("torch."), (0.0, 0.0, 0.0)))

    def describe(self) -> str:
        return f"k={self.k:g}" + (f" ({self.reason})" if self.reason else "")


DEFAULT_K = 2.0
DEFAULT_RULE = ErrorRule()


def looser(k: float, reason: str, rule: ErrorRule = DEFAULT_RULE) -> ErrorRule:
    """``rule`` with a looser ``k``, for the reason given (a family whose kernels sum in another
    order than the reference: split-K, atomics)."""
    return replace(rule, k=float(k), reason=reason)


@dataclass
class TensorCheck:
    """Correctness of one output or gradient against the truth (module docstring).

    ``max_abs`` / ``max_rel``: the result's largest absolute and relative errors; ``rms`` and
    ``bias`` its RMS and worst mean signed error; ``ref_max_abs`` / ``ref_rms`` / ``ref_bias`` the
    yardsticks (the reference's errors, or the rounding's where larger); ``err_ratio``: the worst
    statistic as a multiple of its yardstick (the rule passes at most ``k``); ``ratios``: each
    statistic's ("max", "rms", "shift", "scale"); ``worst``: which one was the worst;
    ``judged_by``: "rule", or why the tolerance alone judged it; ``atol`` / ``rtol``: the outer
    bound; ``nan_mismatch``: elements whose NaN / Inf differ from the truth's (``new_nonfinite``
    of them NaN or Inf where the truth is finite)."""

    name: str
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    nan_mismatch: int
    passed: bool
    note: str = ""  # why it failed where the numbers cannot say (another shape, NaN where none belongs)
    rms: float | None = None
    bias: float | None = None
    ref_max_abs: float | None = None
    ref_rms: float | None = None
    ref_bias: float | None = None
    err_ratio: float | None = None
    worst: str = ""
    k: float | None = None
    judged_by: str = "tolerance"
    within_tolerance: bool = True
    new_nonfinite: int = 0
    ratios: dict = field(default_factory=dict)  # each statistic's error over its yardstick


def compare(name: str, got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> TensorCheck:
    """The outer bound alone: max abs / rel error and pass (``|got - want| <= atol + rtol * |want|``
    everywhere, NaN / Inf in the same places). For a result with no reference in its own dtype
    to judge it by (a whole compiled block checked against an fp32 one)."""
    return judge(name, got, want, None, atol=atol, rtol=rtol, by_rule=False)


def judge(
    name: str,
    got: torch.Tensor,
    truth: torch.Tensor,
    ref: torch.Tensor | None,
    *,
    atol: float,
    rtol: float,
    rule: ErrorRule = DEFAULT_RULE,
    by_rule: bool = True,
    why_not: str = "",
) -> TensorCheck:
    """``got`` against ``truth`` (the reference in float64), judged by ``ref``'s error (the
    reference in the result's dtype; None: by the truth's rounding alone) under ``rule``, inside
    the outer bound ``atol`` / ``rtol``; ``by_rule=False`` judges by the outer bound only and
    ``why_not`` says why (a TF32 result, a compiled block)."""
    import torch

    if got.shape != truth.shape:  # a failed check that says why, not an error (a reference of another shape)
        return TensorCheck(name, math.inf, math.inf, atol, rtol, 0, False,
                           note=f"shape {tuple(got.shape)} differs from the reference's {tuple(truth.shape)}")  # fmt: skip
    work = torch.float64 if truth.dtype == torch.float64 or truth.device.type == "cpu" else torch.float32
    t = truth.detach().to(work)
    g = got.detach().to(work)
    out_dtype = got.dtype
    # NaN / Inf belong where the truth, rounded to the result's dtype, has them (an overflow to
    # Inf in fp16 is the right answer), with the same sign.
    expected = t.to(out_dtype).to(work) if out_dtype.is_floating_point else t
    finite_g, finite_e = torch.isfinite(g), torch.isfinite(expected)
    same_nonfinite = (g == expected) | (torch.isnan(g) & torch.isnan(expected))
    mismatch = (~finite_g | ~finite_e) & ~same_nonfinite
    nan_mismatch = int(mismatch.sum())
    new_nonfinite = int((~finite_g & finite_e).sum())
    both = finite_g & finite_e & torch.isfinite(t)
    d = (g - t)[both]
    tt = t[both]
    max_abs = float(d.abs().max()) if d.numel() else 0.0
    max_rel = float((d.abs() / tt.abs().clamp_min(1e-6)).max()) if d.numel() else 0.0
    within = bool((d.abs() <= atol + rtol * tt.abs()).all())
    check = TensorCheck(name, max_abs, max_rel, atol, rtol, nan_mismatch, False, new_nonfinite=new_nonfinite)
    check.within_tolerance = within
    _fill_ratio(check, d, tt, t, both, ref, out_dtype, rule, work)
    if by_rule and d.numel() < rule.min_elements:
        by_rule, why_not = False, f"{d.numel()} elements: too few for the rule"
    if by_rule:
        check.judged_by = "rule" + ("" if ref is not None else f" (by the rounding: {why_not})" if why_not else "")
        rule_ok = check.err_ratio is not None and check.err_ratio <= rule.k
    else:
        check.judged_by = f"tolerance ({why_not})" if why_not else "tolerance"
        rule_ok = True
    check.passed = within and rule_ok and nan_mismatch == 0
    if new_nonfinite:
        check.note = f"{new_nonfinite} NaN/Inf where the reference has none"
    elif nan_mismatch:
        check.note = f"{nan_mismatch} NaN/Inf differ from the reference's"
    return check


def _stats(err: torch.Tensor, sign: torch.Tensor) -> tuple[float, float, float, float]:
    """(max |err|, RMS, |mean err|, |mean err * sign|) of an error vector (zeros when empty)."""
    if not err.numel():
        return 0.0, 0.0, 0.0, 0.0
    return (
        float(err.abs().max()),
        float(err.square().mean().sqrt()),
        float(err.mean().abs()),
        float((err * sign).mean().abs()),
    )


def _fill_ratio(check, d, tt, t, both, ref, out_dtype, rule: ErrorRule, work) -> None:
    """The rule's statistics of ``d`` (the result's error) against the reference's and the
    rounding's, and the worst ratio, into ``check``."""
    import torch

    check.k = rule.k
    sign = torch.sign(tt)
    e_max, e_rms, e_shift, e_scale = _stats(d, sign)
    check.rms, check.bias = e_rms, max(e_shift, e_scale)
    # The yardsticks: the reference's error in the result's dtype, or the rounding of the truth to
    # that dtype where larger (no result in that dtype does better than rounding the truth).
    rounding = _stats((t.to(out_dtype).to(work) - t)[both], sign) if out_dtype.is_floating_point else (0.0,) * 4
    yards = [rounding]
    if ref is not None and ref.shape == t.shape:
        r = ref.detach().to(work)
        ok = both & torch.isfinite(r)  # where the reference overflowed, the rounding alone judges
        if bool(ok.any()):
            yards.append(_stats((r - t)[ok], torch.sign(t[ok])))
    y_max, y_rms, y_shift, y_scale = (max(y[i] for y in yards) if yards else 0.0 for i in range(4))
    check.ref_max_abs, check.ref_rms, check.ref_bias = y_max, y_rms, max(y_shift, y_scale)
    n = max(1, d.numel())
    eps = torch.finfo(out_dtype).eps if out_dtype.is_floating_point else 0.0
    f_max, f_rms, f_bias = rule.floors(out_dtype)
    scale_max = float(tt.abs().max()) if tt.numel() else 0.0
    scale_rms = float(tt.square().mean().sqrt()) if tt.numel() else 0.0
    scale_mean = float(tt.abs().mean()) if tt.numel() else 0.0
    # Each yardstick: the reference's (or the rounding's) error plus the floor; the bias's also
    # ``bias_z`` standard errors of a mean of n errors of the reference's RMS.
    # A mean of n independent rounding errors is near zero: its noise is bias_z standard errors. The
    # part of the reference's RMS error beyond a few independent roundings of the result (twice the
    # final rounding's; two roundings make 1.4 times it) is an error carried by a shared
    # intermediate (a normaliser, the log-likelihood every flow divides by), which may be one error
    # for all elements: it joins the bias's yardstick. None for bf16 / fp16 results computed in fp32;
    # most of it for an fp32 result normalised by a quantity of its own.
    shared = max(0.0, y_rms - SHARED_ABOVE_ROUNDING * rounding[1])
    bias_yard = rule.bias_z * y_rms / math.sqrt(n) + shared + f_bias * eps * scale_mean
    ratios = {
        "max": _ratio(e_max, y_max + f_max * eps * scale_max),
        "rms": _ratio(e_rms, y_rms + f_rms * eps * scale_rms),
        "shift": _ratio(e_shift, y_shift + bias_yard),
        "scale": _ratio(e_scale, y_scale + bias_yard),
    }
    check.ratios = ratios
    check.worst = max(ratios, key=ratios.get)
    check.err_ratio = ratios[check.worst]


def _ratio(err: float, yard: float) -> float:
    if err == 0.0:
        return 0.0
    return err / yard if yard > 0.0 else math.inf
