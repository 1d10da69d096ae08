"""The Ray sweep's cluster cache (workbench/sweep/cluster_cache.py, issue 60): one Triton cache
that every node reads and writes, each kernel compiled once in the cluster.

The store's rules are tested on the class itself (its async methods, no Ray); then real H100
kernels (Triton's own compiler and its bundled ptxas, no GPU) compiled by Ray actors whose
Triton cache folders are apart, as on nodes that share no disk.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from testkit import H100_FACTS, HAVE_PTXAS, norm_task

from workbench.sweep.cluster_cache import KernelStore

ray = pytest.importorskip("ray", reason="the distributed extra (ray) is not installed")


def _run(coro):
    return asyncio.run(coro)


def test_the_first_to_miss_a_kernel_compiles_it_and_the_others_wait_for_its_files():
    """A miss gives the first owner the lease; a second owner missing it meanwhile waits and then
    gets the files (with how long it waited); the compile is counted once. A fetch that does not
    claim gets "missing" at once."""

    async def scenario():
        store = KernelStore()
        assert await store.fetch_group("K", "k.json", "a") == {"compile": True}
        assert await store.fetch_group("K", "k.json", "a") == {"compile": True}  # its own lease
        assert await store.fetch_group("K", "k.json", "c", 0.0, False) == {"missing": True}
        waiting = asyncio.ensure_future(store.fetch_group("K", "k.json", "b", 5.0))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await store.put_group("K", "k.json", {"k.json": b"{}", "k.cubin": b"\x7fELF"}, "a", "k")
        reply = await waiting
        assert reply["files"] == {"k.json": b"{}", "k.cubin": b"\x7fELF"} and reply["waited_s"] >= 0.04
        stats = await store.stats()
        assert stats["kernels"] == 1 and stats["compiles"] == 1 and stats["compiled_more_than_once"] == []
        assert stats["waited"] == 1 and stats["fetched"] == 1

    _run(scenario())


def test_a_lease_released_without_a_kernel_passes_to_a_waiter_and_a_stale_one_is_given_up():
    """The lease holder's call ended (or it was killed) without sending the kernel: its lease is
    released and one waiter compiles instead. A lease held past the wait limit is given up on:
    the waiter compiles too, and a second compile of the kernel is counted as such."""

    async def scenario():
        store = KernelStore()
        await store.fetch_group("K", "k.json", "a")
        waiting = asyncio.ensure_future(store.fetch_group("K", "k.json", "b", 5.0))
        await asyncio.sleep(0.05)
        assert await store.release("a") == 1
        assert await waiting == {"compile": True}
        assert await store.fetch_group("K", "k.json", "c", 0.05) == {"compile": True, "gave_up": True}
        await store.put_group("K", "k.json", {"k.json": b"1"}, "b")
        await store.put_group("K", "k.json", {"k.json": b"1"}, "c")
        stats = await store.stats()
        assert stats["compiles"] == 2 and stats["compiled_more_than_once"][0]["by"] == ["b", "c"]
        assert stats["gave_up"] == 1

    _run(scenario())


@pytest.mark.skipif(not HAVE_PTXAS, reason="no ptxas (Triton's NVIDIA backend) to compile with")
def test_without_a_store_the_manager_is_the_node_folder_alone(tmp_path, monkeypatch):
    """The cluster cache's manager with no store to reach (no Ray here) compiles into and finds in
    the node's folder, as Triton's own does."""
    from workbench.sweep.cluster_cache import MANAGER, STORE_ENV, how_found
    from workbench.sweep.compile_ahead import compile_task

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_CACHE_MANAGER", MANAGER)
    monkeypatch.delenv(STORE_ENV, raising=False)
    result = compile_task(norm_task("gpu_row", 4, 200, {"BLOCK_SIZE": 256}), H100_FACTS)
    assert result["ok"], result["error"]
    assert list(tmp_path.rglob("_rms_norm_forward_kernel.cubin"))
    assert how_found(result["kernels"][0]["hash"]) is None  # no store: nothing noted


@pytest.fixture
def ray_two_cpus(shared_ray):
    """conftest's shared Ray instance of 2 CPUs, and a list for the actors the test starts,
    killed after it (the instance outlives the test: they would hold its CPUs and the store's name)."""
    from workbench.sweep.actors import kill_actor

    started: list = []
    yield shared_ray, started
    for actor in started:
        kill_actor(shared_ray, actor)


@pytest.mark.skipif(not HAVE_PTXAS, reason="no ptxas (Triton's NVIDIA backend) to compile with")
def test_two_nodes_caches_apart_compile_a_kernel_once_and_a_third_fetches_it(ray_two_cpus, tmp_path):
    """Two compile workers whose Triton caches are apart compile the same configuration at once:
    one compiles its kernel, the other waits for that compile and writes the files into its own
    folder; a third configuration with the same kernel (rows 24 against 8: neither a multiple
    of 16) is not compiled again. A measuring actor with a folder of its own copies the kernels
    from the store into it before its first call. Each worker's output goes to its log file."""
    from workbench.compiling.cache import cache_folder
    from workbench.compiling.note import compiles_per_kernel
    from workbench.sweep.actors import CompileWorker, DeviceWorker
    from workbench.sweep.cluster_cache import start_store

    ray, started = ray_two_cpus
    store = start_store(ray, "test-kernel-store")
    started.append(store)
    roots = [tmp_path / f"node{i}" for i in range(3)]
    logs = tmp_path / "logs"
    compiler = ray.remote(max_restarts=0)(CompileWorker)
    workers = [
        compiler.options(num_cpus=0).remote(str(root), None, "test-kernel-store", str(logs)) for root in roots[:2]
    ]
    started += workers
    task = norm_task("gpu_multirow", 8, 100, {"BLOCK_SIZE_M": 2, "num_warps": 2})
    results = ray.get([w.compile.remote(task, H100_FACTS) for w in workers], timeout=600)
    assert all(r["ok"] for r in results), [r["error"] for r in results]
    hows = [k["how"] for r in results for k in r["kernels"]]
    assert hows.count("compiled") == 1 and len(hows) == 2 and set(hows) - {"compiled"} <= {"waited", "cluster cache"}
    digest = results[0]["kernels"][0]["hash"]
    for root in roots[:2]:
        assert list(root.rglob(f"{cache_folder(digest)}/_rms_norm_forward_kernel.cubin")), root
    same_kernel = norm_task("gpu_multirow", 24, 100, {"BLOCK_SIZE_M": 2, "num_warps": 2})
    again = ray.get(workers[1].compile.remote(same_kernel, H100_FACTS), timeout=600)
    assert again["kernels"][0]["hash"] == digest
    stats = ray.get(store.stats.remote())
    assert stats["kernels"] == stats["compiles"] == 1, stats

    measuring = ray.remote(max_restarts=0)(DeviceWorker).options(num_cpus=1).remote()
    started.append(measuring)
    info = ray.get(measuring.ready.remote(str(roots[2]), "cpu", None, "test-kernel-store", str(logs)), timeout=600)
    assert info["log"] and info["log"].startswith(str(logs))
    compiled = next(r for r in results if r["kernels"][0]["how"] == "compiled")
    ahead = dataclasses.replace(task, extra={**task.extra, "compiled_ahead": compiled})
    record = [ray.get(ref) for ref in measuring.run.options(num_returns="streaming").remote(ahead)][-1]
    note = record["compile_facts"]["compiled_ahead"]
    assert note["fetched"] == {digest: "cluster cache"} and note["found_on_node"] is True
    assert list(roots[2].rglob(f"{cache_folder(digest)}/_rms_norm_forward_kernel.cubin"))
    assert record["passed"], record["error"]
    assert compiles_per_kernel([record])[digest]["compiles"] == 1  # counted from the record's note
    assert sorted(p.name.split("-")[0] for p in logs.iterdir()) == ["compile", "compile", "measuring"]
