"""``workbench tune`` (issue 26) on the CPU interpreter: it writes a table that impl="auto" then
reads, diffs against the installed table without --write, refuses a bad installed table (one
line, exit 2, the file untouched); the pick rule; the strategies; Ray with 2 CPU workers.
"""

from __future__ import annotations

import json
import os

import pytest

from kernels import tuned_tables
from kernels.runtime import device_info
from workbench.cli import main
from workbench.measure import measure
from workbench.tune.pick import pick
from workbench.tune.search import GridSearch, RandomSearch, make_search

CPU_KEY = tuned_tables.device_key(device_info("cpu"))
# One size and a 4-configuration grid: a tune of a norm on the interpreter takes a few seconds.
FAST = ["--device", "cpu", "--sizes", "300", "--rep-ms", "2"]


def _cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_tune_writes_a_table_that_auto_then_reads(tables, tmp_path, capsys):
    out = tmp_path / "run"
    code, text, _ = _cli(["tune", "rms_norm", *FAST, "--out", str(out), "--write"], capsys)
    assert code == 0, text
    path = tables / "rms_norm" / tuned_tables.file_name(CPU_KEY)
    table = tuned_tables.read_table(path, "rms_norm")
    (bucket,) = table["buckets"]
    assert bucket["size"] == 300 and bucket["evaluated"] == 4 and bucket["kernel_ms"] > 0
    assert table["provenance"]["strategy"] == "grid" and table["provenance"]["commit"]
    assert set(bucket["tiles"]) <= {"BLOCK_SIZE_M", "num_warps"}
    for name in ("report.html", "summary.md", "records.csv", "records.json"):
        assert (out / name).is_file()
    assert "Default against the fastest" in (out / "report.html").read_text()
    rec = measure("rms_norm", "gpu_multirow", device="cpu", dtype="fp32", problem={"rows": 4, "hidden": 300}, rep_ms=2)
    assert rec.passed and rec.tiles_source == f"tuned:{CPU_KEY}@300"
    # Without --write a second tune only diffs, and resumes from its out folder (nothing measured again).
    code, text, _ = _cli(["tune", "rms_norm", *FAST, "--out", str(out)], capsys)
    assert code == 0 and "0 of 1 sizes change against the installed table" in text and "not installed" in text
    assert json.loads(path.read_text()) == table


def test_a_tune_of_one_size_keeps_the_installed_tables_other_sizes(tables, tmp_path, capsys):
    """--write after a tune of some sizes installs those and keeps every other size of the
    installed table as it was, saying so in the provenance; the diff counts only what changed."""
    code, text, _ = _cli(["tune", "rms_norm", *FAST, "--out", str(tmp_path / "a"), "--write"], capsys)
    assert code == 0, text
    path = tables / "rms_norm" / tuned_tables.file_name(CPU_KEY)
    first = tuned_tables.read_table(path, "rms_norm")
    other = ["--device", "cpu", "--sizes", "260", "--rep-ms", "2", "--out", str(tmp_path / "b")]
    code, text, _ = _cli(["tune", "rms_norm", *other, "--write"], capsys)
    assert code == 0, text
    assert "1 of 2 sizes change against the installed table" in text
    merged = tuned_tables.read_table(path, "rms_norm")
    assert [b["size"] for b in merged["buckets"]] == [260, 300]
    assert merged["buckets"][1] == first["buckets"][0]
    assert merged["provenance"]["sizes"] == [260]
    assert merged["provenance"]["kept"] == {"sizes": [300], "from": first["provenance"]}
    assert tuned_tables.lookup("rms_norm", CPU_KEY, 300).tiles == first["buckets"][0]["tiles"]


def test_a_table_of_another_problem_is_replaced_not_merged():
    from workbench.tune.table import merge

    tuned = {"family": "f", "device_key": "k", "knob": "n", "problem": {"rows": 4}, "provenance": {}}
    tuned["buckets"] = [{"size": 2, "tiles": {"A": 1}}]
    installed = dict(tuned, problem={"rows": 8}, buckets=[{"size": 1, "tiles": {}}])
    assert merge(installed, tuned) is tuned and merge(None, tuned) is tuned
    same = dict(tuned, buckets=[{"size": 1, "tiles": {}}, {"size": 2, "tiles": {"A": 3}}])
    assert [b["size"] for b in merge(same, tuned)["buckets"]] == [1, 2]
    assert merge(same, tuned)["buckets"][1] == {"size": 2, "tiles": {"A": 1}}


def test_without_write_the_candidate_goes_to_out_only(tables, tmp_path, capsys):
    out = tmp_path / "run"
    code, text, _ = _cli(["tune", "scalar_ops", "--device", "cpu", "--sizes", "4099", "--out", str(out)], capsys)
    assert code == 0 and "no table installed for" in text and "every size is new" in text
    assert (out / "tuned" / tuned_tables.file_name(CPU_KEY)).is_file()
    assert not (tables / "scalar_ops").exists()
    rec = measure("scalar_ops", "triton", device="cpu", dtype="fp32", quick=True, rep_ms=2)
    assert rec.tiles_source == f"heuristic (no table for {CPU_KEY})"


@pytest.mark.parametrize(
    "body, why",
    [("{oops", "not valid JSON"), (None, "family 'fused_add_rms_norm', not 'rms_norm'")],
)
def test_a_bad_installed_table_stops_the_tune_and_stays(tables, tmp_path, capsys, body, why):
    folder = tables / "rms_norm"
    folder.mkdir(parents=True)
    path = folder / tuned_tables.file_name(CPU_KEY)
    if body is None:
        body = json.dumps(
            {"schema": tuned_tables.SCHEMA, "family": "fused_add_rms_norm", "device_key": CPU_KEY, "knob": "hidden"}
            | {"buckets": []}
        )
    path.write_text(body)
    code, out, err = _cli(["tune", "rms_norm", *FAST, "--out", str(tmp_path / "o"), "--write"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert str(path) in err and why in err and "left untouched" in err
    assert path.read_text() == body and not (tmp_path / "o" / "records.sqlite").exists()  # refused before measuring


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--strategy", "annealing"], "grid, random, bayes"),
        (["--sizes", "0"], "hidden=0 is out of range"),
        (["--budget-s", "-1"], "must be a positive number"),
        (["--device", "tpu"], "use cuda, npu or cpu"),
        (["--trials", "0"], "at least 1"),
    ],
)
def test_cli_misuse_is_one_line_exit_2(extra, message, tmp_path, capsys):
    code, _, err = _cli(["tune", "rms_norm", "--device", "cpu", "--out", str(tmp_path), *extra], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_bayes_without_optuna_says_how_to_install(monkeypatch, tmp_path, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "optuna", None)
    code, _, err = _cli(["tune", "rms_norm", *FAST, "--strategy", "bayes", "--out", str(tmp_path)], capsys)
    assert code == 2 and "pip install 'kernel-workbench[tune]'" in err


# --- the pick rule -----------------------------------------------------------------------------
def _rec(ms, lo, hi, **params):
    return {"kernel_ms": ms, "kernel_lo_ms": lo, "kernel_hi_ms": hi, "passed": True, "error": None, "params": params}


def _simple(p):
    return (p.get("num_warps", 0),)


def test_pick_keeps_the_default_within_noise_else_the_simplest_within_noise():
    default = _rec(1.02, 0.99, 1.05)
    fast8 = _rec(1.00, 0.98, 1.02, num_warps=8)
    near2 = _rec(1.01, 0.97, 1.04, num_warps=2)
    slow1 = _rec(1.30, 1.25, 1.35, num_warps=1)
    c = pick(16, [default, fast8, near2, slow1], default, _simple)
    assert c.chosen is default and c.best is fast8 and "default is within noise" in c.why and c.evaluated == 3
    far_default = _rec(1.50, 1.45, 1.55)
    c = pick(16, [far_default, fast8, near2, slow1], far_default, _simple)
    assert c.chosen is near2 and "simplest within noise" in c.why  # 2 warps, overlapping the fastest
    c = pick(16, [far_default, fast8, slow1], far_default, _simple)
    assert c.chosen is fast8 and c.why == "the fastest"
    broken = dict(fast8, passed=False)
    assert pick(16, [broken], None, _simple).chosen is None


# --- the strategies ----------------------------------------------------------------------------
SPACE = [{"a": a, "b": b} for a in range(6) for b in range(6) if (a + b) % 5]  # a non-rectangular valid set


def _objective(c):
    return 1.0 + (c["a"] - 4) ** 2 + 0.5 * (c["b"] - 1) ** 2


def _run(search, budget, batch=4):
    seen = []
    while len(seen) < budget:
        asked = search.ask(min(batch, budget - len(seen)))
        if not asked:
            break
        for c in asked:
            search.tell(c, _objective(c))
        seen += asked
    return seen


def test_grid_and_random_visit_every_candidate_once():
    grid = _run(GridSearch(SPACE), 1000)
    assert grid == SPACE
    r1, r2 = _run(RandomSearch(SPACE, seed=3), 1000), _run(RandomSearch(SPACE, seed=3), 1000)
    assert r1 == r2 and r1 != SPACE and sorted(map(str, r1)) == sorted(map(str, SPACE))


def test_bayes_asks_in_batches_only_valid_new_configurations_and_finds_the_minimum():
    pytest.importorskip("optuna")
    best = min(_objective(c) for c in SPACE)
    search = make_search("bayes", SPACE, seed=0)
    seen = _run(search, 20, batch=4)
    keys = [tuple(sorted(c.items())) for c in seen]
    assert len(keys) == len(set(keys)) == 20 and all(c in SPACE for c in seen)
    assert min(_objective(c) for c in seen) == best  # 20 of 30 evaluations reach the optimum here
    assert make_search("bayes", SPACE, seed=0).ask(4) == make_search("bayes", SPACE, seed=0).ask(4)  # seeded


def test_tune_on_ray_with_two_cpu_workers(tables, shared_ray, tmp_path, capsys):
    # the command's executor joins conftest's shared Ray instance of 2 CPUs
    out = tmp_path / "ray"
    argv = ["tune", "fused_add_rms_norm", *FAST, "--executor", "ray", "--num-cpus", "2", "--out", str(out)]
    code, text, _ = _cli([*argv, "--strategy", "random", "--trials", "3", "--write"], capsys)
    assert code == 0, text
    records = json.loads((out / "records.json").read_text())
    tuned = [r for r in records if r["dtype"] == "bf16"]
    assert len(tuned) == 4 and all(r["passed"] for r in records)  # the default and 3 random configurations
    # ... and the chosen tiles checked (briefly timed) in each other dtype the family declares
    others = [r for r in records if r["dtype"] != "bf16"]
    assert sorted(r["dtype"] for r in others) == ["fp16", "fp32"], [r["dtype"] for r in records]
    assert all(r["params"] == others[0]["params"] for r in others)
    # Measured in Ray's workers, not here. Not necessarily in both: the default runs alone first,
    # and its worker, warm, may take all three while the second still starts (it gets work once
    # ready: ray_executor's warm-up).
    pids = {r["worker"]["pid"] for r in records}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    table = tuned_tables.read_table(tables / "fused_add_rms_norm" / tuned_tables.file_name(CPU_KEY))
    assert table["provenance"]["workers"] == 2 and table["buckets"][0]["evaluated"] == 3


# --- the suites' defaults targets ----------------------------------------------------------------
def test_every_family_has_a_lean_defaults_target_and_h200_runs_the_h100_suite():
    import kernels
    from workbench.suites import targets as S

    h100, h200 = S.SUITES["h100"], S.SUITES["h200"]
    assert h200.names() == h100.names() and "H200" in h200.title
    defaults = [t for t in h100.targets if t.kind == "defaults"]
    assert {t.family for t in defaults} == set(kernels.families())
    for t in defaults:
        assert t.tuned and S.required(t.min_ratio, t.values[0]) == 0.97
        assert t.variant == kernels.get(t.family).tuning.variant


def test_defaults_target_measures_the_table_choice_and_its_neighbours(tables):
    """With a table for the device, the defaults target times the default, the table's entry and
    the entry's grid neighbours (no 1-D sweep)."""
    from workbench.suites.run import run_suite

    entry = {"BLOCK_SIZE_M": 4, "num_warps": 4}
    body = {"schema": tuned_tables.SCHEMA, "family": "rms_norm", "device_key": CPU_KEY, "knob": "hidden"}
    (tables / "rms_norm").mkdir(parents=True)
    buckets = [{"size": 128, "tiles": {}}, {"size": 300, "tiles": entry}]
    (tables / "rms_norm" / tuned_tables.file_name(CPU_KEY)).write_text(json.dumps({**body, "buckets": buckets}))
    tuned_tables.reload()
    run = run_suite("smoke", device="cpu", only=["defaults_rms_norm_forward"])
    records = run.record_dicts()
    assert {r["label"] for r in records} == {
        "default",
        "BLOCK_SIZE_M=4, num_warps=4",
        "BLOCK_SIZE_M=1, num_warps=4",
        "BLOCK_SIZE_M=4, num_warps=2",
    }  # rms_norm's interpreter grid is BLOCK_SIZE_M (1, 4) x num_warps (2, 4): the in-grid neighbours
    default = next(r for r in records if r["label"] == "default")
    assert default["tiles_source"] == f"tuned:{CPU_KEY}@300" and all(r["passed"] for r in records)


# --- an installed entry against the family's rule ------------------------------------------------
def test_pick_prefers_the_rule_then_the_default_then_the_simplest(tables):
    """The rule (tables off) within noise of the fastest is chosen and written as {} even when the
    default (the installed entry) is faster; the entry stays only where it beats the rule by more
    than the noise."""
    from workbench.tune.table import entry_tiles

    entry = {"BLOCK_SIZE_M": 1, "num_warps": 2}
    (tables / "rms_norm").mkdir(parents=True)
    body = {"schema": tuned_tables.SCHEMA, "family": "rms_norm", "device_key": CPU_KEY, "knob": "hidden"}
    path = tables / "rms_norm" / tuned_tables.file_name(CPU_KEY)
    path.write_text(json.dumps({**body, "buckets": [{"size": 300, "tiles": entry}]}))
    tuned_tables.reload()
    names = ("BLOCK_SIZE_M", "num_warps")
    default = dict(_rec(1.00, 0.98, 1.02), tiles_source=f"tuned:{CPU_KEY}@300")
    rule = dict(_rec(1.01, 0.99, 1.03), tiles_source=tuned_tables.DISABLED)
    fast = _rec(0.995, 0.97, 1.01, BLOCK_SIZE_M=4, num_warps=4)
    c = pick(300, [default, rule, fast], default, _simple, rule=rule)
    assert c.chosen is rule and c.rule is rule and c.why == "the rule is within noise of the fastest"
    assert c.evaluated == 1 and entry_tiles(c, "rms_norm", CPU_KEY, names) == {}
    fastest_rule = dict(rule, kernel_ms=0.9, kernel_lo_ms=0.88, kernel_hi_ms=0.92)
    c = pick(300, [default, fastest_rule, fast], default, _simple, rule=fastest_rule)
    assert c.chosen is fastest_rule and c.why == "the rule is the fastest"
    slow_rule = dict(rule, kernel_ms=1.2, kernel_lo_ms=1.18, kernel_hi_ms=1.22)  # the entry beats it
    c = pick(300, [default, slow_rule, fast], default, _simple, rule=slow_rule)
    assert c.chosen is default and "default is within noise" in c.why
    assert entry_tiles(c, "rms_norm", CPU_KEY, names) == entry  # the installed entry is kept
    far = dict(default, kernel_ms=1.5, kernel_lo_ms=1.45, kernel_hi_ms=1.55)
    c = pick(300, [far, slow_rule, fast], far, _simple, rule=slow_rule)
    assert c.chosen is fast and entry_tiles(c, "rms_norm", CPU_KEY, names) == {"BLOCK_SIZE_M": 4, "num_warps": 4}


def test_a_tune_over_an_installed_entry_measures_the_rule_too(tables, tmp_path, capsys):
    """The H100 block-sparse story (b53166b): a table that pins tiles must not stand in for the
    rule. A tune over an installed entry also measures the rule with the tables off (its own
    sweep key, tiles_source not "tuned:"), reports it and stores it in the bucket; an empty entry
    is the rule already, so none is measured there."""
    from workbench.tune.run import _has_entry

    entry = {"BLOCK_SIZE_M": 1, "num_warps": 2}  # 4 programs where the rule runs one on the interpreter
    (tables / "rms_norm").mkdir(parents=True)
    body = {"schema": tuned_tables.SCHEMA, "family": "rms_norm", "device_key": CPU_KEY, "knob": "hidden"}
    path = tables / "rms_norm" / tuned_tables.file_name(CPU_KEY)
    path.write_text(json.dumps({**body, "buckets": [{"size": 300, "tiles": entry}, {"size": 4096, "tiles": {}}]}))
    tuned_tables.reload()
    out = tmp_path / "run"
    code, text, _ = _cli(["tune", "rms_norm", *FAST, "--out", str(out)], capsys)
    assert code == 0, text
    records = json.loads((out / "records.json").read_text())
    checks = [r for r in records if r["dtype"] != "bf16"]  # the chosen tiles in each other dtype
    assert sorted(r["dtype"] for r in checks) == ["fp16", "fp32"] and all(r["passed"] for r in checks)
    records = [r for r in records if r["dtype"] == "bf16"]
    auto = [r for r in records if r["tiles_source"] != "explicit"]  # every tuned tile "auto"
    (default,) = [r for r in auto if r["tiles_source"].startswith("tuned:")]
    (rule,) = [r for r in auto if r is not default]
    assert rule["params"] == default["params"] and "tables" in rule["sweep_key"]
    assert default["tiles_source"] == f"tuned:{CPU_KEY}@300" and rule["tiles_source"] == tuned_tables.DISABLED
    assert rule["passed"] and rule["sweep_key"] != default["sweep_key"] and len(records) == 6  # + 4 grid
    (bucket,) = json.loads((out / "tuned" / tuned_tables.file_name(CPU_KEY)).read_text())["buckets"]
    assert bucket["rule"]["tiles_source"] == tuned_tables.DISABLED and bucket["rule"]["kernel_ms"] > 0
    assert bucket["evaluated"] == 4 and (bucket["tiles"] == {}) == bucket["why"].startswith("the rule")
    assert "rule us [interval]" in (out / "report.html").read_text() and "+ default + rule" in text
    # The tables stayed on for everything else, and an empty entry measures no rule.
    assert tuned_tables.lookup("rms_norm", CPU_KEY, 300).tiles == entry
    assert _has_entry(default, "rms_norm", 300) and not _has_entry(
        dict(default, tiles_source="tuned:x@4096"), "rms_norm", 4096
    )
    assert not _has_entry(rule, "rms_norm", 300)
