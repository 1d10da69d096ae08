"""Compiling ahead: Triton kernels compiled for the measuring GPU by other processes, before the
measuring process's first call of them.

- :mod:`workbench.compiling.target`: what a compile process compiles for (the device's facts).
- :mod:`workbench.compiling.jobs`: one configuration as a job, and the compile of it.
- :mod:`workbench.compiling.pool`: the compile processes.
- :mod:`workbench.compiling.service`: the process's service that suites, sweeps, the notebooks'
  sessions and the Explorer submit to, and that a measurement settles with before its first call.
- :mod:`workbench.compiling.note`: what a record notes of its compile-ahead.
- :mod:`workbench.compiling.first_compile`: a process's first Triton compile, paid in its warm-up.
- :mod:`workbench.compiling.cache`: Triton's disk cache, seen and carried (``workbench cache``).

The Ray executor's compile workers (:mod:`workbench.sweep.compile_ahead_driver`) compile the same
jobs, per node of a cluster.
"""
