"""The Explorer's parts that know nothing of a family: its background worker and its control
widgets (built from a tile Param or a problem Knob)."""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from typing import Any, Callable

import ipywidgets as W


class Worker:
    """One background thread: debounced "latest wins" requests plus queued jobs (sweeps).

    The debounce is on both edges: a request that comes while the worker is idle and after a
    quiet spell of ``debounce_s`` runs at once (a one-notch move waits for nothing), and the
    requests that follow it within ``debounce_s`` of each other coalesce into the last one."""

    def __init__(self, debounce_s: float):
        self.debounce_s = debounce_s
        self._cv = threading.Condition()
        self._pending: tuple[float, Callable[[], None]] | None = None
        self._last_request = float("-inf")
        self._jobs: deque[Callable[[], None]] = deque()
        self._busy = False
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="explorer-worker", daemon=True)
        self._thread.start()

    def request(self, fn: Callable[[], None], delay: float | None = None) -> None:
        """Run ``fn`` after the debounce (or ``delay``), replacing a request not started yet."""
        with self._cv:
            now = time.monotonic()
            wait = self.debounce_s if delay is None else delay
            quiet = not self._busy and self._pending is None and now - self._last_request >= self.debounce_s
            if delay is None and quiet:
                wait = 0.0
            self._last_request = now
            self._pending = (now + wait, fn)
            self._cv.notify_all()

    def submit(self, fn: Callable[[], None]) -> None:
        with self._cv:
            self._jobs.append(fn)
            self._cv.notify_all()

    @property
    def busy(self) -> bool:
        with self._cv:
            return self._busy or self._pending is not None or bool(self._jobs)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is pending or running; False on timeout."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._busy or self._pending is not None or self._jobs:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(0.05 if left is None else min(left, 0.05))
        return True

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stopped:
                        return
                    now = time.monotonic()
                    if self._jobs:
                        fn = self._jobs.popleft()
                        break
                    if self._pending is not None and self._pending[0] <= now:
                        fn = self._pending[1]
                        self._pending = None
                        break
                    self._cv.wait(None if self._pending is None else max(0.0, self._pending[0] - now))
                self._busy = True
            try:
                fn()
            except Exception:  # the jobs report their own errors; never let the thread die
                traceback.print_exc()
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()


REFUSED_MARK = " ✗"  # after a tile value the variant's check refuses at the current problem


def button(description: str, **kwargs) -> W.Button:
    """A button as wide as its label (ipywidgets' fixed width cuts a longer one to "App…") that
    does not shrink beside a long line of text."""
    kwargs.setdefault("layout", W.Layout(width="auto", min_width="fit-content", flex="0 0 auto"))
    return W.Button(description=description, **kwargs)


def value_labels(param, refused=()) -> list[tuple[str, Any]]:
    """A tile control's options: each value's label, marked :data:`REFUSED_MARK` where ``refused``."""
    return [(f"{v}{REFUSED_MARK}" if v in refused else str(v), v) for v in param.values]


def mark_refused(widget: W.Widget, param, refused) -> bool:
    """Relabel a tile control (:func:`param_widget`) so the values in ``refused`` carry
    :data:`REFUSED_MARK`, keeping its value; True when a label changed. Call it where the control's
    observers are held off: replacing options moves the selection for a moment."""
    options = value_labels(param, refused)
    if [tuple(o) for o in widget.options] == options:
        return False
    value = widget.value
    widget.options = options
    widget.value = value
    return True


def param_widget(param, value) -> W.Widget:
    values = list(param.values)
    numeric = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    desc = param.name
    if len(numeric) >= 3 and all(v == "auto" or v in numeric for v in values):
        return W.SelectionSlider(
            options=value_labels(param),
            value=value,
            description=desc,
            continuous_update=False,
            tooltip=param.doc,
            style={"description_width": "initial"},
            layout=W.Layout(width="420px"),
        )
    return W.Dropdown(
        options=value_labels(param),
        value=value,
        description=desc,
        tooltip=param.doc,
        style={"description_width": "initial"},
    )


def knob_widget(knob, value) -> W.Widget:
    style = {"description_width": "initial"}
    tip = knob.doc or knob.name
    if knob.values is not None:
        return W.Dropdown(
            options=[(str(v), v) for v in knob.values], value=value, description=knob.name, style=style, tooltip=tip
        )
    if isinstance(knob.default, bool):
        return W.Checkbox(value=bool(value), description=knob.name, style=style, tooltip=tip)
    if isinstance(knob.default, int):
        # a free integer: impossible sizes are typed in and reported, not clamped away
        return W.IntText(
            value=int(value), description=knob.name, style=style, layout=W.Layout(width="200px"), tooltip=tip
        )
    if isinstance(knob.default, float):
        return W.FloatText(
            value=float(value), description=knob.name, style=style, layout=W.Layout(width="200px"), tooltip=tip
        )
    return W.Text(value=str(value), description=knob.name, style=style, tooltip=tip)


def knobs_help(knobs) -> str:
    """One small line saying what each documented knob means (``block_size``: "0 = the largest
    power of two dividing nodes" …), so a value such as 0 is never shown unexplained."""
    import html

    parts = [f"<b>{html.escape(k.name)}</b>: {html.escape(k.doc)}" for k in knobs if k.doc]
    if not parts:
        return ""
    return '<div style="font-size:12px;color:#555;line-height:1.4">' + " · ".join(parts) + "</div>"


def parse_values(text: str, like: list) -> list:
    """Comma list -> values typed like the allowed ones (ints, floats, bools, "auto")."""
    out = []
    for t in [t.strip() for t in text.split(",") if t.strip()]:
        value: Any = t
        low = t.lower()
        if low in ("true", "false"):
            value = low == "true"
        else:
            for cast in (int, float):
                try:
                    value = cast(t)
                    break
                except ValueError:
                    pass
        match = [v for v in like if str(v) == str(value)]
        out.append(match[0] if match else value)
    return out


def neighbour_values(widget: W.Widget) -> list:
    """The values one step away from a control's current one: the previous and next option of a
    slider or dropdown, the other state of a checkbox; none for a free number (no step to take)."""
    if isinstance(widget, W.Checkbox):
        return [not widget.value]
    options = getattr(widget, "options", None)
    if not options:
        return []
    values = [o[1] if isinstance(o, tuple) else o for o in options]
    if widget.value not in values:
        return []
    i = values.index(widget.value)
    return [values[j] for j in (i + 1, i - 1) if 0 <= j < len(values)]
