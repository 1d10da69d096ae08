"""The environment block of every report: device, versions, the code's commit, the date."""

from __future__ import annotations

import datetime as _dt
import os
import platform


def environment(device: str = "auto") -> dict:
    """Device name and driver, versions, commit, date: the report's environment block."""
    import torch
    import triton

    from workbench.provenance import code_version

    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": getattr(triton, "__version__", "?"),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "git_commit": code_version() or "(not a git checkout)",
    }
    try:
        from workbench.device import get_device

        dev = get_device(device)
        env.update({k: v for k, v in dev.describe().items()})
    except Exception as exc:
        env["device_error"] = str(exc)
    try:
        import plotly

        env["plotly"] = plotly.__version__
    except ImportError:
        pass
    return env
