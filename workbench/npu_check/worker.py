"""npu-check worker: runs inside the triton-ascend virtualenv, never in the main environment.

    <npu-venv>/bin/python workbench/npu_check/worker.py --kernels-root REPO --workdir DIR --out FILE.jsonl \
        --families rms_norm,... [--defaults-only] [--shard K --shards N] [--cases MODULE:FUNC] [--keep]

For every case of every family's ``npu.npu_compile_cases()`` (or of ``--cases``), it runs
triton-ascend's front end for Ascend910B3 (``.ttir`` and ``.ttadapter`` land in a per-case
TRITON_CACHE_DIR; the last stage stops for lack of CANN), then ``bishengir-compile`` on the
``.ttadapter`` with the flags triton-ascend itself uses, and appends one JSON line per case to
``--out`` as soon as it is known. Family-level problems (no npu.py, no npu_compile_cases, an
import error) are JSON lines of type "note".

It is started by file path, not ``-m``: the repository goes at the *end* of ``sys.path`` so that
``import triton`` finds triton-ascend, and ``import kernels`` finds this checkout.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
import types

if __name__ == "__main__":  # drop workbench/npu_check from the path: its module names must not shadow anything
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]

TARGET_ARCH = "Ascend910B3"
BISHENGIR_FLAGS = (
    f"--target={TARGET_ARCH}",
    "--enable-auto-multi-buffer=True",
    "--enable-hfusion-compile=true",
    "--enable-hivm-compile=true",
    "--enable-triton-kernel-compile=true",
)
# Writes memory_info_*.json (the UB memory plan) into the working directory; verdicts are the same.
MEMORY_FLAG = "--enable-memory-display"
FLOAT_TYPES = ("bf16", "fp16", "fp32", "fp8e5", "fp8e4nv", "fp64")
TILE_NAME = re.compile(r"BLOCK|TILE|CHUNK")


def bishengir_path() -> str:
    spec = importlib.util.find_spec("ascendnpuir")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("ascendnpu-ir is not installed in this environment (it ships bishengir-compile)")
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "bin", "bishengir-compile")
        if os.path.exists(path):
            return path
    raise RuntimeError("bishengir-compile not found in the ascendnpuir package")


def case_dtype(signature) -> str:
    """The data type a case is about: the narrowest float among its pointer arguments."""
    pointed = [t[1:] for t in signature.values() if isinstance(t, str) and t.startswith("*")]
    for want in ("bf16", "fp16", "fp8e5", "fp8e4nv", "fp32"):
        if want in pointed:
            return want
    return pointed[0] if pointed else "-"


def case_tiles(constants) -> dict:
    return {k: v for k, v in constants.items() if TILE_NAME.search(k)}


def _kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", kernel)
    return getattr(fn, "__name__", repr(kernel))


def _has_default(param) -> bool:
    return param.default is not inspect.Parameter.empty and param.default is not None


def unwrap(kernel):
    """The JITFunction under @triton.autotune / @triton.heuristics wrappers."""
    from triton.runtime.jit import JITFunction

    while not isinstance(kernel, JITFunction) and hasattr(kernel, "fn"):
        kernel = kernel.fn
    return kernel


def full_signature(case):
    """Signature and constants in the kernel's argument order; constexpr defaults filled in.

    triton-ascend 3.2's ASTSource takes ``{arg name: type}`` (constexprs typed ``"constexpr"``)
    and ``{constexpr name: value}``; the argument order must be the kernel's.
    """
    kernel = unwrap(case.kernel)
    names = list(kernel.arg_names)
    params = {p.name: p for p in getattr(kernel, "params", [])}
    signature, constants = {}, dict(case.constants)
    missing = []
    for name in names:
        if name in constants:
            signature[name] = "constexpr"
        elif name in case.signature:
            signature[name] = case.signature[name]
        elif name in params and getattr(params[name], "is_constexpr", False) and _has_default(params[name]):
            constants[name] = params[name].default
            signature[name] = "constexpr"
        else:
            missing.append(name)
    extra = sorted((set(case.signature) | set(case.constants)) - set(names))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"arguments without a type or value: {', '.join(missing)}")
        if extra:
            parts.append(f"names the kernel does not take: {', '.join(extra)}")
        raise ValueError(f"case does not match {_kernel_name(kernel)}({', '.join(names)}): {'; '.join(parts)}")
    return signature, constants


def compile_case(case, casedir: str, bishengir: str, timeout: float, keep: bool):
    """Front end + BiShengIR for one case; returns the verdict fields and timings."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    from workbench.npu_check import classify

    os.makedirs(casedir, exist_ok=True)
    cache = os.path.join(casedir, "cache")
    os.environ["TRITON_CACHE_DIR"] = cache
    t0 = time.perf_counter()
    out = {"front_seconds": None, "bishengir_seconds": None}
    try:
        signature, constants = full_signature(case)
    except ValueError as exc:
        verdict = classify.Verdict(classify.COMPILE_ERROR, str(exc))
        return {**verdict.as_dict(), **out, "stage": "case"}
    error = ""
    try:
        triton.compile(
            ASTSource(fn=unwrap(case.kernel), signature=signature, constants=constants),
            target=GPUTarget("npu", TARGET_ARCH, 0),
        )
    except Exception as exc:  # the last stage always fails here (no CANN): look for the .ttadapter
        error = f"{type(exc).__name__}: {exc}"
    out["front_seconds"] = round(time.perf_counter() - t0, 3)
    adapters = sorted(glob.glob(os.path.join(cache, "*", "*.ttadapter")))
    if not adapters:
        verdict = classify.front_end_error(error or "triton-ascend wrote no .ttadapter")
        return {**verdict.as_dict(), **out, "stage": "triton-ascend"}
    t1 = time.perf_counter()
    cmd = [bishengir, adapters[0], *BISHENGIR_FLAGS, MEMORY_FLAG, "-o", os.path.join(casedir, "kernel")]
    try:
        proc = subprocess.run(cmd, cwd=casedir, capture_output=True, text=True, timeout=timeout)
        verdict = classify.classify_bishengir(
            proc.returncode, proc.stdout, proc.stderr, used_bits=classify.used_ub_bits(casedir)
        )
    except subprocess.TimeoutExpired:
        verdict = classify.Verdict(classify.COMPILE_ERROR, f"bishengir-compile took longer than {timeout:.0f} s")
    out["bishengir_seconds"] = round(time.perf_counter() - t1, 3)
    result = {**verdict.as_dict(), **out, "stage": "bishengir"}
    if keep:
        result["ttadapter"] = adapters[0]
    return result


def _stub_package(name: str):
    """Register ``kernels.<family>`` without running its ``__init__`` (so a broken GPU module or a
    newer-Triton-only import in the package cannot hide the NPU kernels)."""
    import kernels

    folder = os.path.join(os.path.dirname(kernels.__file__), name.split(".")[-1])
    pkg = types.ModuleType(name)
    pkg.__path__ = [folder]
    pkg.__package__ = name
    sys.modules[name] = pkg


def load_cases(family: str, provider: str | None):
    """(cases, notes) for one family; notes are (message, is_error)."""
    notes = []
    if provider:
        module_name, _, func = provider.partition(":")
    else:
        module_name, func = f"kernels.{family}.npu", "npu_compile_cases"
        if importlib.util.find_spec(f"kernels.{family}") is None:
            return [], [("family package not found", True)]
        import kernels

        if not os.path.exists(os.path.join(os.path.dirname(kernels.__file__), family, "npu.py")):
            return [], [("no npu.py: nothing to compile for the NPU", False)]
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        first = f"{type(exc).__name__}: {exc}"
        for name in [n for n in sys.modules if n == f"kernels.{family}" or n.startswith(f"kernels.{family}.")]:
            del sys.modules[name]
        try:
            _stub_package(f"kernels.{family}")
            module = importlib.import_module(module_name)
            notes.append((f"imported {module_name} without its package __init__, which fails here: {first}", False))
        except Exception as exc2:
            return [], [(f"cannot import {module_name} with triton-ascend: {type(exc2).__name__}: {exc2}", True)]
    fn = getattr(module, func, None)
    if fn is None:
        return [], [*notes, (f"{module_name} has no {func}(): skipped", False)]
    try:
        cases = list(fn())
    except Exception as exc:
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return [], [*notes, (f"{module_name}.{func}() failed: {tb}", True)]
    return cases, notes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="npu-check worker")
    parser.add_argument("--kernels-root", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--families", default="")
    parser.add_argument("--cases", default=None, help="MODULE:FUNC providing the cases instead of npu_compile_cases")
    parser.add_argument("--defaults-only", action="store_true")
    parser.add_argument("--match", action="append", default=[], help="only cases whose name contains this text")
    parser.add_argument("--shard", type=int, default=0)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--list", action="store_true", help="only list the cases")
    args = parser.parse_args(argv)

    sys.path.append(os.path.abspath(args.kernels_root))
    os.environ.pop("TRITON_INTERPRET", None)
    import triton

    if not getattr(triton, "__file__", None) or "backends" not in os.listdir(os.path.dirname(triton.__file__)):
        raise SystemExit("this is not a triton-ascend environment")
    bishengir = bishengir_path()
    families = [f for f in args.families.split(",") if f]
    index = 0
    with open(args.out, "a") as out:

        def emit(obj):
            out.write(json.dumps(obj, default=str) + "\n")
            out.flush()

        for family in families:
            cases, notes = load_cases(family, args.cases)
            if args.shard == 0:
                for message, is_error in notes:
                    emit({"type": "note", "family": family, "message": message, "error": is_error})
            for case in cases:
                i = index
                index += 1
                if args.defaults_only and not case.default:
                    continue
                if args.match and not any(text in case.name for text in args.match):
                    continue
                if i % args.shards != args.shard:
                    continue
                row = {
                    "type": "case",
                    "index": i,
                    "family": getattr(case, "family", family),
                    "case": case.name,
                    "kernel": _kernel_name(case.kernel),
                    "dtype": case_dtype(case.signature),
                    "tiles": case_tiles(case.constants),
                    "constants": dict(case.constants),
                    "default": bool(case.default),
                    "ub_model_bytes": case.ub_bytes,
                }
                if args.list:
                    emit(row)
                    continue
                casedir = os.path.join(args.workdir, f"case{i:05d}")
                t0 = time.perf_counter()
                try:
                    result = compile_case(case, casedir, bishengir, args.timeout, args.keep)
                except Exception as exc:  # a bug in the checker itself: report it on the case
                    result = {"verdict": "compile error", "message": f"checker failed: {type(exc).__name__}: {exc}"}
                row.update(result)
                row["seconds"] = round(time.perf_counter() - t0, 3)
                emit(row)
                if not args.keep:
                    shutil.rmtree(casedir, ignore_errors=True)
        emit({"type": "done", "shard": args.shard, "cases": index})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
