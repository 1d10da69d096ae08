"""An error as text: the one line a person reads (the command line and the profiler's child print
it, :func:`one_line`), and the error a record carries (:func:`short_error`).
"""

from __future__ import annotations

import traceback
from pathlib import Path


def one_line(exc: BaseException) -> str:
    """The error's message on one line, or its type's name where it has none."""
    return " ".join(str(exc).split()) or type(exc).__name__


def short_error(exc: BaseException) -> str:
    """The error a record carries: a ValueError's message as it is (it says why the configuration
    cannot run), another exception's type and message with the line that raised it; at most
    2000 characters."""
    text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
    if not isinstance(exc, ValueError):
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            last = frames[-1]
            text += f" (at {Path(last.filename).name}:{last.lineno})"
    return text.strip()[:2000]
