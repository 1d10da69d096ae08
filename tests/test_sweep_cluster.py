"""A Ray sweep on a cluster of two nodes that share no Triton cache (issue 44).

Two Ray nodes on this machine (``ray.cluster_utils.Cluster``), each started with a Triton cache
folder of its own (``TRITON_CACHE_DIR`` in its raylet's environment, which its workers inherit):
what one node's compile workers write, the other node's measuring actors cannot see, as on two
hosts without a shared disk. The compile-ahead compiles for an H100 (Triton's own compiler, no
GPU) while the interpreter measures; each measuring actor says, before its first call, whether
its configuration's kernels were in its own node's cache.
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
    """16 interpreter configurations of rms_norm (two problems, every tile that fits)."""
    return [
        norm_task("gpu_multirow", 8, hidden, {"BLOCK_SIZE_M": block_m, "num_warps": warps})
        for hidden in (64, 100)
        for block_m in (1, 2, 4, 8)
        for warps in (2, 4)
    ]


def test_each_node_compiles_ahead_into_its_own_cache_for_its_own_actors(two_nodes, tmp_path):
    """Every configuration is measured once; compile workers run on both nodes, each writing
    into its node's cache; every configuration measured after a compile-ahead was compiled on
    the measuring actor's node (its kernels were in that node's cache before the first call)."""
    from workbench.sweep.ray_executor import RayExecutor

    cluster, caches = two_nodes
    tasks = _tasks()
    executor = RayExecutor(address=cluster.address, compile_workers=1, compile_target=H100_FACTS)
    with opened(executor):
        # Every actor and compile worker up first (each compile worker's first compile lands in
        # its node's cache): on a loaded machine a node's compile worker could otherwise still be
        # importing when the interpreter has measured everything.
        executor.warm_up("cpu")
        for cache in caches:
            assert list(cache.rglob("_add_one_kernel.cubin")), f"no compile worker's warm-up wrote into {cache}"
        result = run_sweep(tasks, executor, Store(tmp_path / "r.sqlite"))
    assert sorted(r["sweep_key"] for r in result.records) == sorted(t.key for t in tasks)
    summary = executor.compile_ahead
    assert summary["nodes"] == 2 and summary["workers"] == 2, summary
    assert all(summary["compiled_by_node"].values()), summary  # each node compiled for its actors
    measured_on = {r["worker"]["node"] for r in result.records}
    assert len(measured_on) == 2, "both nodes measured"
    notes = [(r["compile_facts"].get("compiled_ahead"), r["worker"]["node"]) for r in result.records]
    ahead = [(note, node) for note, node in notes if note and note["ok"]]
    assert ahead and all(note["node"] == node for note, node in ahead), "compiled on the measuring node"
    assert all(note["found_on_node"] for note, _node in ahead), "in its cache before the first call"
    assert summary["measured_after"] == len([note for note, _node in notes if note])
