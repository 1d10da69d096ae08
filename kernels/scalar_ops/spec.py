"""The scalar-operand KernelSpec: op / size / value knobs and the four strategies as variants."""

from __future__ import annotations

from kernels import tuned_tables
from kernels.scalar_ops import gpu, npu, random_input, scalar_op
from kernels.scalar_ops.reference import OPS, scalar_op_reference
from kernels.spec import DEFAULT_TOLERANCES, KernelSpec, Knob, Param, Tuning, Variant, elem_bytes

NUMEL_SWEEP = (1, 16384, 262144, 1 << 20, 1 << 22, 1 << 24, 1 << 26)


def _make_inputs(problem, dtype, device, seed):
    shape = () if problem["zero_dim"] else (problem["numel"],)
    return {"x": random_input(shape, problem["op"], problem["value"], seed).to(device, dtype)}


def _reference(inputs, problem):
    return scalar_op_reference(problem["op"], inputs["x"], problem["value"])


def _min_bytes(problem, mode, dtype):
    """Read x, write z: 2 x numel x itemsize (the scalar itself is a few bytes)."""
    return 2 * problem["numel"] * elem_bytes(dtype)


def _check_problem(problem, params, dtype, device):
    if problem["zero_dim"] and problem["numel"] != 1:
        raise ValueError(f"zero_dim=True makes a 0-d tensor, which has numel 1; got numel={problem['numel']}")


def _strategy(strategy, impl=None):
    def run(inputs, problem, **params):
        tiles = {k: v for k, v in params.items() if v != "auto"}
        if impl is not None:
            tiles["impl"] = impl
        return scalar_op(problem["op"], inputs["x"], problem["value"], strategy, **tiles)

    def check(problem, params, dtype, device):
        _check_problem(problem, params, dtype, device)
        if strategy == "triton" and problem["op"] == "pow":
            gpu.pow_mode(problem["value"])
        if impl == "gpu":
            gpu.resolve_tiles(**params)
        elif impl == "npu":
            npu.resolve_tiles(**params, elem_bytes=elem_bytes(dtype), on_npu=device.kind == "npu")

    def source(problem, params, device):
        """Where the Triton kernel's tiles come from (records' tiles_source)."""
        tiles = {k: v for k, v in params.items() if v != "auto"}
        if impl != "gpu":
            return "explicit" if tiles else "heuristic"
        numel = 1 if problem["zero_dim"] else problem["numel"]
        return tuned_tables.choose("scalar_ops", tuned_tables.device_key(device), numel, tiles, gpu.TUNED_TILES).source

    return run, check, source


def _torch_variant(strategy, doc):
    """The variant of one of :func:`kernels.scalar_ops.scalar_op`'s torch strategies."""
    run, check, _ = _strategy(strategy)
    return Variant(strategy, "torch", run, check=check, doc=doc)


_GRID_VALUES = ("auto",) + tuple(2**k for k in range(0, 12))
_triton_gpu_run, _triton_gpu_check, _triton_gpu_source = _strategy("triton", "gpu")
_triton_npu_run, _triton_npu_check, _triton_npu_source = _strategy("triton", "npu")

spec = KernelSpec(
    name="scalar_ops",
    memory_bound=True,
    title="Scalar operand (div / sub / pow)",
    doc="z = x / value, x - value or x ** value: materialised vs cached 0-d vs Python scalar vs Triton.",
    knobs=(
        Knob("op", "div", values=OPS, doc="div: x / value, sub: x - value, pow: x ** value"),
        Knob("numel", 1 << 24, low=1, high=1 << 31, doc="elements of x (flat)", sweep=NUMEL_SWEEP),
        Knob("value", 3.0, doc="the scalar (a Python number)"),
        Knob("zero_dim", False, values=(False, True), doc="x as a 0-d tensor (needs numel=1)"),
    ),
    quick={"numel": 4099},
    make_inputs=_make_inputs,
    reference=_reference,
    output_names=("z",),
    axis="numel",
    min_bytes=_min_bytes,
    modes=("forward",),
    tolerances=dict(DEFAULT_TOLERANCES),
    # The Triton strategy's block and warps per numel: the sweep's sizes (1 element to 64 Mi).
    tuning=Tuning(
        variant="triton",
        knob="numel",
        sizes=NUMEL_SWEEP,
        params={"BLOCK_SIZE": tuple(2**k for k in range(8, 15)), "num_warps": (1, 2, 4, 8, 16)},
        problem={"op": "div"},
        dtype="bf16",
        quick_sizes=(4099, 16384),
        quick_params={"BLOCK_SIZE": (1024, 4096), "num_warps": (4, 8)},
    ),
    variants=(
        _torch_variant("materialized", "full-shape host tensor of the scalar + host-to-device copy every call"),
        _torch_variant("cached", "persistent 0-d device tensor per (device, dtype, value), LRU-bounded"),
        _torch_variant("python", "torch's operator with a Python number"),
        Variant(
            "triton",
            "gpu",
            _triton_gpu_run,
            params=(
                Param("BLOCK_SIZE", ("auto",) + gpu.BLOCK_SIZES, "auto", "elements per program"),
                Param("num_warps", ("auto",) + gpu.NUM_WARPS, "auto", "warps per program"),
            ),
            devices=("cuda", "cpu"),
            check=_triton_gpu_check,
            tiles_source=_triton_gpu_source,
            doc="Triton kernel, scalar as an argument, a block per program",
        ),
        Variant(
            "triton_npu",
            "npu",
            _triton_npu_run,
            params=(
                Param("BLOCK_SIZE", ("auto",) + npu.BLOCK_SIZES, "auto", "elements per block"),
                Param("GRID", _GRID_VALUES, "auto", "programs (auto: vector cores / SMs)"),
            ),
            devices=("npu", "cuda", "cpu"),
            check=_triton_npu_check,
            tiles_source=_triton_npu_source,
            doc="triton-ascend style: grid = cores, grid-stride, scalar as an argument",
        ),
    ),
)
