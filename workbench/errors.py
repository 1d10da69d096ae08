"""An error as the one line a person reads (the command line and the profiler's child print it)."""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """The error's message on one line, or its type's name where it has none."""
    return " ".join(str(exc).split()) or type(exc).__name__
