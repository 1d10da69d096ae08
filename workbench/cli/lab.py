"""``workbench lab``: JupyterLab on the notebooks, with the workbench's kernel and save hook."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from workbench.cli.args import Parser

# JupyterLab quiet, as a person opening the notebooks expects: no "get notified about Jupyter
# news?" pop-up over the page, and no news feed or update check over the network. The options go
# to the server; the settings are this environment's JupyterLab defaults (its settings
# overrides.d, the folder for defaults a package brings), so a person's own choice still wins.
LAB_OPTIONS = ("--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate")
LAB_SETTINGS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


def build_parser() -> Parser:
    parser = Parser(
        prog="workbench lab",
        description="Open JupyterLab on notebooks/: kernels run this Python, records go to results/, and a save "
        "that changed only a notebook's outputs leaves git status clean. Other options go to JupyterLab.",
        epilog="examples:\n  workbench lab\n  workbench lab --port 8890 --no-browser\n  workbench lab --dry-run",
    )
    parser.add_argument("--notebooks", default=None, help="notebooks folder (default: ./notebooks)")
    parser.add_argument("--port", type=int, default=None, help="the port JupyterLab listens on (default: its own)")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser")
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    return parser


def main(argv) -> int:
    """Open JupyterLab on notebooks/ (kernels run this interpreter; records go to results/; a save
    that changed only a notebook's outputs leaves ``git status`` clean)."""
    from workbench.reports.notebooks import default_notebooks_dir, kernel_env

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    nb_dir = Path(args.notebooks).resolve() if args.notebooks else default_notebooks_dir().resolve()
    from workbench.notebook_git import HOOK

    # the post-save hook keeps `git status` clean when a save changed only outputs (workbench/notebook_git.py)
    cmd = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={nb_dir}", f"--ContentsManager.post_save_hook={HOOK}"]
    cmd += LAB_OPTIONS
    if args.port:
        cmd.append(f"--port={args.port}")
    if args.no_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    cmd += extra
    store = os.environ.get("WORKBENCH_STORE") or str(nb_dir.parent / "results" / "workbench.sqlite")
    if args.dry_run:
        print(" ".join(cmd))
        print(f"WORKBENCH_STORE={store}")
        return 0
    if shutil.which("jupyter") is None and not _has_module("jupyterlab"):
        print("workbench lab: jupyterlab is not installed (pip install jupyterlab)", file=sys.stderr)
        return 2
    install_lab_settings()
    with kernel_env(store, root=nb_dir.parent):
        return subprocess.call(cmd)


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def install_lab_settings(app_dir: str | Path | None = None) -> Path | None:
    """Write :data:`LAB_SETTINGS` as this environment's JupyterLab defaults
    (``<app dir>/settings/overrides.d/kernel-workbench.json``; the app dir is JupyterLab's own,
    ``$JUPYTERLAB_DIR`` or ``<prefix>/share/jupyter/lab``) and return the file; None where that
    folder cannot be written (a shared system install: the pop-up then asks once, as usual)."""
    import json

    if app_dir is None:
        from jupyterlab.commands import get_app_dir

        app_dir = get_app_dir()
    path = Path(app_dir) / "settings" / "overrides.d" / "kernel-workbench.json"
    text = json.dumps(LAB_SETTINGS, indent=1) + "\n"
    try:
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    except OSError:
        return None
    return path
