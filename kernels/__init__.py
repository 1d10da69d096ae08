"""Kernel Workbench kernels: every family's GPU and NPU kernels, references and the harness.

>>> import kernels
>>> kernels.families()
['rms_norm', 'fused_add_rms_norm', 'scalar_ops', 'block_sparse']
>>> kernels.get("rms_norm").variants[0].name
'gpu_row'
"""

from kernels.spec import KernelSpec, Knob, Param, Variant, broken_families, families, get, register

__all__ = ["KernelSpec", "Knob", "Param", "Variant", "broken_families", "families", "get", "register"]
__version__ = "0.1.0"
