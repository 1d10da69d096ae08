"""Shared fixtures: CPU-interpreter runs by default; GPU tests are marked and skipped without CUDA."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def device(request):
    """Every test that takes ``device`` runs on the CPU interpreter and, where present, CUDA."""
    return request.param


@pytest.fixture
def store(tmp_path):
    from workbench.store import Store

    s = Store(tmp_path / "records.sqlite")
    yield s
    s.close()
