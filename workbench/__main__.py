"""``python -m workbench ...``: the same as the ``workbench`` console script."""

from workbench.cli import entry

entry()
