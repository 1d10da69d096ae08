"""``workbench tune``: per-device tile search on the sweep engine, written as tuned tables.

:mod:`.space` (the family's grid per size), :mod:`.search` (grid / random / Optuna TPE),
:mod:`.run` (the ask-measure-tell loop on the sweep engine), :mod:`.pick` (one configuration
per size, aware of noise), :mod:`.table` (the table, its diff, installing it), :mod:`.report`
and :mod:`.cli`.
"""
