"""The Ray executor: one Ray actor per device slot, each configuration a call on a free actor.

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
  warm-up call (:meth:`DeviceWorker.ready`: imports, CUDA start, the device's facts, the
  once-per-process parts of a first measurement, and Triton's first compile), and hands an
  actor its first configuration only when that call returns: chosen then, not when the actor
  was asked for, so it can be one compiled ahead meanwhile. An actor whose warm-up fails is
  replaced, and the configuration it would have taken is recorded with why (as if the failure
  had happened inside its call).
  :meth:`RayExecutor.warm_up` starts them (and the compile workers) before any run instead: a
  session that sweeps several times pays their start once, outside its sweeps.
- :attr:`RayExecutor.timeline`: when each actor was asked for, started its process, finished each
  step of its warm-up, and when each configuration was given, started and recorded, in the last
  run or warm-up (:class:`Timeline`): where a sweep's time went.
- A call tells the driver when its configuration starts (the first item of a streaming call):
  its timeout counts from there. The workers of a host share one Triton cache folder
  (:func:`tasks.use_host_triton_cache`).
- Compile-ahead (``compile_workers``): CPU-side actors (no GPU asked for, none touched, run at a
  lower priority) compile queued configurations for the measuring device
  (:mod:`workbench.sweep.compile_ahead`) into the same Triton cache, while the GPUs measure, in
  the order the measuring actors will reach them. A measuring actor that frees up takes, from its
  lane (below), the first configuration whose compile-ahead has finished (ok or not), else the
  first that no compile worker holds (and compiles it itself), else waits for the compile in
  flight, which started earlier than it could. Which device to compile for:
  ``compile_target``, else what the driver knows before any measuring actor is up
  (:func:`workbench.sweep.compile_ahead.driver_target`: ``WORKBENCH_COMPILE_TARGET``, or the
  driver's own GPUs with an embedded Ray), else the first measuring actor's. The first measuring
  actor to report its device checks it: where its facts differ, the compile-ahead switches to
  them (what was compiled for the other target would miss its cache). A compile worker's first
  act, before it imports torch, is to build Triton's host utilities module into the host's cache;
  once the target is known it pays Triton's first compile (:mod:`workbench.sweep.first_compile`);
  and each compile builds the kernel's host launcher too where Triton builds one per signature:
  the measuring actors load both instead of running the C compiler. Best effort: a
  configuration that could not be compiled ahead is compiled by its measuring actor as before;
  its record notes what the compile-ahead did (``compile_facts["compiled_ahead"]``). The compile
  workers write into their own host's cache: with a cluster of several hosts they serve only
  theirs, so ``compile_workers`` defaults to 0 there.
- CPUs (``place_cpus``, an embedded Ray on GPUs): each measuring actor moves onto physical cores
  of its own, and the compile workers onto the rest (:mod:`workbench.sweep.cpus`), so the
  compile-ahead's work does not slow the host side of a measurement (host and call times).
- Lanes (:class:`_Lanes`): each measuring actor works through a contiguous share of the queue of
  its own, so it makes the inputs of only its share's problems; one that runs out takes from the
  back of the longest other share.
- No retries: a configuration is never retried blindly. A call past ``timeout_s`` is recorded as
  timed out and its actor killed (a new one takes its place); an actor that dies (``os._exit``, a
  signal, a device abort, out of memory) is recorded as ``worker died`` with Ray's reason, and
  replaced; the sweep goes on.
- If the Ray instance is already initialised in this process (a notebook, a test fixture) it is
  used as it is and left running; the executor's actors are killed at :meth:`close`.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import deque
from pathlib import Path

from workbench.children import import_path
from workbench.sweep.compile_ahead import driver_target
from workbench.sweep.executors import Executor
from workbench.sweep.tasks import ERROR_CRASH, ERROR_TIMEOUT, error_record, run_task, use_host_triton_cache, worker_info

MISSING_RAY = (
    "--executor ray needs Ray, which is not installed: pip install 'kernel-workbench[distributed]' (or 'ray==2.60.0')"
)


def import_ray():
    """``ray``, or ValueError with the one line that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ValueError(MISSING_RAY) from None
    return ray


def triton_cache_root() -> str:
    base = os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton" / "cache")
    return str(Path(base) / "workbench-workers")


class RayExecutor(Executor):
    name = "ray"

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
    ):
        """``compile_workers``: compile-ahead actors (0: none; None: :func:`default_compile_workers`
        on cuda with an embedded Ray, none otherwise). ``compile_target``: the device facts to
        compile for (:func:`workbench.sweep.compile_ahead.device_facts`); None: what the driver
        knows (:func:`workbench.sweep.compile_ahead.driver_target`), else the first measuring
        actor's. ``place_cpus``: on a host's own GPUs (an embedded Ray), each measuring actor
        runs on physical cores of its own and the compile workers on the others
        (:class:`workbench.sweep.cpus.Placement`)."""
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
        self._compilers: list = []  # compile-ahead actors, kept from run to run like the measuring ones
        self._warmed_compilers: list = []  # those asked to pay their first compile (warm_up)
        self.compile_ahead: dict = {}  # the last run's compile-ahead: workers, compiled, failed, busy_s
        self.timeline: dict = {}  # the last run's (and its warm-up's) events: see Timeline
        self.place_cpus = place_cpus
        self.placement = None  # the CPUs of the measuring slots and compile workers, once planned
        self._clock = Timeline()

    # --- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            kwargs = dict(include_dashboard=False, ignore_reinit_error=True, configure_logging=False)
            if self.address:
                kwargs["address"] = self.address
            else:
                # Workers start from the raylet this process starts: they inherit this path.
                os.environ["PYTHONPATH"] = os.pathsep.join(import_path())
                if self.num_cpus is not None:
                    kwargs["num_cpus"] = self.num_cpus
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

    def close(self) -> None:
        if self.ray.is_initialized():
            for pool in self._pools.values():
                for actor in list(pool.live):
                    self._retire(pool, actor)
            for actor in self._compilers:
                kill_actor(self.ray, actor)
        self._compilers, self._warmed_compilers = [], []
        self._pools.clear()
        if self._owns and self.ray.is_initialized():
            self.ray.shutdown()
        self._owns = False

    def describe(self) -> str:
        where = self.address or "embedded local Ray"
        if self._actor_class is None:  # not started: its slots are not known yet
            return f"ray ({where})"
        return f"ray ({where}, {self.slots} slot(s))"

    def capacity(self, device: str) -> int:
        return self._slots(device)

    def warm_up(self, device: str, wanted: int | None = None) -> float:
        """Start the measuring actors for ``device`` now (as many as it has slots, or ``wanted``)
        and, on cuda, the compile workers; return when every measuring actor has finished its
        warm-up (:meth:`DeviceWorker.ready`) and every compile worker its first compile
        (:meth:`CompileWorker.warm_up`), in seconds. Later runs hand them configurations at
        once: a session that sweeps several times (a tune's rounds, a notebook) pays the start
        once, here, not in its first sweep. An actor whose warm-up fails is replaced by the run
        that needs it, which records why."""
        begun = time.monotonic()
        self._clock.open(warm=True)
        self.slots = self._slots(device)
        self._plan_placement(device)
        pool = self._pool(device)
        root = triton_cache_root()
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

    def _pool(self, device: str) -> "_Pool":
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
            name = "GPU" if device != "npu" else "NPU"
            have = res.get(name, 0)
            if not have:
                raise ValueError(
                    f"the Ray cluster has no {name} (resources: {', '.join(f'{k}={v:g}' for k, v in res.items() if '.' not in k and ':' not in k)}); "
                    "use --device cpu for the interpreter"
                )
            n = int(min(have // self.gpus_per_task, res.get("CPU", 0) // max(self.cpus_per_task, 1e-9)))
        return max(n, 1)

    def _compile_worker_count(self, device: str) -> int:
        if self.compile_workers is not None:
            return max(0, int(self.compile_workers))
        if device != "cuda" or self.address:
            return 0
        return default_compile_workers(int(self.ray.cluster_resources().get("CPU", 1)), self.slots)

    # --- running --------------------------------------------------------------------------
    def run(self, tasks, cancel: threading.Event | None = None):
        ray = self.ray
        tasks = list(tasks)
        if not tasks:
            return
        device = tasks[0].device
        self.slots = self._slots(device)
        self._plan_placement(device)
        pool = self._pool(device)
        clock = self._clock
        clock.open(warm=False)
        for actor in pool.idle:
            clock.idle(actor)
        root = triton_cache_root()
        queue = _Lanes([dataclasses.replace(t, triton_cache_root=root) for t in tasks], self.slots)
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
                    ahead.feed(queue.feed_order())
                for actor in list(pool.idle):
                    if not queue or cancelled:
                        break
                    task = queue.take(actor, ahead)
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
                            task = queue.take(actor, ahead, wait=False)
                            queue.release(actor)
                            yield _as_queued(task), self._error(task, failed)
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
                    else:  # the actor died or its call broke: a fresh one takes its place (and its lane)
                        self._retire(pool, entry[3])
                        queue.release(entry[3])
                    yield _as_queued(entry[0]), value
                if self.timeout_s is not None:
                    now = time.monotonic()
                    for gen, (task, t0, worker, actor) in list(pending.items()):
                        if t0 is not None and now - t0 > self.timeout_s:
                            pending.pop(gen)
                            self._retire(pool, actor)
                            queue.release(actor)
                            yield (
                                _as_queued(task),
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
                self._compilers = ahead.finish()
                self.compile_ahead = ahead.summary()
            self.timeline = clock.close()

    def _grow(self, pool: "_Pool", wanted: int, root: str, device: str) -> None:
        """Start actors until ``pool`` has ``min(slots, wanted)``, all at once: each is created
        with its warm-up call (:meth:`DeviceWorker.ready`), and is idle once that returns."""
        while len(pool.live) < min(self.slots, wanted):
            actor = self._actor_class.options(**pool.options).remote()
            pool.live.append(actor)
            pool.starting[actor.ready.remote(root, device, self.placement)] = actor
            self._clock.asked(actor)

    def _warmed_up(self, pool: "_Pool", ref, ahead: "_CompileAhead | None"):
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
        self._clock.ready(actor, info.get("stamps"), info.get("cpus"))
        self._check_target(ahead, info.get("device"))
        return None

    def _check_target(self, ahead: "_CompileAhead | None", facts: dict | None) -> None:
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

    def _compile_ahead(self, device: str, root: str) -> "_CompileAhead | None":
        """This run's compile-ahead (None when it has no compile workers, or nothing to compile
        for: the CPU without a ``compile_target``)."""
        self.compile_ahead = {}
        if not self._start_compilers(device, root):
            return None
        facts, source = self._known_target(device)  # the compile workers start meanwhile
        if facts is None and device != "cuda":
            return None  # nothing to learn it from: the interpreter compiles nothing
        limit = self.timeout_s if self.timeout_s is not None else COMPILE_TIMEOUT_S
        self._warm_compilers(facts)  # not awaited: each worker's compiles queue behind it
        return _CompileAhead(self.ray, self._compilers, facts, limit, lambda: self._new_compiler(root), source)

    def _start_compilers(self, device: str, root: str) -> int:
        """Start (or trim to) the compile workers ``device`` asks for; how many there are."""
        count = self._compile_worker_count(device)
        while len(self._compilers) < count:
            self._compilers.append(self._new_compiler(root))
        for actor in self._compilers[count:]:
            kill_actor(self.ray, actor)
        self._compilers = self._compilers[:count]
        self._warmed_compilers = [w for w in self._warmed_compilers if w in self._compilers]
        return count

    def _warm_compilers(self, facts: dict | None) -> list:
        """Ask each compile worker not asked yet to pay its first compile for ``facts``
        (:meth:`CompileWorker.warm_up`; a Ray actor runs its calls in order, so it comes before
        any compile sent later); the calls' refs (none while the target is not known)."""
        if facts is None:
            return []
        refs = []
        for worker in self._compilers:
            if worker not in self._warmed_compilers:
                self._warmed_compilers.append(worker)
                refs.append(worker.warm_up.remote(facts))
        return refs

    def _new_compiler(self, root: str):
        cpus = self.placement.compile if self.placement is not None else None
        return self._compile_class.options(num_cpus=0, num_gpus=0).remote(root, cpus)

    def _known_target(self, device: str) -> tuple[dict | None, str]:
        """The facts to compile for and where they came from ("given", "driver", "environment",
        "actor"), before this run's measuring actors report; None: not known yet."""
        if self.compile_target is not None:
            return self.compile_target, "given"
        if self._target is None and not self._target_checked:
            # Only an embedded Ray runs on this host's GPUs; a cluster's may be other ones.
            self._target, self._target_source = driver_target(device, probe=not self.address)
        return self._target, self._target_source

    def _retire(self, pool: "_Pool", actor) -> None:
        if actor in pool.live:
            pool.live.remove(actor)
        if actor in pool.idle:
            pool.idle.remove(actor)
        for ref, starting in list(pool.starting.items()):
            if starting is actor:
                del pool.starting[ref]
        kill_actor(self.ray, actor)

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
        if isinstance(value, dict) and value.get(_STARTED):
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


_STARTED = "__workbench_task_started__"


class Timeline:
    """When things happened in an executor's last run or warm-up, as ``time.time()`` seconds
    (one host's clock: the actors' stamps compare with the driver's), for finding where a sweep's
    time goes. :meth:`close` gives::

        {"kind": "run" | "warm-up", "begun",
         "actors": [{"actor", "asked", "process", "init", "imported", "device", "warm_*", "warmed",
                     "seen", "cpus"}],
         "tasks": [{"actor", "idle", "sent", "started", "arrived"}]}

    An actor's ``asked`` (the driver made it), ``process`` (its process started), ``init`` (the
    actor object was made), ``imported`` / ``device`` / ``warm_*`` / ``warmed`` (the steps of its
    warm-up), ``seen`` (the driver took it as ready) and ``cpus`` (where it runs, when placed). A
    task's ``idle`` (its actor was free), ``sent``, ``started`` (the actor began it) and
    ``arrived`` (its record reached the driver). Actors are numbered in the order they were first
    asked for, across runs."""

    def __init__(self):
        self._numbers: dict = {}
        self._data: dict | None = None
        self._idle: dict = {}
        self._calls: dict = {}

    def open(self, warm: bool) -> None:
        self._data = {"kind": "warm-up" if warm else "run", "begun": time.time(), "actors": {}, "tasks": []}
        self._idle, self._calls = {}, {}

    def close(self) -> dict:
        data, self._data = self._events(), None
        return {**data, "actors": list(data["actors"].values())}

    def _number(self, actor) -> int:
        return self._numbers.setdefault(actor, len(self._numbers))

    def _events(self) -> dict:
        if self._data is None:
            self.open(warm=False)
        return self._data

    def asked(self, actor) -> None:
        n = self._number(actor)
        self._events()["actors"][n] = {"actor": n, "asked": time.time()}

    def ready(self, actor, stamps: dict | None, cpus=None) -> None:
        n = self._number(actor)
        entry = self._events()["actors"].setdefault(n, {"actor": n})
        entry.update(stamps or {})
        entry["cpus"] = cpus
        entry["seen"] = self._idle[n] = time.time()

    def idle(self, actor) -> None:
        self._idle[self._number(actor)] = time.time()

    def sent(self, call, actor, at: float) -> None:
        n = self._number(actor)
        task = {"actor": n, "idle": self._idle.pop(n, None), "sent": at}
        self._calls[call] = task
        self._events()["tasks"].append(task)

    def started(self, call, at: float | None) -> None:
        if call in self._calls:
            self._calls[call]["started"] = at

    def arrived(self, call) -> None:
        task = self._calls.pop(call, None)
        if task is not None:
            task["arrived"] = time.time()


@dataclasses.dataclass
class _Pool:
    """The actors holding one kind of resources (``options``): all of them, those still warming
    up (by their warm-up call), and the idle ones."""

    options: dict
    live: list = dataclasses.field(default_factory=list)
    starting: dict = dataclasses.field(default_factory=dict)
    idle: deque = dataclasses.field(default_factory=deque)


class DeviceWorker:
    """The Ray actor: one process that keeps the device Ray gave it when it started, and
    measures one configuration per call."""

    def __init__(self):
        self.born = time.time()

    def ready(self, cache_root: str | None, device: str, placement=None) -> dict:
        """Warm up before the first configuration: the measuring stack imported, the device
        started, and what a first measurement does once per process (the device's copy bandwidth,
        its L2 flush buffer, NVML, versions, Triton's first compile) done.
        ``{"worker", "device", "stamps", "cpus"}``: where it runs, the facts of its device a
        compile-ahead compiles for (None: none to compile for), and the two below. Only a failed
        import raises; a device that fails here fails its measurements, which say why.
        ``"stamps"``: when (``time.time()``) the process started, this actor was made, and each
        step of the warm-up ended (imports, the device's start, the rest: ``warmed``, and its own
        steps ``warm_*``), for the run's timeline. ``placement``
        (:class:`workbench.sweep.cpus.Placement`): first, the process moves to its slot's CPUs
        (``"cpus"``: those, or None where it stayed where it was)."""
        from workbench.sweep.cpus import pin_to_slot

        stamps = {"process": process_start_time(), "init": self.born}
        cpus = pin_to_slot(placement)
        use_host_triton_cache(cache_root)
        import workbench.measure
        from workbench.sweep.compile_ahead import device_facts

        stamps["imported"] = time.time()
        try:
            facts = device_facts(device)
        except Exception:  # noqa: BLE001 - no compile-ahead check then
            facts = None
        stamps["device"] = time.time()
        try:
            _warm_up(device, workbench.measure, stamps)
        except Exception:  # noqa: BLE001 - the first measurement does it again, and says what failed
            pass
        stamps["warmed"] = time.time()
        return {"worker": worker_info(), "device": facts, "stamps": stamps, "cpus": cpus}

    def run(self, task):
        """Say "started" (the timeout counts from here; ``at``: when, for the timeline), then
        give the record."""
        use_host_triton_cache(task.triton_cache_root)
        yield {_STARTED: True, "worker": worker_info(), "at": time.time()}
        yield run_task(task)


def process_start_time() -> float | None:
    """When this process started, as ``time.time()`` (Linux, to 10 ms); None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time in clock ticks
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - since_boot)


def _warm_up(device: str, measure, stamps: dict) -> None:
    """What a measurement on ``device`` does first, once per process, done ahead of it; when each
    step ended goes into ``stamps`` (``warm_<step>``)."""
    from workbench.provenance import code_version

    measure.versions()
    code_version()
    stamps["warm_versions"] = time.time()
    dev = measure.get_device(device)
    if dev.kind != "cpu":
        dev.state()
        stamps["warm_state"] = time.time()
        dev.flush_l2()
        stamps["warm_flush"] = time.time()
        dev.copy_bandwidth_gbps()
        stamps["warm_copy_bandwidth"] = time.time()
        from workbench.sweep.first_compile import first_launch

        first_launch(dev.torch_device)
        stamps["warm_first_compile"] = time.time()


def kill_actor(ray, actor) -> None:
    """Kill a Ray actor for good; one already dead is left as it is."""
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already dead
        pass


COMPILE_NICENESS = 10  # compile-ahead yields the CPUs to the measuring actors' host work
COMPILE_TIMEOUT_S = 300.0  # a compile-ahead past this (or the executor's timeout) is given up


def default_compile_workers(cpus: int, slots: int) -> int:
    """Compile workers for a host of ``cpus`` CPUs measuring on ``slots`` GPUs: 4 per GPU and 4
    more, at most half the CPUs the measuring actors leave (the rest stay theirs), at least 1.

    Why per GPU: a compile is about 0.75 s of one CPU and a measurement about 0.2 s of a GPU (the
    208-configuration scaling sweep on H100s), so each GPU measuring keeps about 4 compile workers
    busy. With 8 for two GPUs the compile-ahead fell behind at a sweep's start (whose first
    configurations no one had compiled yet) and the measuring actors compiled 10 configurations
    themselves, 4 s of GPU time idle in a 29 s sweep."""
    return max(1, min(4 * slots + 4, (cpus - slots) // 2))


class CompileWorker:
    """The Ray actor of a compile-ahead: a CPU-side process that asks for no GPU and touches
    none, and compiles one configuration per call into its host's Triton cache."""

    def __init__(self, cache_root: str | None, cpus=None):
        """``cpus``: the CPUs it runs on (a :class:`workbench.sweep.cpus.Placement`'s compile
        CPUs, away from the measuring actors'; None: any)."""
        if cpus:
            from workbench.sweep.cpus import pin

            pin(cpus)
        try:
            os.nice(COMPILE_NICENESS)
        except OSError:
            pass
        use_host_triton_cache(cache_root)
        from workbench.sweep.compile_ahead import build_host_utilities, prepare_compiler

        # First, before torch's import: the measuring actors of the host, still importing it,
        # then load Triton's host utilities instead of each building them.
        try:
            build_host_utilities()
        except Exception:  # noqa: BLE001 - no CUDA driver library here: each measuring actor builds its own
            pass
        try:
            prepare_compiler()  # while the target may not be known yet
        except Exception:  # noqa: BLE001 - its first compile imports again, and says what failed
            pass

    def warm_up(self, facts: dict) -> float | None:
        """Pay Triton's once-per-process compile costs for ``facts``' target before the first
        configuration (:func:`workbench.sweep.first_compile.first_compile`); its milliseconds, or
        None where it failed (the first configuration pays them then, as without this)."""
        from workbench.sweep.first_compile import first_compile

        try:
            return first_compile(facts)
        except Exception:  # noqa: BLE001 - best effort, like every compile-ahead
            return None

    def compile(self, task, facts: dict) -> dict:
        from workbench.sweep.compile_ahead import compile_task

        return compile_task(task, facts)


def _as_queued(task):
    """The task as it was queued (without the compile-ahead result the executor added)."""
    if "compiled_ahead" not in task.extra:
        return task
    return dataclasses.replace(task, extra={k: v for k, v in task.extra.items() if k != "compiled_ahead"})


class _Lanes:
    """A run's queued tasks, one lane per measuring slot: lane ``i`` holds the ``i``-th
    contiguous share of them, in their order.

    Why: a sweep queues each problem's configurations together, and a measuring process makes a
    problem's inputs once (:mod:`workbench.measure` keeps them). Taking turns from one queue,
    every actor made every problem's inputs: on the 2xH200, making those of RMSNorm 4096 x 16384
    on the CPU cost about 0.5 s each time. Working through a share of its own, an actor makes
    only its share's, and a problem's configurations are mostly timed on one device. An actor
    takes from the front of its lane (the first lane no other actor holds, or the longest); one
    whose lane is empty takes from the back of the longest other lane, which its owner reaches
    last. One slot: one lane, the queue's order."""

    def __init__(self, tasks: list, slots: int):
        count = max(1, min(slots, len(tasks)))
        cuts = [len(tasks) * i // count for i in range(count + 1)]
        self.lanes = [deque(tasks[cuts[i] : cuts[i + 1]]) for i in range(count)]
        self.owners: dict = {}  # actor -> its lane's index

    def __len__(self) -> int:
        return sum(len(lane) for lane in self.lanes)

    def __bool__(self) -> bool:
        return any(self.lanes)

    def feed_order(self):
        """Every queued task in the order the actors will reach them: the lanes' fronts in turn."""
        for depth in range(max(len(lane) for lane in self.lanes)):
            for lane in self.lanes:
                if depth < len(lane):
                    yield lane[depth]

    def release(self, actor) -> None:
        """``actor`` is gone: its lane waits for the actor that takes its place."""
        self.owners.pop(actor, None)

    def _lane_of(self, actor) -> deque:
        if actor not in self.owners:
            held = set(self.owners.values())
            free = [i for i in range(len(self.lanes)) if i not in held]
            self.owners[actor] = free[0] if free else max(range(len(self.lanes)), key=lambda i: len(self.lanes[i]))
        return self.lanes[self.owners[actor]]

    def take(self, actor, ahead: "_CompileAhead | None", wait: bool = True):
        """The task ``actor`` runs next, out of the queue (with its compile-ahead result), or None
        while the compile-ahead holds every one it could take (``wait`` False: take one anyway)."""
        lane = self._lane_of(actor)
        backwards = not lane
        if backwards:
            lane = max(self.lanes, key=len)
        index = ahead.pick(reversed(lane) if backwards else lane) if ahead is not None else 0
        if index is None:
            if wait:
                return None
            index = 0
        if backwards:
            index = len(lane) - 1 - index
        task = lane[index]
        del lane[index]
        return ahead.attach(task) if ahead is not None else task


class _CompileAhead:
    """One run's compile-ahead: its compile workers, the calls in flight, the results by task key.

    ``feed`` gives idle compile workers the first queued tasks none has had; ``pick`` chooses the
    task a free measuring actor takes (see the module docstring) and ``attach`` gives it its
    compile-ahead's result; ``collect`` files a finished call; ``expire`` gives up calls past
    ``limit_s`` (their worker is replaced); ``retarget`` starts again for other device facts. ``source``: where ``facts`` came from (the summary's
    ``target``)."""

    def __init__(self, ray, workers: list, facts: dict | None, limit_s: float, new_worker, source: str = "given"):
        self.ray = ray
        self.workers = list(workers)
        self.idle = deque(self.workers)
        self.facts = facts
        self.source = source
        self.retargeted = False
        self.limit_s = limit_s
        self.new_worker = new_worker
        self.calls: dict = {}  # ref -> (task key, worker, sent at)
        self.results: dict = {}  # task key -> compile_task's result
        self.taken = 0  # tasks measured with a compile-ahead result

    def compiling(self) -> set:
        """The keys of the tasks being compiled now."""
        return {key for key, _worker, _sent in self.calls.values()}

    def feed(self, tasks) -> None:
        """Give idle compile workers the first of ``tasks`` (in the order the measuring actors
        will take them) that none has had."""
        if self.facts is None or not self.idle:
            return
        busy = self.compiling()
        for task in tasks:
            if not self.idle:
                break
            if task.key in self.results or task.key in busy:
                continue
            worker = self.idle.popleft()
            ref = worker.compile.remote(task, self.facts)
            self.calls[ref] = (task.key, worker, time.monotonic())

    def refs(self) -> list:
        return list(self.calls)

    def pick(self, tasks) -> int | None:
        """Which of ``tasks`` (queued, in a free measuring actor's order of preference) it takes,
        as an index: the first whose compile-ahead finished, else the first no compile worker
        holds (the actor compiles it itself), else None (it waits for a compile under way)."""
        first_free = None
        busy = self.compiling()
        for i, task in enumerate(tasks):
            if task.key in self.results:
                return i
            if first_free is None and task.key not in busy:
                first_free = i
        return first_free

    def attach(self, task):
        """``task`` as sent to its measuring actor: with its compile-ahead's result, if any."""
        result = self.results.get(task.key)
        if result is None:
            return task
        self.taken += 1
        return dataclasses.replace(task, extra={**task.extra, "compiled_ahead": result})

    def collect(self, ref) -> None:
        key, worker, _sent = self.calls.pop(ref)
        try:
            self.results[key] = self.ray.get(ref)
            self.idle.append(worker)
        except self.ray.exceptions.RayError as exc:  # the compile worker died: a new one replaces it
            self.results[key] = _failed(f"compile worker lost: {type(exc).__name__}")
            self._replace(worker)

    def expire(self) -> None:
        now = time.monotonic()
        for ref, (key, worker, sent) in list(self.calls.items()):
            if now - sent > self.limit_s:
                self.calls.pop(ref)
                self.results[key] = _failed(f"no result after {self.limit_s:g} s; its compile worker was replaced")
                self._replace(worker)

    def retarget(self, facts: dict) -> None:
        """Compile for ``facts`` from now on: what was compiled, or is being compiled, for the
        old target is dropped (those calls' workers are replaced), and compiled again."""
        self.facts, self.source, self.retargeted = facts, "actor", True
        self.results.clear()
        for _key, worker, _sent in list(self.calls.values()):
            self._replace(worker)
        self.calls.clear()

    def _replace(self, worker) -> None:
        kill_actor(self.ray, worker)
        fresh = self.new_worker()
        self.workers = [fresh if w is worker else w for w in self.workers]
        self.idle.append(fresh)

    def finish(self) -> list:
        """The workers to keep for the next run; those still compiling are killed (their
        configurations were measured, or the run was cut short)."""
        for _key, worker, _sent in list(self.calls.values()):
            self._replace(worker)
        self.calls.clear()
        return self.workers

    def summary(self) -> dict:
        done = list(self.results.values())
        return {
            "workers": len(self.workers),
            "target": self.source,
            "retargeted": self.retargeted,
            "compiled": sum(1 for r in done if r.get("ok")),
            "failed": sum(1 for r in done if not r.get("ok")),
            "measured_after": self.taken,
            "busy_s": sum(float(r.get("ms") or 0.0) for r in done) / 1e3,
            "launchers_built": sum(1 for r in done for k in r.get("kernels") or [] if k.get("launcher_ms") is not None),
        }


def _failed(why: str) -> dict:
    return {"ok": False, "inputs": None, "kernels": [], "ms": 0.0, "error": why, "worker": {}}
