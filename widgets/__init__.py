"""Widgets: the notebook's model (:class:`Session`), its live view (:class:`Explorer`) and figures.

>>> from widgets import Session
>>> s = Session("rms_norm", device="cpu", quick=True, headless=True)   # doctest: +SKIP

Dependencies run one way: widgets -> workbench -> kernels. Inside widgets the view imports the
model; the model learns its view here (``Session.view``), never by importing it.
"""

from widgets.defaults import default_results_dir, quick_for
from widgets.explorer import Explorer
from widgets.session import Session

Session.view = Explorer

__all__ = ["Session", "Explorer", "quick_for", "default_results_dir"]
