"""Widgets: the live Explorer, sweeps, plotly figures and report export, generic over every KernelSpec.

>>> from widgets import Session
>>> s = Session("rms_norm", device="cpu", quick=True, headless=True)   # doctest: +SKIP

See :mod:`widgets.session` for the notebook API and :mod:`widgets.explorer` for the Explorer.
"""

from widgets.session import Session

__all__ = ["Session", "Explorer"]


def __getattr__(name):
    if name == "Explorer":
        from widgets.explorer import Explorer

        return Explorer
    raise AttributeError(name)
