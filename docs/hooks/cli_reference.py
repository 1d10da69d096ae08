"""MkDocs hook: the command reference (docs/cli.md) generated from the parsers themselves.

The page holds a marker, ``<!-- cli-reference -->``; at build time it is replaced by each
subcommand's ``--help`` as ``workbench/cli/`` builds it, so the reference and the command line
never drift apart.
"""

from __future__ import annotations

import importlib

MARKER = "<!-- cli-reference -->"


def reference() -> str:
    import kernels
    from workbench.cli import COMMANDS, usage

    parts = ["## workbench", "", "```text", usage(), "```", ""]
    for name, (module, summary) in COMMANDS.items():
        mod = importlib.import_module(f"workbench.cli.{module}")
        if name == "bench":
            family = kernels.families()[0]
            parsers = [
                (f"workbench bench {family}", mod.build_parser(kernels.get(family))),
                ("workbench bench --suite", importlib.import_module("workbench.cli.suite").build_parser()),
            ]
            note = (
                f"Each family takes its own problem knobs as options; `workbench bench FAMILY --help` shows "
                f"them. Below: `{family}`'s, then the suite form."
            )
        else:
            parsers = [(f"workbench {name}", mod.build_parser())]
            note = ""
        parts += [f"## workbench {name}", "", summary[0].upper() + summary[1:] + ".", ""]
        if note:
            parts += [note, ""]
        for title, parser in parsers:
            if len(parsers) > 1:
                parts += [f"### {title}", ""]
            parts += ["```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 - MkDocs' hook signature
    if MARKER in markdown:
        return markdown.replace(MARKER, reference())
    return markdown
