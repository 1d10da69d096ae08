"""What a session shows in the notebook: its figures (kept in ``s.figures``), the table of
configurations without a time, the live "Apply best to Explorer" button, and a sweep's progress
bar; the figures themselves are drawn by :mod:`workbench.reports.figures`.

:class:`SessionFigures` is a part of :class:`widgets.session.Session` (its base class), never used
alone. It reads the session's ``spec``, ``problem``, ``dtype``, ``device`` and ``headless``,
appends to its ``figures``, and the button calls its ``apply``. It imports nothing of the session.
"""

from __future__ import annotations

from typing import Mapping

from kernels.spec import dtype_name
from workbench.reports import figures as F


class SessionFigures:
    """The display half of a :class:`~widgets.session.Session`: titles, figures, tables, buttons."""

    def _title(self, head: str, mode: str, dtype: str | None, problem: Mapping | None, exclude=()) -> str:
        """A figure's title: the family, ``head``, mode, dtype, device and the problem (less ``exclude``)."""
        prob = {**self.problem, **dict(problem or {})}
        shown = ", ".join(f"{k}={v}" for k, v in prob.items() if k not in exclude)
        return f"{self.spec.title} {head} — {mode}, {dtype_name(dtype or self.dtype)}, {self.device.kind} ({shown})"

    def _show(self, fig) -> None:
        self.figures.append(fig)
        F.show(fig)

    def _show_failures(self, failures: list[dict]) -> None:
        import pandas as pd
        from IPython.display import display

        print(f"{len(failures)} configuration(s) without a time (cannot run, or failed):")
        display(pd.DataFrame(failures))

    def _show_best(self, best: dict) -> None:
        text = f"best: {best['variant']} {F.mapping_str(best['params'])}" + F.ties_note(best)
        if self.headless:
            print(text)
            return
        import ipywidgets as W
        from IPython.display import display

        from widgets.controls import button as make_button  # as wide as its label

        button = make_button("Apply best to Explorer", button_style="success", icon="check")
        label = W.HTML(text)

        def click(_):
            try:
                self.apply(best)
                label.value = text + " — applied"
            except Exception as exc:  # never raise out of a callback
                label.value = f"{text} — {exc}"

        button.on_click(click)
        display(W.HBox([button, label]))


def progress_bar(total: int, label: str):
    """A sweep's progress bar (``0/total`` beside ``label``), displayed at once; None without ipywidgets."""
    try:
        import ipywidgets as W
        from IPython.display import display
    except ImportError:
        return None
    bar = W.IntProgress(value=0, min=0, max=max(total, 1), description=f"0/{total}")
    display(W.HBox([bar, W.Label(label)]))
    return bar


def show_progress(bar, done: int, total: int) -> None:
    """Move ``bar`` (from :func:`progress_bar`) to ``done`` of ``total``."""
    bar.max = max(total, 1)
    bar.value = done
    bar.description = f"{done}/{total}"
