"""A Ray sweep on a cluster of two nodes that share no disk (issues 44 and 60).

Two Ray nodes on this machine (``ray.cluster_utils.Cluster``), each started with a Triton cache
folder of its own (``TRITON_CACHE_DIR`` in its raylet's environment, which its workers inherit):
what one node's processes write to disk, the other node's cannot see, as on two hosts without a
shared disk. The compile-ahead compiles real H100 kernels (Triton's own compiler and its bundled
ptxas, no GPU) while the interpreter measures. With the cluster cache
(workbench/sweep/cluster_cache.py) each kernel is compiled once in the whole cluster: the other
node fetches it from the store, and the records say so.
"""

from __future__ import annotations

import os

import pytest
from testkit import H100_FACTS, HAVE_PTXAS, norm_task

from workbench.children import import_path
from workbench.store import Store
from workbench.sweep.engine import opened, run_sweep

ray = pytest.importorskip("ray", reason="the distributed extra (ray) is not installed")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.skipif(not HAVE_PTXAS, reason="no ptxas (Triton's NVIDIA backend) to compile with")


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A head node and a second node of 2 CPUs each, each with its own Triton cache folder."""
    if ray.is_initialized():  # another module's Ray instance: this one must be the process's
        ray.shutdown()
    caches = [tmp_path_factory.mktemp(f"node{i}-triton") for i in range(2)]
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(import_path())  # the nodes' workers import the checkout
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "env_vars": {"TRITON_CACHE_DIR": str(caches[0])}}
    )
    cluster.add_node(num_cpus=2, env_vars={"TRITON_CACHE_DIR": str(caches[1])})
    cluster.wait_for_nodes()
    try:
        yield cluster, caches
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _tasks():
    """4 interpreter configurations of rms_norm that share one kernel: four problems whose rows (8,
    24, 40 and 56, none a multiple of 16) Triton specializes alike, two in each measuring actor's
    lane (a lane is a contiguous share of the queue). The kernel is compiled on one node and both
    nodes measure it, so it must cross to the other node whichever node compiles it."""
    return [norm_task("gpu_multirow", rows, 100, {"BLOCK_SIZE_M": 1}) for rows in (8, 24, 40, 56)]


def test_a_two_node_sweep_compiles_each_kernel_once_in_the_cluster(two_nodes, tmp_path):
    """Every configuration is measured once, on both nodes; compile workers on both nodes compile
    into the one cluster cache, and each distinct kernel is compiled once in the cluster (the
    store's count, and the count from the records); every record had its kernels in its own
    node's cache before the first call, and the node that did not compile the kernel came to hold
    it through the store.

    Why as many compile workers as configurations: the interpreter measures a configuration in
    less time than Triton compiles an H100 kernel (2.3-2.5 s on a 2-core machine), so with one
    worker a node the actors took most configurations before a compile-ahead held them. Why one
    kernel: with two (block sizes 1 and 2) an actor that had nothing to start in its lane took a
    compiled task from the other lane, and in one CI run each node measured only the kernel it had
    compiled, so nothing crossed; one kernel measured on both nodes crosses whatever the order.
    """
    from workbench.compiling.note import compiles_per_kernel
    from workbench.sweep.ray_executor import RayExecutor

    cluster, caches = two_nodes
    tasks = _tasks()
    executor = RayExecutor(address=cluster.address, compile_workers=2, compile_target=H100_FACTS, log_dir=tmp_path)
    with opened(executor):
        # Every actor and compile worker up first (each compile worker's first compile lands in
        # its node's cache, compiled on one node and fetched by the other).
        executor.warm_up("cpu")
        for cache in caches:
            assert list(cache.rglob("_add_one_kernel.cubin")), f"no compile worker's warm-up wrote into {cache}"
        result = run_sweep(tasks, executor, Store(tmp_path / "r.sqlite"))
    assert sorted(r["sweep_key"] for r in result.records) == sorted(t.key for t in tasks)
    summary = executor.compile_ahead
    assert summary["nodes"] == 1 and summary["workers"] == 4, summary  # one shared compile-ahead
    shared = summary["cluster_cache"]
    # The warm-up's kernel and the norm's kernel, each compiled once.
    assert shared["compiled_more_than_once"] == [] and shared["compiles"] == shared["kernels"] >= 2, shared
    counted = compiles_per_kernel(result.records)
    assert counted and all(entry["compiles"] == 1 for entry in counted.values()), counted
    assert len(counted) == 1, f"the four configurations share one kernel: {counted}"
    measured_on = {r["worker"]["node"] for r in result.records}
    assert len(measured_on) == 2, "both nodes measured"
    notes = [r["compile_facts"].get("compiled_ahead") for r in result.records]
    assert all(note and note["ok"] for note in notes), notes  # each held by a compile worker from the start
    assert all(note["found_on_node"] for note in notes), "in its node's cache before the first call"
    assert summary["measured_after"] == len(notes)

    # Where each kernel was compiled, and how each node that did not compile it came to hold it:
    # its compile worker fetched it ("cluster cache", or "waited" for the compile under way), or
    # the measuring actor copied it from the store before its first call ("cluster cache").
    compiled_on = {h: n["node"] for n in notes for h, way in n["how"].items() if way["how"] == "compiled"}
    assert sorted(compiled_on) == sorted(counted), (compiled_on, counted)
    fetched_ways = ("cluster cache", "waited")
    through_store = {(n["node"], h) for n in notes for h, way in n["how"].items() if way["how"] in fetched_ways}
    through_store |= {
        (r["worker"]["node"], h)
        for r, n in zip(result.records, notes)
        for h, way in (n.get("fetched") or {}).items()
        if way == "cluster cache"
    }
    crossed = {(r["worker"]["node"], h) for r, n in zip(result.records, notes) for h in n["how"]}
    crossed = {(node, h) for node, h in crossed if node != compiled_on[h]}
    assert crossed, "a kernel compiled on one node was measured on the other"
    assert crossed <= through_store, (crossed, through_store)
    for cache in caches:  # each node's own disk holds what its actors measured
        assert list(cache.rglob("_rms_norm_forward_kernel.cubin")), cache
