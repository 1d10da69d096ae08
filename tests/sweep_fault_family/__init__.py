"""A test-only kernel family whose tile parameter ``FAULT`` makes a configuration fail the ways a
real one can: raise, end its process (``os._exit``), be killed by a signal, or hang.

It is registered only by tests (``register()``), never by the package: production code has no
way to reach it. Workers find it because the sweep task carries the module that registers it.
"""

from __future__ import annotations

import os
import signal
import time

from fake_families import doubling_family

from kernels.spec import Param
from kernels.spec import register as register_family

NAME = "sweep_faults"
FAULTS = ("none", "raise", "exit", "signal", "hang")


def _run(inputs, problem, FAULT="none", SCALE=1):
    if FAULT == "raise":
        print("injected fault: what a failing compiler prints", flush=True)
        raise RuntimeError("injected fault: raise")
    if FAULT == "exit":
        os._exit(3)
    if FAULT == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    if FAULT == "hang":
        time.sleep(3600)
    return inputs["x"] * 2 * SCALE  # SCALE != 1 gives a wrong result (a failed check)


spec = doubling_family(
    NAME,
    "Injected faults (tests only)",
    n=64,
    n_high=1 << 16,
    variant="faulty",
    backend="torch",
    run=_run,
    params=(Param("FAULT", FAULTS, "none"), Param("SCALE", (1, 2), 1)),
)


def register() -> None:
    register_family(__name__, name=NAME)
