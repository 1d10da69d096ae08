"""A kernel family of one's own: declared in a few lines (kernels.custom.family), registered at run
time or through an installed package's entry point, and then measured, swept, tuned and reported
like the built-in families. Bad declarations get one line each; a wrong reference is a failed
check, not a crash."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels
from kernels import custom
from kernels.spec import module_path
from workbench.measure import measure

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "workbench_softmax"


def _double(x, SCALE=2):
    return x * SCALE  # a "kernel" the interpreter need not run: the declaration is what is tested


def _declare(name="twice", **overrides):
    fields = dict(
        run=_double,
        reference=lambda x: 2 * x,
        inputs=lambda n: {"x": torch.randn(n)},
        sizes={"n": 1000},
        quick={"n": 37},
        tiles={"SCALE": [2, 3]},
        check=lambda SCALE: SCALE == 2 or f"SCALE={SCALE} doubles nothing",
        bytes=lambda n, itemsize: 2 * n * itemsize,
    )
    fields.update(overrides)
    return custom.family(name, **fields)


class _Twice(torch.autograd.Function):
    """A peer that is an autograd Function: its apply takes the inputs positionally only."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, dy):
        return 2 * dy


def test_a_declared_family_measures_and_sweeps_like_a_built_in(registered):
    spec = registered(_declare(peers={"function": _Twice.apply}))
    assert "twice" in kernels.families() and kernels.get("twice") is spec
    assert [v.name for v in spec.variants] == ["ours", "function"] and spec.axis == "n" and spec.quick == {"n": 37}
    peer = measure("twice", "function", device="cpu", dtype="fp32", quick=True, rep_ms=1)
    assert peer.error is None and peer.passed
    rec = measure("twice", "ours", device="cpu", dtype="fp32", quick=True, rep_ms=1)
    assert rec.passed and rec.error is None and rec.tiles_source == "declared defaults: SCALE=2"
    assert rec.min_bytes == 2 * 37 * 4
    bad = measure(
        "twice", "ours", device="cpu", dtype="fp32", quick=True, params={"SCALE": 3}, rep_ms=1, on_error="record"
    )
    assert bad.error and "SCALE=3 doubles nothing" in bad.error
    from widgets import Session

    s = Session("twice", device="cpu", quick=True, headless=True, store=False)
    df = s.sweep("n", [5, 37, 100])
    assert list(df["passed"]) == [True] * 6  # ours and the peer at three sizes
    assert module_path("twice") == __name__  # a worker process imports this module to find it


def test_auto_takes_the_tiles_the_check_accepts(registered):
    spec = registered(_declare("thrice", run=lambda x, SCALE=3: x * SCALE, reference=lambda x: 3 * x,
                               tiles={"SCALE": [2, 3]}, check=lambda SCALE: SCALE == 3 or "not 3"))  # fmt: skip
    rec = measure(spec, "ours", device="cpu", dtype="fp32", quick=True, rep_ms=1)
    assert rec.passed, rec.checks


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"tiles": {"SCALE": [2], "TILE_X": [1]}}, "run does not take the tile TILE_X; its parameters: x, SCALE"),
        ({"inputs": lambda n: {"x": torch.randn(n, -1)}}, "twice: inputs(n=37) failed"),
        ({"inputs": lambda n: [torch.randn(n)]}, "inputs(...) must return a dict of tensors"),
        ({"reference": lambda x: x.no_such_method()}, "twice: reference(...) failed on the inputs"),
        ({"sizes": {}}, "sizes names no problem knob"),
        ({"defaults": {"SCALE": 5}}, "default SCALE=5 is not among its values"),
    ],
)
def test_a_bad_declaration_is_one_line(overrides, message):
    with pytest.raises(ValueError) as info:
        _declare(**overrides)
    text = str(info.value)
    assert message in text and "\n" not in text, text


def test_a_name_that_is_taken_is_refused():
    with pytest.raises(ValueError, match="family name 'rms_norm' is already registered"):
        kernels.register(_declare("rms_norm"))


def test_a_wrong_reference_is_a_failed_check_not_a_crash(registered):
    registered(_declare("wrong_values", reference=lambda x: 3 * x))
    registered(_declare("wrong_shape", reference=lambda x: x[:-1]))
    values = measure("wrong_values", "ours", device="cpu", dtype="fp32", quick=True, rep_ms=1)
    shape = measure("wrong_shape", "ours", device="cpu", dtype="fp32", quick=True, rep_ms=1)
    assert values.error is None and values.passed is False
    assert shape.error is None and shape.passed is False and "differs from the reference's" in shape.checks[0]["note"]
    from widgets import Session

    s = Session("wrong_shape", device="cpu", quick=True, headless=True, store=False, out_dir=None)
    s.measure("ours")
    with pytest.raises(AssertionError, match="WRONG RESULT ours .*differs from the reference's"):
        s.finish()


def test_a_family_from_a_notebook_cell_sweeps_on_the_local_executor_only(registered):
    spec = registered(_declare("cell_family"))
    object.__setattr__(spec, "module", None)  # as kernels.custom.family leaves it for a notebook cell
    from widgets import Session

    s = Session("cell_family", device="cpu", quick=True, headless=True, store=False)
    assert s.sweep("SCALE", [2], executor="local")["passed"].all()
    with pytest.raises(ValueError, match="defined in a notebook cell or a script.*executor='local' only"):
        s.sweep("SCALE", [2], executor="isolate")


# --- an installed package's family, through the entry point, on the command line ---------------
@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The fixture package installed into a scratch folder (its entry point visible to every
    process run with that folder on PYTHONPATH)."""
    work = tmp_path_factory.mktemp("byo")
    source = work / "source"
    shutil.copytree(FIXTURE, source)
    site = work / "site"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return work, site


def _cli(installed, *argv, timeout=600):
    work, site = installed
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
        "WORKBENCH_STORE": str(work / "s.sqlite"),
    }
    out = subprocess.run([sys.executable, "-m", "workbench", *argv], cwd=work, capture_output=True, text=True,
                         timeout=timeout, env=env)  # fmt: skip
    return out.returncode, out.stdout + out.stderr


def test_an_installed_family_is_listed_and_benched(installed):
    code, text = _cli(installed, "list")
    assert code == 0 and "byo_softmax" in text and "knobs: cols, rows" in text, text
    code, text = _cli(installed, "bench", "byo_softmax", "--device", "cpu", "--quick", "--rep-ms", "1")
    assert code == 0 and "byo_softmax/ours forward bf16 cols=300" in text and "PASS" in text, text


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_an_installed_family_sweeps_and_its_records_pass_the_gate(installed, executor):
    pytest.importorskip("ray") if executor == "ray" else None
    work, _ = installed
    out = work / f"sweep-{executor}"
    argv = [
        "sweep",
        "byo_softmax",
        "--param",
        "BLOCK_SIZE=256,512",
        "--quick",
        "--device",
        "cpu",
        "--executor",
        executor,
    ]
    argv += ["--num-cpus", "2"] if executor == "ray" else []
    code, text = _cli(installed, *argv, "--out", str(out))
    assert code == 0 and "1 cannot run" in text and "0 wrong results" in text, text
    rows = json.loads((out / "records.json").read_text())
    assert sorted(r["params"]["BLOCK_SIZE"] for r in rows) == [256, 512]
    assert (out / "report.html").exists()
    code, text = _cli(installed, "report", str(out), "--check")
    assert code == 0, text


def test_an_installed_family_tunes_and_its_table_lands_beside_its_code(installed):
    work, site = installed
    code, text = _cli(installed, "tune", "byo_softmax", "--device", "cpu", "--out", str(work / "tune"), "--write")
    assert code == 0 and "installed" in text, text
    tables = list((site / "workbench_softmax" / "tuned" / "byo_softmax").glob("*.json"))
    assert len(tables) == 1 and json.loads(tables[0].read_text())["family"] == "byo_softmax"
    code, text = _cli(installed, "bench", "byo_softmax", "--device", "cpu", "--quick", "--variants", "ours",
                      "--rep-ms", "1", "--json", str(work / "after.json"))  # fmt: skip
    assert code == 0, text
    assert json.loads((work / "after.json").read_text())[0]["tiles_source"].startswith("tuned:cpu:")


class _WrongGradient(torch.autograd.Function):
    """``x * w`` whose backward forgets ``w`` in ``dx``: forward right, one gradient wrong."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return dy, (dy * x).sum(0)


GRADIENT_CASES = [(lambda x, w, SCALE=1: x * w, True), (lambda x, w, SCALE=1: _WrongGradient.apply(x, w), False)]


@pytest.mark.parametrize("run, passes", GRADIENT_CASES)
def test_declared_gradients_are_checked_against_the_reference(registered, run, passes, device, name="scaled_rows"):
    spec = registered(
        custom.family(
            name,
            run=run,
            reference=lambda x, w: x * w,
            inputs=lambda rows, cols: {"x": torch.randn(rows, cols), "w": torch.randn(cols)},
            sizes={"cols": 37, "rows": 3},
            tiles={"SCALE": [1]},
            grads=("x", "w"),
        )
    )
    assert spec.modes == ("forward", "backward", "full")
    rec = measure(spec, "ours", device=device, dtype="fp32", mode="full", rep_ms=1, warmup_ms=0)
    names = {c["name"]: c["passed"] for c in rec.checks}
    assert rec.error is None and set(names) == {"out", "dx", "dw"}, (rec.error, names)
    assert names == {"out": True, "dx": passes, "dw": True}


def test_a_session_tunes_a_cell_family_and_installs_its_table_where_it_was_told(registered, tmp_path):
    from widgets import Session

    spec = registered(_declare("twice_tuned", run=lambda x, SCALE: x * 2, check=None, tables=tmp_path / "tables"))
    s = Session(spec, device="cpu", dtype="fp32", quick=None, headless=True, out_dir=tmp_path / "out", store=False,
                rep_ms=1)  # fmt: skip
    tuned = s.tune(install=True)
    assert not tuned.wrong and (tmp_path / "out" / "tune-twice_tuned-cpu" / "report.html").exists()
    assert [p.parent for p in (tmp_path / "tables").glob("*.json")] == [tmp_path / "tables"]
    rec = measure(spec, "ours", device="cpu", dtype="fp32", problem={"n": 37}, rep_ms=1, warmup_ms=0)
    assert rec.tiles_source.startswith("tuned:cpu:"), rec.tiles_source
    with pytest.raises(ValueError, match="n=-1 is out of range"):
        s.tune(sizes=[-1])


def test_the_families_one_module_declares_keep_their_tables_apart(registered, monkeypatch):
    """A table's file is named by its device alone, so two families declared in one module (the
    SwiGLU fixture declares five) each get a folder: one family's tune never overwrites another's
    table, and no family reads another's."""
    from kernels import tuned_tables

    monkeypatch.delenv("KERNELS_TUNED_DIR", raising=False)
    registered(_declare("twice_left"))
    registered(_declare("twice_right"))
    beside = Path(__file__).resolve().parent / "tuned"
    assert tuned_tables.table_dir("twice_left") == beside / "twice_left"
    assert tuned_tables.table_dir("twice_right") == beside / "twice_right"
    key = "cuda:NVIDIA H200"
    assert tuned_tables.table_path("twice_left", key) != tuned_tables.table_path("twice_right", key)


def test_tuned_tiles_that_do_not_fit_a_size_give_way_to_the_nearest_that_does(registered, tmp_path):
    from kernels import tuned_tables
    from kernels.runtime import device_info

    spec = registered(
        _declare(
            "tiled_rows",
            run=lambda x, TILE: x * 2,
            tiles={"TILE": [16, 64, 256]},
            check=lambda n, TILE: TILE >= n or f"TILE={TILE} < n={n}",
            tables=tmp_path,
        )
    )
    key = tuned_tables.device_key(device_info(torch.device("cpu")))
    table = {"schema": tuned_tables.SCHEMA, "family": "tiled_rows", "device_key": key, "knob": "n",
             "variant": "ours", "mode": "forward", "dtype": "fp32", "problem": {}, "provenance": {},
             "buckets": [{"size": 16, "tiles": {"TILE": 16}}, {"size": 64, "tiles": {}},
                         {"size": 256, "tiles": {"TILE": 256}}]}  # fmt: skip
    (tmp_path / tuned_tables.file_name(key)).write_text(json.dumps(table))
    tuned_tables.reload()
    sources = {}
    for n in (16, 20, 64, 200):  # 20: the nearest bucket (16) has a tile too short for it; 64: the rule
        rec = measure(spec, "ours", device="cpu", dtype="fp32", problem={"n": n}, rep_ms=1, warmup_ms=0)
        assert rec.ok, rec.error
        sources[n] = rec.tiles_source
    assert sources[16] == f"tuned:{key}@16: TILE=16" and sources[200] == f"tuned:{key}@256: TILE=256", sources
    assert sources[20] == f"tuned:{key}@16 adjusted to fit (TILE=16 < n=20): TILE=64", sources
    # An empty entry: the tune kept the rule (the declared default, 16, adjusted to the nearest that fits).
    assert sources[64] == f"tuned:{key}@64 adjusted to fit (TILE=16 < n=64): TILE=64", sources


def test_the_tutorial_goes_from_its_kernel_to_the_explorer_in_15_lines_and_no_package_names_it():
    import nbformat

    nb = nbformat.read(str(ROOT / "notebooks" / "your_kernel.ipynb"), as_version=4)
    declaring = [c.source for c in nb.cells if c.cell_type == "code" and "custom.family(" in c.source]
    assert len(declaring) == 1
    lines = [ln for ln in declaring[0].splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(lines) <= 15 and lines[-1] == "s.explorer()", lines
    for package in ("kernels", "workbench", "widgets"):
        for path in (ROOT / package).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".json", ".toml"):
                text = path.read_text(errors="replace")
                assert "my_softmax" not in text and "byo_softmax" not in text, path


@pytest.fixture
def fixture_softmax(monkeypatch):
    """The fixture package's spec, imported from its source folder (no install)."""
    monkeypatch.syspath_prepend(str(FIXTURE))
    import workbench_softmax

    return workbench_softmax.spec


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_the_fixture_softmax_matches_torch_on_fresh_inputs_at_odd_sizes(fixture_softmax, device, dtype):
    sizes = [(1, 1), (3, 300), (5, 1000)] + ([(64, 4096), (4096, 1000)] if device == "cuda" else [])
    for seed, (rows, cols) in enumerate(sizes, start=11):
        rec = measure(fixture_softmax, "ours", device=device, dtype=dtype, problem={"rows": rows, "cols": cols},
                      seed=seed, rep_ms=1, warmup_ms=0)  # fmt: skip
        assert rec.error is None and rec.passed, (rows, cols, rec.error, rec.checks)
        if device == "cuda":
            assert rec.compile_facts.get("kernels"), rec.compile_facts  # the why-view saw the launch


@pytest.mark.gpu
def test_on_the_gpu_a_declared_family_passes_and_its_gradients_are_checked(fixture_softmax, registered):
    """The two tests above, on CUDA only (the GPU step runs the tests marked gpu)."""
    for dtype in ("fp32", "fp16", "bf16"):
        test_the_fixture_softmax_matches_torch_on_fresh_inputs_at_odd_sizes(fixture_softmax, "cuda", dtype)
    for name, (run, passes) in zip(("right_grad", "wrong_grad"), GRADIENT_CASES):
        test_declared_gradients_are_checked_against_the_reference(registered, run, passes, "cuda", name)
