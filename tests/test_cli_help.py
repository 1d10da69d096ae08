"""Help for every subcommand and option of ``workbench``: plain text, a default where one exists,
examples; ``workbench --help`` one line per subcommand."""

from __future__ import annotations

import importlib
import re

import pytest

import kernels
from workbench.cli import COMMANDS, main

MARKUP = re.compile(r"``|:(func|mod|class|meth|data|attr):`")


def _parsers():
    for name, (module, _) in COMMANDS.items():
        mod = importlib.import_module(f"workbench.cli.{module}")
        if name == "bench":
            for family in kernels.families():
                yield f"bench {family}", mod.build_parser(kernels.get(family))
            yield "bench --suite", importlib.import_module("workbench.cli.suite").build_parser()
        else:
            yield name, mod.build_parser()


PARSERS = list(_parsers())


def test_top_level_help_has_a_line_per_subcommand(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, (_, summary) in COMMANDS.items():
        assert re.search(rf"^\s+{re.escape(name)}\s+\S", out, re.M), f"{name} has no line in workbench --help"
        assert summary in out


@pytest.mark.parametrize("name,parser", PARSERS, ids=[n for n, _ in PARSERS])
def test_every_option_has_help_and_the_help_is_plain_text(name, parser):
    # argparse has no public list of a parser's arguments: its _actions is what format_help reads.
    missing = [a.option_strings or [a.dest] for a in parser._actions if not (a.help or "").strip()]
    assert not missing, f"workbench {name}: no help for {missing}"
    text = parser.format_help()
    assert not MARKUP.search(text), f"workbench {name} --help shows markup: {MARKUP.search(text).group(0)}"
    assert "example" in (parser.epilog or ""), f"workbench {name} --help shows no example"
    assert parser.description, f"workbench {name} --help says nothing about what it does"
