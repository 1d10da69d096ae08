"""A wrong kernel never passes: each output and gradient judged against a float64 truth by the
reference's own error in the kernel's dtype (kernels/testing.py), at edge shapes derived from the
declaration (workbench/edges.py), through measure, bench, sweep, tune, the gate and a notebook.

The SwiGLU fixture (tests/fixtures/workbench_swiglu) holds the correct kernel and wrong copies of
it: its output times 1.01 and 1.005 (in bf16 within about one unit in the last place), its ``db``
times 1.01, and ``swiglu_pair``: one family with a correct and a wrong variant. The many-seed study
of the rule's constants is benchmarks/error_rule.py, not a test."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels
from kernels import custom, wrong
from kernels.testing import ErrorRule, judge, looser
from workbench.measure import check_edges, measure

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "workbench_swiglu"
DTYPES = ("bf16", "fp16", "fp32")
ROW = {"rows": 2, "cols": 1024}  # 1,024 elements per row: every wrong copy must fail from here on


@pytest.fixture(scope="module")
def swiglu():
    """The fixture module, imported from its source folder (no install)."""
    sys.path.insert(0, str(FIXTURE))
    try:
        import workbench_swiglu

        yield workbench_swiglu
    finally:
        sys.path.remove(str(FIXTURE))


# --- the rule on tensors ---------------------------------------------------------------------------
def _silu_mul(dtype, cols=1024, rows=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(rows, cols, generator=gen).to(dtype)
    b = torch.randn(rows, cols, generator=gen).to(dtype)
    truth = torch.nn.functional.silu(a.double()) * b.double()
    ref = torch.nn.functional.silu(a) * b  # the reference in the kernel's dtype: two roundings
    fused = torch.nn.functional.silu(a.float()) * b.float()  # a kernel computing in fp32, rounding once
    return truth, ref, fused


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_correct_result_passes_and_a_scaled_one_fails_though_within_one_ulp(dtype):
    truth, ref, fused = _silu_mul(dtype)
    right = judge("out", fused.to(dtype), truth, ref, atol=1, rtol=1)
    assert right.passed and right.judged_by == "rule" and right.err_ratio < 1, right
    for factor in (1.01, 1.005):
        scaled = judge("out", (fused * factor).to(dtype), truth, ref, atol=1, rtol=1)
        assert not scaled.passed and scaled.worst == "scale" and scaled.err_ratio > 2, (factor, scaled)
        assert scaled.within_tolerance  # the loose outer bound alone would have let it through
    if dtype == torch.bfloat16:  # the case neither the maximum nor the RMS can tell: only the bias does
        scaled = judge("out", (fused * 1.005).to(dtype), truth, ref, atol=1, rtol=1)
        assert scaled.ratios["max"] < 2 and scaled.ratios["rms"] < 2 and scaled.ratios["scale"] > 4, scaled.ratios


def test_a_shifted_result_fails_on_its_mean_error():
    truth, ref, fused = _silu_mul(torch.bfloat16)
    shifted = judge("out", (fused + 0.01).to(torch.bfloat16), truth, ref, atol=1, rtol=1)
    assert not shifted.passed and shifted.worst == "shift", shifted


def test_nan_or_inf_where_the_reference_has_none_fails():
    truth, ref, fused = _silu_mul(torch.float32)
    broken = fused.clone()
    broken[0, 3] = float("nan")
    broken[1, 5] = float("inf")
    check = judge("out", broken, truth, ref, atol=1, rtol=1)
    assert not check.passed and check.new_nonfinite == 2 and "2 NaN/Inf where the reference has none" in check.note


def test_an_overflow_the_dtype_must_have_is_right():
    truth = torch.tensor([1e5, 2.0, -1e6] + [1.0] * 20, dtype=torch.float64)
    got = truth.to(torch.float16)  # 1e5 and -1e6 overflow fp16: inf and -inf are the right answer
    check = judge("y", got, truth, got.clone(), atol=1e-2, rtol=1e-2)
    assert check.passed and check.nan_mismatch == 0, check


def test_too_few_elements_are_judged_by_the_tolerance_alone():
    truth = torch.tensor([1e-8, 2.0], dtype=torch.float64)
    got = torch.tensor([3e-8, 2.0], dtype=torch.float32)
    check = judge("dx", got, truth, truth.float(), atol=1e-4, rtol=1e-5)
    assert check.passed and check.judged_by.startswith("tolerance (2 elements"), check


def test_a_looser_k_must_say_why():
    with pytest.raises(ValueError, match="give the reason"):
        ErrorRule(k=4)
    rule = looser(4, "split-K sums in another order")
    assert rule.k == 4 and "split-K" in rule.describe()
    with pytest.raises(ValueError, match="k >= 1"):
        ErrorRule(k=0.5)


# --- measured: the fixture family, built-in families, wrong gradients ------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_wrong_swiglus_fail_and_the_right_one_passes(swiglu, dtype):
    right = measure(swiglu.spec, "ours", device="cpu", dtype=dtype, mode="full", problem=ROW, time_it=False)
    assert right.passed and right.err_ratio < 2, right.checks
    for spec in (swiglu.scaled_1_01, swiglu.scaled_1_005):
        rec = measure(spec, "ours", device="cpu", dtype=dtype, mode="forward", problem=ROW, time_it=False)
        failed = {c["name"] for c in rec.checks if not c["passed"]}
        assert rec.error is None and rec.passed is False and failed == {"out"}, (spec.name, rec.checks)
        assert rec.err_ratio > 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_wrong_gradient_fails_with_the_forward_right(swiglu, dtype):
    rec = measure(swiglu.db_scaled_1_01, "ours", device="cpu", dtype=dtype, mode="full", problem=ROW, time_it=False)
    verdicts = {c["name"]: c["passed"] for c in rec.checks}
    assert verdicts == {"out": True, "da": True, "db": False}, rec.checks


def test_a_family_with_a_right_and_a_wrong_variant_gets_both_verdicts(swiglu):
    pair = swiglu.pair
    assert [v.name for v in pair.variants][:2] == ["ours", "scaled"]
    ours = measure(pair, "ours", device="cpu", dtype="bf16", mode="full", problem=ROW, time_it=False)
    scaled = measure(pair, "scaled", device="cpu", dtype="bf16", mode="full", problem=ROW, time_it=False)
    assert ours.passed and ours.error is None
    assert scaled.passed is False and scaled.error is None
    assert {c["name"] for c in scaled.checks if not c["passed"]} == {"out", "da", "db"}


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_built_in_norm_with_dw_times_1_01_fails(dtype):
    spec = kernels.get("rms_norm")
    bad = wrong.scaled_gradient(spec.variant("gpu_multirow"), "weight", 1.01)
    problem = {"rows": 4, "hidden": 1024}
    rec = measure(spec, bad, device="cpu", dtype=dtype, mode="full", problem=problem, time_it=False)
    verdicts = {c["name"]: c["passed"] for c in rec.checks}
    assert verdicts == {"y": True, "dx": True, "dweight": False}, rec.checks
    right = measure(spec, "gpu_multirow", device="cpu", dtype=dtype, mode="full", problem=problem, time_it=False)
    assert right.passed and right.err_ratio < 2, right.checks


def test_records_keep_the_errors_and_the_ratio(swiglu):
    rec = measure(swiglu.scaled_1_005, "ours", device="cpu", dtype="bf16", problem=ROW, time_it=False)
    (check,) = rec.checks
    for key in ("max_abs", "max_rel", "rms", "bias", "ref_max_abs", "ref_rms", "ref_bias", "err_ratio", "k"):
        assert isinstance(check[key], float) and math.isfinite(check[key]), key
    assert rec.err_ratio == check["err_ratio"] and rec.max_abs_err == check["max_abs"]
    from workbench.store import Store

    store = Store(":memory:")
    store.append(rec)
    assert store.records()[0]["err_ratio"] == rec.err_ratio


# --- edge shapes ---------------------------------------------------------------------------------------
def test_edge_shapes_come_from_the_declaration(swiglu):
    verdicts = check_edges(swiglu.spec, "ours", device="cpu", dtype="bf16", mode="full", problem=ROW)
    edges = {v["edge"]: v for v in verdicts}
    assert {"one row", "odd sizes", "smallest BLOCK_SIZE", "largest BLOCK_SIZE", "smallest num_warps",
            "largest num_warps", "strided inputs"} <= set(edges), sorted(edges)  # fmt: skip
    assert edges["one row"]["sizes"]["rows"] == 1 and edges["odd sizes"]["sizes"] == {"cols": 1025, "rows": 5}
    assert edges["smallest BLOCK_SIZE"]["params"] == {"BLOCK_SIZE": 128}
    assert edges["largest BLOCK_SIZE"]["params"] == {"BLOCK_SIZE": 8192}
    assert edges["strided inputs"]["layout"] == "strided"
    assert all(v["passed"] for v in verdicts), [(v["edge"], v.get("error"), v["failed"]) for v in verdicts]
    # each says what it cost; on the CPU nothing compiles, so no case says where it compiled
    assert all(v["seconds"] > 0 and v["compiled_ahead"] is None for v in verdicts)


def test_the_edge_summary_says_what_the_cases_cost():
    from workbench.edges import summary

    ran = [
        {"edge": "one row", "passed": True, "seconds": 2.5, "compiled_ahead": True, "waited_ms": 1200.0},
        {"edge": "odd sizes", "passed": True, "seconds": 4.0, "compiled_ahead": False},
        {"edge": "smallest TILE", "passed": True, "seconds": 0.5, "compiled_ahead": True},
        {"edge": "largest TILE", "passed": None, "refused": "too wide"},
    ]
    assert summary(ran) == (
        "edge shapes: 3 passed, 0 failed, 1 refused by the declaration (in 7.0 s; 2 of 3 compiled ahead; waited 1.2 s)"
    )
    on_cpu = [{"edge": "one row", "passed": True, "seconds": 0.25, "compiled_ahead": None}]
    assert summary(on_cpu) == "edge shapes: 1 passed, 0 failed, 0 refused by the declaration (in 0.2 s)"


def test_a_kernel_wrong_only_at_one_row_fails_its_record(registered):
    """NaN in one-row outputs (where the reference has none): the record at the usual sizes
    passes, its edge "one row" fails, and the record says so."""

    def run(x, TILE=64):
        y = x * 2
        return y * float("nan") if x.shape[0] == 1 else y

    spec = registered(custom.family("nan_one_row", run=run, reference=lambda x: 2 * x, tiles={"TILE": [32, 64]},
                                    inputs=lambda rows, cols: {"x": torch.randn(rows, cols)},
                                    sizes={"cols": 64, "rows": 8}))  # fmt: skip
    rec = measure(spec, "ours", device="cpu", dtype="fp32", quick=True, time_it=False, edges=True)
    edges = {v["edge"]: v for v in rec.edges}
    assert edges["odd sizes"]["passed"] and edges["one row"]["passed"] is False
    assert rec.passed is False
    failed = [c for c in rec.checks if not c["passed"]]
    assert failed and "one row" in failed[0]["name"] and "NaN/Inf where the reference has none" in failed[0]["note"]


def test_an_edge_the_check_refuses_is_not_a_failure(registered):
    spec = registered(custom.family("wide_tiles", run=lambda x, TILE=64: x * 2, reference=lambda x: 2 * x,
                                    inputs=lambda n: {"x": torch.randn(n)}, sizes={"n": 48},
                                    tiles={"TILE": [16, 64, 256]},
                                    check=lambda n, TILE: TILE >= n or f"TILE={TILE} < n={n}"))  # fmt: skip
    verdicts = check_edges(spec, "ours", device="cpu", dtype="fp32", mode="forward", problem={"n": 48})
    edges = {v["edge"]: v for v in verdicts}
    assert edges["smallest TILE"]["params"] == {"TILE": 64}  # 16 is refused at 49, so 64 is the smallest
    assert all(v["passed"] is not False for v in verdicts), verdicts


# --- tune: nothing installed for a wrong kernel ------------------------------------------------------
def _wrong_in_fp32(x, TILE=64):
    y = x * 2
    return y * 1.01 if x.dtype == torch.float32 else y


def test_tune_installs_nothing_when_the_chosen_tiles_are_wrong_in_another_dtype(registered, tmp_path, capsys):
    from widgets import Session

    spec = registered(custom.family("wrong_in_fp32", run=_wrong_in_fp32, reference=lambda x: 2 * x,
                                    inputs=lambda n: {"x": torch.randn(n)}, sizes={"n": 300},
                                    tiles={"TILE": [32, 64]}, tables=tmp_path / "tables"))  # fmt: skip
    s = Session(spec, device="cpu", dtype="bf16", headless=True, store=False, out_dir=tmp_path, rep_ms=1)
    tuned = s.tune()
    assert tuned.result.space.tuning.dtype == "bf16"
    assert {r["dtype"] for r in tuned.result.dtype_checks} == {"fp16", "fp32"}
    assert [r["dtype"] for r in tuned.wrong] == ["fp32"], tuned.wrong
    message = tuned.wrong_message()
    assert "1 configurations of wrong_in_fp32 gave wrong results; nothing was installed" in message
    assert "ours forward fp32 n=64" in message and "out: " in message
    with pytest.raises(ValueError, match="gave wrong results"):
        tuned.install()
    assert not (tmp_path / "tables").exists() or not list((tmp_path / "tables").glob("*.json"))

    from workbench.cli import main

    code = main(["tune", "wrong_in_fp32", "--device", "cpu", "--out", str(tmp_path / "cli"), "--write"])
    out = capsys.readouterr().out
    assert code == 1 and "nothing was installed" in out and "fp32" in out, out
    assert not (tmp_path / "tables").exists() or not list((tmp_path / "tables").glob("*.json"))


def test_tune_dtypes_are_declared_and_chosen(registered, tmp_path, capsys):
    spec = registered(custom.family("doubled_fp16", run=lambda x, TILE=64: x * 2, reference=lambda x: 2 * x,
                                    inputs=lambda n: {"x": torch.randn(n)}, sizes={"n": 300},
                                    tiles={"TILE": [32, 64]}, tune_dtypes=["fp16", "fp32"],
                                    tables=tmp_path / "tables"))  # fmt: skip
    assert spec.tuning.dtype == "fp16" and spec.tuning.timed_dtypes == ("fp16", "fp32")
    with pytest.raises(ValueError, match="tune_dtypes"):
        custom.family("bad_tune", run=lambda x, TILE=64: x, reference=lambda x: x, inputs=lambda n: {"x": torch.randn(n)},
                      sizes={"n": 8}, tiles={"TILE": [64]}, dtypes=["fp32"], tune_dtypes=["bf16"])  # fmt: skip
    from workbench.cli import main

    assert main(["tune", "doubled_fp16", "--device", "cpu", "--dtype", "bf16", "--out", str(tmp_path / "x")]) == 2
    assert "doubled_fp16 tunes in fp16, fp32, not bf16" in capsys.readouterr().err
    code = main(["tune", "doubled_fp16", "--device", "cpu", "--dtype", "fp32", "--out", str(tmp_path / "y"), "--write"])
    assert code == 0, capsys.readouterr()
    (table,) = (tmp_path / "tables").glob("*.json")
    assert json.loads(table.read_text())["dtype"] == "fp32"


# --- the path of a user's kernel ---------------------------------------------------------------------
def test_bytes_are_counted_per_mode(swiglu, registered):
    n = 4096 * 4096
    spec = swiglu.spec
    problem = {"rows": 4096, "cols": 4096}
    # forward: read a and b, write out; backward: read dout, a and b, write da and db.
    assert spec.min_bytes(problem, "forward", "bf16") == 3 * n * 2
    assert spec.min_bytes(problem, "backward", "bf16") == 5 * n * 2
    assert spec.min_bytes(problem, "full", "fp32") == 8 * n * 4
    told = registered(custom.family("told_bytes", run=lambda x, TILE=64: x * 2, reference=lambda x: 2 * x,
                                    inputs=lambda n: {"x": torch.randn(n)}, sizes={"n": 8}, tiles={"TILE": [64]},
                                    grads=("x",),
                                    bytes=lambda n, itemsize, mode: {"forward": 2, "backward": 3, "full": 5}[mode] * n * itemsize))  # fmt: skip
    assert [told.min_bytes({"n": 10}, m, "fp32") for m in ("forward", "backward", "full")] == [80, 120, 200]


def test_auto_falls_back_to_the_accepted_tile_nearest_the_default_and_says_so(registered):
    def run(x, TILE=1024):
        return x * 2

    spec = registered(custom.family("nearest_tile", run=run, reference=lambda x: 2 * x,
                                    inputs=lambda n: {"x": torch.randn(n)}, sizes={"n": 1500},
                                    tiles={"TILE": [64, 128, 256, 512, 1024, 2048, 4096, 8192]},
                                    check=lambda n, TILE: TILE >= n or f"TILE={TILE} < n={n}"))  # fmt: skip
    rec = measure(spec, "ours", device="cpu", dtype="fp32", problem={"n": 1500}, time_it=False)
    assert rec.passed and rec.tiles_source == "declared defaults adjusted to fit (TILE=1024 < n=1500): TILE=2048"
    rec = measure(spec, "ours", device="cpu", dtype="fp32", problem={"n": 900}, time_it=False)
    assert rec.tiles_source == "declared defaults: TILE=1024"  # the host function's own default


def test_a_session_on_the_cpu_picks_quick_sizes_and_says_so(swiglu, registered, capsys):
    from widgets import Session

    registered(swiglu.spec)
    s = Session("swiglu", device="cpu", headless=True, store=False)
    assert s.quick and s.problem == {"cols": 1024, "rows": 4}
    assert "CPU: the Triton interpreter at small sizes (quick: cols=1024, rows=4)" in capsys.readouterr().out


def test_best_is_none_safe_with_a_message(swiglu, registered, tmp_path):
    from widgets import Session

    spec = registered(swiglu.scaled_1_01)
    s = Session(spec, device="cpu", headless=True, store=False, out_dir=tmp_path)
    assert not s.best and "no sweep2d has run" in repr(s.best)
    df = s.sweep2d("BLOCK_SIZE", [1024], "num_warps", [4], variant="ours", problem={"rows": 1}, show=False)
    assert df.attrs["best"] is None and not s.best and s.best.get("params") is None
    with pytest.raises(ValueError, match="no configuration of ours in the last sweep2d passed .*1 failed their check"):
        s.best["params"]


# --- a family that cannot load ---------------------------------------------------------------------------
@pytest.fixture
def ghost(tmp_path):
    """A dist-info whose entry point names a package that is not there (a removed package's
    metadata, or a typo)."""
    info = tmp_path / "ghost_family-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ghost-family\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[kernel_workbench.families]\nghost = ghost_family.sub:spec\n")
    return tmp_path


def test_a_broken_entry_point_is_named_and_the_others_stay_usable(ghost):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ghost), str(ROOT)])}
    code = (
        "import kernels\n"
        "assert 'rms_norm' in kernels.families() and 'ghost' not in kernels.families()\n"
        "print(kernels.broken_families()['ghost'])\n"
        "kernels.get('rms_norm')\n"
        "from widgets import Session\n"
        "Session('rms_norm', device='cpu', headless=True, store=False)\n"
        "try:\n    kernels.get('ghost')\nexcept ValueError as exc:\n    print('GET:', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "ghost_family.sub:spec: ModuleNotFoundError: No module named 'ghost_family'" in text
    assert "note: kernel family 'ghost' cannot load (" in text  # the notebooks' Session says it, once
    assert "GET: kernel family 'ghost' cannot load" in text and "the others are usable: rms_norm" in text
    listed = subprocess.run([sys.executable, "-m", "workbench", "list"], capture_output=True, text=True, env=env,
                            timeout=300)  # fmt: skip
    lines = listed.stdout.splitlines()
    assert listed.returncode == 1 and any(ln.startswith("rms_norm ") for ln in lines), listed.stdout
    (ghost_line,) = [ln for ln in lines if ln.startswith("ghost ")]
    assert "cannot load: ghost_family.sub:spec: ModuleNotFoundError" in ghost_line


# --- the installed SwiGLU through the command line and a notebook ------------------------------------------
@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("swiglu")
    shutil.copytree(FIXTURE, work / "source")
    site = work / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--target", str(site), str(work / "source")], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return work, site


def _cli(installed, *argv, timeout=900):
    work, site = installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
           "WORKBENCH_STORE": str(work / "s.sqlite")}  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "workbench", *argv], cwd=work, capture_output=True, text=True,
                         timeout=timeout, env=env)  # fmt: skip
    return out.returncode, out.stdout + out.stderr


def test_the_wrong_swiglu_fails_through_bench_sweep_tune_and_the_gate(installed):
    work, site = installed
    code, text = _cli(installed, "bench", "swiglu_x1_005", "--device", "cpu", "--quick", "--variants", "ours",
                      "--dtype", "bf16,fp16,fp32", "--rep-ms", "1")  # fmt: skip
    assert code == 1 and text.count("FAIL  out: ") == 3, text
    code, text = _cli(installed, "sweep", "swiglu_x1_01", "--param", "BLOCK_SIZE=512,1024", "--variants", "ours",
                      "--quick", "--device", "cpu", "--out", str(work / "sweep"))  # fmt: skip
    assert "2 wrong results" in text, text
    code, text = _cli(installed, "report", str(work / "sweep"), "--check")
    assert code == 1 and "gate: FAILED: 2 wrong results" in text, text
    assert "WRONG RESULT: swiglu_x1_01/ours forward bf16 cols=1024, rows=4 (BLOCK_SIZE=512): out: " in text, text
    code, text = _cli(installed, "tune", "swiglu_x1_01", "--device", "cpu", "--out", str(work / "tune"), "--write")
    assert code == 1 and "nothing was installed" in text, text
    assert not list((site / "workbench_swiglu").glob("tuned/**/*.json"))
    code, text = _cli(installed, "bench", "swiglu", "--device", "cpu", "--quick", "--variants", "ours",
                      "--rep-ms", "1", "--edges")  # fmt: skip
    assert code == 0 and "edge shapes: 8 passed, 0 failed" in text, text


def test_the_wrong_swiglu_fails_a_notebook(tmp_path):
    """A notebook that declares nothing itself: the fixture's wrong family measured in every dtype
    and tuned; finish() must fail naming each wrong result, and the tune must refuse its table."""
    import nbformat
    import papermill

    from workbench.reports.notebooks import execute_notebook, kernel_env

    cells = [
        nbformat.v4.new_code_cell('device = "cpu"\nout_dir = None', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            f"import sys\nsys.path.insert(0, {str(FIXTURE)!r})\n"
            "import kernels, workbench_swiglu\nkernels.register(workbench_swiglu.scaled_1_005)\n"
            "from widgets import Session\n"
            's = Session("swiglu_x1_005", device=device, headless=True, out_dir=out_dir, rep_ms=1)\n'
            'for dt in ("bf16", "fp16", "fp32"):\n'
            '    s.sweep("cols", [1024], variants=["ours"], dtype=dt, show=False)\n'
            "try:\n    s.tune(install=True)\nexcept ValueError as exc:\n"
            '    print("TUNE REFUSED:", str(exc).splitlines()[0])\n'
        ),
        nbformat.v4.new_code_cell("s.finish()"),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src = tmp_path / "wrong_swiglu.ipynb"
    nbformat.write(nb, str(src))
    with kernel_env(tmp_path / "store.sqlite", root=ROOT):
        with pytest.raises(papermill.PapermillExecutionError) as info:
            execute_notebook(src, tmp_path / "out.ipynb", {"out_dir": str(tmp_path)}, cwd=tmp_path)
    assert info.value.ename == "AssertionError"
    for dtype in DTYPES:
        assert f"WRONG RESULT ours forward {dtype} cols=1024" in info.value.evalue, info.value.evalue
    out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    printed = "".join(o.get("text", "") for c in out.cells for o in c.get("outputs", []))
    assert "TUNE REFUSED:" in printed and "nothing was installed" in printed, printed


# --- on the GPU (the GPU step runs these; skipped without CUDA) ---------------------------------------------
GPU_PROBLEMS = {
    "rms_norm": [{"rows": 4096, "hidden": h} for h in (1000, 4096, 8192)] + [{"rows": 1, "hidden": 4096}],
    "fused_add_rms_norm": [{"rows": 4096, "hidden": h} for h in (1000, 4096, 8192)] + [{"rows": 1, "hidden": 4096}],
    "scalar_ops": [{"numel": n, "op": op} for n in (1 << 20, 4099) for op in ("div", "sub", "pow")],
    "block_sparse": [{"nodes": 1024, "batch": b} for b in (1, 16, 64)]
    + [{"nodes": 1024, "batch": 8, "layer": "product"}],
}


@pytest.mark.gpu
@pytest.mark.long_gpu
@pytest.mark.parametrize("family", list(GPU_PROBLEMS))
def test_on_the_gpu_every_correct_kernel_passes_the_rule(family):
    """Every variant of ours, every dtype, forward and backward, at the suites' kind of sizes (a
    single row among them): no false alarm on the device."""
    spec = kernels.get(family)
    wrong_results = []
    for variant in [v for v in spec.variants if not v.is_peer and v.unavailable_reason("cuda") is None]:
        for dtype in spec.dtypes:
            for seed, problem in enumerate(GPU_PROBLEMS[family]):
                mode = "full" if "full" in spec.modes else "forward"
                rec = measure(spec, variant, device="cuda", dtype=dtype, mode=mode, problem=problem, seed=seed,
                              time_it=False, on_error="record")  # fmt: skip
                if rec.error is None and not rec.passed:
                    wrong_results.append((variant.name, dtype, problem, rec.err_ratio, rec.checks))
    assert not wrong_results, wrong_results


@pytest.mark.gpu
@pytest.mark.long_gpu
@pytest.mark.parametrize("family", list(GPU_PROBLEMS))
def test_on_the_gpu_every_family_passes_its_edge_shapes(family):
    spec = kernels.get(family)
    variant = next(v for v in spec.variants if not v.is_peer and v.unavailable_reason("cuda") is None)
    mode = "full" if "full" in spec.modes else "forward"
    for dtype in spec.dtypes:
        verdicts = check_edges(spec, variant, device="cuda", dtype=dtype, mode=mode, problem=GPU_PROBLEMS[family][0])
        failed = [(v["edge"], v.get("error"), v["failed"]) for v in verdicts if v["passed"] is False]
        assert not failed, (dtype, failed)


@pytest.mark.gpu
def test_on_the_gpu_the_wrong_swiglus_fail_and_the_right_one_passes(swiglu):
    for cols in (1024, 4096):
        problem = {"rows": 4096, "cols": cols}
        for dtype in DTYPES:
            right = measure(swiglu.spec, "ours", device="cuda", dtype=dtype, mode="full", problem=problem,
                            time_it=False)  # fmt: skip
            assert right.passed, (cols, dtype, right.checks)
            for spec in (swiglu.scaled_1_01, swiglu.scaled_1_005, swiglu.db_scaled_1_01):
                rec = measure(spec, "ours", device="cuda", dtype=dtype, mode="full", problem=problem, time_it=False)
                assert rec.error is None and rec.passed is False, (spec.name, cols, dtype, rec.checks)
    verdicts = check_edges(
        swiglu.spec, "ours", device="cuda", dtype="bf16", mode="full", problem={"rows": 4096, "cols": 4096}
    )
    assert all(v["passed"] is not False for v in verdicts), verdicts
