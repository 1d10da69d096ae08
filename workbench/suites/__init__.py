"""Benchmark suites: targets as data (:mod:`.targets`), their runs (:mod:`.run`, :mod:`.chain`),
the ratio maths (:mod:`.judge`) and their files (:mod:`.files`); ``workbench bench --suite``.

The names below are loaded from their module on first use, so that what only needs the targets
(``workbench bench --suite NAME --help``, a misspelt suite) does not load the store, pandas and
torch that running a suite needs."""

import importlib

_MODULE_OF = {
    **dict.fromkeys(
        ("combined", "load_previous", "peer_versions", "target_info", "wall_table", "write_files"), "files"
    ),
    **dict.fromkeys(
        ("RatioRow", "best_of", "chain_rows", "defaults_rows", "failures", "judge", "label", "rows_for", "versus_rows"),
        "judge",
    ),
    **dict.fromkeys(("peer_plan", "run_suite"), "run"),
    **dict.fromkeys(
        (
            "MET",
            "MISSED",
            "NOT_COMPARABLE",
            "NOT_MEASURED",
            "OURS",
            "PEER_BACKENDS",
            "SUITES",
            "WRONG",
            "Chain",
            "Defaults",
            "Rule",
            "Suite",
            "Versus",
            "get_suite",
            "required",
        ),
        "targets",
    ),
}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_MODULE_OF))


__all__ = sorted(_MODULE_OF)  # every name the package gives, each loaded on first use
