"""The process Nsight Compute profiles: one configuration, one call inside the profiler's range.

    python -m workbench.profile_child '{"family": "rms_norm", "variant": "gpu_row", "device": "cuda", ...}'

Builds the configuration through the same spec / variant path every measurement takes
(:func:`workbench.prepare.prepared_call`), calls it three times more so compiles and first-touch
work stay outside, then makes one call between ``torch.cuda.profiler.start()`` and ``stop()``
(``ncu --profile-from-start off`` profiles only there). A configuration that cannot run prints
one line after a mark the parent (:mod:`workbench.ncu`) looks for, and exits 2.
"""

from __future__ import annotations

import json
import sys

from workbench.errors import one_line

WARM_CALLS = 3
ERROR_MARK = "workbench-profile-child-error:"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = json.loads(argv[0])
        run(config)
    except Exception as exc:  # noqa: BLE001 - the parent shows it as one line
        text = one_line(exc)
        print(
            f"{ERROR_MARK} {type(exc).__name__}: {text}" if not isinstance(exc, ValueError) else f"{ERROR_MARK} {text}"
        )
        return 2
    return 0


def run(config: dict) -> None:
    import torch

    from workbench.prepare import prepared_call

    family = config["family"]
    call_config = {k: config[k] for k in ("variant", "dtype", "mode", "problem", "params", "seed") if k in config}
    _, step = prepared_call(family, call_config, device=config.get("device", "cuda"), quick=bool(config.get("quick")))
    for _ in range(WARM_CALLS):
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    raise SystemExit(main())
