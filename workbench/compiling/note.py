"""The note a compile-ahead leaves on a measured record: ``compile_facts["compiled_ahead"]``.

- :func:`noted`: a record's compile facts with what was compiled ahead
  (:func:`workbench.compiling.jobs.compile_job`'s result), and whether every kernel of the first
  call was (``first_call_cached``), so the record's ``compile_ms`` reads as the cache load it
  was. :func:`workbench.measure.measure_many` writes it where this process's compile service
  compiled the configuration; :func:`workbench.sweep.tasks.run_task` where a Ray compile worker
  did (a task whose ``extra["compiled_ahead"]`` holds the result). A compile-ahead that failed
  changes nothing else: the measuring process compiles as it always did.
- :func:`note_on_record`: the same on a record dict.
- :func:`first_call_cached`: that flag read back from a record (benchmarks/sweep_scaling.py).

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
    (None: not asked, or nothing to find)."""
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
    if ahead.get("error"):
        note["error"] = ahead["error"]
    if ahead.get("waited_ms") is not None:
        note["waited_ms"] = round(float(ahead["waited_ms"]), 1)
    facts[NOTE] = note
    return facts
