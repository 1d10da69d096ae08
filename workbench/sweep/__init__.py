"""Sweeps: plans derived from a KernelSpec (:mod:`.plan`), shared by the notebooks and the CLI,
and the engine that runs them (:mod:`.engine`) on an executor: in-process, a subprocess per
configuration (:mod:`.executors`) or Ray (:mod:`.ray_executor`), one task per configuration
(:mod:`.tasks`); ``workbench sweep`` (:mod:`.cli`) and the sweep report (:mod:`.report`)."""
