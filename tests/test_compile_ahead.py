"""Compile-ahead (issue 26): kernels compiled in a CPU-side process before a GPU measures them.

The compile-only launch path runs every family's host functions on stand-in tensors (meta, or
CPU tensors where a host function needs values) with Triton's compile replaced by a recorder
(no CUDA here): which kernels, with which constexprs, a measuring worker's first call would
compile. One real compile for an H100 target (Triton's bundled ptxas, no GPU) checks the path
into the Triton cache. A compile-ahead that fails never changes a record's measurement.

Why one long module: one test module per subject, as in the rest of tests/; the driver's side
and the workers' side share the stand-in tasks that :func:`_task` builds.
"""

from __future__ import annotations

import json
import types
from collections import deque

import pytest
import torch
from testkit import H100_FACTS, HAVE_PTXAS

import kernels
from kernels import launch as launch_module
from workbench.compiling.cache import cache_folder
from workbench.compiling.note import note_on_record
from workbench.sweep.compile_ahead import compile_task
from workbench.sweep.compile_ahead_driver import CompileAhead
from workbench.sweep.lanes import Lanes
from workbench.sweep.tasks import make_task, run_task

H100 = H100_FACTS


@pytest.fixture
def recorded_compiles(monkeypatch):
    """Triton's compile replaced by a recorder: [(kernel name, launch keyword arguments)]."""
    seen = []

    def record(kernel, grid, args, kwargs):
        name = launch_module._kernel_name(kernel)
        seen.append((name, dict(kwargs)))
        return types.SimpleNamespace(hash=f"hash-{name}-{len(seen)}")

    monkeypatch.setattr(launch_module, "_warmup", record)
    return seen


def _task(family, variant, mode="forward", problem=None, params=None, device="cpu"):
    spec = kernels.get(family)
    return make_task(
        spec, variant, device=device, dtype="fp32", mode=mode, problem=problem, params=params, quick=True, rep_ms=1
    )


def test_every_family_compiles_ahead_on_stand_ins(recorded_compiles):
    """Each of our variants, forward and backward: compiled on meta tensors where the host
    functions need no values (the norms, scalar ops), on CPU tensors where they do (block-sparse
    range checks); the kernels are the ones its call launches."""
    want_inputs = {"rms_norm": "meta", "fused_add_rms_norm": "meta", "scalar_ops": "meta", "block_sparse": "cpu"}
    for family in ("rms_norm", "fused_add_rms_norm", "scalar_ops", "block_sparse"):
        spec = kernels.get(family)
        for var in spec.variants:
            if var.is_peer:
                continue
            for mode in ("forward", "backward"):
                if mode not in (var.modes or spec.modes):
                    continue
                result = compile_task(_task(family, var.name, mode), H100)
                assert result["ok"], (family, var.name, mode, result["error"])
                assert result["inputs"] == want_inputs[family], (family, var.name)
                names = [k["name"] for k in result["kernels"]]
                assert names and all(k["hash"] for k in result["kernels"]), (family, var.name, mode)
                assert ("backward" in " ".join(names) or "flows" in " ".join(names)) == (mode == "backward"), names


def test_constexprs_are_the_tiles_resolved_for_the_target_device(recorded_compiles):
    """The host function resolves tiles for the described GPU, not for the CPU the compile runs
    on: the constexprs are those a launch on that GPU uses."""
    task = _task(
        "rms_norm", "gpu_multirow", problem={"rows": 64, "hidden": 1000}, params={"BLOCK_SIZE_M": 2, "num_warps": 8}
    )
    result = compile_task(task, H100)
    assert result["ok"] and result["inputs"] == "meta"
    name, kwargs = recorded_compiles[-1]
    assert name == "_rms_norm_forward_kernel"
    assert kwargs["BLOCK_SIZE"] == 1024 and kwargs["BLOCK_SIZE_M"] == 2 and kwargs["num_warps"] == 8


@pytest.mark.parametrize("family, rows", [("rms_norm", 64), ("fused_add_rms_norm", 32)])  # fused: at most 65536
def test_the_npu_kernels_compile_ahead_with_the_warps_a_cuda_launch_takes(recorded_compiles, family, rows):
    """On CUDA the NPU kernels launch with warps sized to their tile; compiled ahead (meta tensors
    standing in for CUDA ones) they must take the same, or the measuring process's first call
    finds nothing compiled (and the compile process spends minutes on a kernel nobody runs)."""
    task = _task(family, "npu", problem={"rows": 4097, "hidden": 4097}, params={"BLOCK_SIZE_M": rows})
    result = compile_task(task, H100)
    assert result["ok"] and result["inputs"] == "meta", result["error"]
    (name, kwargs), *_ = recorded_compiles
    assert "npu" in name and kwargs["BLOCK_SIZE_M"] == rows and kwargs["BLOCK_SIZE_N"] == 2048
    assert kwargs["num_warps"] == 32  # default_num_warps(rows x 2048), as a launch on the GPU


def test_compile_only_leaves_no_trace_for_later_cpu_calls(recorded_compiles):
    """Inside compile_only nothing runs; after it, CPU calls run in the interpreter again and
    device_of answers the CPU."""
    from triton.backends.compiler import GPUTarget

    from kernels.launch import compile_only
    from kernels.rms_norm import rms_norm
    from kernels.runtime import described_device, device_of

    gpu = described_device("cuda", name=H100["name"], num_cores=H100["num_cores"])
    x = torch.randn(4, 64)
    with compile_only(GPUTarget("cuda", 90, 32), gpu) as compiled:
        assert device_of(x) is gpu
        rms_norm(x, None, impl="gpu")
    assert [c.name for c in compiled] == ["_rms_norm_forward_kernel"]
    assert device_of(x).kind == "cpu"
    y = rms_norm(x, None, impl="gpu")
    torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    assert len(recorded_compiles) == 1


def test_a_configuration_that_cannot_compile_ahead_says_why(recorded_compiles):
    bad = _task("rms_norm", "gpu_row", problem={"rows": 4, "hidden": 300}, params={"BLOCK_SIZE": 64})
    result = compile_task(bad, H100)
    assert not result["ok"] and result["error"] and result["kernels"] == []


def test_failing_compile_ahead_never_changes_a_record():
    """A task carrying a failed compile-ahead is measured as always: same error and pass; the
    record only notes the compile-ahead, with no claim about the first call."""
    task = _task("rms_norm", "gpu_row", problem={"rows": 4, "hidden": 64})
    failed = {"ok": False, "inputs": None, "kernels": [], "ms": 3.0, "error": "RuntimeError: boom", "worker": {}}
    import dataclasses

    plain = run_task(task)
    noted = run_task(dataclasses.replace(task, extra={"compiled_ahead": failed}))
    assert (noted["error"], noted["passed"], noted["sweep_key"]) == (
        plain["error"],
        plain["passed"],
        plain["sweep_key"],
    )
    assert noted["checks"] == plain["checks"]
    note = noted["compile_facts"]["compiled_ahead"]
    assert note["ok"] is False and note["error"] == "RuntimeError: boom" and note["first_call_cached"] is None
    assert "compiled_ahead" not in plain["compile_facts"]


def test_note_says_whether_the_first_call_found_every_kernel():
    body = {"compile_facts": {"kernels": [{"name": "a", "hash": "h1"}, {"name": "b", "hash": "h2"}]}}
    ahead = {"ok": True, "inputs": "meta", "kernels": [{"name": "a", "hash": "h1"}, {"name": "b", "hash": "h2"}]}
    assert note_on_record(body, ahead)["compile_facts"]["compiled_ahead"]["first_call_cached"] is True
    partly = dict(ahead, kernels=[{"name": "a", "hash": "h1"}])
    assert note_on_record(body, partly)["compile_facts"]["compiled_ahead"]["first_call_cached"] is False
    assert "compiled_ahead" not in body["compile_facts"]  # the record given is left as it was


@pytest.mark.skipif(not HAVE_PTXAS, reason="no ptxas (Triton's NVIDIA backend) to compile with")
def test_real_compile_for_an_h100_target_needs_no_gpu(tmp_path, monkeypatch):
    """Triton compiles for an explicit target with no device: the kernel lands in the Triton
    cache (with its launcher, where Triton builds one per signature), and a second compile-ahead
    of the same configuration is Triton's cache hit (the same hash, as a measuring worker's first
    call would find it)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    task = _task("rms_norm", "gpu_multirow", problem={"rows": 8, "hidden": 64}, params={"BLOCK_SIZE_M": 2})
    first = compile_task(task, H100)
    assert first["ok"], first["error"]
    (kernel,) = first["kernels"]
    assert (tmp_path / cache_folder(kernel["hash"])).is_dir()
    from triton.backends.nvidia import driver as nvidia

    launchers = list(tmp_path.rglob("__triton_launcher*"))
    if hasattr(nvidia, "make_launcher"):  # Triton 3.6: its launcher is built too, into the cache
        assert kernel["launcher_ms"] is not None and launchers
    else:  # one shared launcher: none to build
        assert kernel["launcher_ms"] is None and not launchers
    again = compile_task(task, H100)
    assert [k["hash"] for k in again["kernels"]] == [k["hash"] for k in first["kernels"]]


@pytest.mark.skipif(not HAVE_PTXAS, reason="no ptxas (Triton's NVIDIA backend) to compile with")
@pytest.mark.parametrize(
    "stages, rows, warps, hidden",
    [
        (2, 1, 4, 1000),
        (3, 2, 4, 300),
        (2, 8, 32, 2048),
    ],  # the last: warps split the rows, dw's sum meets in shared memory
)
def test_staged_backward_shared_memory_is_what_triton_allocates(tmp_path, monkeypatch, stages, rows, warps, hidden):
    """The model behind the staged backward's shared-memory check (kernels.rms_norm.gpu.staged_bytes)
    against what Triton's pipeliner gave the compiled kernel: the model may leave out only a
    few hundred bytes of the row sums."""
    from kernels.rms_norm import gpu

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    params = {"BWD_STAGES": stages, "BWD_ROWS": rows, "BWD_WARPS": warps, "BWD_RELOAD_W": True}
    result = compile_task(_task("rms_norm", "gpu_row", "full", {"rows": 64, "hidden": hidden}, params), H100)
    assert result["ok"], result["error"]
    (backward,) = [k for k in result["kernels"] if k["name"] == "_rms_norm_backward_kernel"]
    (meta,) = (tmp_path / cache_folder(backward["hash"])).glob("_rms_norm_backward_kernel.json")
    tiles = gpu.resolve_tiles(64, hidden, H100["num_cores"], **params)
    x = torch.empty(64, hidden, device="meta")  # fp32, as the task
    modelled = gpu.staged_bytes(tiles, x, x, None, torch.empty(hidden, device="meta"))
    assert modelled <= json.loads(meta.read_text())["shared"] <= modelled + 1024


def test_staged_tiles_a_device_cannot_hold_are_refused_before_compiling(recorded_compiles):
    """Eight rows of 4096 fp32 x and dy, four stages: 768 KiB of staged tiles on an H100's 227 KiB."""
    params = {"BWD_STAGES": 4, "BWD_ROWS": 8}
    result = compile_task(_task("rms_norm", "gpu_row", "full", {"rows": 64, "hidden": 4096}, params), H100)
    assert not result["ok"] and "lower BWD_STAGES or BWD_ROWS" in result["error"], result["error"]
    assert "232448 bytes" in result["error"]
    assert all(name != "_rms_norm_backward_kernel" for name, _ in recorded_compiles)


@pytest.mark.skipif(not HAVE_PTXAS, reason="no ptxas (Triton's NVIDIA backend) to compile with")
def test_first_compile_puts_its_kernel_in_the_cache_for_the_target(tmp_path, monkeypatch):
    """A compile worker's warm-up compiles the first-compile kernel for the target's facts into
    the Triton cache (a real compile, no GPU); an H200's facts (another name, the same sm_90)
    find it there."""
    from workbench.compiling.first_compile import _add_one_kernel, first_compile

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    # Triton keeps compiled kernels in memory too (per target): an earlier test's compile for the
    # same target in this process would be reused without reaching the disk cache.
    _add_one_kernel.device_caches.clear()
    assert first_compile(H100) > 0
    entries = {p.parent for p in tmp_path.rglob("_add_one_kernel.json")}
    assert len(entries) == 1 and list(next(iter(entries)).glob("_add_one_kernel.cubin"))
    _add_one_kernel.device_caches.clear()
    first_compile(dict(H100, name="NVIDIA H200", num_cores=132))
    assert {p.parent for p in tmp_path.rglob("_add_one_kernel.json")} == entries


def test_first_launch_runs_its_kernel_and_checks_what_it_wrote(monkeypatch):
    """A measuring actor's warm-up launches the kernel through the library's launch path (the
    interpreter here) and checks its output: a kernel that wrote something else raises."""
    from workbench.compiling import first_compile as module

    assert module.first_launch("cpu") > 0

    def off_by_one(kernel, like, grid, x, n, BLOCK):
        x[: n + 1] += 1  # one element past the mask

    monkeypatch.setattr(launch_module, "launch", off_by_one)
    with pytest.raises(RuntimeError, match="expected ones, then a zero"):
        module.first_launch("cpu")


def test_a_free_worker_takes_a_compiled_task_first_then_one_no_compiler_holds():
    """The Ray executor's choice for a free measuring actor: the first queued task whose
    compile-ahead finished (carrying its result), else the first no compile worker holds (it
    compiles that one itself), else none: it waits for a compile already under way."""
    tasks = [_task("rms_norm", "gpu_row", problem={"rows": rows, "hidden": 64}) for rows in (1, 2, 3)]
    ahead = CompileAhead(ray=None, workers=[], facts=H100, limit_s=60, new_worker=None)
    queue = Lanes(tasks, slots=1)
    ahead.calls = {"ref0": (tasks[0].key, None, 0.0), "ref1": (tasks[1].key, None, 0.0)}  # being compiled
    ahead.results = {tasks[1].key: {"ok": True, "kernels": []}}
    first = queue.take("actor", ahead)
    assert first.key == tasks[1].key and first.extra["compiled_ahead"] == {"ok": True, "kernels": []}
    second = queue.take("actor", ahead)
    assert second.key == tasks[2].key and "compiled_ahead" not in second.extra
    assert queue.take("actor", ahead) is None and [t for t, _at in queue.reach_times()] == [tasks[0]]
    assert queue.take("actor", ahead, wait=False) == tasks[0] and not queue  # a failed warm-up's record


def test_each_actor_works_through_a_lane_of_its_own_then_takes_from_the_longest_others_back():
    """Two slots: the queue in two contiguous lanes; each actor takes its lane's front (a
    problem's configurations stay with one actor, which makes its inputs once), the
    compile-ahead learns when each task will be reached (the lanes' fronts first, then the next
    of each), and an actor whose lane is empty takes the last task of the longest other lane. A
    lane whose actor is gone goes to the next actor."""
    tasks = [_task("rms_norm", "gpu_row", problem={"rows": rows, "hidden": 64}) for rows in range(1, 8)]
    queue = Lanes(tasks, slots=2)
    reach = {t.key: at for t, at in queue.reach_times()}
    step = queue.expected_s(tasks[0])  # nothing measured yet: what the timing budget suggests
    assert [reach[tasks[i].key] / step for i in (0, 3, 1, 4, 2, 5, 6)] == pytest.approx([0, 0, 1, 1, 2, 2, 3])
    assert queue.take("a", None) == tasks[0] and queue.take("b", None) == tasks[3]
    assert queue.take("a", None) == tasks[1] and queue.take("a", None) == tasks[2]
    assert queue.take("a", None) == tasks[6]  # a's lane is empty: the back of b's
    assert queue.take("b", None) == tasks[4]
    queue.release("b")
    assert queue.take("c", None) == tasks[5] and not queue  # b's lane, taken over by c
    ahead = CompileAhead(ray=None, workers=[], facts=H100, limit_s=60, new_worker=None)
    queue = Lanes(tasks[:4], slots=2)
    ahead.results = {tasks[3].key: {"ok": True, "kernels": []}}
    assert queue.take("a", ahead) == tasks[0]  # its own lane first, compiled or not
    assert queue.take("a", ahead).key == tasks[1].key
    assert queue.take("a", ahead).key == tasks[3].key  # then the other lane's back
    assert len(queue) == 1


def _fake_gpus(monkeypatch, *props):
    """torch.cuda answering for GPUs with these (capability, name, SMs, L2, shared bytes per block) and no device."""
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: props[i][0])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: props[i][1])
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda i: types.SimpleNamespace(
            multi_processor_count=props[i][2], L2_cache_size=props[i][3], shared_memory_per_block_optin=props[i][4]
        ),
    )


H100_PROPS = ((9, 0), H100["name"], H100["num_cores"], H100["l2_bytes"], H100["shared_bytes_per_program"])


def test_the_driver_reads_the_target_its_gpus_share(monkeypatch):
    """The driver's GPUs give the facts a measuring worker on any of them would (Triton's target
    is the capability as major * 10 + minor, 32 lanes); GPUs of two kinds, or none, give None:
    which one a worker gets is Ray's choice, so the first worker's facts are waited for."""
    from workbench.compiling.target import visible_device_facts

    _fake_gpus(monkeypatch, H100_PROPS, H100_PROPS)
    assert visible_device_facts("cuda") == H100
    assert visible_device_facts("cpu") is None
    _fake_gpus(monkeypatch, H100_PROPS, ((8, 0), "NVIDIA A100-SXM4-80GB", 108, 40 << 20, 166912))
    assert visible_device_facts("cuda") is None
    _fake_gpus(monkeypatch)
    assert visible_device_facts("cuda") is None
    _fake_gpus(monkeypatch, H100_PROPS)
    monkeypatch.setattr(torch.version, "hip", "6.2")
    assert visible_device_facts("cuda") is None


def test_driver_target_takes_the_environment_then_the_driver_else_the_first_actor(monkeypatch):
    import json

    from workbench.compiling import target
    from workbench.compiling.target import TARGET_ENV, driver_target

    monkeypatch.setattr(target, "visible_device_facts", lambda device: H100 if device == "cuda" else None)
    monkeypatch.delenv(TARGET_ENV, raising=False)
    assert driver_target("cuda") == (H100, "driver")
    assert driver_target("cuda", probe=False) == (None, "actor")  # a cluster's GPUs are not the driver's
    assert driver_target("cpu") == (None, "actor")
    monkeypatch.setenv(TARGET_ENV, "actor")
    assert driver_target("cuda") == (None, "actor")
    other = dict(H100, name="NVIDIA H200", num_cores=132)
    monkeypatch.setenv(TARGET_ENV, json.dumps(other))
    assert driver_target("cuda", probe=False) == (other, "environment")
    for bad in ("sm90", '{"arch": 90}'):
        monkeypatch.setenv(TARGET_ENV, bad)
        with pytest.raises(ValueError, match=TARGET_ENV):
            driver_target("cuda")


def test_retarget_drops_what_was_compiled_for_the_other_target():
    """A measuring actor reporting other facts than the driver's: calls in flight are given up
    (their workers replaced), results dropped, and the queue is compiled again for its facts."""

    killed, made = [], []

    class Worker:
        def __init__(self, name):
            self.name = name
            self.compile = types.SimpleNamespace(remote=lambda task, facts: (self.name, task.key, facts["name"]))

    def new_worker(old):
        made.append(Worker(f"new{len(made)}"))
        return made[-1]

    fake_ray = types.SimpleNamespace(kill=lambda actor, no_restart: killed.append(actor.name))
    tasks = [_task("rms_norm", "gpu_row", problem={"rows": rows, "hidden": 64}) for rows in (1, 2, 3)]
    ahead = CompileAhead(fake_ray, [Worker("w0")], H100, 60, new_worker, source="driver")
    queue = [(task, 0.3 * i) for i, task in enumerate(tasks)]  # (task, when an actor reaches it)
    ahead.feed(queue)  # the driver's target: compiling from the start
    assert list(ahead.calls) == [("w0", tasks[0].key, H100["name"])]
    ahead.results[tasks[1].key] = {"ok": True, "kernels": []}
    h200 = dict(H100, name="NVIDIA H200")
    ahead.retarget(h200)
    assert killed == ["w0"] and ahead.calls == {} and ahead.results == {}
    ahead.feed(queue)
    assert list(ahead.calls) == [("new0", tasks[0].key, "NVIDIA H200")]
    summary = ahead.summary()
    assert summary["target"] == "actor" and summary["retargeted"] is True


@pytest.fixture
def fake_nvidia(monkeypatch):
    """Triton's NVIDIA driver module with its launcher and utilities builders replaced by
    recorders; ``per_signature`` set: a Triton that builds a launcher per signature (3.6)."""
    from triton.backends.nvidia import driver as nvidia

    built = []

    class Launcher:
        def __init__(self, src, metadata):
            built.append(("launcher", src, metadata))

    class Utilities:
        def __init__(self):
            built.append(("utilities",))

    monkeypatch.setattr(nvidia, "CudaLauncher", Launcher)
    monkeypatch.setattr(nvidia, "CudaUtils", Utilities)
    monkeypatch.setattr(nvidia, "make_launcher", lambda *a: "", raising=False)
    return types.SimpleNamespace(module=nvidia, built=built, monkeypatch=monkeypatch)


def _compiled_for(backend):
    metadata = types.SimpleNamespace(target=types.SimpleNamespace(backend=backend))
    return types.SimpleNamespace(src="the kernel's source", metadata=metadata, hash="h")


def test_a_cuda_kernels_launcher_is_built_where_triton_builds_one_per_signature(fake_nvidia):
    from kernels.launch import build_launcher

    kernel = _compiled_for("cuda")
    assert build_launcher(kernel) >= 0.0
    assert fake_nvidia.built == [("launcher", kernel.src, kernel.metadata)]
    assert build_launcher(_compiled_for("hip")) is None  # another backend: nothing built
    assert build_launcher(types.SimpleNamespace(hash="h")) is None  # no compiled kernel (a recorder's)
    fake_nvidia.monkeypatch.delattr(fake_nvidia.module, "make_launcher")  # Triton 3.7+: one shared launcher
    assert build_launcher(kernel) is None
    assert len(fake_nvidia.built) == 1


def test_compile_only_builds_launchers_when_asked_and_a_failed_build_leaves_the_compile(monkeypatch):
    """launchers=True: each compiled kernel's launcher is built, its time noted; a build that fails
    leaves the compile as it was (launcher_ms None). Without it nothing is built."""
    from triton.backends.compiler import GPUTarget

    from kernels.launch import compile_only
    from kernels.rms_norm import rms_norm
    from kernels.runtime import described_device

    monkeypatch.setattr(launch_module, "_warmup", lambda kernel, grid, args, kwargs: _compiled_for("cuda"))
    calls = []

    def build(kernel):
        calls.append(kernel)
        if len(calls) == 2:
            raise OSError("no C compiler")
        return 12.5

    monkeypatch.setattr(launch_module, "build_launcher", build)
    gpu = described_device("cuda", name=H100["name"], num_cores=H100["num_cores"])
    x = torch.randn(4, 64)
    for launchers, want in ((True, 12.5), (True, None), (False, None)):
        with compile_only(GPUTarget("cuda", 90, 32), gpu, launchers=launchers) as compiled:
            rms_norm(x, None, impl="gpu")
        assert [(c.name, c.hash, c.launcher_ms) for c in compiled] == [("_rms_norm_forward_kernel", "h", want)]
    assert len(calls) == 2


def test_compile_task_lists_each_kernels_launcher_time(recorded_compiles):
    """compile_task asks for launchers: a recorder's compile has none to build (None)."""
    result = compile_task(_task("rms_norm", "gpu_row", problem={"rows": 4, "hidden": 64}), H100)
    assert result["ok"] and [k["launcher_ms"] for k in result["kernels"]] == [None]


def test_host_utilities_are_built_for_cuda_only(fake_nvidia):
    from workbench.compiling.target import build_host_utilities

    assert build_host_utilities("npu") is None and fake_nvidia.built == []
    assert build_host_utilities("cuda") >= 0.0
    assert fake_nvidia.built == [("utilities",)]


def test_compile_workers_grow_with_the_gpus_and_leave_cpus_to_the_measuring_actors():
    from workbench.sweep.compile_ahead_driver import default_compile_workers

    assert [default_compile_workers(32, gpus) for gpus in (1, 2, 4)] == [8, 12, 14]
    assert default_compile_workers(128, 8) == 36 and default_compile_workers(8, 2) == 3
    assert default_compile_workers(2, 1) == 1  # always one


def test_an_embedded_ray_on_gpus_declares_the_cpus_its_sweep_places():
    """Ray starts one worker process per declared CPU, each importing the measuring stack: on a
    64-CPU host with 4 GPUs a sweep places 4 measuring actors, 20 compile workers and the cluster
    cache's store, so 26 CPUs are declared, not 64; never more than the host has, never fewer than
    the measuring actors hold."""
    from workbench.sweep.compile_ahead_driver import embedded_ray_cpus

    assert embedded_ray_cpus(64, 4, 1, 1, None) == 4 + 20 + 2
    assert embedded_ray_cpus(64, 1, 1, 1, None) == 1 + 8 + 2
    assert embedded_ray_cpus(64, 4, 1, 1, 0) == 6  # compile-ahead off
    assert embedded_ray_cpus(64, 4, 1, 8, 0) == 32  # the measuring actors' CPUs come first
    assert embedded_ray_cpus(16, 8, 1, 1, 30) == 16  # capped at the host
    assert embedded_ray_cpus(64, 4, 2, 1, 3) == 2 + 3 + 2  # two GPUs per slot


def test_the_executor_starts_its_embedded_ray_with_those_cpus(monkeypatch, tmp_path):
    """What :class:`RayExecutor` asks ``ray.init`` for: the sweep's CPUs on a GPU host (and the
    compile workers still sized by the host's own CPUs), Ray's own count where there is no GPU,
    and a ``num_cpus`` given by the caller as it is."""
    import os

    import workbench.sweep.ray_executor as rx

    # start() sets these for its workers: put back after the test
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.delenv(rx.LOG_DIR_ENV, raising=False)

    class FakeRay:
        def __init__(self):
            self.inits = []

        def is_initialized(self):
            return False

        def init(self, **kwargs):
            self.inits.append(kwargs)

        def remote(self, **options):
            return lambda cls: cls

    def started(gpus_seen: int, **options):
        fake = FakeRay()
        monkeypatch.setattr(rx, "import_ray", lambda: fake)
        monkeypatch.setattr(rx, "visible_gpus", lambda: gpus_seen)
        executor = rx.RayExecutor(cluster_cache=False, preload=False, log_dir=tmp_path, **options)
        executor._host_cpus = 64
        executor.start()
        return executor, fake.inits[0]

    executor, kwargs = started(4)
    assert kwargs["num_cpus"] == 26 and kwargs["address"] == "local"
    assert executor._compile_worker_count("cuda", {"GPU": 4, "CPU": 26}) == 20
    assert "num_cpus" not in started(0)[1]
    assert started(4, num_cpus=3)[1]["num_cpus"] == 3
    assert started(0, num_gpus=2)[1]["num_cpus"] == 2 + 12 + 2


def test_four_lanes_share_the_queue_and_an_idle_actor_takes_from_the_longest():
    """Any number of slots (the 4-GPU run of issue 27): 10 tasks in 4 contiguous lanes of 2, 3,
    2 and 3; each actor keeps to its own; the compile-ahead learns the fronts come first; an
    actor whose lane runs out takes the back of the longest other lane, and every task is taken once."""
    tasks = [_task("rms_norm", "gpu_row", problem={"rows": rows, "hidden": 64}) for rows in range(1, 11)]
    queue = Lanes(tasks, slots=4)
    assert [len(lane) for lane in queue.lanes] == [2, 3, 2, 3]
    assert [t.key for t, at in queue.reach_times() if at == 0] == [tasks[i].key for i in (0, 2, 5, 7)]
    actors = ["a", "b", "c", "d"]
    assert [queue.take(x, None) for x in actors] == [tasks[i] for i in (0, 2, 5, 7)]
    assert queue.take("a", None) == tasks[1]
    assert queue.take("a", None) == tasks[4]  # a's lane is empty: b's and d's hold 2, b's gives its last
    taken = [tasks[i] for i in (0, 2, 5, 7, 1, 4)]
    while queue:
        taken.append(queue.take(actors[len(taken) % 4], None))
    assert sorted(t.key for t in taken) == sorted(t.key for t in tasks)
    assert Lanes(tasks[:2], slots=4).lanes == [deque([tasks[0]]), deque([tasks[1]])]  # no empty lanes


def test_an_idle_actor_takes_from_the_lane_with_the_most_expected_seconds_not_the_most_tasks():
    """Finished tasks teach the lanes what each kind takes (family, variant, mode, dtype and
    problem): an actor whose lane ran out takes from the lane expected to take longest, a kind
    never seen is expected to take the median of all so far, and before any finished task the
    lanes are compared by count."""
    slow = [_task("rms_norm", "gpu_row", problem={"rows": 4096, "hidden": 64}, params={"num_warps": w}) for w in (1, 2)]
    fast = [_task("rms_norm", "gpu_row", problem={"rows": 1, "hidden": 64}, params={"num_warps": w}) for w in (1, 2, 4)]
    queue = Lanes([*fast[:1], *slow, *fast[1:]], slots=3)  # lanes: [fast0], [slow0, slow1], [fast1, fast2]
    assert [len(lane) for lane in queue.lanes] == [1, 2, 2]
    assert queue.take("a", None) == fast[0]
    assert queue.take("a", None) in (slow[1], fast[2])  # nothing measured: by count (a tie)
    queue = Lanes([*fast[:1], *slow, *fast[1:]], slots=3)
    queue.done(slow[0], 10.0)
    queue.done(fast[0], 1.0)
    assert queue.expected_s(slow[1]) == 10.0 and queue.expected_s(fast[2]) == 1.0
    other = _task("rms_norm", "gpu_row", problem={"rows": 7, "hidden": 64})
    assert queue.expected_s(other) == 5.5  # an unseen kind: the median of all so far
    assert queue.take("a", None) == fast[0]
    assert queue.take("b", None) == slow[0] and queue.take("c", None) == fast[1]
    queue.lanes[2].append(fast[0])  # c's lane now holds two fast tasks (2 s), b's one slow (10 s)
    assert queue.take("a", None) == slow[1]  # a's lane is empty: the heaviest lane's back


def test_a_nodes_compile_workers_are_fed_from_its_own_actors_lanes_then_from_the_free_ones():
    """On a cluster each node's compile workers compile what that node's measuring actors will
    reach: the lanes they hold, then the lanes no actor holds yet, never another node's lanes."""
    tasks = [_task("rms_norm", "gpu_row", problem={"rows": rows, "hidden": 64}) for rows in range(1, 9)]
    queue = Lanes(tasks, slots=4)  # lanes of 2: (0, 1), (2, 3), (4, 5), (6, 7)
    queue.take("a", None)  # a holds lane 0, b lane 1: a on node 1, b on node 2
    queue.take("b", None)

    def keys(actors=None):
        return [t.key for t, _at in queue.reach_times(actors)]

    assert keys({"a"}) == [tasks[i].key for i in (1, 4, 5, 6, 7)]
    assert keys({"b"}) == [tasks[i].key for i in (3, 4, 5, 6, 7)]
    assert keys(set()) == [tasks[i].key for i in (4, 5, 6, 7)]  # a node with no actor up yet
    assert len(keys()) == 6


def test_a_long_compile_starts_when_it_must_to_be_done_as_the_actors_reach_it():
    """The compile-ahead starts, of the queued tasks, those whose compile must begin soonest: the
    time the actors reach a task (scaled by REACH_SAFETY) less its expected compile
    (KernelSpec.compile_s: RMSNorm at hidden 16384 with 4 rows on 2 warps, 1024 elements a thread,
    expects seconds). So a long compile at the back of a lane starts before the quick ones just
    ahead of it, and a task an actor already took is not compiled ahead. Finished compiles
    correct a family's estimates: one that compiled in a quarter of its estimate has the
    family's other estimates quartered."""
    from workbench.sweep.compile_ahead_driver import expected_compile_s

    def rms(hidden, rows, warps):
        return _task("rms_norm", "gpu_multirow", problem={"rows": 64, "hidden": hidden},
                     params={"BLOCK_SIZE_M": rows, "num_warps": warps})  # fmt: skip

    quick = [rms(h, 1, 4) for h in (1024, 512, 2048, 4096, 256, 128, 64)]
    long_one, longer_one = rms(16384, 4, 2), rms(16384, 8, 2)
    assert expected_compile_s(longer_one) > expected_compile_s(long_one) > 2.0
    assert all(expected_compile_s(t) < 1.0 for t in quick)
    tasks = quick + [long_one, longer_one]

    class Worker:
        def __init__(self, name):
            self.name = name
            self.compile = types.SimpleNamespace(remote=lambda task, facts: (self.name, task.key))

    ahead = CompileAhead(None, [Worker(f"w{i}") for i in range(4)], H100, 60, None)
    lanes = Lanes(tasks, slots=2)  # lanes: quick[0:4], then quick[4:7] and the two long ones
    ahead.feed(lanes.reach_times())
    sent = [key for _worker, key in ahead.calls]
    assert sent[:2] == [longer_one.key, long_one.key]  # the back of lane 2, but they must start first
    assert sent[2:] == [quick[0].key, quick[4].key]  # then the lanes' fronts
    # a long task the actors took before any worker was free is not compiled ahead
    ahead2 = CompileAhead(None, [Worker(f"w{i}") for i in range(4)], H100, 60, None)
    lanes2 = Lanes(tasks, slots=1)
    lanes2.lanes[0].remove(longer_one)
    ahead2.attach(longer_one)
    ahead2.feed(lanes2.reach_times())
    sent2 = [key for _worker, key in ahead2.calls]
    assert longer_one.key not in sent2 and sent2[0] == long_one.key
    # learning: the longer one compiled in a quarter of its estimate
    ref = next(ref for ref, (key, _w, _t) in ahead.calls.items() if key == longer_one.key)
    ahead.ray = types.SimpleNamespace(get=lambda ref: {"ok": True, "ms": expected_compile_s(longer_one) * 250})
    ahead.collect(ref)
    assert ahead.expected_compile_s(long_one) == pytest.approx(expected_compile_s(long_one) / 4)


def test_an_actor_with_nothing_to_start_in_its_lane_takes_a_compiled_task_from_another_lane():
    """Lanes that end together: an actor whose own lane holds only tasks being compiled takes a
    compiled task from the back of another lane instead of waiting; with its own lane empty it
    takes a compiled task from any lane before an uncompiled one from the heaviest; it waits
    only when every task it could take is being compiled."""
    tasks = [_task("rms_norm", "gpu_row", problem={"rows": rows, "hidden": 64}) for rows in range(1, 9)]
    ahead = CompileAhead(ray=None, workers=[], facts=H100, limit_s=60, new_worker=None)
    queue = Lanes(tasks, slots=3)  # lanes: (0, 1), (2, 3, 4), (5, 6, 7)
    assert queue.take("a", None) == tasks[0]
    ahead.calls = {"r1": (tasks[1].key, None, 0.0), "r4": (tasks[4].key, None, 0.0)}  # being compiled
    ahead.results = {tasks[6].key: {"ok": True, "kernels": []}}
    taken = queue.take("a", ahead)  # its lane holds tasks[1], being compiled: lane 3's compiled one
    assert taken.key == tasks[6].key and taken.extra["compiled_ahead"]["ok"]
    assert queue.take("b", ahead).key == tasks[2].key  # b's own lane: its front, which no one compiles
    ahead.calls["r3"] = (tasks[3].key, None, 0.0)
    ahead.calls["r5"] = (tasks[5].key, None, 0.0)
    ahead.calls["r7"] = (tasks[7].key, None, 0.0)
    assert queue.take("b", ahead) is None  # everything it could take is being compiled: it waits
    ahead.results[tasks[4].key] = {"ok": True, "kernels": []}
    del ahead.calls["r4"]
    assert queue.take("b", ahead).key == tasks[4].key  # compiled now: out of its own lane
    del ahead.calls["r7"]
    queue.lanes[0].clear()  # a's lane empty, nothing compiled left
    assert queue.take("a", ahead).key == tasks[7].key  # the heaviest lane's back that no one compiles


def test_the_notebook_reports_count_what_first_calls_found_compiled_ahead():
    """ahead_counts over records: those with a note, whose first call found every kernel, whose
    first call missed one, and the processes that compiled them; ahead_text says so in a line."""
    from workbench.compiling.note import ahead_counts, ahead_text

    def record(hashes_launched, ahead_hashes, pid):
        body = {"compile_facts": {"kernels": [{"hash": h} for h in hashes_launched]}}
        kernels = [{"name": "k", "hash": h} for h in ahead_hashes]
        return note_on_record(body, {"ok": True, "kernels": kernels, "worker": {"host": "h", "pid": pid}})

    records = [
        record(["a"], ["a"], 1),
        record(["a", "b"], ["a"], 1),  # b was compiled again by the first call
        record([], ["c"], 2),  # no hashes read: neither found nor missed
        {"compile_facts": {"kernels": [{"hash": "d"}]}},  # not compiled ahead
    ]
    counts = ahead_counts(records)
    assert counts == {"ahead": 3, "found": 1, "missed": 1, "processes": 2}
    assert ahead_text(counts) == "3 by 2 processes: first call found 1, missed 1"
    assert ahead_text(ahead_counts(records[3:])) == "-"
