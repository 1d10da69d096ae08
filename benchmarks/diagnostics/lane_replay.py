"""Does a Ray sweep's schedule leave a GPU idle at its end? The executor's own scheduling
(``RayExecutor.run``: its lanes, steals and compile-ahead) replayed on a simulated clock, with
each configuration's measuring and compile seconds taken from a committed run.

    python benchmarks/diagnostics/lane_replay.py reports/sweep-h100x4/at-b775391/warm/gpus4
    python benchmarks/diagnostics/lane_replay.py RUN_DIR --slots 4 --nodes 2 --compile-workers 12
    python benchmarks/diagnostics/lane_replay.py RUN_DIR --compile-scale 3   # compiles 3x slower

``RUN_DIR`` holds a ``sweep_scaling.py`` run (run.json, records.json[.gz]). Nothing runs on a
device and Ray is not started: :class:`FakeRay` stands in for Ray (actors whose calls take the
recorded seconds, one after another per actor, and ``ray.wait`` moving a simulated clock to the
next result), and the executor's modules read that clock. Printed per measuring actor: the
configurations it ran, its busy seconds, the seconds it waited for its next configuration, and
when its last record came; then the sweep's end and each actor's idle seconds before it (what a
schedule whose lanes end together keeps near zero).

:func:`replay` is what tests/test_lanes.py drives with timings written by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workbench.sweep.actors import STARTED_KEY  # noqa: E402


class Clock:
    """The simulated time every patched module reads (``time.monotonic`` / ``time.time`` /
    ``time.perf_counter``); ``sleep`` moves it."""

    def __init__(self, start: float = 1000.0):
        self.now = start

    def monotonic(self) -> float:
        return self.now

    time = perf_counter = monotonic

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


class _Ref:
    """A call's result: ready at ``at`` (simulated seconds)."""

    _ids = itertools.count()

    def __init__(self, at: float, value=None, error: Exception | None = None):
        self.at, self.value, self.error = at, value, error
        self.id = next(self._ids)

    def __hash__(self) -> int:
        return self.id

    def __lt__(self, other) -> bool:
        return (self.at, self.id) < (other.at, other.id)


class _Stream:
    """A streaming call's results ("started", then the record), each a :class:`_Ref`."""

    _ids = itertools.count()

    def __init__(self, refs: list):
        self.refs = list(refs)
        self.id = next(self._ids)

    @property
    def at(self) -> float:
        return self.refs[0].at if self.refs else float("inf")

    def __hash__(self) -> int:
        return self.id

    def __iter__(self):
        return self

    def __next__(self):
        if not self.refs:
            raise StopIteration
        return self.refs.pop(0)


class _Method:
    def __init__(self, actor, name: str, streaming: bool = False):
        self.actor, self.name, self.streaming = actor, name, streaming

    def options(self, num_returns=None, **_):
        return _Method(self.actor, self.name, streaming=num_returns == "streaming")

    def remote(self, *args):
        return self.actor.call(self.name, args, self.streaming)


class _Actor:
    """One fake actor: its calls run one after another, each taking what ``timing`` says."""

    _ids = itertools.count()

    def __init__(self, ray, kind: str, node: str, ready_at: float):
        self.ray, self.kind, self.node = ray, kind, node
        self._actor_id = bytes.fromhex(f"{next(self._ids):032x}")  # what the driver names a lease owner by
        self.free_at = ready_at
        self.dead = False

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)

    def call(self, name: str, args: tuple, streaming: bool):
        ray, timing = self.ray, self.ray.timing
        start = max(ray.clock.now, self.free_at)
        if name == "ready":
            self.free_at = start
            return _Ref(start, {"worker": {"node": self.node}, "device": None, "stamps": {}, "cpus": None})
        if name == "warm_up":
            self.free_at = start + timing.first_compile_s
            return _Ref(self.free_at, 1.0)
        if name == "compile":
            task = args[0]
            seconds = timing.compile_s(task)
            self.free_at = start + seconds
            ray.compiled[task.key] = self.free_at
            ray.compile_started[task.key] = start
            result = {"ok": True, "inputs": "meta", "kernels": [], "ms": seconds * 1e3, "error": None, "worker": {}}
            return _Ref(self.free_at, result)
        if name == "run":
            task = args[0]
            seconds = timing.measure_s(task)
            ahead = task.extra.get("compiled_ahead")
            if not (ahead and ahead.get("ok")) and ray.compiled.get(task.key, float("inf")) > start:
                seconds += timing.compile_s(task)  # nobody compiled it before: the actor does
            self.free_at = start + seconds
            ray.ran.append((task.key, self.node, start, self.free_at))
            record = {"sweep_key": task.key, "error": None, "passed": True, "compile_facts": {}, "worker": {}}
            return _Stream([_Ref(start, {STARTED_KEY: True, "worker": {}, "at": start}), _Ref(self.free_at, record)])
        if name in ("release", "stats"):
            return _Ref(ray.clock.now, {} if name == "stats" else 0)
        raise AttributeError(f"the fake actor has no method {name}")


class _ActorClass:
    def __init__(self, ray, kind: str):
        self.ray, self.kind = ray, kind
        self._options: dict = {}

    def options(self, **options):
        made = _ActorClass(self.ray, self.kind)
        made._options = options
        return made

    def remote(self, *args):
        return self.ray.new_actor(self.kind, self._options)


class _Exceptions:
    class RayError(Exception):
        pass

    class RayTaskError(RayError):
        pass


class FakeRay:
    """What :class:`workbench.sweep.ray_executor.RayExecutor` asks of Ray, on a simulated clock:
    ``nodes`` nodes of ``slots_per_node`` GPUs, measuring actors ready ``ready_s`` after they are
    asked for, calls taking what ``timing`` says."""

    exceptions = _Exceptions

    def __init__(self, clock: Clock, timing, nodes: int, slots_per_node: int, ready_s: float = 0.0):
        self.clock, self.timing = clock, timing
        self.node_ids = [f"{i:056x}" for i in range(nodes)]  # hex, as Ray checks node ids
        self.slots_per_node, self.ready_s = slots_per_node, ready_s
        self.placed: dict[str, int] = {}
        self.compiled: dict[str, float] = {}  # task key -> when its compile-ahead finished
        self.compile_started: dict[str, float] = {}
        self.ran: list[tuple] = []  # (task key, node, started, ended)

    def is_initialized(self) -> bool:
        return True

    def nodes(self) -> list[dict]:
        return [
            {"NodeID": n, "Alive": True, "Resources": {"GPU": self.slots_per_node, "CPU": 64}} for n in self.node_ids
        ]

    def cluster_resources(self) -> dict:
        return {"GPU": self.slots_per_node * len(self.node_ids), "CPU": 64 * len(self.node_ids)}

    def remote(self, **_options):
        return lambda cls: _ActorClass(self, cls.__name__)

    def new_actor(self, kind: str, options: dict) -> _Actor:
        strategy = options.get("scheduling_strategy")
        if strategy is not None:  # a compile worker, held on its node
            return _Actor(self, kind, strategy.node_id, self.clock.now)
        node = min(self.node_ids, key=lambda n: self.placed.get(n, 0))
        self.placed[node] = self.placed.get(node, 0) + 1
        return _Actor(self, kind, node, self.clock.now + self.ready_s)

    def kill(self, actor, no_restart=True) -> None:
        actor.dead = True

    def get(self, ref, timeout=None):
        if ref.at > self.clock.now:
            self.clock.now = ref.at
        if ref.error is not None:
            raise ref.error
        return ref.value

    def wait(self, refs, num_returns=1, timeout=None):
        if not refs:
            return [], []
        ready = [r for r in refs if r.at <= self.clock.now]
        if not ready:
            first = min(refs, key=lambda r: r.at)
            limit = self.clock.now + (timeout if timeout is not None else float("inf"))
            if first.at > limit:
                self.clock.now = limit
                return [], list(refs)
            self.clock.now = first.at
            ready = [r for r in refs if r.at <= self.clock.now]
        ready = heapq.nsmallest(num_returns, ready, key=lambda r: (r.at, r.id))
        return ready, [r for r in refs if r not in ready]


class Timing:
    """Seconds per configuration: ``measure`` and ``compile`` by task key (others: the medians),
    and a compile worker's first compile."""

    def __init__(self, measure: dict, compile: dict, first_compile_s: float = 0.5, compile_scale: float = 1.0):
        self.measure, self.compile = dict(measure), dict(compile)
        self.first_compile_s = first_compile_s
        self.compile_scale = compile_scale
        self._median_measure = _median(self.measure.values(), 0.2)
        self._median_compile = _median(self.compile.values(), 0.75)

    def measure_s(self, task) -> float:
        return self.measure.get(task.key, self._median_measure)

    def compile_s(self, task) -> float:
        return self.compile.get(task.key, self._median_compile) * self.compile_scale


def _median(values, default: float) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else default


@contextlib.contextmanager
def _simulated(clock: Clock):
    """The executor's modules read ``clock`` instead of the system's."""
    from workbench.sweep import compile_ahead_driver, ray_executor, timeline

    saved = [(module, module.time) for module in (ray_executor, compile_ahead_driver, timeline)]
    for module, _time in saved:
        module.time = clock
    try:
        yield
    finally:
        for module, original in saved:
            module.time = original


def replay(tasks, timing: Timing, *, slots: int, nodes: int = 1, compile_workers: int = 4, ready_s: float = 0.0,
           cluster_cache: bool = True) -> dict:  # fmt: skip
    """Run ``tasks`` through a real :class:`~workbench.sweep.ray_executor.RayExecutor` on a
    :class:`FakeRay` of ``nodes`` nodes (``slots`` measuring slots in all), ``compile_workers``
    per node; ``{"end", "actors": [{"actor", "n", "busy", "waiting", "last_at", "idle_at_end"}],
    "ran": [(key, node, started, ended)], "timeline"}`` in seconds from the sweep's start."""
    from workbench.sweep.ray_executor import RayExecutor

    clock = Clock()
    fake = FakeRay(clock, timing, nodes, slots // nodes, ready_s)
    with _simulated(clock):
        ex = RayExecutor.__new__(RayExecutor)
        _init_without_ray(ex, fake, compile_workers, cluster_cache)
        begun = clock.now
        for _task, _record in ex.run(list(tasks)):
            pass
        timeline = ex.timeline
    end = max((t["arrived"] for t in timeline["tasks"] if t.get("arrived")), default=begun) - begun
    actors = {}
    for t in timeline["tasks"]:
        row = actors.setdefault(t["actor"], {"actor": t["actor"], "n": 0, "busy": 0.0, "waiting": 0.0, "last_at": 0.0})
        row["n"] += 1
        if t.get("started") is not None and t.get("arrived") is not None:
            row["busy"] += t["arrived"] - t["started"]
            row["last_at"] = max(row["last_at"], t["arrived"] - begun)
        if t.get("idle") is not None:
            row["waiting"] += t["sent"] - t["idle"]
    for row in actors.values():
        row["idle_at_end"] = end - row["last_at"]
    return {"end": end, "actors": sorted(actors.values(), key=lambda r: r["actor"]), "ran": fake.ran,
            "compiled": fake.compiled, "compile_started": fake.compile_started, "timeline": timeline}  # fmt: skip


def _init_without_ray(ex, fake: FakeRay, compile_workers: int, cluster_cache: bool) -> None:
    """The executor as ``RayExecutor(address=..., compile_workers=..., compile_target=...)`` sets
    it up and ``start()`` leaves it, with ``fake`` as its Ray."""
    from workbench.sweep.ray_executor import RayExecutor

    init = RayExecutor.__init__
    import workbench.sweep.ray_executor as module

    real_import = module.import_ray
    module.import_ray = lambda: fake
    try:
        init(ex, address="simulated", compile_workers=compile_workers, compile_target={"kind": "simulated"},
             place_cpus=False, cluster_cache=False)  # fmt: skip
    finally:
        module.import_ray = real_import
    ex._actor_class = _ActorClass(fake, "DeviceWorker")
    ex._compile_class = _ActorClass(fake, "CompileWorker")
    if cluster_cache:
        ex._store = _Actor(fake, "KernelStore", "node0", 0.0)
        ex._store_name = "simulated"


def load_run(folder: Path):
    """(tasks, Timing, slots, nodes, compile workers per node) of a sweep_scaling.py run folder:
    each configuration's measuring seconds (started -> record, from the timeline matched to the
    records in arrival order) and compile seconds (its compile-ahead's, from its record)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "sweep_scaling", Path(__file__).resolve().parents[1] / "sweep_scaling.py"
    )
    scaling = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scaling)
    from workbench.store import kept_path, read_json, read_records

    run = read_json(kept_path(folder, "run.json"))["runs"][-1]  # plain or compressed, as reports/ keeps it
    records = read_records(kept_path(folder, "records.json"))
    items = scaling.plan(False)
    tasks = scaling.tasks_for(items, "cuda", 40.0, False)
    arrived = sorted((t for t in run["timeline"]["run"]["tasks"] if t.get("arrived")), key=lambda t: t["arrived"])
    measure, compile_s = {}, {}
    for record, event in zip(records, arrived):
        task = _task_of(record, items, tasks)  # matched by what the plan sweeps (keys change with the code)
        if task is None:
            continue
        if event.get("started") is not None:
            ahead = (record.get("compile_facts") or {}).get("compiled_ahead") or {}
            own = 0.0 if ahead.get("first_call_cached") else (record.get("compile_ms") or 0.0) / 1e3
            measure[task.key] = event["arrived"] - event["started"] - own  # its own compile, where it paid one, apart
        ms = ((record.get("compile_facts") or {}).get("compiled_ahead") or {}).get("ms")
        if ms:
            compile_s[task.key] = ms / 1e3
    ahead = run.get("compile_ahead") or {}
    nodes = run.get("nodes") or 1
    workers = max(1, (ahead.get("workers") or 4) // nodes)
    return [t for t in tasks if t.key in measure], Timing(measure, compile_s), run.get("slots") or 1, nodes, workers


def _task_of(record: dict, items: list, tasks: list):
    """The plan's task whose swept problem sizes and tiles the record has."""
    for (family, _variant, problem, params), task in zip(items, tasks):
        if record.get("kernel") != family:
            continue
        have_problem, have_params = record.get("problem") or {}, record.get("params") or {}
        if all(have_problem.get(k) == v for k, v in problem.items()) and all(
            have_params.get(k) == v for k, v in params.items()
        ):
            return task
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="a sweep_scaling.py run folder (run.json, records.json[.gz])")
    p.add_argument("--slots", type=int, default=None, help="measuring slots (default: the run's)")
    p.add_argument("--nodes", type=int, default=None, help="nodes (default: the run's)")
    p.add_argument("--compile-workers", type=int, default=None, help="compile workers per node (default: the run's)")
    p.add_argument("--compile-scale", type=float, default=1.0, help="every compile this many times longer")
    p.add_argument("--no-cluster-cache", action="store_true", help="a compile-ahead per node, as without the store")
    args = p.parse_args(argv)
    tasks, timing, slots, nodes, workers = load_run(Path(args.run))
    timing.compile_scale = args.compile_scale
    out = replay(tasks, timing, slots=args.slots or slots, nodes=args.nodes or nodes,
                 compile_workers=args.compile_workers or workers, cluster_cache=not args.no_cluster_cache)  # fmt: skip
    print(f"{len(tasks)} configurations on {args.slots or slots} slot(s), {args.nodes or nodes} node(s): "
          f"last record at {out['end']:.2f} s")  # fmt: skip
    for a in out["actors"]:
        print(f"actor {a['actor']}: {a['n']} configurations, busy {a['busy']:.2f} s, waiting {a['waiting']:.2f} s, "
              f"last record at {a['last_at']:.2f} s, idle at the end {a['idle_at_end']:.2f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
