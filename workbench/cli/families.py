"""``workbench list``: the kernel families, their variants and problem knobs."""

from __future__ import annotations

from workbench.cli.args import Parser


def build_parser() -> Parser:
    return Parser(
        prog="workbench list",
        description="List every registered kernel family: its title, variants and problem knobs; a family "
        "that cannot load (a broken entry point, a module that fails to import) by name with its error "
        "in one line (exit 1), every other family as usual.",
        epilog="example:\n  workbench list",
    )


def main(argv) -> int:
    import kernels

    build_parser().parse_args(argv)
    status = 0
    listed = kernels.families()
    for name in listed:
        try:
            spec = kernels.get(name)
        except Exception as exc:  # a broken family must not hide the others
            print(f"{name:22s} (cannot load: {kernels.broken_families().get(name) or exc})")
            status = 1
            continue
        print(f"{name:22s} {spec.title}: {', '.join(v.name for v in spec.variants)}")
        print(f"{'':22s} knobs: {', '.join(k.name for k in spec.knobs)}; modes: {', '.join(spec.modes)}")
    for name, reason in kernels.broken_families().items():
        if name not in listed:
            print(f"{name:22s} (cannot load: {reason})")
            status = 1
    return status
