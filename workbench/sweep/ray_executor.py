"""The Ray executor: one Ray actor per device slot, each configuration a call on a free actor.

:class:`RayExecutor` starts the actors, hands them configurations and files what comes back; the
parts it is built from have modules of their own: the actors (:mod:`workbench.sweep.actors`),
the queue's lanes (:mod:`workbench.sweep.lanes`), a run's compile-ahead
(:mod:`workbench.sweep.compile_ahead_driver`) and its timeline (:mod:`workbench.sweep.timeline`).

- No address: an embedded local Ray instance (this machine's GPUs, or ``num_cpus`` CPU workers
  for the interpreter), shut down at the end. With ``address`` (``"auto"``, ``"ray://…"``,
  ``"HOST:PORT"``): join that cluster; its nodes must have the workbench and the families
  installed (the same checkout or package).
- Why actors, not tasks: a worker process is bound to the GPU it first touched (its CUDA
  context), while Ray leases a reused task worker whichever GPU is free and only resets
  ``CUDA_VISIBLE_DEVICES`` per task. On the CPU with two declared GPUs, 80 plain tasks sent as
  slots freed up went to two worker processes that were each handed both GPU ids (44 and 36
  tasks): on real GPUs, two configurations timed at once on one device. Streaming tasks, as this
  executor sent them before, kept their ids in three such trials, but Ray promises neither. An
  actor asks for ``gpus_per_task`` GPUs on cuda (one CPU in the interpreter) once, when it
  starts, and keeps them for its life; at most as many actors run as the cluster has slots, and
  each runs one configuration at a time. Actors live from the first run until
  :meth:`RayExecutor.close` (a tune's rounds reuse them: imports and CUDA start once).
- A run starts every actor it needs at once (no more than it has configurations), each with a
  warm-up call (:meth:`workbench.sweep.actors.DeviceWorker.ready`: imports, CUDA start, the
  device's facts, the once-per-process parts of a first measurement, and Triton's first
  compile), and hands an actor its first configuration only when that call returns: chosen then,
  not when the actor was asked for, so it can be one compiled ahead meanwhile. An actor whose
  warm-up fails is replaced, and the configuration it would have taken is recorded with why (as
  if the failure had happened inside its call).
  :meth:`RayExecutor.warm_up` starts them (and the compile workers) before any run instead: a
  session that sweeps several times pays their start once, outside its sweeps.
- :attr:`RayExecutor.timeline`: when each actor was asked for, started its process, finished each
  step of its warm-up, and when each configuration was given, started and recorded, in the last
  run or warm-up (:class:`workbench.sweep.timeline.Timeline`): where a sweep's time went.
- A call tells the driver when its configuration starts (the first item of a streaming call):
  its timeout counts from there. The workers of a host share one Triton cache folder below
  :func:`triton_cache_root` (:func:`workbench.sweep.tasks.use_host_triton_cache`); on a cluster,
  below each node's own.
- Compile-ahead (``compile_workers``): CPU-side actors (:class:`workbench.sweep.actors.CompileWorker`)
  compile queued configurations for the measuring device into the same Triton cache while the
  GPUs measure, kernels and host launchers both: the measuring actors load them instead of
  compiling (:class:`workbench.sweep.compile_ahead_driver.CompileAhead` says which configuration a
  free measuring actor takes). Which device to compile for: ``compile_target``, else what the
  driver knows before any measuring actor is up
  (:func:`workbench.compiling.target.driver_target`: ``WORKBENCH_COMPILE_TARGET``, or the
  driver's own GPUs with an embedded Ray), else the first measuring actor's. The first measuring
  actor to report its device checks it: where its facts differ, the compile-ahead switches to
  them (what was compiled for the other target would miss its cache). Once the target is known
  each compile worker pays Triton's first compile (:meth:`workbench.sweep.actors.CompileWorker.warm_up`).
  On a cluster every node that measures gets compile workers of its own (``compile_workers``
  per node; on cuda by default :func:`workbench.sweep.compile_ahead_driver.default_compile_workers`
  of the node's CPUs and GPUs), held on that node and writing into its own Triton cache, below
  the folder its Ray node's environment names (:data:`workbench.sweep.tasks.NODE_CACHE`): nodes
  need no shared disk. With the cluster cache (``cluster_cache``, on by default:
  :mod:`workbench.sweep.cluster_cache`) every process also reads and writes one store of the
  kernels compiled anywhere in the cluster, each compiled once, and one compile-ahead over every
  node's workers compiles each configuration once; without it each node's workers are fed what
  that node's actors will reach, and an actor takes what its own node compiled
  (:class:`workbench.sweep.compile_ahead_driver.CompileAheadByNode`).
- CPUs (``place_cpus``, an embedded Ray on GPUs): each measuring actor moves onto physical cores
  of its own, and the compile workers onto the rest (:mod:`workbench.sweep.cpus`), so the
  compile-ahead's work does not slow the host side of a measurement (host and call times).
- Lanes (:class:`workbench.sweep.lanes.Lanes`): each measuring actor works through a contiguous
  share of the queue of its own, so it makes the inputs of only its share's problems; one that
  has nothing it can start takes a compiled task from the back of another share, heaviest first
  (each kind of configuration is expected to take what its finished ones took).
- The start: an embedded Ray's worker processes import the measuring stack as they start
  (``preload``: :mod:`workbench.sweep.preload`), before the actors are put in them.
  :func:`shared` keeps one started executor for a whole process (a notebook's sessions).
- Output: every worker's standard output and error go to a file in ``log_dir``
  (:mod:`workbench.sweep.worker_log`), never to the console; a failed configuration's part of
  its worker's log is kept in ``log_dir/failed/`` and named by its record (``log``).
- No retries: a configuration is never retried blindly. A call past ``timeout_s`` is recorded as
  timed out and its actor killed (a new one takes its place); an actor that dies (``os._exit``, a
  signal, a device abort, out of memory) is recorded as ``worker died`` with Ray's reason, and
  replaced; the sweep goes on.
- If the Ray instance is already initialised in this process (a notebook, a test fixture) it is
  used as it is and left running; the executor's actors are killed at :meth:`close`.

Why one module over 600 lines: :class:`RayExecutor` is one loop over one run's state (the
actors, their lanes, what is compiling where, the cluster cache, the timeline), and every
decision in it (which task a free actor takes, when a compile starts, what a lost actor's task
becomes) reads and changes that state; the pieces that do not share it have modules of their
own (above).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import tempfile
import threading
import time
import uuid
from collections import deque
from pathlib import Path

from workbench.children import import_path
from workbench.compiling.target import driver_target
from workbench.sweep.actors import STARTED_KEY, CompileWorker, DeviceWorker, kill_actor
from workbench.sweep.cluster_cache import owner_of, start_store
from workbench.sweep.compile_ahead_driver import (
    COMPILE_TIMEOUT_S,
    SHARED,
    CompileAhead,
    CompileAheadByNode,
    as_queued,
    default_compile_workers,
    embedded_ray_cpus,
)
from workbench.sweep.executors import Executor
from workbench.sweep.lanes import Lanes
from workbench.sweep.tasks import ERROR_CRASH, ERROR_TIMEOUT, NODE_CACHE, error_record, triton_cache_root
from workbench.sweep.timeline import Timeline

# Ray's system configuration for an embedded Ray: each worker process imports the measuring stack
# as it starts (workbench/sweep/preload.py), before an actor is put in it
PRELOAD_CONFIG = {"preload_python_modules": ["workbench.sweep.preload"]}
LOG_DIR_ENV = "WORKBENCH_WORKER_LOG_DIR"  # read by the preload in each worker (the embedded Ray's)

MISSING_RAY = (
    "--executor ray needs Ray, which is not installed: pip install 'kernel-workbench[distributed]' (or 'ray==2.60.0')"
)


_SHARED: dict = {}  # options -> the process's shared executor (shared())
_SHARED_LOCK = threading.Lock()


def shared(options: dict | None = None, warm_device: str | None = None, log_dir=None) -> RayExecutor:
    """The process's Ray executor for ``options`` (:class:`RayExecutor`'s keywords), started on
    first use and kept for every later sweep of the process: a notebook's sessions and sweeps
    share one Ray instance, its measuring actors and compile workers, which start once. Asked for
    with other options, the one kept before is closed first (one Ray instance per process: two
    executors' actors would wait for each other's GPUs). ``warm_device``: its actors start now,
    in the background (:meth:`RayExecutor.warm_up_in_background`); the first sweep waits for
    what is left of that. ``log_dir``: its workers' log folder, where it is made. Closed when the
    process exits."""
    key = tuple(sorted((options or {}).items()))
    with _SHARED_LOCK:
        executor = _SHARED.get(key)
        if executor is None:
            for other in list(_SHARED):
                _SHARED.pop(other).close()
            executor = RayExecutor(**{"log_dir": log_dir, **dict(options or {})})
            executor.start()
            executor._started = True  # the engine leaves it running after each sweep
            _SHARED[key] = executor
            if warm_device is not None:
                executor.warm_up_in_background(warm_device)
        return executor


def close_shared() -> None:
    """Close the process's shared executors (at exit)."""
    with _SHARED_LOCK:
        for key in list(_SHARED):
            executor = _SHARED.pop(key)
            executor._started = False
            executor.close()


atexit.register(close_shared)


def import_ray():
    """``ray``, or ValueError with the one line that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ValueError(MISSING_RAY) from None
    return ray


def visible_gpus() -> int:
    """The NVIDIA GPUs this process sees (what an embedded Ray gives its actors), 0 where the
    device layer finds no cuda (:func:`kernels.runtime.kinds_present`). It initialises CUDA here
    without making a context, as the compile-ahead's
    :func:`workbench.compiling.target.visible_device_facts` does in the same driver."""
    import torch

    from kernels.runtime import kinds_present

    return torch.cuda.device_count() if "cuda" in kinds_present() and not torch.version.hip else 0


def _measuring_resource(device: str) -> str:
    """The Ray resource a measuring actor on ``device`` holds: CPU (the interpreter), NPU or GPU."""
    return {"cpu": "CPU", "npu": "NPU"}.get(device, "GPU")


@dataclasses.dataclass
class _Pool:
    """The actors holding one kind of resources (``options``): all of them, those still warming
    up (by their warm-up call), and the idle ones."""

    options: dict
    live: list = dataclasses.field(default_factory=list)
    starting: dict = dataclasses.field(default_factory=dict)
    idle: deque = dataclasses.field(default_factory=deque)


class RayExecutor(Executor):
    name = "ray"
    compiles_ahead = True  # its own compile workers, per node (compile_ahead_driver)

    def __init__(
        self,
        address: str | None = None,
        *,
        gpus_per_task: float = 1,
        cpus_per_task: float = 1,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        timeout_s: float | None = None,
        poll_s: float = 0.2,
        compile_workers: int | None = None,
        compile_target: dict | None = None,
        place_cpus: bool = True,
        cluster_cache: bool = True,
        log_dir: str | os.PathLike | None = None,
        preload: bool = True,
    ):
        """``compile_workers``: compile-ahead actors (0: none; None: :func:`default_compile_workers`
        on cuda with an embedded Ray, none otherwise). ``compile_target``: the device facts to
        compile for (:func:`workbench.compiling.target.device_facts`); None: what the driver
        knows (:func:`workbench.compiling.target.driver_target`), else the first measuring
        actor's. ``place_cpus``: on a host's own GPUs (an embedded Ray), each measuring actor
        runs on physical cores of its own and the compile workers on the others
        (:class:`workbench.sweep.cpus.Placement`). ``cluster_cache``: every worker reads and
        writes a Triton cache shared by the whole cluster (:mod:`workbench.sweep.cluster_cache`),
        so each kernel is compiled once in it. ``log_dir``: where the workers' output goes (None:
        a new temporary folder; ``run_sweep`` gives the out folder's ``logs``). ``preload``: an
        embedded Ray's worker processes import the measuring stack as they start
        (:mod:`workbench.sweep.preload`)."""
        self.ray = import_ray()
        self.address = address
        self.gpus_per_task = gpus_per_task
        self.cpus_per_task = cpus_per_task
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._owns = False
        self._actor_class = None
        self._pools: dict[str, _Pool] = {}  # actors by the resources they hold
        self.slots = 1
        self.drained_s: float | None = None  # seconds into the last run() when its last task was sent
        self.compile_workers = compile_workers
        self.compile_target = compile_target
        self._target: dict | None = None  # the facts compiled for when none were given, once known
        self._target_source = "actor"  # where they came from: "driver", "environment" or "actor"
        self._target_checked = False  # a measuring actor reported its facts (and they were taken)
        self._compile_class = None
        self._compilers: dict = {}  # node id -> its compile-ahead actors, kept from run to run
        self._compiler_node: dict = {}  # compile worker -> its node
        self._actor_nodes: dict = {}  # measuring actor -> the node it runs on (from its warm-up)
        self._warmed_compilers: list = []  # those asked to pay their first compile (warm_up)
        self.compile_ahead: dict = {}  # the last run's compile-ahead: workers, compiled, failed, busy_s
        self.timeline: dict = {}  # the last run's (and its warm-up's) events: see Timeline
        self.place_cpus = place_cpus
        self.placement = None  # the CPUs of the measuring slots and compile workers, once planned
        self._clock = Timeline()
        self.cluster_cache = cluster_cache
        self.log_dir = None if log_dir is None else str(Path(log_dir).resolve())
        self.preload = preload
        self._host_cpus = os.cpu_count() or 1  # an embedded Ray declares fewer (_embedded_cpus)
        self._store = None  # the cluster cache's actor, while started
        self._store_name: str | None = None
        self._failures = 0  # failed configurations whose log was kept
        self._warming: threading.Thread | None = None  # a warm-up begun in the background
        self._log_env: str | None = None  # LOG_DIR_ENV before start() set it (an embedded Ray)

    # --- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        ray = self.ray
        if self.log_dir is None:
            self.log_dir = tempfile.mkdtemp(prefix="workbench-ray-logs-")
        Path(self.log_dir).mkdir(parents=True, exist_ok=True)
        if not ray.is_initialized():
            kwargs = dict(include_dashboard=False, ignore_reinit_error=True, configure_logging=False)
            if self.address:
                kwargs["address"] = self.address
            else:
                # A Ray instance of its own, even where another one runs on this machine (Ray
                # would join that one, found in /tmp/ray, and refuse our num_cpus / num_gpus).
                kwargs["address"] = "local"
                # Workers start from the raylet this process starts: they inherit this path, and
                # the log folder their preload sends their output to.
                os.environ["PYTHONPATH"] = os.pathsep.join(import_path())
                self._log_env = os.environ.get(LOG_DIR_ENV)  # put back at close: a later Ray's workers log elsewhere
                os.environ[LOG_DIR_ENV] = self.log_dir
                if self.preload:
                    kwargs["_system_config"] = dict(PRELOAD_CONFIG)
                num_cpus = self.num_cpus if self.num_cpus is not None else self._embedded_cpus()
                if num_cpus is not None:
                    kwargs["num_cpus"] = num_cpus
                if self.num_gpus is not None:
                    kwargs["num_gpus"] = self.num_gpus
            for attempt in range(3):
                try:
                    ray.init(**kwargs)
                    break
                except ConnectionError as exc:
                    raise ValueError(f"cannot join the Ray cluster at {self.address!r}: {exc}") from None
                except Exception as exc:  # noqa: BLE001
                    # On a loaded machine the node's agents can miss the raylet's start-up wait
                    # (it gives up after ~15 s: "node timed out during startup"); start again.
                    if self.address or attempt == 2 or "timed out during startup" not in str(exc):
                        raise
                    ray.shutdown()
            self._owns = True
        self._actor_class = ray.remote(max_restarts=0, max_task_retries=0)(DeviceWorker)
        self._compile_class = ray.remote(max_restarts=0, max_task_retries=0)(CompileWorker)
        if self.cluster_cache and self._store is None:
            self._store_name = f"workbench-kernels-{uuid.uuid4().hex[:12]}"
            self._store = start_store(ray, self._store_name)

    def close(self) -> None:
        self._await_warm_up()
        if self.ray.is_initialized():
            self._store, store = None, self._store  # no leases to release: the store ends too
            for pool in self._pools.values():
                for actor in list(pool.live):
                    self._retire(pool, actor)
            for actor in self._all_compilers():
                kill_actor(self.ray, actor)
            if store is not None:
                kill_actor(self.ray, store)
        self._store, self._store_name = None, None
        self._compiler_node.clear()
        self._compilers, self._warmed_compilers = {}, []
        self._actor_nodes.clear()
        self._pools.clear()
        if self._owns and self.ray.is_initialized():
            self.ray.shutdown()
        if self._owns and not self.address:
            if self._log_env is None:
                os.environ.pop(LOG_DIR_ENV, None)
            else:
                os.environ[LOG_DIR_ENV] = self._log_env
        self._owns = False

    def describe(self) -> str:
        where = self.address or "embedded local Ray"
        if self._actor_class is None:  # not started: its slots are not known yet
            return f"ray ({where})"
        return f"ray ({where}, {self.slots} slot(s))"

    def capacity(self, device: str) -> int:
        return self._slots(device)

    def warm_up_in_background(self, device: str) -> None:
        """:meth:`warm_up` in a thread of its own: the caller goes on (a notebook's next cells),
        and the next :meth:`run` or :meth:`warm_up` waits for it first."""
        self._await_warm_up()
        self._warming = threading.Thread(
            target=self._warm_quietly, args=(device,), name="workbench-ray-warm-up", daemon=True
        )
        self._warming.start()

    def _warm_quietly(self, device: str) -> None:
        try:
            self.warm_up(device)
        except Exception:  # noqa: BLE001 - the run that needs the actors starts them and says what fails
            pass

    def _await_warm_up(self) -> None:
        thread = self._warming
        if thread is None or thread is threading.current_thread():
            return
        thread.join()
        self._warming = None

    def warm_up(self, device: str, wanted: int | None = None) -> float:
        """Start the measuring actors for ``device`` now (as many as it has slots, or ``wanted``)
        and, on cuda, the compile workers; return when every measuring actor has finished its
        warm-up (:meth:`DeviceWorker.ready`) and every compile worker its first compile
        (:meth:`CompileWorker.warm_up`), in seconds. Later runs hand them configurations at
        once: a session that sweeps several times (a tune's rounds, a notebook) pays the start
        once, here, not in its first sweep. An actor whose warm-up fails is replaced by the run
        that needs it, which records why."""
        self._await_warm_up()
        begun = time.monotonic()
        self._clock.open(warm=True)
        self.slots = self._slots(device)
        self._plan_placement(device)
        pool = self._pool(device)
        root = self._cache_root()
        self._grow(pool, wanted if wanted is not None else self.slots, root, device)
        self._start_compilers(device, root)
        while pool.starting:
            ready, _ = self.ray.wait(list(pool.starting), num_returns=1)
            for ref in ready:
                self._warmed_up(pool, ref, None)
        # The target is known now (a measuring actor's, at the latest): the compile workers pay
        # their first compile here too, not in the first sweep's first configurations.
        warming = self._warm_compilers(self._known_target(device)[0])
        if warming:
            self.ray.wait(warming, num_returns=len(warming))
        self.timeline = self._clock.close()
        return time.monotonic() - begun

    def _plan_placement(self, device: str) -> None:
        """Plan the CPUs of the measuring slots and compile workers once, for this host's own
        devices (an embedded Ray; not the interpreter, whose workers measure on CPUs)."""
        if self.placement is not None or not self.place_cpus or self.address or device == "cpu":
            return
        from workbench.sweep.cpus import Placement, physical_cores

        self.placement = Placement.plan(self.slots, physical_cores())

    def _pool(self, device: str) -> _Pool:
        opts = self._options(device)
        return self._pools.setdefault(repr(sorted(opts.items())), _Pool(opts))

    def _options(self, device: str) -> dict:
        if device == "cpu":
            return {"num_cpus": self.cpus_per_task, "num_gpus": 0}
        if device == "npu":
            return {"num_cpus": self.cpus_per_task, "resources": {"NPU": self.gpus_per_task}}
        return {"num_cpus": self.cpus_per_task, "num_gpus": self.gpus_per_task}

    def _slots(self, device: str) -> int:
        res = self.ray.cluster_resources()
        if device == "cpu":
            n = int(res.get("CPU", 0) // max(self.cpus_per_task, 1e-9))
        else:
            name = _measuring_resource(device)
            have = res.get(name, 0)
            if not have:
                raise ValueError(
                    f"the Ray cluster has no {name} (resources: {', '.join(f'{k}={v:g}' for k, v in res.items() if '.' not in k and ':' not in k)}); "
                    "use --device cpu for the interpreter"
                )
            n = int(min(have // self.gpus_per_task, res.get("CPU", 0) // max(self.cpus_per_task, 1e-9)))
        return max(n, 1)

    def _cache_root(self) -> str:
        """Where the workers keep their Triton cache: below the driver's own folder for an
        embedded Ray (this host's workers), each node's own on a cluster (:data:`NODE_CACHE`)."""
        return NODE_CACHE if self.address else triton_cache_root()

    def _nodes(self, device: str) -> dict:
        """The live nodes that can measure on ``device``: node id -> its resources."""
        name = _measuring_resource(device)
        return {
            node["NodeID"]: node["Resources"]
            for node in self.ray.nodes()
            if node.get("Alive") and node.get("Resources", {}).get(name, 0) > 0
        }

    def _embedded_cpus(self) -> int | None:
        """The CPUs an embedded Ray on this host's GPUs declares (:func:`embedded_ray_cpus`:
        the processes a GPU sweep places, not one per host CPU); None, Ray's own count, on a
        host without GPUs, whose CPUs are the interpreter's measuring slots. An interpreter
        sweep through an embedded Ray on a GPU host gets that many CPU slots too; ``num_cpus``
        gives it more."""
        gpus = self.num_gpus if self.num_gpus is not None else visible_gpus()
        if not gpus:
            return None
        return embedded_ray_cpus(self._host_cpus, gpus, self.gpus_per_task, self.cpus_per_task, self.compile_workers)

    def _compile_worker_count(self, device: str, resources: dict) -> int:
        """Compile workers for a node with ``resources``: ``compile_workers`` as given, else on
        cuda :func:`default_compile_workers` of the node's CPUs (this host's, for an embedded
        Ray, which declares fewer: :meth:`_embedded_cpus`) and measuring slots."""
        if self.compile_workers is not None:
            return max(0, int(self.compile_workers))
        if device != "cuda":
            return 0
        slots = int(resources.get("GPU", 0) // max(self.gpus_per_task, 1e-9))
        cpus = self._host_cpus if self._owns and not self.address else int(resources.get("CPU", 1))
        return default_compile_workers(cpus, max(slots, 1))

    def _all_compilers(self) -> list:
        return [actor for actors in self._compilers.values() for actor in actors]

    # --- running --------------------------------------------------------------------------
    def run(self, tasks, cancel: threading.Event | None = None):
        ray = self.ray
        tasks = list(tasks)
        if not tasks:
            return
        self._await_warm_up()
        device = tasks[0].device
        self.slots = self._slots(device)
        self._plan_placement(device)
        pool = self._pool(device)
        clock = self._clock
        clock.open(warm=False)
        for actor in pool.idle:
            clock.idle(actor)
        root = self._cache_root()
        queue = Lanes([dataclasses.replace(t, triton_cache_root=root) for t in tasks], self.slots)
        # generator -> [task, started at (None until the worker says so), worker, actor]
        pending: dict = {}
        begun, self.drained_s = time.monotonic(), None
        self._grow(pool, len(queue), root, device)  # first: their start is the longest
        ahead = self._compile_ahead(device, root)
        try:
            while queue or pending:
                cancelled = cancel is not None and cancel.is_set()
                if not cancelled:
                    self._grow(pool, len(queue) + len(pending), root, device)  # replace retired actors
                if ahead is not None and not cancelled:
                    ahead.feed(queue, self._actor_nodes)
                for actor in list(pool.idle):
                    if not queue or cancelled:
                        break
                    task = queue.take(actor, self._ahead_of(ahead, actor))
                    if task is None:  # its next ones are being compiled ahead: it waits for one
                        continue
                    pool.idle.remove(actor)
                    sent = time.time()  # before the call: the actor may start it before .remote() returns
                    gen = actor.run.options(num_returns="streaming").remote(task)
                    pending[gen] = [task, None, None, actor]
                    clock.sent(gen, actor, sent)
                    if not queue:
                        self.drained_s = time.monotonic() - begun
                waiting = list(pending)
                if queue and not cancelled:
                    waiting += list(pool.starting) + (ahead.refs() if ahead is not None else [])
                if not waiting:
                    return
                ready, _ = ray.wait(waiting, num_returns=1, timeout=self.poll_s)
                for ref in ready:
                    if ref in pool.starting:
                        actor = pool.starting[ref]
                        failed = self._warmed_up(pool, ref, ahead)
                        if failed is not None and queue:  # the configuration it would have run says why
                            task = queue.take(actor, self._ahead_of(ahead, actor), wait=False)
                            queue.release(actor)
                            yield as_queued(task), self._error(task, failed)
                        continue
                    if ref not in pending:
                        ahead.collect(ref)
                        continue
                    entry = pending[ref]
                    kind, value = self._next(ref, entry[0])
                    if kind == "started":
                        entry[1], entry[2] = time.monotonic(), value["worker"]
                        clock.started(ref, value.get("at"))
                        continue
                    pending.pop(ref)
                    clock.arrived(ref)
                    if kind == "record":
                        pool.idle.append(entry[3])
                        clock.idle(entry[3])
                        if entry[1] is not None:  # how long it ran: what the lanes expect of its kind
                            queue.done(entry[0], time.monotonic() - entry[1])
                        value = self._kept_log(entry[0], value)
                    else:  # the actor died or its call broke: a fresh one takes its place (and its lane)
                        self._retire(pool, entry[3])
                        queue.release(entry[3])
                    yield as_queued(entry[0]), value
                if self.timeout_s is not None:
                    now = time.monotonic()
                    for gen, (task, t0, worker, actor) in list(pending.items()):
                        if t0 is not None and now - t0 > self.timeout_s:
                            pending.pop(gen)
                            self._retire(pool, actor)
                            queue.release(actor)
                            yield (
                                as_queued(task),
                                error_record(
                                    task,
                                    ERROR_TIMEOUT,
                                    f"no result after {self.timeout_s:g} s; its worker was killed and replaced "
                                    "(not retried)",
                                    worker,
                                ),
                            )
                if cancel is not None and cancel.is_set() and not queue:
                    break
                if ahead is not None:
                    ahead.expire()
        finally:
            for _task, _t0, _worker, actor in pending.values():  # interrupted: nothing left running
                self._retire(pool, actor)
            if ahead is not None:
                self._kept_compilers(ahead.finish())
                self.compile_ahead = ahead.summary()
                stats = self.cluster_cache_stats()
                if stats is not None:
                    self.compile_ahead["cluster_cache"] = stats
            self.timeline = clock.close()

    def _grow(self, pool: _Pool, wanted: int, root: str, device: str) -> None:
        """Start actors until ``pool`` has ``min(slots, wanted)``, all at once: each is created
        with its warm-up call (:meth:`DeviceWorker.ready`), and is idle once that returns."""
        while len(pool.live) < min(self.slots, wanted):
            actor = self._actor_class.options(**pool.options).remote()
            pool.live.append(actor)
            pool.starting[actor.ready.remote(root, device, self.placement, self._store_name, self.log_dir)] = actor
            self._clock.asked(actor)

    def _ahead_of(self, ahead: CompileAheadByNode | None, actor) -> CompileAhead | None:
        """The compile-ahead of ``actor``'s node (None: none there, or none at all)."""
        return ahead.for_node(self._actor_nodes.get(actor)) if ahead is not None else None

    def _warmed_up(self, pool: _Pool, ref, ahead: CompileAheadByNode | None):
        """File an actor's finished warm-up: the actor is idle, and its device facts check the
        compile-ahead's target; None, or the RayError of a warm-up that failed (the actor is
        retired: a fresh one takes its place)."""
        actor = pool.starting.pop(ref)
        try:
            info = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            self._retire(pool, actor)
            return exc
        pool.idle.append(actor)
        self._actor_nodes[actor] = (info.get("worker") or {}).get("node")
        self._clock.ready(actor, info.get("stamps"), info.get("cpus"))
        self._check_target(ahead, info.get("device"))
        return None

    def _check_target(self, ahead: CompileAheadByNode | None, facts: dict | None) -> None:
        """The first measuring actor's device facts: kept for later runs, taken where the target
        was not known yet, and where they differ from the driver's (or the environment's) the
        compile-ahead switches to them. A ``compile_target`` given is used as given."""
        if not facts or self._target_checked:
            return
        self._target_checked = True
        if self.compile_target is not None:
            return
        if self._target != facts:
            self._target, self._target_source = facts, "actor"
        if ahead is None:
            return
        if ahead.facts is None:
            ahead.facts = facts
            self._warm_compilers(facts)
        elif ahead.facts != facts:
            ahead.retarget(facts)

    def _compile_ahead(self, device: str, root: str) -> CompileAheadByNode | None:
        """This run's compile-ahead, a :class:`CompileAhead` per node (None when no node has
        compile workers, or there is nothing to compile for: the CPU without a ``compile_target``)."""
        self.compile_ahead = {}
        if not self._start_compilers(device, root):
            return None
        facts, source = self._known_target(device)  # the compile workers start meanwhile
        if facts is None and device != "cuda":
            return None  # nothing to learn it from: the interpreter compiles nothing
        limit = self.timeout_s if self.timeout_s is not None else COMPILE_TIMEOUT_S
        self._warm_compilers(facts)  # not awaited: each worker's compiles queue behind it
        if self._store is not None:  # one compile per configuration in the whole cluster
            workers = self._all_compilers()
            return CompileAheadByNode(
                {SHARED: CompileAhead(self.ray, workers, facts, limit, self._replacement(root), source, self._kill)}
            )
        return CompileAheadByNode(
            {
                node: CompileAhead(self.ray, workers, facts, limit, self._replacement(root), source, self._kill)
                for node, workers in self._compilers.items()
                if workers
            }
        )

    def _replacement(self, root: str):
        """A new compile worker on the node of the one it replaces."""
        return lambda old: self._new_compiler(root, self._compiler_node.get(old))

    def _kept_compilers(self, by_node: dict) -> None:
        """The compile workers a run's compile-ahead kept (:meth:`CompileAheadByNode.finish`), by
        the node each runs on; the others were stopped."""
        kept = [worker for workers in by_node.values() for worker in workers]
        self._compilers = {}
        for worker in kept:
            self._compilers.setdefault(self._compiler_node.get(worker), []).append(worker)
        self._compiler_node = {worker: self._compiler_node.get(worker) for worker in kept}

    def _start_compilers(self, device: str, root: str) -> int:
        """Start (or trim to) the compile workers each node that measures on ``device`` asks for,
        placed on that node; how many there are in all."""
        nodes = self._nodes(device)
        for node in list(self._compilers):
            if node not in nodes:  # gone from the cluster: its workers with it
                for actor in self._compilers.pop(node):
                    self._kill(actor)
        for node, resources in nodes.items():
            count = self._compile_worker_count(device, resources)
            workers = self._compilers.setdefault(node, [])
            while len(workers) < count:
                workers.append(self._new_compiler(root, node))
            for actor in workers[count:]:
                self._kill(actor)
            del workers[count:]
        alive = self._all_compilers()
        self._warmed_compilers = [w for w in self._warmed_compilers if w in alive]
        return len(alive)

    def _warm_compilers(self, facts: dict | None) -> list:
        """Ask each compile worker not asked yet to pay its first compile for ``facts``
        (:meth:`CompileWorker.warm_up`; a Ray actor runs its calls in order, so it comes before
        any compile sent later); the calls' refs (none while the target is not known)."""
        if facts is None:
            return []
        refs = []
        for worker in self._all_compilers():
            if worker not in self._warmed_compilers:
                self._warmed_compilers.append(worker)
                refs.append(worker.warm_up.remote(facts))
        return refs

    def _new_compiler(self, root: str, node):
        """A compile worker on ``node`` (held there: it writes into that node's Triton cache)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cpus = self.placement.compile if self.placement is not None else None
        strategy = NodeAffinitySchedulingStrategy(node, soft=False)
        actor = self._compile_class.options(num_cpus=0, num_gpus=0, scheduling_strategy=strategy).remote(
            root, cpus, self._store_name, self.log_dir
        )
        self._compiler_node[actor] = node
        return actor

    def _known_target(self, device: str) -> tuple[dict | None, str]:
        """The facts to compile for and where they came from ("given", "driver", "environment",
        "actor"), before this run's measuring actors report; None: not known yet."""
        if self.compile_target is not None:
            return self.compile_target, "given"
        if self._target is None and not self._target_checked:
            # Only an embedded Ray runs on this host's GPUs; a cluster's may be other ones.
            self._target, self._target_source = driver_target(device, probe=not self.address)
        return self._target, self._target_source

    def _retire(self, pool: _Pool, actor) -> None:
        if actor in pool.live:
            pool.live.remove(actor)
        if actor in pool.idle:
            pool.idle.remove(actor)
        for ref, starting in list(pool.starting.items()):
            if starting is actor:
                del pool.starting[ref]
        self._kill(actor)

    def _kill(self, actor) -> None:
        """Kill a measuring actor or compile worker; the compile leases it held in the cluster
        cache are released (whoever waits for its kernels compiles them)."""
        kill_actor(self.ray, actor)
        if self._store is not None:
            self._store.release.remote(owner_of(actor))

    def _kept_log(self, task, body: dict) -> dict:
        """A failed record's ``failure_log`` (what its actor printed meanwhile) written to
        ``<log_dir>/failed/``; the record keeps the file's path as ``log``."""
        text = body.pop("failure_log", None)
        if not text or not self.log_dir:
            return body
        self._failures += 1
        path = Path(self.log_dir) / "failed" / f"{self._failures:04d}-{task.family}-{task.variant}.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# {task.key}\n# {body.get('error') or 'wrong result'}\n{text}")
        except OSError:
            return body
        return {**body, "log": str(path)}

    def cluster_cache_stats(self) -> dict | None:
        """The cluster cache's counts (:meth:`workbench.sweep.cluster_cache.KernelStore.stats`), or
        None without one."""
        if self._store is None:
            return None
        try:
            return self.ray.get(self._store.stats.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - the counts only: the sweep's records stand
            return None

    def _next(self, gen, task) -> tuple[str, dict]:
        """("started", {"worker": worker info, "at": when}), ("record", record dict) or
        ("broken", error record) from a call's stream."""
        try:
            ref = next(gen)
        except StopIteration:
            return "broken", error_record(task, ERROR_CRASH, "the call ended without a record (not retried)")
        except self.ray.exceptions.RayError as exc:
            return "broken", self._error(task, exc)
        try:
            value = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            return "broken", self._error(task, exc)
        if isinstance(value, dict) and value.get(STARTED_KEY):
            return "started", value
        return "record", value

    def _error(self, task, exc) -> dict:
        ray = self.ray
        if isinstance(exc, ray.exceptions.RayTaskError):
            # run_task records every error of a configuration; this is the task machinery's own
            cause = getattr(exc, "cause", None) or exc
            text = " ".join(str(cause).split())[:500]
            return error_record(task, "task failed", f"{type(cause).__name__}: {text} (not retried)")
        # ActorDiedError, OutOfMemoryError, NodeDiedError ... (timeouts kill the actor: no cancel)
        text = " ".join(str(exc).split())[:500]
        return error_record(task, ERROR_CRASH, f"{type(exc).__name__}: {text} (not retried)")
