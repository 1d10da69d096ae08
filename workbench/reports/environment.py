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


def suite_environment(device, suite, argv) -> dict:
    """The report's environment block (:func:`environment`) plus the
    suite, the command, installed peer versions and the device's copy bandwidth."""
    from workbench import suites as S
    from workbench.reports.reader import scrub_command

    env = environment(device)
    env["suite"] = suite.name
    env["command"] = "workbench bench " + scrub_command(argv)
    for dist, version in S.peer_versions().items():
        env[dist] = version
    try:
        facts = device.copy_bandwidth_facts()
        bw = None if facts is None else facts["gbps"]
    except Exception as exc:  # noqa: BLE001
        facts, bw = None, f"not measured ({exc})"
    env["copy_bw_gbps"] = round(bw, 1) if isinstance(bw, float) else (bw if bw is not None else "n/a (CPU)")
    if facts:
        env["copy_bw_measured"] = f"{facts['measured_at']} ({facts['source']}, {facts['age_s']:.0f} s old)"
    return env
