"""What the families' ``torch.library.triton_op`` registrations share: the namespace and the
tile overrides carried as one string argument.

Each family registers its forward and backward as ops under ``torch.ops.kwb`` (kernel
workbench) in its own ``ops.py``. The public functions call them only while torch.compile traces
(``torch.compiler.is_compiling()``): there Dynamo sees one op per call and no Python to break on,
and Inductor sees the Triton kernels (``wrap_triton``, see :func:`kernels.launch.launch`). Eager
calls keep the leaner direct path: a custom op's dispatch costs host time a small kernel feels.

Tile overrides mix ints and strings (``BLOCK_SIZE=1024``, ``DW_REDUCE="partials"``), which an op
schema cannot hold in one list, so they travel as ``"BLOCK_SIZE=1024;DW_REDUCE=partials"``.
"""

from __future__ import annotations

import functools

NAMESPACE = "kwb"


def encode_tiles(tiles: dict) -> str:
    """``{"BLOCK_SIZE": 1024, "DW_REDUCE": "partials"}`` -> ``"BLOCK_SIZE=1024;DW_REDUCE=partials"``."""
    return ";".join(f"{name}={tiles[name]}" for name in sorted(tiles))


@functools.lru_cache(maxsize=1024)
def decode_tiles(text: str) -> tuple[tuple[str, object], ...]:
    """The inverse of :func:`encode_tiles`, as sorted ``(name, value)`` pairs: integers back to
    int, ``True`` / ``False`` to bool, anything else kept as its string ("auto", "partials")."""
    pairs = []
    for part in text.split(";") if text else ():
        name, _, value = part.partition("=")
        if value in ("True", "False"):
            pairs.append((name, value == "True"))
        else:
            pairs.append((name, int(value) if value.lstrip("-").isdigit() else value))
    return tuple(pairs)
