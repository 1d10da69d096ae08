"""Did a refactor change the GPU code? Compile a family's kernels at two revisions and compare PTX.

    python benchmarks/ptx_diff.py --base b3d9906 --family block_sparse --sizes 1,8,16,64 --problem precision=ieee,tf32
    python benchmarks/ptx_diff.py --base HEAD --family rms_norm --variant npu --sizes 1024,8192

No GPU needed: each side compiles for an H100 (sm_90, Triton's own ptxas) through the
compile-ahead path (:func:`workbench.sweep.compile_ahead.compile_task`: the family's default
variant or ``--variant``, with ``--param`` tiles, forward and backward, at each size), in a
process of its own with its own Triton cache;
the base revision runs from a temporary git worktree, so it must have that path (8c4298a or
later). Each kernel's PTX is compared with its debug information (source locations, temporary
labels, debug sections) stripped: identical instructions mean the timings measured at the base
revision stand for this tree. Prints one line per kernel and exits 1 when any differs.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
H100 = {"kind": "cuda", "backend": "cuda", "arch": 90, "warp_size": 32, "name": "NVIDIA H100 80GB HBM3",
        "num_cores": 132, "l2_bytes": 50 << 20}  # fmt: skip


def dump(args) -> int:
    """In a child process (this side's code first on sys.path): compile every case, write
    ``{case: {kernel: hash}}``."""
    sys.path.insert(0, os.getcwd())
    from kernels.spec import get
    from workbench.sweep.compile_ahead import compile_task
    from workbench.sweep.tasks import make_task

    spec = get(args.family)
    variant = args.variant or (spec.tuning.variant if spec.tuning is not None else spec.variants[0].name)
    params = {name: typed_value(value) for name, value in (kv.split("=", 1) for kv in args.param)}
    knobs = dict(kv.split("=", 1) for kv in args.problem)
    axes = {name: [typed_value(v) for v in values.split(",")] for name, values in knobs.items()}
    out = {}
    for size, combo in itertools.product(args.sizes.split(","), itertools.product(*axes.values())):
        problem = {spec.axis: int(size), **dict(zip(axes, combo))}
        task = make_task(spec, variant, device="cuda", dtype=args.dtype or spec.dtypes[0], mode="full",
                         problem=problem, params=params)  # fmt: skip
        result = compile_task(task, H100)
        if not result["ok"]:
            print(f"{problem}: not compiled: {result['error']}", file=sys.stderr)
            continue
        case = ", ".join(f"{k}={v}" for k, v in problem.items())
        out[case] = {k["name"]: k["hash"] for k in result["kernels"] if k.get("hash")}
    Path(args.dump).write_text(json.dumps(out))
    return 0


def typed_value(text: str):
    """A value given as text, read as JSON where it is (``64``, ``0.5``, ``true``), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def instructions(cache: str, kernel_hash: str) -> list[str]:
    """A compiled kernel's PTX without debug information (locations, temporary labels, sections)."""
    for meta in glob.glob(f"{cache}/*/*.json"):
        if Path(meta).name.startswith("__grp__") or json.loads(Path(meta).read_text()).get("hash") != kernel_hash:
            continue
        text = next(iter(glob.glob(f"{Path(meta).parent}/*.ptx")), None)
        text = Path(text).read_text().split(".section\t.debug")[0] if text else ""
        return [
            re.sub(r"//.*", "", line).rstrip()
            for line in text.splitlines()
            if not re.match(r"\s*(\.loc|\.file|//)", line) and not re.match(r"\$L__tmp\d+:", line.strip())
        ]
    raise FileNotFoundError(f"no compiled kernel {kernel_hash} in {cache}")


def compile_side(code: Path, args, work: Path, name: str) -> tuple[dict, str]:
    cache, out = str(work / f"cache-{name}"), work / f"{name}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--dump", str(out), "--family", args.family,
           "--sizes", args.sizes, "--dtype", args.dtype or "", "--variant", args.variant or ""]  # fmt: skip
    cmd += [x for kv in args.problem for x in ("--problem", kv)] + [x for kv in args.param for x in ("--param", kv)]
    env = dict(os.environ, TRITON_CACHE_DIR=cache, PYTHONPATH=str(code))
    subprocess.run(cmd, cwd=code, env=env, check=True)
    return json.loads(out.read_text()), cache


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", help="the revision to compare this tree with")
    p.add_argument("--family", default="block_sparse")
    p.add_argument("--sizes", default="1,8,16,64", help="values of the family's axis (block_sparse: batch)")
    p.add_argument("--problem", action="append", default=[], help="KNOB=v1,v2: more problem values (repeatable)")
    p.add_argument("--dtype", default=None)
    p.add_argument("--variant", default=None, help="one of the family's variants (default: its tuned or first)")
    p.add_argument("--param", action="append", default=[], help="TILE=value: a variant parameter (repeatable)")
    p.add_argument("--dump", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dump:
        return dump(args)
    if not args.base:
        p.error("--base REV is required")
    with tempfile.TemporaryDirectory(prefix="ptx-diff-") as tmp:
        work = Path(tmp)
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(work / "base"), args.base], cwd=ROOT, check=True
        )
        try:
            base, base_cache = compile_side(work / "base", args, work, "base")
            here, here_cache = compile_side(ROOT, args, work, "here")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(work / "base")], cwd=ROOT, check=False)
        same = differ = 0
        for case, kernels in base.items():
            for kernel, kernel_hash in kernels.items():
                other = here.get(case, {}).get(kernel)
                ok = other is not None and instructions(base_cache, kernel_hash) == instructions(here_cache, other)
                same, differ = same + ok, differ + (not ok)
                print(f"{'same  ' if ok else 'DIFFER'} {case}: {kernel}")
        print(f"{same} of {same + differ} kernels compile to the same PTX instructions at {args.base} and in this tree")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
