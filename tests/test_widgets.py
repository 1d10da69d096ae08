"""Session and Explorer driven programmatically (no browser): a toy spec proves they are generic,
RMSNorm at quick sizes proves they work with real Triton kernels in the interpreter."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from kernels.spec import KernelSpec, Knob, Param, Variant
from widgets import Explorer, Session
from widgets.core import ResultCache
from workbench.store import Store
from workbench.sweep.config import config_key


# --- a toy family: nothing in widgets/ may need to know it ----------------------------------
def _inputs(problem, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(problem["n"], generator=gen, dtype=torch.float32).to(device, dtype).requires_grad_()
    return {"x": x}


def _double(inputs, problem, **params):
    return inputs["x"] * 2


def _tiled_check(problem, params, dtype, device):
    if params["TILE"] == 1:
        raise ValueError("TILE=1 is too small for the toy kernel; use TILE >= 2")


TOY = KernelSpec(
    name="toy",
    title="Toy",
    doc="y = 2x",
    knobs=(Knob("n", 64, low=1, high=10_000, sweep=(16, 64)), Knob("flavour", "a", values=("a", "b"))),
    make_inputs=_inputs,
    reference=lambda inputs, problem: inputs["x"] * 2,
    output_names=("y",),
    variants=(
        Variant(
            "tiled",
            "gpu",
            _double,
            params=(Param("TILE", ("auto", 1, 2, 4, 8), "auto"), Param("FLAG", (False, True), False)),
            check=_tiled_check,
            devices=("cuda", "cpu"),
        ),
        Variant("eager", "torch", _double),
        Variant("gpu_only", "torch", _double, devices=("cuda",)),
    ),
    min_bytes=lambda problem, mode, dtype: problem["n"] * 4,
    axis="n",
    quick={"n": 32},
)


def _wrong(inputs, problem, **params):
    return inputs["x"] * 2 + 1


TOY_WRONG = KernelSpec(
    **{
        **{f: getattr(TOY, f) for f in TOY.__dataclass_fields__},
        "name": "toy_wrong",
        "variants": (Variant("broken", "gpu", _wrong, devices=("cpu",)),),
    }
)


@pytest.fixture
def session(tmp_path):
    s = Session(
        TOY, device="cpu", dtype="fp32", quick=True, headless=True, out_dir=tmp_path, store=tmp_path / "s.sqlite"
    )
    yield s
    s.store.close()


# --- Session -------------------------------------------------------------------------------------
def test_session_sweep_knob_skips_unavailable_and_returns_records(session, capsys):
    df = session.sweep("n", [8, 16, 32])
    assert "skipping gpu_only" in capsys.readouterr().out
    assert sorted(set(df["variant"])) == ["eager", "tiled"]
    assert list(df[df.variant == "tiled"]["x_value"]) == [8, 16, 32]
    assert df["passed"].all() and df["error"].isna().all()
    assert (df["timing_method"].isin(["interpreter-wall", "cpu-wall"])).all()
    assert len(session.figures) == 1 and len(session.figures[0].data) >= 2
    assert len(session.store) == 6  # stored as measured


def test_session_param_sweep_marks_failures_without_raising(session):
    df = session.sweep("TILE", [1, 2, 4])
    tiled = df[df.variant == "tiled"].set_index("x_value")
    assert "TILE=1 is too small" in tiled.loc[1, "error"]
    assert tiled.loc[2, "passed"] and tiled.loc[4, "passed"]
    eager = df[df.variant == "eager"]
    assert len(eager) == 1  # no TILE: measured once, drawn as a flat reference
    names = [t.name for t in session.figures[-1].data]
    assert "eager (fixed)" in names


def test_session_cache_serves_repeats(session):
    session.sweep("n", [8, 16], variants=["eager"])
    measured = session.measured
    session.sweep("n", [16, 8], variants=["eager"])
    assert session.measured == measured
    assert session.cache.hits >= 2
    # {} and the explicit defaults are one configuration
    a = session.measure("tiled", params={})
    b = session.measure("tiled", params={"TILE": "auto", "FLAG": False})
    assert a is b


def test_session_sweep2d_heatmap_best_and_failed_cells(session):
    df = session.sweep2d("TILE", [1, 2, 4], "n", [16, 32], variant="tiled", metric="gbps")
    assert len(df) == 6
    assert df["error"].notna().sum() == 2  # TILE=1 for both n
    best = df.attrs["best"]
    assert best["variant"] == "tiled" and best["params"]["TILE"] in (2, 4)
    fig = session.figures[-1]
    assert fig.data[0].type == "heatmap"
    z = fig.data[0].z
    assert z[0][0] is None and z[1][0] is None  # failed cells carry no value ...
    crosses = [t for t in fig.data if t.type == "scatter"]
    assert crosses and "TILE=1 is too small" in crosses[0].hovertext[0]  # ... and their reason
    assert any(s.type == "rect" for s in fig.layout.shapes)  # best outlined


def test_session_finish_writes_and_raises_on_wrong_result(tmp_path):
    s = Session(TOY_WRONG, device="cpu", dtype="fp32", quick=True, headless=True, out_dir=tmp_path, store=False)
    s.sweep("n", [8])
    with pytest.raises(AssertionError, match="WRONG RESULT broken"):
        s.finish()
    assert (tmp_path / "toy_wrong_records.csv").exists() and (tmp_path / "toy_wrong_records.json").exists()


def test_session_finish_passes_and_default_failure_raises(session, tmp_path):
    session.sweep("n", [8])
    out = session.finish()
    assert out["records"] == 2 and (tmp_path / "toy_records.csv").read_text().count("\n") == 3
    session.measure("tiled", problem={"n": 0})  # an impossible size at the default tiles
    with pytest.raises(AssertionError, match="DEFAULT CONFIG FAILED tiled"):
        session.finish()


def test_memory_and_correctness_tables(session):
    mem = session.memory(mode="full")
    assert set(mem["variant"]) == {"tiled", "eager"}
    assert mem["peak_mb"].isna().all()  # the CPU keeps no allocator statistics: n/a, not invented
    assert (mem["min_mb"] > 0).all()
    checks = session.correctness(mode="full")
    assert set(checks["tensor"]) == {"y", "dx"} and checks["pass"].all()


def test_config_key_is_order_independent():
    a = config_key("v", "cpu", "bf16", "forward", {"a": 1, "b": 2}, {"T": 4})
    b = config_key("v", "cpu", "bf16", "forward", {"b": 2, "a": 1}, {"T": 4})
    assert a == b and hash(a) == hash(b)
    cache = ResultCache()
    assert cache.get(a) is None and cache.misses == 1


# --- Explorer ------------------------------------------------------------------------------------
@pytest.fixture
def explorer(tmp_path):
    store = Store(tmp_path / "e.sqlite")
    s = Session(TOY, device="cpu", dtype="fp32", quick=True, headless=False, store=store)
    ex = Explorer(s, debounce_s=0.01)
    assert ex.wait(60)
    yield ex
    ex.close()
    store.close()


def test_explorer_controls_come_from_the_spec(explorer):
    controls = explorer.controls
    for name in ("variant", "device", "dtype", "mode", "n", "flavour", "TILE", "FLAG"):
        assert name in controls
    assert list(controls["variant"].options) == ["tiled", "eager"]  # gpu_only cannot run on cpu
    # TILE=1 is refused by the variant's check: marked, with the reason under the tile controls
    assert list(controls["TILE"].options) == [("auto", "auto"), ("1 ✗", 1), ("2", 2), ("4", 4), ("8", 8)]
    assert "TILE</b> 1: TILE=1 is too small" in explorer.w_refused.value
    explorer.set(variant="eager")
    assert explorer.wait(30)
    assert "TILE" not in explorer.controls  # tile controls follow the variant


def test_explorer_set_control_measures_and_records(explorer):
    store = explorer.session.store
    before = len(store)
    explorer.controls["TILE"].value = 4  # as a person would
    assert explorer.wait(30)
    rec = explorer.record
    assert rec.params["TILE"] == 4 and rec.ok
    assert explorer.last_cached is False
    assert any(r.params.get("TILE") == 4 for r in explorer.session.records)
    assert any(r.get("params", {}).get("TILE") == 4 for r in store.records()[before:])
    assert "time" in explorer.status_text and "pass" in explorer.status_text
    assert explorer.error_text == ""
    # speed and memory figures show the measured config with its peer
    assert any(t.name == "tiled" for t in explorer.speed_fig.data)
    assert "tiled" in list(explorer.memory_fig.data[0].x) and "eager" in list(explorer.memory_fig.data[0].x)
    assert "pass" in explorer.w_checks.value


def test_explorer_invalid_config_shows_error_and_recovers(explorer):
    explorer.set(TILE=1)
    assert explorer.wait(30)
    assert "TILE=1 is too small" in explorer.error_text
    explorer.set(n=0)  # an impossible size: typed in, not clamped
    assert explorer.wait(30)
    assert "n=0 is out of range" in explorer.error_text
    explorer.set(n=32, TILE=2)
    assert explorer.wait(30)
    assert explorer.error_text == "" and explorer.record.ok


def test_explorer_repeat_is_served_from_cache(explorer):
    explorer.set(TILE=8)
    assert explorer.wait(30)
    explorer.set(TILE=2)
    assert explorer.wait(30)
    measured = explorer.session.measured
    t0 = time.perf_counter()
    explorer.set(TILE=8)  # seen before: shown in the callback itself, nothing queued
    assert explorer.record.params["TILE"] == 8 and explorer.last_cached is True
    assert time.perf_counter() - t0 < 1.0
    assert explorer.wait(30)
    assert explorer.session.measured == measured
    assert "cached" in explorer.status_text


def test_explorer_callback_never_raises(explorer):
    # a broken figure axis or an unknown variant in a callback becomes error text
    explorer._safe(lambda: explorer.spec.variant("nope"))
    assert "has no variant 'nope'" in explorer.error_text


def test_explorer_sweep_heatmap_and_apply_best(explorer):
    explorer.run_sweep("TILE", [1, 2, 4], "n", [16, 32], wait=True)
    assert explorer.heatmap_fig.data and explorer.heatmap_fig.data[0].type == "heatmap"
    assert explorer.w_progress.value == 6 and explorer.w_progress.bar_style == "success"
    assert "TILE=1 is too small" in explorer.w_failures.value
    assert explorer.best is not None and not explorer.w_apply_best.disabled
    explorer.w_apply_best.click()
    assert explorer.wait(30)
    assert explorer.controls["TILE"].value == explorer.best["params"]["TILE"]
    assert explorer.controls["n"].value == explorer.best["problem"]["n"]
    assert explorer.record.params["TILE"] == explorer.best["params"]["TILE"] and explorer.last_cached


def test_explorer_debounces_rapid_changes(tmp_path):
    s = Session(TOY, device="cpu", dtype="fp32", quick=True, headless=False, store=False)
    ex = Explorer(s, debounce_s=0.3, autostart=False, peers=False)
    for tile in (2, 4, 8):  # the first after a quiet spell starts at once; the rest coalesce into the last
        ex.controls["TILE"].value = tile
    assert ex.wait(30)
    measured = [r.params["TILE"] for r in s.records]
    # 2 may be replaced by 4 before the worker picks it up; 4 never outlives the debounce
    assert measured in ([2, 8], [8]) and s.measured == len(measured) and ex.record.params["TILE"] == 8
    ex.close()


def test_a_single_change_after_a_quiet_spell_waits_for_no_debounce():
    from widgets.controls import Worker

    worker = Worker(debounce_s=30.0)
    ran = threading.Event()
    try:
        started = time.monotonic()
        worker.request(ran.set)
        assert ran.wait(10) and time.monotonic() - started < 10  # not after the 30 s debounce
        assert worker.wait(10)
        later = threading.Event()
        worker.request(later.set)  # right after the first: debounced
        assert not later.wait(0.5)
    finally:
        worker.stop()


def test_explorer_on_rms_norm_in_the_interpreter(tmp_path):
    s = Session("rms_norm", device="cpu", dtype="bf16", quick=True, headless=False, store=tmp_path / "r.sqlite")
    ex = Explorer(s, variant="gpu_row", debounce_s=0.01, peers=False)
    assert ex.wait(120)
    assert ex.record.ok and ex.record.problem["hidden"] == 300
    ex.set(BLOCK_SIZE=16)  # smaller than the row: rejected before launch
    assert ex.wait(60)
    assert "BLOCK_SIZE=16" in ex.error_text
    ex.set(BLOCK_SIZE=512)
    assert ex.wait(120)
    assert ex.record.ok and ex.record.params["BLOCK_SIZE"] == 512
    assert "interpreter time" in ex.status_text
    ex.close()
    s.store.close()


def test_default_store_follows_env_then_checkout(monkeypatch, tmp_path):
    from widgets.defaults import default_store_path

    monkeypatch.setenv("WORKBENCH_STORE", str(tmp_path / "x.sqlite"))
    assert default_store_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("WORKBENCH_STORE")
    path = default_store_path()
    assert path.parts[-2:] == ("results", "workbench.sqlite")


def _mode_toy():
    """TOY with a backward-only tile: the forward's controls must not show it."""
    import dataclasses

    tiled = TOY.variant("tiled")
    bwd = Param("BWD_TILE", ("auto", 2, 4), "auto", "backward tile", modes=("backward", "full"))
    variants = (dataclasses.replace(tiled, params=tiled.params + (bwd,)),) + TOY.variants[1:]
    return dataclasses.replace(TOY, name="toy_modes", variants=variants)


def test_explorer_shows_only_the_chosen_modes_tiles_and_marks_refused_values():
    s = Session(_mode_toy(), device="cpu", dtype="fp32", quick=True, headless=False, store=False)
    ex = Explorer(s, debounce_s=0.01, autostart=False, peers=False)
    shown = lambda: [w.description for w in ex.params_box.children]  # noqa: E731
    assert shown() == ["TILE", "FLAG"]  # forward: no backward tile
    assert "BWD_TILE" in ex.controls  # still a control (set() and apply() reach it) ...
    ex.set(mode="full")
    assert ex.wait(60)
    assert shown() == ["TILE", "FLAG", "BWD_TILE"]  # ... shown where a run reads it
    assert "BWD_TILE" in ex.speed_fig.layout.annotations[0].text  # and named under the figure
    ex.set(mode="forward")
    assert ex.wait(60)
    assert shown() == ["TILE", "FLAG"] and "BWD_TILE" not in ex.speed_fig.layout.annotations[0].text
    # marking keeps the value a person set, and follows the problem
    ex.set(TILE=4)
    assert ex.wait(60)
    assert ex.controls["TILE"].value == 4 and ex.controls["TILE"].options[1] == ("1 ✗", 1)
    ex.close()


def test_refused_values_come_from_the_variants_check():
    v = TOY.variant("tiled")
    problem = TOY.resolve_problem(quick=True)
    refused = v.refused_values("TILE", problem, {}, "fp32", None)
    assert list(refused) == [1] and "too small" in refused[1]
    assert (
        Variant("x", "torch", _double, params=(Param("T", (1, 2), 1),)).refused_values("T", problem, {}, "fp32", None)
        == {}
    )


def test_a_figure_update_keeps_the_widgets_template_and_drops_what_the_new_layout_lacks():
    import plotly.graph_objects as go

    from widgets.explorer_figures import update_figure
    from workbench.reports import figures as F

    target = go.Figure(layout=dict(template=F.HOUSE_TEMPLATE, height=420))
    first = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout=dict(title="a", annotations=[dict(text="note", x=1, y=3)]))
    update_figure(target, first)
    assert target.layout.annotations and target.layout.title.text == "a"
    with F.template_held():
        second = F.fit(go.Figure(go.Bar(x=["p"], y=[1]), layout=dict(title="b", xaxis=dict(type="log"))))
    assert second.layout.template.layout.plot_bgcolor != "white"  # fit left plotly's default in place
    assert F.fit(go.Figure()).layout.template.layout.plot_bgcolor == "white"  # outside the block: set
    update_figure(target, second)
    assert target.layout.title.text.startswith("b") and target.layout.xaxis.type == "log"
    assert not target.layout.annotations  # the first figure's note is gone
    assert [t.type for t in target.data] == ["bar"]
    assert target.layout.template.layout.plot_bgcolor == "white" and target.layout.height == second.layout.height
