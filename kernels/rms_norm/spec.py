"""The RMSNorm KernelSpec: problem knobs, variants (ours and the peers), tiles, bytes, tolerances.

The knobs, tile Params, input maker and our-variant builder here are shared by the norm families
(``fused_add_rms_norm.spec`` builds on them), so both families describe the same tiles alike.
"""

from __future__ import annotations

import functools
import inspect

import torch

from kernels import tuned_tables
from kernels.peers import compiled, liger_variant, missing, torch_compile_variant
from kernels.rms_norm import gpu, npu, rms_norm
from kernels.rms_norm.reference import CASTING_MODES, rms_norm_reference
from kernels.runtime import auto_impl
from kernels.spec import (
    DEFAULT_TOLERANCES,
    DTYPES,
    KernelSpec,
    Knob,
    Param,
    Tuning,
    Variant,
    dtype_name,
    elem_bytes,
    run_of,
)
from kernels.tiling import next_power_of_2

POW2 = tuple(2**k for k in range(4, 17))  # 16 … 65536


# --- shared by the norm families -------------------------------------------------------------
def norm_inputs(problem, dtype, device, seed, names=("x",)) -> dict:
    """Fresh random rows for each of ``names`` (every one requires grad) and the weight."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rows, hidden = problem["rows"], problem["hidden"]
    inputs = {}
    for name in names:
        t = torch.randn(rows, hidden, generator=gen, dtype=torch.float32)
        inputs[name] = t.to(device, dtype).requires_grad_()
    if problem["weight"]:
        w = 1.0 + 0.1 * torch.randn(hidden, generator=gen, dtype=torch.float32)
        if problem["casting_mode"] == "gemma":
            w = w - 1.0  # gemma stores w around 0 and uses offset 1
        inputs["weight"] = w.to(device, dtype).requires_grad_()
    return inputs


def norm_min_bytes(problem, mode, dtype, forward_rows: int, backward_rows: int) -> int:
    """The fewest bytes a norm family's ``mode`` moves: ``forward_rows`` row tensors read or
    written by the forward (rows x hidden elements each) and the weight read once where there is
    one; the backward's ``backward_rows`` and the weight read and its gradient written; full is
    their sum."""
    n, h, e = problem["rows"] * problem["hidden"], problem["hidden"], elem_bytes(dtype)
    w = 1 if problem["weight"] else 0
    forward = (forward_rows * n + w * h) * e
    backward = (backward_rows * n + 2 * w * h) * e
    return {"forward": forward, "backward": backward, "full": forward + backward}[mode]


def chosen_tiles(fixed, params, defaults=None) -> dict:
    """The tile keyword arguments a variant passes: its fixed tiles plus every non-auto Param,
    less those equal (value and type) to ``defaults``, the kernel's own (:func:`keyword_defaults`)."""
    defaults = defaults or {}
    given = {k: v for k, v in params.items() if v != "auto" and not _is_default(v, defaults.get(k, _NONE))}
    return {**fixed, **given}


_NONE = object()


def _is_default(value, default) -> bool:
    return type(value) is type(default) and value == default


def keyword_defaults(fn) -> dict:
    """The keyword defaults of ``fn`` other than "auto": the tiles a kernel takes as given."""
    return {
        name: p.default
        for name, p in inspect.signature(fn).parameters.items()
        if p.default is not inspect.Parameter.empty and not (isinstance(p.default, str) and p.default == "auto")
    }


def tile_check(impl, fixed, gpu_module, npu_module, residual=False):
    """A Variant.check for a norm family: resolve its tiles for the problem without launching,
    and on a GPU hold the staged backward's shared memory to the device's limit (``residual``:
    the fused family's backward also stages ds)."""

    def check(problem, params, dtype, device):
        tiles = chosen_tiles(fixed, params)
        if impl == "gpu":
            t = gpu_module.tiles_for_rows(problem["rows"], problem["hidden"], device, **tiles)
            gpu.check_register_tiles(t)
            if t.bwd_stages > 1:
                row = torch.empty(0, dtype=DTYPES[dtype_name(dtype)], device="meta")
                w = row if problem["weight"] else None
                gpu.check_staged_tiles(t, row, row, row if residual else None, w, device=device)
        else:
            npu_module.resolve_tiles(
                problem["rows"],
                problem["hidden"],
                device.num_cores,
                elem_bytes(dtype),
                on_npu=device.kind == "npu",
                **tiles,
            )

    return check


def tile_source(impl, fixed, gpu_module):
    """A Variant.tiles_source for a norm family: where the GPU forward's tiles come from on the
    device (its tuned table, the rule, or the call's explicit tiles), then the backward's
    (``"...; backward: ..."``, :func:`kernels.tuned_tables.joined_sources`); the NPU kernels read
    no table."""

    def source(problem, params, device):
        tiles = chosen_tiles(fixed, params)
        if impl != "gpu":
            return "explicit" if tiles else "heuristic"
        t = gpu_module.tiles_for_rows(problem["rows"], problem["hidden"], device, **tiles)
        return tuned_tables.joined_sources(t.source, backward=t.bwd_source)

    return source


def our_variants(api, tensor_names, gpu_module, npu_module, backward_params, docs) -> tuple[Variant, ...]:
    """The three variants of our kernels in a norm family: ``gpu_row`` (one row per program),
    ``gpu_multirow`` (the API default) and ``npu``. ``api(*tensors, weight, eps, offset=,
    casting_mode=, impl=, **tiles)`` is the family's function; ``docs`` the three docstrings."""

    api_defaults = keyword_defaults(api)

    def ours(impl, fixed=None):
        fixed = dict(fixed or {})
        # A tile at the kernel's own default is left out of the call, as a user leaves it out.
        defaults = keyword_defaults((gpu_module if impl == "gpu" else npu_module).resolve_tiles)

        def bind(inputs, problem, **params):
            # The call a user writes: eps by position, as F.rms_norm takes it, and every other
            # option only where it differs from the API's default (impl where "auto" would pick
            # another). Keyword arguments cost a call host time, most after a drained device:
            # with all four given, the suite's call timing read 24.2 us of host inside our call
            # against 19.0 for rms_norm(x, w) (reports/h100-eager-call).
            tensors = [inputs[n] for n in tensor_names]
            options = {
                name: problem[name]
                for name in ("offset", "casting_mode")
                if not _is_default(problem[name], api_defaults[name])
            }
            if impl != auto_impl(tensors[0]):
                options["impl"] = impl
            options.update(chosen_tiles(fixed, params, defaults))
            return functools.partial(api, *tensors, inputs.get("weight"), problem["eps"], **options)

        check = tile_check(impl, fixed, gpu_module, npu_module, residual=len(tensor_names) > 1)
        return run_of(bind), bind, check, tile_source(impl, fixed, gpu_module)

    row_run, row_bind, row_check, row_source = ours("gpu", {"BLOCK_SIZE_M": 1})
    multi_run, multi_bind, multi_check, multi_source = ours("gpu")
    npu_run, npu_bind, npu_check, npu_source = ours("npu")
    gpu_only = ("cuda", "cpu")
    row_params, multi_params = GPU_ROW_PARAMS + backward_params, GPU_MULTIROW_PARAMS + backward_params
    return (
        Variant(
            "gpu_row",
            "gpu",
            row_run,
            row_params,
            gpu_only,
            row_check,
            doc=docs[0],
            tiles_source=row_source,
            bind=row_bind,
        ),
        Variant(
            "gpu_multirow",
            "gpu",
            multi_run,
            multi_params,
            gpu_only,
            multi_check,
            doc=docs[1],
            tiles_source=multi_source,
            bind=multi_bind,
        ),
        Variant(
            "npu",
            "npu",
            npu_run,
            NPU_PARAMS,
            ("npu", "cuda", "cpu"),
            npu_check,
            doc=docs[2],
            tiles_source=npu_source,
            bind=npu_bind,
        ),
    )


def norm_tuning(hidden_sizes: tuple) -> Tuning:
    """What ``workbench tune`` searches for a norm family: the multi-row forward's rows per
    program and warps (the tiles its table sets, ``gpu.TUNED_TILES``) at 4096 bf16 rows, per
    hidden size: ``hidden_sizes`` (the suite's) plus the hidden sizes of common models."""
    models = (2048, 2560, 3072, 4096, 5120, 7168, 8192)  # Llama / Qwen / Mistral / DeepSeek widths
    return Tuning(
        variant="gpu_multirow",
        knob="hidden",
        sizes=tuple(sorted(set(hidden_sizes) | set(models))),
        params={"BLOCK_SIZE_M": (1, 2, 4, 8, 16), "num_warps": (1, 2, 4, 8, 16, 32)},
        problem={"rows": 4096},
        dtype="bf16",
        quick_sizes=(64, 300),
        quick_params={"BLOCK_SIZE_M": (1, 4), "num_warps": (2, 4)},
        quick_problem={"rows": 16},
        keep=_worth_timing,
    )


def norm_backward_tuning(hidden_sizes: tuple) -> Tuning:
    """What ``workbench tune --part backward`` searches for a norm family: the whole-row backward's
    rows per program, warps, staged loop and w per tile (``gpu.BACKWARD_TUNED_TILES``), timed
    forward+backward at 4096 bf16 rows, as a training step runs them (the backward then finds
    x in the L2), per hidden size up to the widest whole row (wider rows take the chunked
    backward, which the table does not set). The grid leaves out what the H100 sweeps
    (benchmarks/norm_backward_sweep.py) never found fastest, to fit a tune in one device call:
    two and four stages (the sweeps never chose two; four came within 0.3 us of three except at
    512, where the rule already stages four) and w loaded per tile on rows of 4096 or fewer
    (``_backward_worth_timing``)."""
    models = (2048, 4096, 5120, 8192)
    sizes = tuple(sorted(h for h in set(hidden_sizes) | set(models) if h <= gpu.BWD_WHOLE_ROW_MAX))
    return Tuning(
        variant="gpu_multirow",
        knob="hidden",
        sizes=sizes,
        params={
            "BWD_ROWS": (1, 2, 4, 8, 16),
            "BWD_WARPS": (2, 4, 8, 16, 32),
            "BWD_STAGES": (1, 3),
            "BWD_RELOAD_W": (False, True),
        },
        problem={"rows": 4096},
        mode="full",
        dtype="bf16",
        quick_sizes=(64, 300),
        quick_params={"BWD_ROWS": (1, 4), "BWD_WARPS": (2, 4), "BWD_STAGES": (1, 3), "BWD_RELOAD_W": (False,)},
        quick_problem={"rows": 16},
        keep=_backward_worth_timing,
        simpler=("BWD_STAGES", "BWD_RELOAD_W", "BWD_WARPS", "BWD_ROWS"),
        part="backward",
    )


# A backward tile holds x, dy and dx a thread: outside 8-64 elements a thread it either spills or
# leaves the loop too little work (the bounds benchmarks/norm_backward_sweep.py sweeps within).
BACKWARD_ELEMENTS_PER_THREAD = (8, 64)


def _backward_worth_timing(hidden: int, params: dict) -> bool:
    tile = next_power_of_2(hidden) * params["BWD_ROWS"]
    low, high = BACKWARD_ELEMENTS_PER_THREAD
    per_thread = tile // (32 * params["BWD_WARPS"])
    if params["BWD_RELOAD_W"] and next_power_of_2(hidden) <= 4096:
        return False  # w in registers is a few registers a thread there
    # Rows under 256 elements (the interpreter's quick sizes) hold fewer than 8 a thread at any tile.
    return tile <= gpu.MAX_TILE_ELEMENTS and (low <= per_thread <= high or hidden < low * 32)


# Past 128 elements per thread a forward tile spills: on the H100 such tiles ran 1.3-70x slower
# than the default (hidden 5120 with 4 rows on 2 warps: 493 against 34 us) and took tens of
# seconds each to compile, most of a tune's budget.
MAX_TUNE_ELEMENTS_PER_THREAD = 128


def norm_compile_s(problem, params) -> float | None:
    """A norm forward's expected compile seconds from its elements per thread (the row tile over
    the threads), or None where a tile is left "auto". The H100 host's compiles (issue 44's
    sweeps, Triton's compile for sm_90): medians of 0.3-0.6 s up to 128 elements a thread, then
    0.9, 2.3 and 7.3 s at 256, 512 and 1024, as the tile spills."""
    rows, warps, block = params.get("BLOCK_SIZE_M"), params.get("num_warps"), params.get("BLOCK_SIZE", "auto")
    if "auto" in (rows, warps) or rows is None or warps is None:
        return None
    block = next_power_of_2(problem["hidden"]) if block in ("auto", None) else block
    per_thread = block * rows / (32 * warps)
    return 0.4 * max(1.0, per_thread / MAX_TUNE_ELEMENTS_PER_THREAD) ** 1.5


def _worth_timing(hidden: int, params: dict) -> bool:
    tile = next_power_of_2(hidden) * params["BLOCK_SIZE_M"]
    return tile <= gpu.MAX_TILE_ELEMENTS and tile <= MAX_TUNE_ELEMENTS_PER_THREAD * 32 * params["num_warps"]


_GRID_VALUES = ("auto",) + tuple(2**k for k in range(0, 12))
NORM_KNOBS = (
    Knob("rows", 4096, low=1, high=1 << 22, doc="rows (batch x sequence)", sweep=(1, 256, 4096, 16384)),
    Knob(
        "hidden",
        4096,
        low=1,
        high=1 << 17,
        doc="hidden size (the normalised axis)",
        sweep=(512, 1024, 2048, 4096, 8192, 16384, 32768),
    ),
    Knob("casting_mode", "llama", values=CASTING_MODES, doc="where the arithmetic happens"),
    Knob("offset", 0.0, doc="y = v * rstd * (offset + w) for the normalised input v; gemma uses 1.0"),
    Knob("weight", True, values=(True, False), doc="with a weight (False: y = v * rstd)"),
    Knob("eps", 1e-6),
)
_BLOCK_SIZE_M_VALUES = ("auto", 1, 2, 4, 8, 16, 32, 64)
# The modes whose kernels read the backward's tiles (the forward never does).
BACKWARD_MODES = ("backward", "full")
GPU_ROW_PARAMS = (
    Param("BLOCK_SIZE", ("auto",) + POW2, "auto", "row tile; >= hidden (next power of two)"),
    Param("num_warps", ("auto",) + gpu.NUM_WARPS, "auto", "warps per program"),
    Param("GRID", _GRID_VALUES, "auto", "backward programs (auto: one per SM)", modes=BACKWARD_MODES),
)
GPU_MULTIROW_PARAMS = (
    GPU_ROW_PARAMS[:1] + (Param("BLOCK_SIZE_M", _BLOCK_SIZE_M_VALUES, "auto", "rows per program"),) + GPU_ROW_PARAMS[1:]
)
# The backward's own tiles and loop (both norm families).
GPU_BACKWARD_LOOP_PARAMS = (
    Param(
        "DW_REDUCE",
        gpu.DW_REDUCTIONS,
        "atomic",
        "dw: fp32 atomics, one launch; partials: deterministic",
        modes=BACKWARD_MODES,
    ),
    Param("BWD_ROWS", _BLOCK_SIZE_M_VALUES[:6], "auto", "backward rows per program", modes=BACKWARD_MODES),
    Param("BWD_WARPS", ("auto",) + gpu.NUM_WARPS, "auto", "backward warps per program", modes=BACKWARD_MODES),
    Param(
        "BWD_PREFETCH",
        ("auto", False, True),
        "auto",
        "backward loads the next row tile before this one's math",
        modes=BACKWARD_MODES,
    ),
    Param(
        "BWD_RELOAD_W",
        ("auto", False, True),
        "auto",
        "backward loads w per tile instead of holding it",
        modes=BACKWARD_MODES,
    ),
    Param(
        "BWD_STAGES",
        ("auto",) + gpu.BWD_STAGE_COUNTS,
        "auto",
        "backward row tiles in flight via shared memory",
        modes=BACKWARD_MODES,
    ),
)
# ... and RMSNorm's column chunks for rows too wide for registers (the fused kernels keep whole rows).
GPU_BACKWARD_PARAMS = (
    Param("FWD_CHUNK", ("auto",) + POW2, "auto", "forward column chunk (>= hidden: whole rows)"),
    Param("FWD_WALKS", ("auto",) + gpu.FWD_WALK_COUNTS, "auto", "forward reads of a row: 2 reads it again from L2"),
    Param(
        "BWD_CHUNK",
        ("auto",) + POW2,
        "auto",
        "backward column chunk (>= hidden: whole rows in registers)",
        modes=BACKWARD_MODES,
    ),
    Param(
        "BWD_WIDE",
        gpu.WIDE_BACKWARDS,
        "columns",
        "chunked rows: two kernels by columns, one re-reading L2, or dw on chip (Gluon)",
        modes=BACKWARD_MODES,
    ),
    *GPU_BACKWARD_LOOP_PARAMS,
)
NPU_PARAMS = (
    Param("strategy", npu.STRATEGIES, "auto", "untiled rows, or two-pass column chunks"),
    Param("CHUNK_THRESHOLD", (512, 1024, 2048, 4096, 8192, 16384), 2048, "auto: chunk when hidden is above this"),
    Param("BLOCK_SIZE_M", _BLOCK_SIZE_M_VALUES, "auto", "rows per tile"),
    Param("BLOCK_SIZE_N", ("auto",) + POW2, "auto", "columns per tile (the chunk width when chunked)"),
    Param("GRID", _GRID_VALUES, "auto", "programs (auto: vector cores / SMs)"),
    Param("USE_WHERE", (False, True), False, "zero the padding with tl.where (slow on NPU)"),
)


# --- RMSNorm -----------------------------------------------------------------------------------
def _make_inputs(problem, dtype, device, seed):
    return norm_inputs(problem, dtype, device, seed)


def _reference(inputs, problem):
    return rms_norm_reference(
        inputs["x"], inputs.get("weight"), problem["eps"], problem["offset"], problem["casting_mode"]
    )


def _min_bytes(problem, mode, dtype):
    """Forward reads x and w and writes y; backward reads dy, x, w and writes dx, dw."""
    return norm_min_bytes(problem, mode, dtype, forward_rows=2, backward_rows=3)


def _eager(inputs, problem):
    return _reference(inputs, problem)


def _functional_bind(inputs, problem):
    w = inputs.get("weight")
    if w is not None and problem["offset"]:  # F.rms_norm has no offset: the add is part of the call
        return lambda: torch.nn.functional.rms_norm(
            inputs["x"], (problem["hidden"],), w + problem["offset"], problem["eps"]
        )
    return functools.partial(torch.nn.functional.rms_norm, inputs["x"], (problem["hidden"],), w, problem["eps"])


def _torch_compile_bind(inputs, problem):
    return functools.partial(
        compiled(rms_norm_reference),
        inputs["x"], inputs.get("weight"), problem["eps"], problem["offset"], problem["casting_mode"],
    )  # fmt: skip


def _liger_available():
    return missing("liger_kernel", "liger-kernel")


def _liger_bind(inputs, problem):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    if inputs.get("weight") is None:
        raise ValueError("Liger's RMSNorm needs a weight; set weight=True")
    return functools.partial(
        LigerRMSNormFunction.apply,
        inputs["x"], inputs["weight"], problem["eps"], problem["offset"], problem["casting_mode"], False,
    )  # fmt: skip


spec = KernelSpec(
    name="rms_norm",
    memory_bound=True,
    title="RMSNorm",
    doc="y = x * rstd * (offset + w), rstd = 1/sqrt(mean(x^2) + eps), over the last axis.",
    knobs=NORM_KNOBS,
    quick={"rows": 37, "hidden": 300},
    make_inputs=_make_inputs,
    reference=_reference,
    output_names=("y",),
    axis="hidden",
    min_bytes=_min_bytes,
    tolerances=dict(DEFAULT_TOLERANCES),
    strided=True,  # rows inside a wider buffer (a slice of a fused projection) are taken as they are
    ub_estimate=npu.ub_estimate,  # NPU tiles -> Unified Buffer bytes (calibrated; > npu.UB_BYTES overflows)
    tuning=norm_tuning((1024, 2048, 4096, 8192, 16384, 32768)),
    backward_tuning=norm_backward_tuning((1024, 2048, 4096, 8192, 16384)),
    compile_s=norm_compile_s,
    variants=our_variants(
        rms_norm,
        ("x",),
        gpu,
        npu,
        GPU_BACKWARD_PARAMS,
        (
            "one row per program, whole row in registers",
            "BLOCK_SIZE_M rows per program, for small hidden sizes",
            "triton-ascend style: grid = cores, grid-stride, untiled or chunked",
        ),
    )
    + (
        Variant("torch_eager", "torch", _eager, doc="Llama module math in eager PyTorch"),
        Variant(
            "torch_functional",
            "torch",
            run_of(_functional_bind),
            available=lambda: None if hasattr(torch.nn.functional, "rms_norm") else "needs torch >= 2.4",
            doc="torch.nn.functional.rms_norm",
            bind=_functional_bind,
        ),
        torch_compile_variant(_torch_compile_bind, "torch.compile of the eager math"),
        liger_variant(
            _liger_bind, "Liger-Kernel RMSNorm", module="liger_kernel.ops.rms_norm", available=_liger_available
        ),
    ),
)
