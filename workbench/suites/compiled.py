"""The compiled decoder-block target: our fused add+RMSNorm op inside ``torch.compile`` against
Inductor's own generated norm, both with ``mode="reduce-overhead"`` (CUDA graphs).

The block is ``linear -> fused add+RMSNorm (with the residual stream) -> linear`` in bf16, as in a
decoder layer's inference step. Both versions are compiled from the same module; only the norm
differs: ours calls :func:`kernels.fused_add_rms_norm.fused_add_rms_norm` (a registered
``triton_op``, so Dynamo traces it without a graph break and its kernels land in Inductor's CUDA
graphs), Inductor's writes the same maths in plain torch and lets Inductor fuse it. Each
compiled block's output is checked against the eager plain-torch block in float64, judged by the
same block's own error in bf16 (:func:`kernels.testing.judge`), before it is timed; the two are
timed together, interleaved, and judged on the call time (what a model's loop pays per step).
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from kernels.fused_add_rms_norm import fused_add_rms_norm
from kernels.fused_add_rms_norm.reference import fused_add_rms_norm_reference
from kernels.spec import get
from kernels.testing import judge
from workbench.measure import measure_many
from workbench.suites.context import RunContext, SuiteRun, new_record

EPS = 1e-6


class DecoderBlock(torch.nn.Module):
    """linear -> fused add+RMSNorm -> linear; ``ours`` picks the norm's implementation."""

    def __init__(self, hidden: int, ours: bool, device, dtype=torch.bfloat16, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        scale = hidden**-0.5
        self.w_in = torch.nn.Parameter((torch.randn(hidden, hidden, generator=gen) * scale).to(device, dtype))
        self.w_out = torch.nn.Parameter((torch.randn(hidden, hidden, generator=gen) * scale).to(device, dtype))
        self.norm_w = torch.nn.Parameter((1 + 0.1 * torch.randn(hidden, generator=gen)).to(device, dtype))
        self.ours = ours

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x @ self.w_in.t()
        if self.ours:
            y, s = fused_add_rms_norm(h, residual, self.norm_w, EPS)
        else:
            y, s = fused_add_rms_norm_reference(h, residual, self.norm_w, EPS)
        return y @ self.w_out.t(), s


def _reference(block: DecoderBlock, x, residual, dtype=torch.float64):
    """The eager block in plain torch in ``dtype``: float64, the truth both compiled blocks are
    checked against; bf16, the yardstick (its own error) they are judged by."""
    h = x.to(dtype) @ block.w_in.to(dtype).t()
    y, s = fused_add_rms_norm_reference(h, residual.to(dtype), block.norm_w.to(dtype), EPS)
    return y @ block.w_out.to(dtype).t(), s


def run_compiled(target, ctx: RunContext, run: SuiteRun) -> None:
    dev = ctx.device
    spec = get(target.family)
    missing: dict[str, str] = {}
    run.missing[target.name] = missing
    variants = {target.ours: True, **{name: False for name in target.peers}}
    if dev.kind != "cuda":  # nothing to measure: said once, not failed per size
        missing.update({name: "reduce-overhead compiles to CUDA graphs: needs a CUDA device" for name in variants})
        return
    for hidden in target.values:
        problem = {"rows": target.tokens, "hidden": hidden}
        extra = []
        for name, ours in variants.items():
            backend = "gpu" if ours else "torch"
            rec = new_record(spec.name, name, backend, target.mode, target.dtype, dev, problem, {}, "hidden", hidden)
            fn = None
            try:
                fn = _compiled_step(hidden, target.tokens, ours, dev.torch_device, rec, ctx.phases)
            except Exception as exc:  # noqa: BLE001 - one block failing to compile is reported, not fatal
                rec.error, rec.passed = f"{type(exc).__name__}: {exc}"[:2000], False
            extra.append((rec, fn))
        runnable = [(rec, fn) for rec, fn in extra if fn is not None]
        if runnable:
            measure_many(
                spec,
                [],
                device=dev,
                warmup_ms=ctx.warmup_ms,
                rep_ms=ctx.rep_ms,
                on_error="record",
                extra=runnable,
                phases=ctx.phases,
            )
        for rec, _ in extra:  # no min_bytes (matmuls inside): measure gives no bandwidth share
            ctx.emit(rec, to_store=True)


def _compiled_step(hidden: int, tokens: int, ours: bool, device, rec, phases):
    """The compiled block's inference step, after a check of its output (recorded on ``rec``)."""
    with phases("setup"):
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(tokens, hidden, generator=gen).to(device, torch.bfloat16)
        residual = torch.randn(tokens, hidden, generator=gen).to(device, torch.bfloat16)
        block = DecoderBlock(hidden, ours, device)
    compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)

    def step():
        with torch.no_grad():
            return compiled(x, residual)

    with phases("compile"):
        for _ in range(3):  # cudagraph trees record on a later call than the first
            out, s = step()
    with torch.no_grad(), phases("check"):
        want, want_s = _reference(block, x, residual)
        eager, eager_s = _reference(block, x, residual, torch.bfloat16)
    # Judged by the eager bf16 block's own error (kernels.testing.judge) inside an outer bound:
    # bf16 matmuls over ``hidden`` terms, whose errors scale with the output's magnitude.
    scale = max(1.0, float(want.abs().max()))
    checks = [
        judge("out", out, want, eager, atol=2e-2 * scale, rtol=2e-2),
        judge("s", s, want_s, eager_s, atol=2e-2, rtol=2e-2),
    ]
    rec.checks = [asdict(c) for c in checks]
    rec.max_abs_err = max(c.max_abs for c in checks)
    rec.max_rel_err = max(c.max_rel for c in checks)
    rec.passed = all(c.passed for c in checks)
    return step
