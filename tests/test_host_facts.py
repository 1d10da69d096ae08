"""workbench/host_facts.py: a device's copy bandwidth measured once per host, reused with its age."""

from __future__ import annotations

import json

import pytest

from workbench import host_facts


class Clock:
    def __init__(self, t=1_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


class Meter:
    def __init__(self, gbps):
        self.gbps, self.calls = gbps, 0

    def __call__(self):
        self.calls += 1
        return self.gbps


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.delenv(host_facts.MAX_AGE_ENV, raising=False)
    return tmp_path / "host-facts.json"


def test_measured_once_then_reused_with_its_age(cache):
    clock, meter = Clock(), Meter(3000.0)
    first = host_facts.copy_bandwidth("h|H100|0|580|torch 2.11", meter, cache, clock)
    assert first["source"] == "measured" and first["gbps"] == 3000.0 and first["age_s"] == 0.0
    clock.t += 3600
    again = host_facts.copy_bandwidth("h|H100|0|580|torch 2.11", Meter(1.0), cache, clock)
    assert again["source"] == "host cache" and again["gbps"] == 3000.0 and again["age_s"] == 3600.0
    assert again["measured_at"] == first["measured_at"] and meter.calls == 1


def test_each_device_has_its_own_entry_and_a_stale_one_is_measured_again(cache):
    clock = Clock()
    host_facts.copy_bandwidth("gpu0", Meter(3000.0), cache, clock)
    host_facts.copy_bandwidth("gpu1", Meter(2900.0), cache, clock)
    assert set(json.loads(cache.read_text())) == {"gpu0", "gpu1"}
    clock.t += 25 * 3600  # older than the default day
    fresh = Meter(3100.0)
    assert host_facts.copy_bandwidth("gpu0", fresh, cache, clock)["gbps"] == 3100.0 and fresh.calls == 1
    assert host_facts.copy_bandwidth("gpu1", Meter(1.0), cache, Clock(clock.t - 25 * 3600 + 10))["gbps"] == 2900.0


def test_the_age_limit_is_a_setting_and_zero_measures_every_time(cache, monkeypatch):
    clock, meter = Clock(), Meter(3000.0)
    monkeypatch.setenv(host_facts.MAX_AGE_ENV, "0")
    host_facts.copy_bandwidth("gpu0", meter, cache, clock)
    host_facts.copy_bandwidth("gpu0", meter, cache, clock)
    assert meter.calls == 2
    monkeypatch.setenv(host_facts.MAX_AGE_ENV, "0.5")
    clock.t += 1000
    assert host_facts.copy_bandwidth("gpu0", meter, cache, clock)["source"] == "host cache"
    clock.t += 1000
    assert host_facts.copy_bandwidth("gpu0", meter, cache, clock)["source"] == "measured"
    monkeypatch.setenv(host_facts.MAX_AGE_ENV, "a day")
    with pytest.raises(ValueError, match="not a number of hours"):
        host_facts.copy_bandwidth("gpu0", meter, cache, clock)


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"gpu0": {"copy_bandwidth": {"gbps": "x"}}}'])
def test_an_unreadable_file_costs_a_measurement_and_is_replaced(cache, content):
    cache.write_text(content)
    meter = Meter(3000.0)
    assert host_facts.copy_bandwidth("gpu0", meter, cache, Clock())["source"] == "measured" and meter.calls == 1
    assert json.loads(cache.read_text())["gpu0"]["copy_bandwidth"]["gbps"] == 3000.0


def test_a_clock_that_went_back_does_not_reuse(cache):
    host_facts.copy_bandwidth("gpu0", Meter(3000.0), cache, Clock(2_000_000.0))
    meter = Meter(3100.0)
    assert host_facts.copy_bandwidth("gpu0", meter, cache, Clock(1_000_000.0))["source"] == "measured"


def test_an_unwritable_place_still_answers(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    answer = host_facts.copy_bandwidth("gpu0", Meter(3000.0), blocker / "sub" / "host-facts.json", Clock())
    assert answer["gbps"] == 3000.0 and answer["source"] == "measured"


def test_the_default_place_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "wb"))
    assert host_facts.cache_dir() == tmp_path / "wb"
    monkeypatch.delenv("WORKBENCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert host_facts.cache_dir() == tmp_path / "xdg" / "kernel-workbench"
