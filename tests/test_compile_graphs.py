"""torch.compile's graphs compiled ahead (issue 55): a graph process compiles a torch.compile
peer's graphs into Inductor's caches and runs nothing; the measuring process's first call finds
them there.

- A torch.compile peer's configuration is a "graphs" job; the service gives it to the graph
  processes, and takes none where there are no graph processes.
- The real thing on this CPU (Inductor's C++ code instead of Triton's): one process compiles a
  configuration's forward and backward and is stopped before running them; a second process's
  first call finds both graphs in Inductor's cache, compiles none, and its outputs and gradients
  match the reference.
- A variant that declares no graphs is refused in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path

import pytest
from testkit import H100_FACTS

import kernels
from workbench.compiling import service as compile_service
from workbench.compiling.graphs import compile_graphs
from workbench.compiling.jobs import job_of
from workbench.compiling.service import CompileService

ROOT = Path(__file__).resolve().parents[1]


class RecordingPool:
    def __init__(self):
        self.submitted, self.started = [], False

    def start(self):
        self.started = True

    def submit(self, job):
        self.submitted.append(job)
        return Future()

    def close(self):
        pass


def _service(tmp_path, graph_workers):
    triton, graphs = RecordingPool(), RecordingPool()
    service = CompileService(
        H100_FACTS,
        1,
        tmp_path / "log",
        pool_factory=lambda *a: triton,
        graph_workers=graph_workers,
        graph_pool_factory=lambda *a: graphs,
    )
    return service, triton, graphs


def test_a_torch_compile_peer_is_a_graphs_job_for_the_graph_processes(tmp_path):
    spec = kernels.get("rms_norm")
    graph_job = job_of(spec, "torch_compile", dtype="bf16", mode="full", problem={"hidden": 1000}, params=None)
    ours = job_of(spec, "gpu_row", dtype="bf16", mode="full", problem={"hidden": 1000}, params=None)
    assert graph_job.kind == "graphs" and ours.kind == "triton"
    assert job_of(spec, "torch_eager", dtype="bf16", mode="full", problem=None, params=None) is None
    assert spec.has_graph_peers("cuda") and not spec.has_graph_peers("cpu")  # torch_compile runs on a device only
    assert not kernels.get("scalar_ops").has_graph_peers("cuda")

    service, triton, graphs = _service(tmp_path, graph_workers=2)
    assert service.submit([graph_job, ours, graph_job]) == 2
    assert graphs.submitted == [graph_job] and triton.submitted == [ours]
    assert service.state(graph_job) == "queued"
    service.start(graphs=True)
    assert triton.started and graphs.started

    service, triton, graphs = _service(tmp_path, graph_workers=0)  # WORKBENCH_GRAPH_WORKERS=0
    assert service.submit([graph_job, ours]) == 1 and triton.submitted == [ours] and not graphs.submitted
    service.start(graphs=True)
    assert service.state(graph_job) == "none" and not graphs.started


def test_a_sweep_submits_its_torch_compile_tasks_as_graphs_jobs(tmp_path, monkeypatch):
    """The local and isolate executors' sweeps (workbench/sweep/compile_ahead.py): a torch.compile
    task goes to the graph processes under the key its measurement settles with."""
    import dataclasses

    from testkit import norm_task

    from workbench.sweep.compile_ahead import job_kind, submit_tasks

    service, triton, graphs = _service(tmp_path, graph_workers=1)
    monkeypatch.setattr(compile_service, "for_kind", lambda kind: service if kind == "cuda" else None)
    tasks = [
        dataclasses.replace(norm_task(v, 5, 333, {}), device="cuda")
        for v in ("torch_compile", "gpu_row", "torch_eager")
    ]
    assert [job_kind(t) for t in tasks] == ["graphs", "triton", None]
    assert submit_tasks(tasks) == 2
    spec = kernels.get("rms_norm")
    want = job_of(
        spec, "torch_compile", dtype="fp32", mode="forward", problem=tasks[0].problem, params={}, resolved=True
    )
    assert [j.key for j in graphs.submitted] == [want.key] and len(triton.submitted) == 1


def test_graph_workers_come_from_the_environment(monkeypatch):
    monkeypatch.setattr(
        "workbench.compiling.target.visible_device_facts", lambda device: dict(H100_FACTS)
    )  # a GPU's facts on this CPU host: for_kind builds the service without starting anything
    for value, want in (("0", 0), ("3", 3)):
        compile_service.install(None)
        monkeypatch.setenv(compile_service.ENV_GRAPH_WORKERS, value)
        assert compile_service.for_kind("cuda").graph_workers == want
    compile_service.install(None)


def test_starting_the_graph_processes_leaves_inductor_unimported_here(tmp_path):
    """The measuring process does not import Inductor to start them (1.3 s here, and a first
    profiler session that finds Inductor loaded pays for it: tests/test_timing.py)."""
    code = f"""
import sys
import torch
from workbench.compiling.graphs import GraphPool
if __name__ == "__main__":
    pool = GraphPool(0, 1, {str(tmp_path / "log")!r})
    pool.start().result(timeout=120)
    pool.close()
    print(sorted(m for m in sys.modules if m.startswith("torch._inductor")))
"""
    script = tmp_path / "start.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "graph process" in (tmp_path / "log").read_text()  # it started, and wrote to its log


def test_a_variant_without_graphs_is_refused_in_one_line():
    spec = kernels.get("rms_norm")
    job = job_of(spec, "gpu_row", dtype="fp32", mode="forward", problem={"hidden": 64}, params=None, quick=True)
    result = compile_graphs(job, device="cpu")
    assert not result["ok"] and result["graphs"] == 0
    assert result["error"] == "ValueError: gpu_row declares no torch.compile graphs to compile ahead"


AHEAD = """
import json, kernels
from workbench.compiling.graphs import compile_graphs, compile_graphs_only
from workbench.compiling.jobs import job_of
compile_graphs_only(None)
job = job_of(kernels.get("rms_norm"), "torch_compile", dtype="fp32", mode="full",
             problem={"rows": 3, "hidden": 67}, params=None, quick=True)
print(json.dumps(compile_graphs(job, device="cpu")))
"""

MEASURE = """
import json, torch, kernels
from kernels.spec import as_tuple
from workbench.compiling.graphs import inductor_cache_counts
from workbench.compiling.jobs import job_of
spec = kernels.get("rms_norm")
job = job_of(spec, "torch_compile", dtype="fp32", mode="full", problem={"rows": 3, "hidden": 67}, params=None, quick=True)
inputs = spec.make_inputs(job.problem, torch.float32, torch.device("cpu"), 7)
wrt = [v for v in inputs.values() if isinstance(v, torch.Tensor) and v.requires_grad]
out = as_tuple(spec.variant("torch_compile").run(inputs, job.problem))[0]
grads = torch.autograd.grad(out, wrt, torch.ones_like(out))
ref_inputs = {k: v.detach().double().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v
              for k, v in inputs.items()}
ref = as_tuple(spec.reference(ref_inputs, job.problem))[0]
ref_grads = torch.autograd.grad(ref, [v for v in ref_inputs.values() if isinstance(v, torch.Tensor) and v.requires_grad],
                                torch.ones_like(ref))
errors = [float((a.double() - b).abs().max()) for a, b in zip((out, *grads), (ref, *ref_grads))]
print(json.dumps({"cache": inductor_cache_counts(), "errors": errors, "grads": len(grads)}))
"""


@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None, reason="Inductor's CPU code needs a C++ compiler"
)
def test_graphs_compiled_ahead_are_found_by_the_next_process_and_compute_right(tmp_path):
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }

    def run(code: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    ahead = run(AHEAD)
    assert ahead["ok"], ahead["error"]
    assert ahead["inputs"] == "empty cpu (shapes from meta)"
    assert ahead["graphs"] == 1 and ahead["cache"] == {"hit": 0, "miss": 2}  # the forward and the backward, compiled

    measured = run(MEASURE)
    assert measured["cache"] == {"hit": 2, "miss": 0}  # both found; nothing compiled by the measuring process
    assert measured["grads"] == 2
    assert max(measured["errors"]) < 1e-4, measured["errors"]


@pytest.mark.gpu
def test_on_a_gpu_the_graph_processes_compile_what_the_measuring_first_call_then_finds(tmp_path, monkeypatch):
    """The graph processes on this GPU compile torch.compile's forward and backward of a shape no
    process has compiled (a fresh Inductor cache); the measurement's first call finds both, and
    the record notes it; the measured outputs and gradients pass their checks."""
    import torch

    from workbench.measure import measure

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    from workbench.compiling.target import visible_device_facts

    service = CompileService(visible_device_facts("cuda"), 1, tmp_path / "log", graph_workers=2)
    compile_service.install(service)
    try:
        spec = kernels.get("rms_norm")
        problem = {"rows": 257, "hidden": 1031}
        config = dict(variant="torch_compile", dtype="bf16", mode="full", problem=problem)
        assert compile_service.submit_configs(spec, [config], "cuda") == 1
        job = job_of(spec, "torch_compile", dtype="bf16", mode="full", problem=problem, params=None)
        service.wait_any([job], limit_s=120)  # the graph processes start first (their imports, a context)
        assert service.state(job) == "done"
        record = measure("rms_norm", "torch_compile", problem=problem, mode="full", dtype="bf16", device="cuda")
        note = record.compile_facts["compiled_ahead"]
        assert note["ok"], note
        assert note["graphs"] == 1 and note["graph_cache"] == {"hit": 0, "miss": 2}
        assert record.compile_facts["inductor_cache"] == {"hit": 2, "miss": 0}
        assert record.passed, record.error
    finally:
        compile_service.install(None)
