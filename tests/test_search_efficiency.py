"""benchmarks/search_efficiency.py on stored records, offline.

TEST FIXTURE: the records below are synthetic (a made-up kernel-time surface over the
block-sparse batch-16 space), not measurements; they check the replay's bookkeeping, not how
well any strategy does on a real device.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import pytest

from workbench.tune.search import RandomSearch

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    spec = importlib.util.spec_from_file_location("search_efficiency", ROOT / "benchmarks" / "search_efficiency.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic_records() -> list[dict]:
    """A synthetic grid (TEST FIXTURE): TILE_M x TILE_K x SPLITS x num_warps x precision at
    batch 16, with a smooth made-up time, some failures, and records of another batch to filter out."""
    out = []
    for tm, tk, splits, warps, prec in itertools.product(
        (4, 8, 16, 32), (16, 32, 64), (1, 2, 4, 8), (2, 4, 8), ("ieee", "tf32")
    ):
        ms = 0.02 * (1 + abs(tm - 16) / 16 + abs(tk - 32) / 64 + abs(splits - 4) / 8 + (warps != 4) * 0.1)
        ms *= 0.9 if prec == "tf32" else 1.0
        failed = tm == 32 and tk == 64  # too large for the tile, say
        for batch in (16, 32):
            out.append(
                {
                    "kernel": "block_sparse",
                    "variant": "gpu",
                    "problem": {"batch": batch, "nodes": 1024, "precision": prec},
                    "params": {"TILE_M": tm, "TILE_K": tk, "SPLITS": splits, "num_warps": warps, "BLOCK_B": 16},
                    "kernel_ms": None if failed else ms * (1 + (batch == 32)),
                    "passed": not failed,
                    "error": "too large" if failed else None,
                }
            )
    return out


def test_replay_on_stored_records(tmp_path):
    bench = _bench()
    path = tmp_path / "records.json"
    path.write_text(json.dumps(synthetic_records()))
    out = tmp_path / "eff.json"
    assert bench.main([str(path), "--where", "batch=16", "--seeds", "5", "--batch", "4", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["grid"] == 4 * 3 * 4 * 3 * 2
    assert result["dimensions"] == ["SPLITS", "TILE_K", "TILE_M", "num_warps", "problem.precision"]
    assert result["best_ms"] == pytest.approx(0.02 * 0.9)
    for name in ("random", "bayes"):
        r = result["strategies"][name]
        assert len(r["evaluations"]) == 5 and all(
            1 <= (c or result["grid"]) <= result["grid"] for c in r["evaluations"]
        )
        assert r["share"] == pytest.approx(r["median"] / result["grid"])


def test_random_replay_counts_to_the_first_configuration_within_reach():
    """With one ask at a time, random needs exactly the position of the first configuration
    within 2% of the best in its seeded order."""
    bench = _bench()
    dims, table = bench.grid_table(synthetic_records(), "block_sparse", "gpu", {"batch": "16"})
    goal = min(v for v in table.values() if v is not None) * 1.02
    order = RandomSearch([dict(k) for k in table], seed=3).ask(len(table))
    first = next(i for i, c in enumerate(order, 1) if (table[tuple(sorted(c.items()))] or 1e9) <= goal)
    assert bench.evaluations_to_target("random", table, 3, 1, 0.02) == first


def test_no_matching_records_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "records.json"
    path.write_text(json.dumps(synthetic_records()))
    assert _bench().main([str(path), "--where", "batch=3"]) == 2
    assert "no block_sparse records match" in capsys.readouterr().err
