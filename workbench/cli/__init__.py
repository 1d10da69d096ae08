"""The ``workbench`` command line: one module per subcommand, over the library.

Each subcommand module (``workbench/cli/<name>.py``) parses its arguments with
:class:`workbench.cli.args.Parser`, calls the library and prints; :data:`COMMANDS` is the
registry (name -> module and a one-line summary), so a new subcommand is one module and one line.
Nothing below the command line imports this package.

User errors: a command raises :class:`~workbench.cli.args.UsageError` (or ``ValueError``, the
project's "what to change" error) and :func:`main` prints it as one line, ``workbench CMD:
message``, and exits 2, never with a traceback. Exit 1 is kept for a wrong result or a failed check.
"""

from __future__ import annotations

import importlib
import sys

from workbench.errors import one_line

# name -> (module under workbench.cli, what it does in one line)
COMMANDS: dict[str, tuple[str, str]] = {
    "list": ("families", "list the kernel families, their variants and knobs"),
    "bench": ("bench", "measure a family over sizes (or --suite NAME: a suite of targets with verdicts)"),
    "sweep": ("sweep", "sweep tile parameters and sizes of a family, locally or on Ray; resumable"),
    "tune": ("tune", "search a family's tiles per size on this device and write its tuned table"),
    "report": ("report", "run the notebooks headless into an HTML report, re-render a run's report, or gate it"),
    "profile": ("profile", "Nsight Compute counters for one configuration's kernels"),
    "cache": ("cache", "Triton's compiled-kernel cache: info, prune, export and import it (CI)"),
    "npu-check": ("npu_check", "compile the NPU kernels with the real Ascend compiler (no NPU needed)"),
    "lab": ("lab", "open JupyterLab on the notebooks"),
}


# The optional packages and the extra of pyproject.toml that installs each.
EXTRAS = {
    **dict.fromkeys(
        (
            "plotly",
            "ipywidgets",
            "anywidget",
            "jupyterlab",
            "ipykernel",
            "nbformat",
            "nbconvert",
            "papermill",
            "nbclient",
            "jupyter_client",
            "IPython",
            "nbstripout",
            "latex2mathml",
        ),
        "lab",
    ),  # fmt: skip
    "ray": "distributed",
    "optuna": "tune",
    "kaleido": "report",
}


def missing_package(exc: ModuleNotFoundError) -> str:
    """What to install for a package this command needs and this environment lacks."""
    name = (exc.name or str(exc)).split(".")[0]
    extra = EXTRAS.get(name)
    if extra is None:
        return f"needs the Python package {name!r}, which is not installed ({one_line(exc)})"
    return f"needs {name}, from the {extra} extra: pip install 'kernel-workbench[{extra}]' (or make lab)"


def usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: workbench COMMAND [options]   (workbench COMMAND --help for its options and examples)", ""]
    lines += [f"  {name:{width}s}  {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


# A process still alive this long after its command returned prints every thread's stack (entry).
EXIT_WATCH_S = 15


def entry() -> None:
    """The ``workbench`` console script and ``python -m workbench``: :func:`main`, then the exit.

    Once the command has returned, a watchdog prints every thread's stack to stderr if the process
    is still alive :data:`EXIT_WATCH_S` seconds later (faulthandler's; it does not stop the
    process), so a thread or an exit function of Python's that holds the exit names itself. A
    process that ends in time (its compile processes and Inductor's stopped: a few seconds)
    prints nothing. Not armed by :func:`main` itself, which tests call in their own process.

    Where the process used CUDA, it leaves by :func:`_exit_after_python_teardown`: GPU suite runs
    of the norm targets outlived their finished command until their step limit (165 s at 83dd028,
    185 s at bd1262d, 63 s after the last line) with the 15 s watchdog silent, so what held them
    ran after Python's own teardown, in the native libraries' exit handlers (the profiler's
    Kineto and CUPTI are loaded there)."""
    code = main()
    import faulthandler

    faulthandler.dump_traceback_later(EXIT_WATCH_S, exit=False)
    if _used_cuda():
        _exit_after_python_teardown(code)
    raise SystemExit(code)


def _used_cuda() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def _exit_after_python_teardown(code: int) -> None:
    """Python's exit steps in its own order (the non-daemon threads joined, the ``atexit``
    functions run: the compile processes and Inductor's pool stop there), the streams flushed,
    then ``os._exit``: the native libraries' exit handlers, which run after Python's teardown
    where no watchdog can name them, do not run. The driver frees the device at process exit."""
    import atexit
    import os
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()  # as Python's exit does; the watchdog names one that holds
    atexit._run_exitfuncs()  # private but stable (Python 3.0 on): the registered functions, now
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing left to say there
            pass
    os._exit(code)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"workbench: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        target = importlib.import_module(f"{__name__}.{COMMANDS[name][0]}").main
    except ImportError as exc:
        print(f"workbench {name}: not available ({exc})", file=sys.stderr)
        return 2
    try:
        return int(target(rest) or 0)
    except ModuleNotFoundError as exc:  # an optional package: say which install brings it
        print(f"workbench {name}: {missing_package(exc)}", file=sys.stderr)
        return 2
    except ValueError as exc:  # UsageError and the library's own "what to change" errors
        print(f"workbench {name}: {one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader stopped reading (`workbench list | head`): not an error of ours
        sys.stderr.close()
        return 141
    except OSError as exc:  # a path given on the command line that cannot be read or written
        where = f" {exc.filename!r}" if getattr(exc, "filename", None) else ""
        print(
            f"workbench {name}: cannot use the path{where} ({exc.strerror or one_line(exc)}); choose another path",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"workbench {name}: interrupted; every record measured so far is in the store", file=sys.stderr)
        return 130
