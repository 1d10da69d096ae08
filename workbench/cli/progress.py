"""Where a long command is: a progress bar on a terminal, plain numbered lines in a log.

:class:`Progress` wraps tqdm (a bar on stderr with an estimate of the time left, the command's
own lines printed above it) when stderr is a terminal, and otherwise prints each line with its
count (``[3/12] …``) so a CI log shows the same progress without control characters.
"""

from __future__ import annotations

import sys


class Progress:
    """``with Progress(total, "sweep rms_norm") as p: p.line(text)`` after each step (or
    ``p.advance()`` for a step with nothing to print)."""

    def __init__(self, total: int, label: str, *, stream=None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self._bar = None
        if getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=label, file=self.stream, unit="config", dynamic_ncols=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()

    def line(self, text: str) -> None:
        """Print ``text`` for the step just finished and count it."""
        self.done += 1
        if self._bar is not None:
            self._bar.write(text, file=sys.stdout)
            self._bar.update(1)
        else:
            print(f"[{self.done}/{self.total}] {text}", flush=True)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
