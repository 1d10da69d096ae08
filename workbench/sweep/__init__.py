"""Sweeps: a request planned against a KernelSpec (:mod:`.plan`, each configuration's identity in
:mod:`.config`), shared by the notebooks and the command line, and the engine that runs a plan
(:mod:`.engine`) on an executor: in-process, a subprocess per configuration (:mod:`.executors`)
or Ray (:mod:`.ray_executor`, built from its actors :mod:`.actors`, the queue's lanes
:mod:`.lanes`, a run's compile-ahead :mod:`.compile_ahead_driver` and its timeline
:mod:`.timeline`), one task per configuration (:mod:`.tasks`; a task compiled ahead,
:mod:`.compile_ahead`, through :mod:`workbench.compiling`). ``workbench sweep`` is
:mod:`workbench.cli.sweep`; the sweep report :mod:`workbench.reports.sweep`."""
