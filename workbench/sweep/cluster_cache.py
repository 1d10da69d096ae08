"""A Triton cache that every node of a Ray cluster reads and writes: each kernel compiled once.

A Ray sweep's processes (measuring actors and compile workers, on every node) keep their
compiled kernels in their node's own Triton cache folder, as always, and share them through a
store held by one Ray actor (:class:`KernelStore`). Nodes need no shared disk: a kernel one node
compiled is fetched from the store by any other node that needs it, and written into that node's
folder, where its next process finds it.

Why a Ray actor and not Ray's internal key-value store or a Redis server:

- the actor lives and dies with the sweep's Ray job (no port, no server binary to install on
  the GPU image, nothing left running), and every worker already holds a connection to it;
- it can hand out a compile lease: the first process to miss a kernel compiles it, and any
  other process that misses it meanwhile waits for that compile (an async actor method awaits
  it) instead of compiling it again. Ray's internal KV (GCS) and a plain Redis ``GET`` / ``SET``
  store bytes but cannot make a second process wait, so two nodes missing the same kernel at
  once would both compile it; the KV also keeps everything in the GCS process that the whole
  cluster's control plane depends on;
- it counts every compile, so a run can say how many times each distinct kernel was compiled
  in the whole cluster.

What each process runs (set by :func:`use_cluster_cache` in its environment):

- :class:`ClusterCacheManager`, Triton's cache manager (``TRITON_CACHE_MANAGER``): reads the
  node's folder first; on a miss it asks the store (:meth:`KernelStore.fetch_group`), which
  answers with the kernel's files, or "compile it" (this process holds the lease), or, while
  another process compiles it, waits and then answers with its files. A kernel this process
  compiled goes to the store with its group (:meth:`KernelStore.put_group`), which counts the
  compile and wakes whoever waits. Host modules Triton builds with the C compiler (its CUDA
  utilities and, in Triton 3.6, a launcher per kernel signature) are shared the same way,
  without a lease.
- :class:`RayCacheBackend`: Triton's own ``RemoteCacheBackend`` interface (``get(filenames)``,
  ``put(filename, data)``) served by the store, which :class:`ClusterCacheManager` uses for
  single files; it also works alone with Triton's ``RemoteCacheManager``
  (``TRITON_REMOTE_CACHE_BACKEND=workbench.sweep.cluster_cache:RayCacheBackend``), without the
  lease and the counts.

Never in the way: where the store cannot be reached (no Ray here, the actor gone) a process
reads and writes its node's folder alone, as without it. A lease is released when its process's
call ends (:func:`release_mine`, after each configuration and each compile-ahead), when the
driver kills the actor holding it (:meth:`KernelStore.release`), and at the latest after
:data:`WAIT_S`, when a waiter compiles the kernel itself.

:func:`how_found` tells, for a kernel this process needed, how it came: ``"compiled"``,
``"node cache"``, ``"cluster cache"`` (fetched from the store) or ``"waited"`` (fetched after
another process's compile finished). :func:`fetch_kernels` copies kernels from the store into the
node's folder ahead of a first call.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

from triton.runtime.cache import CacheManager, FileCacheManager, RemoteCacheBackend

STORE_ENV = "WORKBENCH_KERNEL_STORE"  # the store actor's name, in this process's environment
MANAGER = "workbench.sweep.cluster_cache:ClusterCacheManager"
WAIT_S = 300.0  # the longest a process waits for another's compile of the same kernel
GROUP_PREFIX = "__grp__"

# How each kernel this process needed came to it: its cache folder name -> how (how_found)
_HOW: dict[str, str] = {}
_LOCK = threading.Lock()
_STORE: list = []  # [name, actor handle or None, when it was looked up]
RETRY_S = 5.0  # a store that could not be found is looked up again after this


class KernelStore:
    """The Ray actor (async: a waiting call does not hold up the others) holding every kernel
    compiled in a sweep's cluster, its compile leases and its compile counts.

    Files are kept by ``"<cache key>/<file name>"`` (the key is the kernel's Triton cache folder
    name); a kernel's group by ``"<cache key>/<metadata file name>"``."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.groups: dict[str, list[str]] = {}  # group key -> its files' names
        self.names: dict[str, str] = {}  # group key -> the kernel's name
        self.compiles: dict[str, list[str]] = {}  # group key -> who compiled it, once per compile
        self.claims: dict[str, tuple[str, asyncio.Event]] = {}  # group key -> (owner, set when done)
        self.counts = {"fetched": 0, "waited": 0, "waited_s": 0.0, "gave_up": 0, "files_put": 0, "files_got": 0}

    def _group_files(self, group: str) -> dict[str, bytes]:
        key = group.split("/", 1)[0]
        return {name: self.files[f"{key}/{name}"] for name in self.groups[group]}

    async def fetch_group(
        self, key: str, filename: str, owner: str, wait_s: float = WAIT_S, claim: bool = True
    ) -> dict:
        """A kernel's files, or the lease to compile it: ``{"files": {name: bytes}}`` (with
        ``"waited_s"`` where another process's compile was waited for), or ``{"compile": True}``
        (this ``owner`` compiles it and sends it with :meth:`put_group`; ``"gave_up"``: after
        ``wait_s`` of waiting for another owner). ``claim`` False: ``{"missing": True}`` instead
        of a lease, at once (a fetch ahead of a first call, which compiles nothing)."""
        group = f"{key}/{filename}"
        started = time.monotonic()
        waited = False
        while True:
            if group in self.groups:
                self.counts["fetched"] += 1
                reply = {"files": self._group_files(group)}
                if waited:
                    spent = time.monotonic() - started
                    self.counts["waited"] += 1
                    self.counts["waited_s"] += spent
                    reply["waited_s"] = spent
                return reply
            if not claim:
                return {"missing": True}
            held = self.claims.get(group)
            if held is None or held[0] == owner:
                if held is None:
                    self.claims[group] = (owner, asyncio.Event())
                return {"compile": True}
            left = wait_s - (time.monotonic() - started)
            if left <= 0:
                self.counts["gave_up"] += 1
                return {"compile": True, "gave_up": True}
            waited = True
            try:
                await asyncio.wait_for(held[1].wait(), timeout=left)
            except asyncio.TimeoutError:
                pass

    async def put_group(self, key: str, filename: str, files: dict, owner: str, name: str = "") -> None:
        """A kernel compiled by ``owner``: its files (the group's), counted as one compile; whoever
        waits for it is woken."""
        group = f"{key}/{filename}"
        for child, data in files.items():
            self.files[f"{key}/{child}"] = data
        self.groups[group] = sorted(files)
        self.names[group] = name or filename.rsplit(".", 1)[0]
        self.compiles.setdefault(group, []).append(owner)
        self.counts["files_put"] += len(files)
        claim = self.claims.pop(group, None)
        if claim is not None:
            claim[1].set()

    async def get_files(self, names: list[str]) -> dict:
        """Single files (``"<key>/<file name>"``) the store holds, by name."""
        found = {name: self.files[name] for name in names if name in self.files}
        self.counts["files_got"] += len(found)
        return found

    async def put_file(self, name: str, data: bytes) -> None:
        self.files[name] = data
        self.counts["files_put"] += 1

    async def has_groups(self, groups: list[str]) -> list[bool]:
        return [group in self.groups for group in groups]

    async def release(self, owner: str) -> int:
        """Drop ``owner``'s leases (its call ended, or it was killed, without sending what it
        compiled); the processes waiting for them ask again, and one of them compiles. How many."""
        mine = [group for group, (holder, _event) in self.claims.items() if holder == owner]
        for group in mine:
            self.claims.pop(group)[1].set()
        return len(mine)

    async def stats(self) -> dict:
        """``{"kernels": distinct kernels, "compiles": compiles in all, "compiled_more_than_once":
        [{"kernel", "key", "compiles", "by"}], "per_kernel": {key: compiles}, "bytes", ...counts}``."""
        repeated = [
            {"kernel": self.names.get(group, group), "key": group.split("/", 1)[0], "compiles": len(by), "by": by}
            for group, by in sorted(self.compiles.items())
            if len(by) > 1
        ]
        return {
            "kernels": len(self.compiles),
            "compiles": sum(len(by) for by in self.compiles.values()),
            "compiled_more_than_once": repeated,
            "per_kernel": {group.split("/", 1)[0]: len(by) for group, by in self.compiles.items()},
            "bytes": sum(len(data) for data in self.files.values()),
            "files": len(self.files),
            **self.counts,
        }


def start_store(ray, name: str, namespace: str | None = None):
    """The store actor, named ``name`` (on no CPU of its own: it only moves bytes), started in
    this Ray job; it ends with the job."""
    remote = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1000)(KernelStore)
    options = {"name": name, "lifetime": None}
    if namespace is not None:
        options["namespace"] = namespace
    return remote.options(**options).remote()


def use_cluster_cache(name: str | None) -> None:
    """Have this process's Triton compiles and cache lookups go through the store named ``name``
    (:class:`ClusterCacheManager`); None leaves Triton's own cache manager. A cache manager the
    user set (``TRITON_CACHE_MANAGER``) is left as it is."""
    if not name:
        return
    current = os.environ.get("TRITON_CACHE_MANAGER")
    if current and current != MANAGER:
        return
    os.environ[STORE_ENV] = name
    os.environ["TRITON_CACHE_MANAGER"] = MANAGER


def _owner() -> str:
    """Who holds a lease: this Ray actor (its id, which the driver knows too), else this process."""
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            actor = ray.get_runtime_context().get_actor_id()
            if actor:
                return actor
        except Exception:  # noqa: BLE001 - not in a Ray worker
            pass
    return f"pid:{os.getpid()}"


def owner_of(actor) -> str:
    """The lease owner name of a Ray actor handle (what :func:`_owner` gives inside it)."""
    return actor._actor_id.hex()


def _store():
    """The store's actor handle, or None (no store named here, no Ray, or it cannot be found: asked
    again after :data:`RETRY_S`)."""
    name = os.environ.get(STORE_ENV)
    if not name:
        return None
    with _LOCK:
        if _STORE and _STORE[0] == name and (_STORE[1] is not None or time.monotonic() - _STORE[2] < RETRY_S):
            return _STORE[1]
        handle = None
        try:
            import ray

            if ray.is_initialized():
                handle = ray.get_actor(name)
        except Exception:  # noqa: BLE001 - no store: this node's folder alone, for now
            handle = None
        _STORE[:] = [name, handle, time.monotonic()]
        return handle


def _call(method: str, *args):
    """``store.method(*args)``, waited for; None where the store cannot answer (then this process
    works from its node's folder alone, and says so once in its log)."""
    store = _store()
    if store is None:
        return None
    try:
        import ray

        return ray.get(getattr(store, method).remote(*args))
    except Exception as exc:  # noqa: BLE001 - never fail a compile because the store is away
        with _LOCK:
            if _STORE and _STORE[1] is store:
                _STORE[1], _STORE[2] = None, time.monotonic()
        print(f"workbench cluster cache: the store stopped answering ({type(exc).__name__}: {exc}); "
              "this process uses its node's cache alone", flush=True)  # fmt: skip
        return None


def _note(key: str, how: str) -> None:
    """The first way a kernel came to this process is the one kept: a process compiles a kernel
    at most once, and later needs of it find it in its node's folder or in memory."""
    with _LOCK:
        _HOW.setdefault(key, how)


def how_found(kernel_hash: str) -> str | None:
    """How a kernel (its Triton hash, hex) came to this process: "compiled", "node cache",
    "cluster cache", "waited"; None where it did not pass through :class:`ClusterCacheManager`
    (no store, or not needed by this process)."""
    from workbench.compiling.cache import cache_folder

    try:
        key = cache_folder(kernel_hash)
    except ValueError:
        return None
    with _LOCK:
        return _HOW.get(key)


def release_mine() -> None:
    """Drop the leases this process still holds (a compile that raised never sent its kernel):
    called when each configuration and each compile-ahead ends."""
    if os.environ.get(STORE_ENV) and _store() is not None:
        _call("release", _owner())


class RayCacheBackend(RemoteCacheBackend):
    """Triton's ``RemoteCacheBackend`` served by the store: the files of one cache key."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key

    def get(self, filenames: list[str]) -> dict[str, bytes]:
        found = _call("get_files", [f"{self.key}/{name}" for name in filenames]) or {}
        return {name.split("/", 1)[1]: data for name, data in found.items()}

    def put(self, filename: str, data: bytes) -> None:
        _call("put_file", f"{self.key}/{filename}", data)


class ClusterCacheManager(CacheManager):
    """Triton's cache manager for one cache key: this node's folder (Triton's own
    :class:`FileCacheManager`) first, then the cluster's store (see the module docstring)."""

    def __init__(self, key, override=False, dump=False):
        self.key = key
        self.local = FileCacheManager(key, override=override, dump=dump)
        self.shared = not (override or dump) and _store() is not None
        self.backend = RayCacheBackend(key) if self.shared else None
        self._group_asked = False  # get_group was called: a kernel's compile, whose files go with its group
        self._pending: dict[str, bytes] = {}

    def get_file(self, filename):
        path = self.local.get_file(filename)
        if path is not None or not self.shared:
            return path
        found = self.backend.get([filename])
        if filename not in found:
            return None
        return self.local.put(found[filename], filename)

    def put(self, data, filename, binary=True):
        path = self.local.put(data, filename, binary=binary)
        if self.shared:
            raw = data if isinstance(data, bytes) else str(data).encode("utf-8")
            if self._group_asked:
                self._pending[filename] = raw  # sent with the group, in one call
            else:
                self.backend.put(filename, raw)  # a host module: no group follows
        return path

    def get_group(self, filename):
        self._group_asked = True
        group = self.local.get_group(filename)
        if group is not None and filename in group:
            _note(self.key, "node cache")
            return group
        if not self.shared:
            return group
        reply = _call("fetch_group", self.key, filename, _owner(), WAIT_S)
        if reply is None:  # the store is away: compile here, as without it
            return group
        files = reply.get("files")
        if files is None:
            _note(self.key, "compiled")
            return None
        paths = {name: self.local.put(data, name) for name, data in files.items() if not name.startswith(GROUP_PREFIX)}
        self.local.put_group(filename, paths)
        _note(self.key, "waited" if reply.get("waited_s") else "cluster cache")
        return paths

    def put_group(self, filename, group):
        path = self.local.put_group(filename, group)
        if self.shared:
            files = {name: self._pending[name] for name in group if name in self._pending}
            _call("put_group", self.key, filename, files, _owner(), filename.rsplit(".", 1)[0])
            self._pending.clear()
        return path


def fetch_kernels(kernels: list[dict]) -> dict:
    """Copy compiled kernels (``[{"name", "hash"}]``, a compile-ahead's result) from the store
    into this node's Triton cache where the folder lacks them, before the first call that needs
    them; ``{hash: "node cache" | "cluster cache" | "missing"}`` (empty without a store)."""
    from workbench.compiling.cache import cache_folder

    if _store() is None:
        return {}
    out = {}
    for kernel in kernels:
        digest, name = kernel.get("hash"), kernel.get("name")
        if not digest or not name:
            continue
        key = cache_folder(digest)
        local = FileCacheManager(key)
        metadata = f"{name[:150]}.json"
        group = local.get_group(metadata)
        if group is not None and metadata in group:
            out[digest] = "node cache"
            continue
        reply = _call("fetch_group", key, metadata, _owner(), 0.0, False) or {}
        files = reply.get("files")
        if files is None:  # not in the store (yet): the first call compiles or waits for it
            out[digest] = "missing"
            continue
        paths = {n: local.put(data, n) for n, data in files.items() if not n.startswith(GROUP_PREFIX)}
        local.put_group(metadata, paths)
        _note(key, "cluster cache")
        out[digest] = "cluster cache"
    return out
