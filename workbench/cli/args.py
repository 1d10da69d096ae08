"""What every subcommand of ``workbench`` shares: the parser, its errors, and the option helpers.

- :class:`Parser` raises :class:`UsageError` instead of printing argparse's usage block, so
  :func:`workbench.cli.main` prints one line and exits 2; its help shows each option's default
  and keeps the examples of an epilog as written.
- The helpers turn option text into checked values (comma lists, ``NAME=VALUE`` tiles,
  ``k=v,…`` problem knobs, dtypes and modes of a family) and refuse bad input with a message
  that says what to change. Nothing below the command line imports this module.
"""

from __future__ import annotations

import argparse
from pathlib import Path


class UsageError(ValueError):
    """Bad input from the command line: the message says what to change."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's default after its help (where it has one worth saying: not an unset value or
    an off switch); descriptions and epilogs (the examples) kept as written."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        # an unset value or an off switch says nothing (``is``: a default of 0 is worth saying)
        if "%(default)" in text or "(default" in text or default is None or default is False:
            return text
        if default is argparse.SUPPRESS or default == [] or default == "":
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse whose errors (a bad number, an unknown option) are a :class:`UsageError`, so
    :func:`workbench.cli.main` prints them as one line with exit code 2 instead of argparse's usage block."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        if kwargs.get("description"):
            kwargs["description"] = fill_paragraphs(kwargs["description"])
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def fill_paragraphs(text: str, width: int = 92) -> str:
    """Prose paragraphs re-wrapped to ``width``; an indented paragraph (an example) kept as written."""
    import textwrap

    out = []
    for para in text.strip().split("\n\n"):
        if any(line.startswith((" ", "\t")) for line in para.splitlines()):
            out.append(para)
        else:
            out.append(textwrap.fill(" ".join(para.split()), width))
    return "\n\n".join(out)


# --- plain values ---------------------------------------------------------------------------
def split_list(text: str | None) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def typed_value(text: str):
    """A tile value given as text: an int, a float, a bool (true / false) or the text itself."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def parse_param(text: str) -> tuple[str, object]:
    """``--param NAME=VALUE`` -> (name, typed value)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise UsageError(f"--param expects NAME=VALUE (e.g. --param BLOCK_SIZE=1024), got {text!r}")
    return name, typed_value(value)


def parse_assignments(text: str, option: str, example: str = "BLOCK_SIZE=512,1024") -> dict[str, list[str]]:
    """``"A=1,2,B=3"`` -> ``{"A": ["1", "2"], "B": ["3"]}`` (values as text); ``example``: what
    an error shows as the right form (a tile for ``--param``, a problem knob for ``--problem``)."""
    out: dict[str, list[str]] = {}
    current = None
    for token in split_list(text):
        if "=" in token:
            name, _, value = token.partition("=")
            name = name.strip()
            if not name:
                raise UsageError(f"{option} expects NAME=V1,V2,… got {text!r}")
            current = name
            out.setdefault(name, [])
            if value.strip():
                out[name].append(value.strip())
        elif current is None:
            raise UsageError(f"{option} expects NAME=V1,V2,… (e.g. {option} {example}), got {text!r}")
        else:
            out[current].append(token)
    for name, values in out.items():
        if not values:
            raise UsageError(f"{option} {name}= needs at least one value")
    return out


def positive(value, option: str):
    """``value`` unless it is given and not above zero."""
    if value is not None and not value > 0:
        raise UsageError(f"{option} {value:g}: must be a positive number")
    return value


def check_budget(rep_ms: float | None) -> None:
    if rep_ms is not None and not rep_ms > 0:
        raise UsageError(f"--rep-ms {rep_ms:g}: the timing budget must be a positive number of milliseconds")


def check_output_path(path, option: str, folder: bool = False) -> None:
    """Before anything is measured: ``path`` (a file to write, or with ``folder`` a folder) can be
    written: it is not the wrong kind of thing and no parent of it is a file."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and (p.is_dir() != folder):
        raise UsageError(
            f"{option} {p} is {'a file' if folder else 'a folder'}; give {'a folder' if folder else 'a file name'}"
        )
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{option} {p}: {parent} is a file, not a folder; choose another path")
            break


# --- a family's names -------------------------------------------------------------------------
def family(name: str):
    """The registered family ``name`` (its KernelSpec); UsageError naming the families."""
    import kernels

    broken = kernels.broken_families()
    if name in broken:
        raise UsageError(f"kernel family {name!r} cannot load ({broken[name]})")
    if name not in kernels.families():
        raise UsageError(f"unknown kernel family {name!r}; families: {', '.join(kernels.families())}")
    try:
        return kernels.get(name)
    except ValueError as exc:  # its module failed to import: one line, the others unaffected
        raise UsageError(str(exc)) from None


def checked_dtypes(spec, text: str | None) -> list[str]:
    """``--dtype A,B`` as canonical names (default: bf16 where the family has it, else its first);
    UsageError for one the family does not support."""
    from kernels.spec import dtype_name

    dtypes = [dtype_name(d) for d in split_list(text or default_dtype(spec))]
    return _checked_choices("--dtype", dtypes, spec.dtypes, f"is not supported by {spec.name}")


def default_dtype(spec) -> str:
    return "bf16" if "bf16" in spec.dtypes else spec.dtypes[0]


def checked_modes(spec, text: str) -> list[str]:
    """``--mode A,B`` checked against the family's modes."""
    return _checked_choices("--mode", split_list(text), spec.modes, f"is not a mode of {spec.name}")


def _checked_choices(option: str, values: list[str], allowed, why_not: str) -> list[str]:
    """``values`` of a comma-list ``option``, at least one and each in ``allowed``; UsageError
    ``"<option> <value> <why_not>; use one of ..."`` for the first that is not."""
    if not values:
        raise UsageError(f"{option} needs at least one value (a comma list)")
    for value in values:
        if value not in allowed:
            raise UsageError(f"{option} {value} {why_not}; use one of {', '.join(allowed)}")
    return values


def problem_axes(spec, texts) -> dict[str, list]:
    """``--problem k=v,…`` options: each named knob's values, parsed and checked by the knob;
    UsageError names an unknown knob or a bad value."""
    knob_names = {k.name for k in spec.knobs}
    axes: dict[str, list] = {}
    for text in texts:
        for name, values in parse_assignments(text, "--problem", knob_example(spec)).items():
            if name not in knob_names:
                raise UsageError(
                    f"--problem {name}: {spec.name} has no such knob; knobs: {', '.join(sorted(knob_names))}"
                )
            knob = spec.knob(name)
            axes[name] = [knob.validate(knob.parse(v)) for v in values]
    return axes


def knob_example(spec) -> str:
    """``hidden=1024,4096``: the family's x-axis knob with two of the values it sweeps (or its
    default), the form ``--problem`` takes."""
    knob = spec.knob(spec.axis) if spec.axis in {k.name for k in spec.knobs} else spec.knobs[0]
    values = list(knob.sweep[:2]) or list((knob.values or ())[:2]) or [knob.default]
    return f"{knob.name}={','.join(map(str, values))}"


def param_axes(texts) -> dict[str, list]:
    """``--param NAME=V1,V2,…`` options: each tile's values, typed (:func:`typed_value`), not yet
    checked against a variant (:func:`checked_param` does that)."""
    axes: dict[str, list] = {}
    for text in texts:
        for name, values in parse_assignments(text, "--param").items():
            axes[name] = [typed_value(v) for v in values]
    return axes


def checked_param(variant, name: str, value):
    """``value`` checked as the tile ``name`` of ``variant``; UsageError names the variant's tiles."""
    try:
        param = variant.param(name)
    except KeyError:
        known = ", ".join(p.name for p in variant.params) or "none"
        raise UsageError(f"--param {name}: variant {variant.name} has no such tile; its tiles: {known}") from None
    return param.validate(value)


def check_overrides(spec, variants: list[str], overrides: dict) -> None:
    """Every ``--param NAME=VALUE`` names a tile of at least one chosen variant and a value it allows."""
    for name, value in overrides.items():
        having = [spec.variant(v) for v in variants if any(p.name == name for p in spec.variant(v).params)]
        if not having:
            known = sorted({p.name for v in variants for p in spec.variant(v).params})
            raise UsageError(
                f"--param {name}: no chosen variant has this tile; tiles of {', '.join(variants)}: "
                f"{', '.join(known) or 'none'}"
            )
        for var in having:
            var.param(name).validate(value)


# --- where configurations run -----------------------------------------------------------------
def add_executor_options(p: argparse.ArgumentParser, isolate: bool) -> None:
    """The options that choose where configurations run (``workbench sweep`` and ``workbench tune``);
    ``isolate``: offer local runs in a subprocess per configuration."""
    p.add_argument(
        "--executor",
        default="local",
        help="local (this process) or ray (one measuring actor per GPU, compiles ahead on the CPUs)",
    )
    p.add_argument("--address", default=None, help="join this Ray cluster, e.g. 10.0.0.5:6379 (default: a local Ray)")
    p.add_argument("--gpus-per-task", type=float, default=1.0, help="GPUs each Ray measuring actor holds")
    p.add_argument(
        "--num-cpus",
        type=int,
        default=None,
        help="CPU workers of a local Ray (interpreter runs) (default: one per CPU core, Ray's own count)",
    )
    where = "ray, or local --isolate" if isolate else "ray"
    p.add_argument(
        "--timeout-s", type=float, default=None, help=f"seconds one configuration may take ({where}; none: no limit)"
    )
    if isolate:
        p.add_argument("--isolate", action="store_true", help="local: a subprocess per configuration")


def executor_of(args):
    """The executor :func:`add_executor_options`' arguments ask for; UsageError for another name."""
    from workbench.sweep.engine import make_executor

    if args.executor not in ("local", "ray"):
        raise UsageError(f"--executor {args.executor}: use local or ray")
    positive(args.timeout_s, "--timeout-s")
    return make_executor(
        args.executor,
        isolate=getattr(args, "isolate", False),
        address=args.address,
        gpus_per_task=args.gpus_per_task,
        timeout_s=args.timeout_s,
        num_cpus=args.num_cpus,
    )
