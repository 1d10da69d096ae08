"""One tune from start to files: measure a family's grid, pick per size, and write the candidate
table and the records into an out folder. ``workbench tune`` and ``Session.tune`` (a notebook)
both call :func:`tune_family`; each then writes the tune report (workbench/reports/tune.py) and
says what it found in its own way.

Files in ``out``: ``records.sqlite`` (the sweep store; a second tune into the same folder takes
what is recorded there), ``records.csv`` / ``.json`` and ``tuned/<device>.json`` (the candidate:
the sizes this run measured, the installed table's other sizes kept as they were;
``tuned/<part>/<device>.json`` for a part other than the forward). Nothing is
installed here: :meth:`Tuned.install` does that, and refuses a tune that saw a wrong result, in
the tuned dtype or, for the tiles it chose, in any other dtype the family declares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernels import tuned_tables
from workbench.provenance import code_version
from workbench.record import failed_checks, versions
from workbench.store import Store, write_csv, write_json
from workbench.sweep.engine import STORE_NAME
from workbench.tune import table
from workbench.tune.run import TuneOptions, TuneResult, run_tune
from workbench.tune.space import Space


@dataclass
class Tuned:
    """What one tune found and wrote: the result (choices, records), the device key the table is
    filed under, the candidate table, its diff against the installed one and the candidate's path."""

    result: TuneResult
    key: str
    table: dict
    diff: list[str]
    table_path: Path

    @property
    def wrong(self) -> list[dict]:
        return self.result.wrong

    @property
    def family(self) -> str:
        return self.result.space.spec.name

    @property
    def part(self) -> str:
        return self.result.space.part

    def installed_path(self) -> Path:
        """Where :meth:`install` writes: beside the family's code, or under ``$KERNELS_TUNED_DIR``."""
        return table.installed_path(self.family, self.key, self.part)

    def wrong_message(self) -> str:
        """Every wrong result of this tune, one line each (size, dtype, tiles and the outputs that
        failed), under a line that counts them."""
        lines = [
            f"{len(self.wrong)} configurations of {self.family} gave wrong results; nothing was installed "
            "(fix the kernel, or its check, and tune again):"
        ]
        knob = self.result.space.tuning.knob
        for r in self.wrong:
            what = failed_checks(r)
            tiles = ", ".join(f"{k}={v}" for k, v in (r.get("params") or {}).items() if v != "auto") or "auto tiles"
            size = (r.get("problem") or {}).get(knob)
            lines.append(f"  {r.get('variant')} {r.get('mode')} {r.get('dtype')} {knob}={size} ({tiles}): {what}")
        return "\n".join(lines)

    def install(self) -> Path:
        """Install the candidate, so ``"auto"`` tiles take it from now on; ValueError (naming each
        wrong result) where a configuration gave a wrong result in the tuned dtype, or the chosen
        tiles of a size did in another dtype the family declares (a table built on them is not
        trusted)."""
        if self.wrong:
            raise ValueError(self.wrong_message())
        return table.install(self.table)


def tune_family(
    space: Space,
    options: TuneOptions,
    executor,
    host,
    device_kind: str,
    out: str | Path,
    *,
    command: str,
    extra_provenance: dict | None = None,
    progress=None,
) -> Tuned:
    """Measure ``space`` with ``executor`` (``host``: the device configurations are checked
    against; ``device_kind``: where the tasks run) and write the files listed in the module
    docstring into ``out``. ValueError where no configuration ran (nothing to file a table under),
    or where the installed table cannot be read (checked before measuring, where the host names
    its device)."""
    family = space.spec.name
    out = Path(out)
    key = tuned_tables.device_key(host) if getattr(host, "name", "?") != "?" else None
    if key is not None:
        table.read_installed(family, key, space.part)  # a bad installed table stops here, before measuring
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out / STORE_NAME)
    try:
        result = run_tune(space, options, executor, store, host, device_kind, progress=progress)
        rows = store.records()
    finally:
        store.close()
    key = result.device_key or key
    if key is None:
        raise ValueError(f"no configuration of {family} ran on {device_kind}; see {out / 'records.csv'}")
    installed = table.read_installed(family, key, space.part)
    provenance = {
        "commit": code_version(),
        **{k: versions()[k] for k in ("torch", "triton")},
        "command": command,
        "strategy": options.strategy,
        "seed": options.seed,
        "budget_s": options.budget_s,
        "executor": executor.describe(),
        "workers": result.workers,
        "rep_ms": options.rep_ms,
        "wall_s": round(result.wall_s, 1),
        **(extra_provenance or {}),
    }
    candidate = table.merge(installed, table.build_table(space, key, result.choices, provenance))
    folder = tuned_tables.part_dir(out / "tuned", space.part)
    written = table.write_table(candidate, folder / tuned_tables.file_name(key))
    write_csv(rows, out / "records.csv")
    write_json(rows, out / "records.json")
    return Tuned(result, key, candidate, table.diff_lines(installed, candidate), written)
