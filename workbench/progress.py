"""Where a long command is: a progress bar on a terminal, plain lines in a log, never silent.

:class:`Progress` shows a tqdm bar on stderr (count, rate and an estimate of the time left,
redrawn every second so the elapsed time moves between steps) when stderr is a terminal, and
otherwise prints each step's line with its count (``[3/12] …``), so a CI log shows the same
progress without control characters. Either way a background thread says what is going on
(``… still running rms_norm.ipynb: 35 s``) whenever nothing was printed for ``quiet_s``
seconds, so no command stays silent through a long step. :meth:`Progress.sweep` is the
callback the sweep engine takes (:func:`workbench.sweep.engine.run_sweep`).
"""

from __future__ import annotations

import sys
import threading
import time

QUIET_S = 5.0


class Progress:
    """``with Progress(total, "bench rms_norm") as p:`` then ``p.line(text)`` after each step,
    ``p.doing(text)`` when a long step starts; ``total=None`` where the count is not known ahead."""

    def __init__(self, total: int | None, label: str, *, stream=None, quiet_s: float = QUIET_S):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.quiet_s = quiet_s
        self.started = self._last = time.monotonic()
        self._doing = ""
        self._bar = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._printed_at = 0.0
        if getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=label, file=self.stream, unit="step", dynamic_ncols=True)
        self._thread = threading.Thread(target=self._watch, name="workbench-progress", daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        if self._bar is not None:
            self._bar.close()

    # --- what the command calls ----------------------------------------------------------------
    def line(self, text: str, count: bool = True) -> None:
        """Print ``text`` for a step just finished (counted unless ``count=False``)."""
        with self._lock:
            if count:
                self.done += 1
            self._last = time.monotonic()
            if self._bar is not None:
                self._bar.write(text, file=sys.stdout)
                if count:
                    self._bar.update(1)
            else:
                # the count alone where the total is not known ahead: never a "?" for a reader to puzzle over
                prefix = (
                    (f"[{self.done}/{self.total}] " if self.total is not None else f"[{self.done}] ") if count else ""
                )
                print(prefix + text, flush=True)

    def doing(self, text: str) -> None:
        """Say what a step that is starting does (shown by the heartbeat while it runs)."""
        with self._lock:
            self._doing = text
            self._last = time.monotonic()
            if self._bar is not None:
                self._bar.set_postfix_str(text[:60], refresh=True)

    def advance(self, n: int = 1, total: int | None = None) -> None:
        """Count ``n`` steps without a line (``total``: the count became known)."""
        with self._lock:
            self.done += n
            if total is not None:
                self.total = total
            self._last = time.monotonic()
            if self._bar is not None:
                if total is not None and self._bar.total != total:
                    self._bar.total = total
                self._bar.update(n)

    def sweep(self, every_s: float = QUIET_S):
        """A callback for the sweep engine's ``progress(progress, record)``: the bar follows its
        count; in a log a line every ``every_s``. A configuration that truly failed gets one line
        of its own (:func:`failure_line`), on a terminal too; one that cannot run (the record's
        ``cannot_run``: its tile refused before anything launched) is only counted."""

        def show(p, record=None) -> None:
            with self._lock:
                gained = p.done - self.done
                self.total = p.total
            failed = record is not None and not record.get("cannot_run")
            failed = failed and bool(record.get("error") or record.get("passed") is False)
            if failed:
                self.line(failure_line(record), count=False)
            if self._bar is not None:
                self.advance(max(gained, 0), total=p.total)
                return
            with self._lock:
                self.done = p.done
            now = time.monotonic()
            if p.remaining == 0 or failed or now - self._printed_at >= every_s:
                self._printed_at = now
                self.line(p.line(), count=False)

        return show

    # --- the heartbeat ---------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                quiet = time.monotonic() - self._last
                if quiet < self.quiet_s:
                    continue
                self._last = time.monotonic()
                if self._bar is not None:
                    self._bar.refresh()
                    continue
                what = f" {self._doing}" if self._doing else ""
                count = f" ({self.done}/{self.total} done)" if self.total else ""
                print(f"… still running{what}{count}: {time.monotonic() - self.started:.0f} s", flush=True)


def failure_line(record: dict, width: int = 240) -> str:
    """One line for a configuration that failed: what it was and the first line of its error,
    with the file holding its full log where the executor kept one (``record["log"]``)."""
    tiles = " ".join(f"{k}={v}" for k, v in (record.get("params") or {}).items() if v != "auto")
    problem = " ".join(f"{k}={v}" for k, v in (record.get("problem") or {}).items())
    error = (record.get("error") or "wrong result").strip().splitlines() or ["?"]
    text = f"failed: {record.get('kernel', '?')}/{record.get('variant', '?')} {tiles} [{problem}]: {error[0]}"
    if len(text) > width:
        text = text[: width - 1] + "…"
    log = record.get("log")
    return f"{text} (full log: {log})" if log else text
