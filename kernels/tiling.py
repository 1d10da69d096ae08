"""Plain-integer tile arithmetic for host code.

Triton's own ``triton.cdiv`` / ``triton.next_power_of_2`` are wrapped for use inside kernels in
recent Triton versions and cost microseconds per call on the host; these cost nanoseconds, which
matters on the launch path of a kernel that runs for ten microseconds.
"""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def is_power_of_two(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and (v & (v - 1)) == 0
