"""Sweeps: plans derived from a KernelSpec (:mod:`.plan`), shared by the notebooks and the CLI."""
