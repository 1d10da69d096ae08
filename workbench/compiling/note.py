"""The note a compile-ahead leaves on a measured record: ``compile_facts["compiled_ahead"]``.

- :func:`noted`: a record's compile facts with what was compiled ahead
  (:func:`workbench.compiling.jobs.compile_job`'s result, or
  :func:`workbench.compiling.graphs.compile_graphs`'), and whether every kernel of the first
  call was (``first_call_cached``), so the record's ``compile_ms`` reads as the cache load it
  was. :func:`workbench.measure.measure_many` writes it where this process's compile service
  compiled the configuration; :func:`workbench.sweep.tasks.run_task` where a Ray compile worker
  did (a task whose ``extra["compiled_ahead"]`` holds the result). A compile-ahead that failed
  changes nothing else: the measuring process compiles as it always did.
- :func:`note_on_record`: the same on a record dict.
- :func:`first_call_cached`: that flag read back from a record (benchmarks/sweep_scaling.py).
- :func:`ahead_counts`: how a set of records' compile-ahead went (the notebook report's table).

Plain dicts in and out, no imports.
"""

from __future__ import annotations

NOTE = "compiled_ahead"


def note_of(record: dict) -> dict:
    """The record's compile-ahead note ({} where it has none)."""
    return (record.get("compile_facts") or {}).get(NOTE) or {}


def first_call_cached(record: dict) -> bool:
    """True when the record's first call found every kernel compiled ahead (its note says so)."""
    return bool(note_of(record).get("first_call_cached"))


def ahead_counts(records) -> dict:
    """``{"ahead", "found", "missed", "processes"}``: the records with a compile-ahead note, those
    whose first call found every kernel compiled ahead, those whose first call launched one that
    was not (compiled again in the measuring process), and the compile processes that made them."""
    notes = [note_of(r) for r in records]
    notes = [n for n in notes if n]
    return {
        "ahead": len(notes),
        "found": sum(1 for n in notes if n.get("first_call_cached") is True),
        "missed": sum(1 for n in notes if n.get("first_call_cached") is False),
        "processes": len({n.get("worker") for n in notes}),
    }


def ahead_text(counts: dict) -> str:
    """:func:`ahead_counts` in a few words (``-`` where nothing was compiled ahead)."""
    if not counts.get("ahead"):
        return "-"
    return (
        f"{counts['ahead']} by {counts['processes']} processes: first call found {counts['found']}, "
        f"missed {counts['missed']}"
    )


def note_on_record(body: dict, ahead: dict) -> dict:
    """The record dict with its compile facts :func:`noted`."""
    body = dict(body)
    body["compile_facts"] = noted(body.get("compile_facts") or {}, ahead)
    return body


def noted(compile_facts: dict, ahead: dict) -> dict:
    """``compile_facts`` with ``["compiled_ahead"]``: ``ok``, the inputs it compiled on, its
    milliseconds, the kernels, where it ran, ``error`` when it failed, ``waited_ms`` (how long the
    measuring process waited for it; absent: it did not), and ``first_call_cached``: True when
    every kernel the first call launched had been compiled ahead (so ``compile_ms`` is a cache
    load plus one run), False when one had not, None when the record names no kernel hashes (the
    interpreter, or compile facts not read); and ``found_on_node``: whether the measuring worker
    found every kernel compiled ahead in its own node's Triton cache before its first call
    (None: not asked, or nothing to find). With a Ray sweep's cluster cache
    (:mod:`workbench.sweep.cluster_cache`) also ``how``: per kernel hash, its name and whether
    the compile process compiled it (``"compiled"``) or found it (``"node cache"``, ``"cluster cache"``,
    ``"waited"``), and ``fetched``: per kernel hash, how the measuring worker's node got it."""
    facts = dict(compile_facts)
    first_call = [k.get("hash") for k in facts.get("kernels") or []]
    ahead_hashes = {k.get("hash") for k in ahead.get("kernels") or [] if k.get("hash")}
    cached = None
    if first_call and all(first_call):
        cached = bool(ahead.get("ok")) and all(h in ahead_hashes for h in first_call)
    worker = ahead.get("worker") or {}
    note = {
        "ok": bool(ahead.get("ok")),
        "inputs": ahead.get("inputs"),
        "ms": round(float(ahead.get("ms") or 0.0), 1),
        "kernels": [k.get("name") for k in ahead.get("kernels") or []],
        "worker": f"{worker.get('host', '?')}:{worker.get('pid', '?')}",
        "node": worker.get("node"),  # the Ray node it compiled on (None outside Ray)
        "first_call_cached": cached,
        "found_on_node": ahead.get("found_on_node"),
    }
    how = {k["hash"]: {"name": k.get("name"), "how": k["how"]} for k in ahead.get("kernels") or [] if k.get("how")}
    if how:  # with a cluster cache: whether the compile process compiled each kernel or found it
        note["how"] = how
    if ahead.get("fetched"):  # copied from the cluster cache into the measuring node's before the first call
        note["fetched"] = ahead["fetched"]
    if "graphs" in ahead:  # a graph process's (workbench.compiling.graphs): graphs compiled, cache hits there
        note["graphs"] = ahead["graphs"]
        note["graph_cache"] = ahead.get("cache")
    if ahead.get("error"):
        note["error"] = ahead["error"]
    if ahead.get("waited_ms") is not None:
        note["waited_ms"] = round(float(ahead["waited_ms"]), 1)
    facts[NOTE] = note
    return facts


def compiles_per_kernel(records) -> dict:
    """How many times each distinct kernel was compiled, counted from records of a Ray sweep with
    a cluster cache: ``{hash: {"name", "compiles", "by"}}``, one compile per process that
    compiled it (a process compiles a kernel at most once), from each record's compile-ahead note
    (``how``) and its own first call (``compile_facts["cluster_cache"]``, the measuring process's).
    Kernels no record says anything about are absent."""
    out: dict = {}

    def seen(digest, name, how, process) -> None:
        entry = out.setdefault(digest, {"name": name, "compiles": 0, "by": []})
        entry["name"] = entry["name"] or name
        if how == "compiled" and process not in entry["by"]:
            entry["by"].append(process)
            entry["compiles"] += 1

    for record in records:
        facts = record.get("compile_facts") or {}
        names = {k.get("hash"): k.get("name") for k in facts.get("kernels") or [] if k.get("hash")}
        note = facts.get(NOTE) or {}
        for digest, entry in (note.get("how") or {}).items():
            seen(digest, entry.get("name"), entry.get("how"), (note.get("node"), note.get("worker")))
        worker = record.get("worker") or {}
        for digest, how in (facts.get("cluster_cache") or {}).items():
            seen(
                digest,
                names.get(digest),
                how,
                (worker.get("node"), f"{worker.get('host', '?')}:{worker.get('pid', '?')}"),
            )
    return out
