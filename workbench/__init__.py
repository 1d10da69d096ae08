"""Kernel Workbench's measuring tool: devices and timings, ``measure``, the store, sweeps,
suites, the NPU compile check, reports and the ``workbench`` command line.

The library it measures is ``kernels`` (which imports nothing of this package); the notebook
UI built on it is ``widgets``.
"""
