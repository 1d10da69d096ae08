"""JupyterLab in headless Chromium: start a throwaway server, open a notebook, drive the Explorer.

Used by the browser tests (``tests/browser/``) and by ``benchmarks/diagnostics/browser_latency.py``.

- :class:`Lab` starts ``jupyter lab`` (this Python's) on a free localhost port with a random
  token and temporary config / data / runtime / settings / workspace directories, waits until
  it answers and shuts it down again: the REST shutdown first (which stops the kernels), then
  SIGTERM and SIGKILL to its process group and to the kernels it started (they run in sessions
  of their own).
- :func:`launch_chromium` drives Debian's ``chromium`` through Playwright's Python API
  (``executable_path``; Playwright's own browser downloads are never used).
- :func:`copy_checkout` makes a throwaway git checkout of this working tree with the notebook
  filter configured (``make notebook-filter``), so notebooks can be run and saved there and
  ``git status`` asked what the run left behind; :func:`prepare_notebook` copies one notebook
  with a cell of parameters injected after its ``parameters`` cell (as papermill does).
- :class:`NotebookPage` runs a notebook through JupyterLab's menus (Run All, then Save) and
  reads / sets the Explorer's controls the way a person does (select, keyboard on sliders,
  typing, clicking), finding them by the Explorer's CSS hooks (``wb-control-<name>``, ``wb-speed`` …).

Why one long module: the server, the browser and the page are one harness whose waits and
timeouts are tuned together (a page waits on the kernel the server started); every browser test
and the latency diagnostic import it as one kit.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from workbench.cli.lab import LAB_OPTIONS, install_lab_settings

REPO = Path(__file__).resolve().parents[2]
SAVE_HOOK = "workbench.notebook_git.refresh_index_after_save"  # workbench.notebook_git.HOOK
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


# --- locating the pieces ---------------------------------------------------------------------
def find_chromium() -> str | None:
    """``$WORKBENCH_CHROMIUM``, else Debian's ``chromium`` on PATH (``/usr/bin/chromium``)."""
    env = os.environ.get("WORKBENCH_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def missing_pieces() -> list[str]:
    """Why the browser suite cannot run here ([] when it can)."""
    missing = []
    if find_chromium() is None:
        missing.append("no chromium executable (apt-get install chromium, or set WORKBENCH_CHROMIUM)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("no Playwright Python package (pip install playwright; its browser download is not needed)")
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        missing.append("no jupyterlab")
    return missing


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the checkout copy -----------------------------------------------------------------------
def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {out.stderr.strip()}")
    return out.stdout


def copy_checkout(dst: Path) -> Path:
    """``dst/repo``: this working tree's files (tracked, and untracked but not ignored) committed
    in a new git repository through the notebook filter ``make notebook-filter`` configures (with
    this Python's nbstripout), so a notebook run and saved here first goes in without its outputs.
    Raises when the copy is not clean right after (tests/test_notebook_hygiene.py checks that
    the committed notebooks are in their filtered form)."""
    repo = Path(dst) / "repo"
    names = [n for n in _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0") if n]
    for name in names:
        src = REPO / name
        if src.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    ident = ["-c", "user.name=browser-tests", "-c", "user.email=tests@localhost", "-c", "commit.gpgsign=false"]
    _git(repo, "init", "-q")
    # The filter first, as in a clone after `make lab`: notebooks this working tree ran and saved
    # (outputs in the files) are committed through it, as their committed form.
    make = subprocess.run(
        ["make", "-s", "notebook-filter", f"PY={sys.executable}"], cwd=repo, capture_output=True, text=True, timeout=60
    )
    if make.returncode != 0:
        raise RuntimeError(f"make notebook-filter failed: {make.stdout}{make.stderr}")
    _git(repo, "add", "-A")
    _git(repo, *ident, "commit", "-q", "-m", "copy of the working tree")
    changed = git_status(repo)
    if changed:
        raise RuntimeError(f"the copy is not clean right after its commit through the notebook filter: {changed}")
    return repo


def git_status(repo: Path) -> list[str]:
    """``git status --porcelain`` lines (untracked files included): [] for a clean tree."""
    return [line for line in _git(repo, "status", "--porcelain", "--untracked-files=all").splitlines() if line]


def settled_git_status(repo: Path, timeout: float = 180) -> list[str]:
    """:func:`git_status` once the lab's save hook has refreshed the index: the hook runs git in
    the server's background, so a save's entry can still be in flight; polls until the tree is
    clean or ``timeout``, then returns what it last saw."""
    end = time.monotonic() + timeout
    while True:
        status = git_status(repo)
        if not status or time.monotonic() >= end:
            return status
        time.sleep(1.0)


def code_version_of(repo: Path) -> str:
    """What :func:`workbench.provenance.version_of` names the copy's code."""
    out = subprocess.run(
        [sys.executable, "-m", "workbench.provenance"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    return out.stdout.strip() or out.stderr.strip()


def notebooks_of(repo: Path) -> list[Path]:
    """Every notebook in the copy's notebooks/, the index first."""
    found = sorted((Path(repo) / "notebooks").glob("*.ipynb"))
    return sorted(found, key=lambda p: (p.stem != "index", p.stem))


# --- the notebook copy -----------------------------------------------------------------------
def prepare_notebook(src: Path, dst_dir: Path, params: dict, name: str | None = None) -> Path:
    """Copy ``src`` into ``dst_dir`` with a cell setting ``params`` right after the cell tagged
    ``parameters`` (tagged ``injected-parameters``, like papermill's)."""
    import nbformat

    nb = nbformat.read(str(src), as_version=4)
    index = next((i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if index is None:
        raise ValueError(f"{src} has no cell tagged 'parameters'")
    source = "# Parameters injected by the browser tests\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(index + 1, cell)
    for c in nb.cells:  # a clean start: no old outputs in the page
        if c.cell_type == "code":
            c.outputs = []
            c.execution_count = None
    dst = Path(dst_dir) / (name or Path(src).name)
    nbformat.write(nb, str(dst))
    return dst


# --- the server ------------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc; [] where there is no /proc)."""
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def _command_line(pid: int) -> str:
    """The process's command line, its arguments joined by spaces ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the process that started it dies, so a
    killed test run (CI timeout, SIGKILL) leaves no server behind; the server then stops its
    kernels, and a kernel exits by itself when its server is gone."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        state = Path(f"/proc/{pid}/stat").read_text()
        return state[state.rfind(")") + 2] != "Z"
    except OSError:
        return True


class Lab:
    """A throwaway JupyterLab server rooted at ``root_dir`` (see the module docstring).

    ``env`` is added to the server's environment, which its kernels inherit (the checkout goes
    first on ``PYTHONPATH`` so a notebook copied elsewhere still imports this checkout's code).
    """

    def __init__(self, root_dir: Path, work_dir: Path | None = None, env: dict | None = None):
        self.root_dir = Path(root_dir)
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="wb-lab-"))
        self.port = free_port()
        self.token = secrets.token_hex(24)
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.log_path = self.work_dir / "jupyterlab.log"
        self._log = None
        self._kernel_pids: set[int] = set()

    def start(self, timeout: float = 90) -> Lab:
        dirs = {n: self.work_dir / n for n in ("config", "data", "runtime", "settings", "workspaces")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        # no news pop-up, no news feed, no update check: the settings and options `workbench lab`
        # gives JupyterLab (workbench/cli/lab.py), so the browser tests see the lab a person sees
        if install_lab_settings() is None:
            raise RuntimeError("cannot write the lab's JupyterLab settings (workbench.cli.lab.install_lab_settings)")
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(dirs["config"]),
            JUPYTER_DATA_DIR=str(dirs["data"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
            JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
            JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
            PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p]),
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            f"--LabApp.user_settings_dir={dirs['settings']}",
            f"--LabApp.workspaces_dir={dirs['workspaces']}",
            f"--ContentsManager.post_save_hook={SAVE_HOOK}",  # as `workbench lab` starts it
            *LAB_OPTIONS,
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.root_dir,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() can signal all of it
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        self._wait_ready(timeout)
        return self

    def api(self, path: str, method: str = "GET", timeout: float = 5):
        req = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        if method != "GET":
            req.data = b""
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def _wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.api("/api/status", timeout=2)
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.25)
        raise TimeoutError(f"jupyter lab did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def notebook_url(self, relpath: str) -> str:
        return f"{self.url}/lab/tree/{relpath}?token={self.token}&reset"

    def kernel_pids(self) -> set[int]:
        """Process ids of the server's kernels now: its children that run ipykernel (not the save
        hook's git, also a child of the server while it refreshes the index)."""
        if self.proc is None or self.proc.poll() is not None:
            return set()
        return {pid for pid in _children(self.proc.pid) if "ipykernel" in _command_line(pid)}

    def shutdown_kernel_of(self, relpath: str) -> None:
        """End the session (and its kernel) of the notebook at ``relpath``, through the REST API."""
        self.remember_kernels()
        for session in self.api("/api/sessions") or []:
            if session.get("path") == relpath or session.get("path", "").endswith("/" + relpath):
                self.api(f"/api/sessions/{session['id']}", method="DELETE")

    def remember_kernels(self) -> None:
        """Note the server's current child processes (its kernels, in sessions of their own)."""
        if self.proc is not None and self.proc.poll() is None:
            self._kernel_pids.update(self.kernel_pids())

    def stop(self, grace: float = 10) -> None:
        """Shut the server and its kernels down; safe to call twice and after a crash."""
        if self.proc is None:
            return
        self.remember_kernels()
        if self.proc.poll() is None:
            try:
                self.api("/api/shutdown", method="POST", timeout=3)
            except Exception:
                pass
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            live = [p for p in self._kernel_pids if _alive(p)]
            for pid in live:
                try:
                    os.killpg(pid, sig)  # a kernel leads its own session / process group
                except (ProcessLookupError, PermissionError):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            end = time.monotonic() + 3
            while live and time.monotonic() < end:
                live = [p for p in live if _alive(p)]
                time.sleep(0.1)
        if self._log is not None:
            self._log.close()
            self._log = None
        self.proc = None

    def __enter__(self) -> Lab:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- the browser -----------------------------------------------------------------------------
def launch_chromium(playwright, executable: str | None = None):
    executable = executable or find_chromium()
    if executable is None:
        raise RuntimeError("no chromium executable")
    return playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)


def open_offline(browser, path: Path, width: int = 1280, height: int = 1000):
    """A page with ``path`` opened from disk and every http(s) request refused; returns
    (page, page errors, URLs it asked the network for), the lists filled as the page runs."""
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    asked: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def offline(route):
        asked.append(route.request.url)
        route.abort()

    page.route("http://**/*", offline)
    page.route("https://**/*", offline)
    page.goto(Path(path).as_uri(), wait_until="load", timeout=60_000)
    return page, errors, asked


# JS helpers evaluated in the page ------------------------------------------------------------
# A plotly graph inside an element: its title and a digest of its traces (what was drawn).
_PLOT_JS = """
(sel) => {
  const host = document.querySelector(sel);
  if (!host) return null;
  const gd = host.classList.contains('js-plotly-plot') ? host : host.querySelector('.js-plotly-plot');
  if (!gd || !gd.data) return {drawn: false};
  const title = host.querySelector('.gtitle');
  const notes = ((gd.layout || {}).annotations || []).map(a => String(a.text || '')).join(' | ');
  const traces = gd.data.map(t => ({
    type: t.type || 'scatter', name: t.name || '',
    x: Array.from(t.x || []).map(String), y: Array.from(t.y || []).map(String),
    z: t.z ? Array.from(t.z).map(r => Array.from(r).map(v => v === null ? null : Number(v))) : null,
  }));
  return {
    drawn: true,
    title: title ? title.textContent : '',
    notes: notes,
    traces: traces,
    points: gd.querySelectorAll('.scatterlayer .point, .heatmaplayer image, .hm image').length,
  };
}
"""


# What a person would see wrong in one cell's outputs, measured on the page's boxes (the cell
# scrolled into view first). For every plotly figure: its title (and subtitle lines) against
# each plot area (the drag rectangle over it), the tick labels and the figure's edges (a title
# cut on the right or the top); a note outside the plot areas (a subplot's title, the line under
# a plot) against the plot areas, the axis titles, the title and the other notes; the legend
# against the axis titles and the title. For every button, its label against its width
# (scrollWidth > clientWidth: "App…"). For every table, figure, picture or preformatted block,
# that it stays inside the cell or scrolls there. Returns {figures, buttons, problems}.
_FIT_JS = """
(cell) => {
  const box = (e) => { const r = e.getBoundingClientRect(); return {l: r.left, t: r.top, r: r.right, b: r.bottom, w: r.width, h: r.height}; };
  const meet = (a, b) => Math.min(a.r, b.r) - Math.max(a.l, b.l) > 1 && Math.min(a.b, b.b) - Math.max(a.t, b.t) > 1;
  const inside = (p, a) => p.x >= a.l && p.x <= a.r && p.y >= a.t && p.y <= a.b;
  const visible = (b) => b.w > 0.5 && b.h > 0.5;
  const problems = [];
  let figures = 0, buttons = 0;
  for (const gd of cell.querySelectorAll('.js-plotly-plot')) {
    const svg = gd.querySelector('.main-svg');
    if (!svg) continue;
    figures += 1;
    const name = ((gd.querySelector('.gtitle') || {}).textContent || '(untitled)').slice(0, 80);
    const fig = box(svg);
    const areas = Array.from(gd.querySelectorAll('.draglayer .nsewdrag')).map(box).filter(visible);
    const ticks = Array.from(gd.querySelectorAll('.xtick text, .ytick text, .x2tick text, .y2tick text')).map(box).filter(visible);
    const axisTitles = Array.from(gd.querySelectorAll('[class*="xtitle"], [class*="ytitle"]')).map(box).filter(visible);
    const title = gd.querySelector('.gtitle');
    if (title) {
      const t = box(title);
      if (visible(t)) {
        if (areas.some(a => meet(t, a))) problems.push(`${name}: the title overlaps the plot area`);
        if (ticks.some(a => meet(t, a))) problems.push(`${name}: the title overlaps a tick label`);
        if (t.t < fig.t - 1) problems.push(`${name}: the title is cut at the figure's top`);
        if (t.r > fig.r + 1 || t.l < fig.l - 1) problems.push(`${name}: the title is cut at the figure's edge (${Math.round(t.l - fig.l)}..${Math.round(t.r - fig.l)} of ${Math.round(fig.w)} px)`);
      }
    }
    const notes = [];
    for (const ann of gd.querySelectorAll('.annotation')) {
      const a = box(ann);
      if (!visible(a)) continue;
      if (notes.some(o => meet(a, o))) problems.push(`${name}: the note "${ann.textContent.slice(0, 60)}" overlaps another note`);
      notes.push(a);
      const text = ann.textContent.slice(0, 60);
      const centre = {x: (a.l + a.r) / 2, y: (a.t + a.b) / 2};
      if (!areas.some(p => inside(centre, p)) && areas.some(p => meet(a, p))) problems.push(`${name}: the note "${text}" overlaps a plot area`);
      if (axisTitles.some(p => meet(a, p))) problems.push(`${name}: the note "${text}" overlaps an axis title`);
      if (title && meet(a, box(title))) problems.push(`${name}: the note "${text}" overlaps the title`);
      if (a.r > fig.r + 1) problems.push(`${name}: the note "${text}" is cut at the figure's edge`);
    }
    const legend = gd.querySelector('.legend');
    if (legend) {
      const l = box(legend);
      if (visible(l) && axisTitles.some(p => meet(l, p))) problems.push(`${name}: the legend overlaps an axis title`);
      if (visible(l) && title && meet(l, box(title))) problems.push(`${name}: the legend overlaps the title`);
    }
  }
  for (const b of cell.querySelectorAll('button.jupyter-button, .widget-button, .widget-toggle-button')) {
    if (!b.offsetParent) continue;
    buttons += 1;
    if (b.scrollWidth > b.clientWidth + 1) problems.push(`button "${b.textContent.trim()}" is truncated (${b.scrollWidth} px of text in ${b.clientWidth} px)`);
  }
  const area = cell.querySelector('.jp-Cell-outputArea, .jp-OutputArea');
  if (area) {
    const out = box(area);
    for (const t of area.querySelectorAll('table, .js-plotly-plot, img, pre')) {
      const b = box(t);
      if (!visible(b) || b.r <= out.r + 1) continue;
      let e = t.parentElement, scrolls = false;
      while (e && e !== area.parentElement) {
        const s = getComputedStyle(e);
        if (['auto', 'scroll', 'hidden'].includes(s.overflowX) && box(e).r <= out.r + 1) { scrolls = true; break; }
        e = e.parentElement;
      }
      if (!scrolls) problems.push(`a ${t.tagName.toLowerCase()} reaches ${Math.round(b.r - out.r)} px past the cell's edge`);
    }
  }
  return {figures, buttons, problems};
}
"""


@dataclass
class RunAll:
    """What a notebook showed after Run All and Save."""

    seconds: float  # from Run All to every cell done
    prompts: list[str]
    tracebacks: list[str] = field(default_factory=list)
    widget_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    saved: bool = False
    save_seconds: list[float] = field(default_factory=list)  # each File > Save, click to clean tab
    layout: dict = field(default_factory=dict)  # NotebookPage.layout_problems() after the run


class NotebookPage:
    """One notebook open in JupyterLab, with Explorer helpers. ``page`` is a Playwright Page."""

    def __init__(self, page, lab: Lab, relpath: str):
        self.page = page
        self.lab = lab
        self.relpath = relpath
        self.console: list[str] = []  # the browser console, uncaught page errors included
        page.on("console", lambda m: self.console.append(f"[{m.type}] {m.text}"))
        page.on("pageerror", lambda e: self.console.append(f"[pageerror] {e}"))

    def page_errors(self) -> list[str]:
        """Uncaught JavaScript errors in the page so far."""
        return [c for c in self.console if c.startswith("[pageerror]")]

    # --- the notebook ------------------------------------------------------------------------
    def open(self, timeout: float = 90) -> NotebookPage:
        self.page.goto(self.lab.notebook_url(self.relpath), wait_until="domcontentloaded", timeout=timeout * 1000)
        self.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=timeout * 1000)
        # the kernel is up when the toolbar's status says idle
        self.wait_kernel_idle(timeout)
        return self

    def kernel_status(self) -> str:
        """The kernel's state as the status bar shows it ("Python 3 (ipykernel) | Idle" -> "idle");
        '' before a kernel is attached."""
        return self.page.evaluate(
            """() => {
              for (const e of document.querySelectorAll('.jp-StatusBar-TextItem')) {
                const m = /^(.+) \\| (\\w[\\w ]*)$/.exec(e.textContent.trim());
                if (m && m[1] !== 'No Kernel') return m[2].toLowerCase();
              }
              return '';
            }"""
        )

    def wait_kernel_idle(self, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        status = ""
        while time.monotonic() < end:
            status = self.kernel_status()
            if status == "idle":
                return
            time.sleep(0.2)
        raise TimeoutError(f"kernel not idle after {timeout:.0f} s (status {status!r})")

    def run_all(self) -> None:
        """Run > Run All Cells, through the menu bar as a person would."""
        self.page.get_by_role("menuitem", name="Run", exact=True).click()
        self.page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

    def save(self, timeout: float = 30) -> float | None:
        """File > Save, then wait until the tab no longer shows unsaved changes: the seconds from
        the click to then, or None when it did not happen within ``timeout``."""
        self.page.get_by_role("menuitem", name="File", exact=True).click()
        # the item's accessible name carries its shortcut: find it by its label
        item = self.page.locator(
            ".lm-Menu-item", has=self.page.locator(".lm-Menu-itemLabel", has_text="Save Notebook")
        ).filter(has_not_text="As")
        item.first.wait_for()
        started = time.monotonic()
        item.first.click()
        end = started + timeout
        while time.monotonic() < end:
            if self.page.locator(".lm-TabBar-tab.jp-mod-dirty, .jp-mod-dirty").count() == 0:
                return time.monotonic() - started
            time.sleep(0.05)
        return None

    def run_all_and_save(self, timeout: float = 240, saves: int = 2) -> RunAll:
        """Open the notebook, Run All, wait until every cell ran (or execution stopped), read what
        the page shows, then save it ``saves`` times (a person saves again; the second save's git
        refresh queues behind the first's)."""
        self.open()
        self.lab.remember_kernels()
        t0 = time.monotonic()
        self.run_all()
        prompts = self.wait_all_ran(timeout=timeout)
        seconds = time.monotonic() - t0
        run = RunAll(
            seconds=seconds,
            prompts=prompts,
            tracebacks=self.tracebacks(),
            widget_errors=self.widget_errors(),
            page_errors=self.page_errors(),
        )
        run.layout = self.layout_problems()
        for _ in range(saves):
            took = self.save()
            run.saved = took is not None
            if not run.saved:
                break
            run.save_seconds.append(took)
        return run

    def layout_problems(self, settle_s: float = 0.4) -> dict:
        """Every cell scrolled into view in turn and measured with :data:`_FIT_JS`: {"figures",
        "buttons" (how many were measured), "problems" (each prefixed with the cell's number)}."""
        cells = self.page.locator(".jp-Notebook .jp-Cell")
        figures = buttons = 0
        problems: list[str] = []
        for i in range(cells.count()):
            cell = cells.nth(i)
            cell.evaluate("e => e.scrollIntoView({block: 'start'})")
            time.sleep(settle_s)  # the notebook renders a cell that comes into view
            found = cell.evaluate(_FIT_JS)
            figures += found["figures"]
            buttons += found["buttons"]
            problems += [f"cell {i + 1}: {p}" for p in found["problems"]]
        return {"figures": figures, "buttons": buttons, "problems": problems}

    def cells_state(self) -> list[str]:
        """Each code cell's prompt: '[3]:' ran, '[*]:' running or queued, '[ ]:' not run."""
        return self.page.evaluate(
            """() => Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt'))
                    .map(e => e.textContent.trim())"""
        )

    def wait_all_ran(self, timeout: float = 240) -> list[str]:
        """Wait until Run All is over: nothing running or queued and the kernel idle (all cells
        numbered, or execution stopped at an error and stayed so for a while). Returns the prompts."""
        end = time.monotonic() + timeout
        prompts: list[str] = []
        settled_since = None
        while time.monotonic() < end:
            prompts = self.cells_state()
            numbered = [p for p in prompts if p[1:-2].strip().isdigit()]
            busy = any("*" in p for p in prompts) or self.kernel_status() != "idle"
            if prompts and not busy and len(numbered) == len(prompts):
                return prompts
            if numbered and not busy:  # stopped early (an error): wait a little to be sure
                settled_since = settled_since or time.monotonic()
                if time.monotonic() - settled_since > 3:
                    return prompts
            else:
                settled_since = None
            time.sleep(0.3)
        raise TimeoutError(f"cells still running after {timeout:.0f} s: {prompts}")

    def tracebacks(self) -> list[str]:
        """Texts of error outputs (tracebacks) in the notebook."""
        return self.page.evaluate(
            """() => Array.from(document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
                .map(e => e.textContent)
                .filter(t => /Traceback \\(most recent call last\\)|^\\s*Cell In\\[|\\w+Error: /.test(t))
                .map(t => t.slice(-3000))"""
        )

    def widget_errors(self) -> list[str]:
        """Widget views that failed to render (a front-end / extension mismatch shows these)."""
        return self.page.evaluate(
            """() => Array.from(document.querySelectorAll('.jp-OutputArea-output'))
                .map(e => e.textContent)
                .filter(t => /Error displaying widget|Failed to load model class|Error rendering/.test(t))
                .map(t => t.slice(0, 1000))"""
        )

    def picture(self, path: Path, css: str = ".wb-explorer", height: int = 1500) -> Path:
        """A PNG of the top of the element ``css`` as the page shows it: the window made tall
        enough, the element scrolled to the top of the notebook, the shot clipped to it (an
        element screenshot of a cell inside JupyterLab's scrolling notebook comes out grey)."""
        size = self.page.viewport_size
        self.page.set_viewport_size({"width": size["width"], "height": height})
        try:
            el = self.page.locator(css).first
            el.evaluate("e => e.scrollIntoView({block: 'start'})")
            time.sleep(1.0)  # plotly redraws at the new size
            box = el.bounding_box()
            panel = self.page.locator(".jp-NotebookPanel-notebook, .jp-Notebook").first.bounding_box()
            bottom = min(box["y"] + box["height"], panel["y"] + panel["height"] if panel else height, height)
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            clip = {"x": box["x"], "y": max(box["y"], 0), "width": box["width"], "height": bottom - max(box["y"], 0)}
            self.page.screenshot(path=str(path), clip=clip)
        finally:
            self.page.set_viewport_size(size)
        return Path(path)

    # --- the Explorer ------------------------------------------------------------------------
    def control(self, name: str):
        return self.page.locator(f".wb-explorer .wb-control-{name}").first

    def text_of(self, css: str) -> str:
        """Text of the first match (textContent: the notebook skips rendering cells out of view,
        so innerText of an off-screen Explorer would be empty)."""
        loc = self.page.locator(f".wb-explorer {css}")
        return (loc.first.text_content() or "") if loc.count() else ""

    def select(self, name: str, value: str) -> None:
        """A Dropdown control: pick ``value`` by its label."""
        self.control(name).locator("select").select_option(label=str(value))

    def dropdown(self, name: str) -> dict:
        """A Dropdown control: {"value": the shown label, "options": every label}."""
        return (
            self.control(name)
            .locator("select")
            .evaluate(
                """s => ({value: s.options[s.selectedIndex] ? s.options[s.selectedIndex].text : null,
                     options: Array.from(s.options).map(o => o.text)})"""
            )
        )

    def input_value(self, css: str) -> str:
        """The text in a Text / IntText control (by control name or CSS)."""
        css = css if css.startswith((".", "#")) else f".wb-control-{css}"
        return self.page.locator(f".wb-explorer {css} input").first.input_value()

    def checks(self) -> dict:
        """The correctness table: its caption (which configuration ran) and its rows as texts."""
        return self.page.evaluate(
            """() => {
              const host = document.querySelector('.wb-explorer .wb-checks');
              if (!host) return {caption: '', rows: []};
              const table = host.querySelector('table');
              const rest = host.cloneNode(true);
              rest.querySelectorAll('table').forEach(t => t.remove());
              const rows = table ? Array.from(table.querySelectorAll('tr')).slice(1)
                  .map(r => Array.from(r.querySelectorAll('td')).map(c => c.textContent.trim())) : [];
              return {caption: rest.textContent.trim(), rows: rows};
            }"""
        )

    def slider_label(self, name: str) -> str:
        """A SelectionSlider's readout as shown ("128 ✗" for a value the variant refuses here)."""
        return (self.control(name).locator(".widget-readout").text_content() or "").strip()

    def slider_value(self, name: str) -> str:
        """A SelectionSlider's value as text: its readout without the refused mark."""
        return self.slider_label(name).removesuffix("✗").strip()

    def slide_to(self, name: str, value: str, options: list[str], timeout: float = 10) -> None:
        """A SelectionSlider control: focus its handle and step with the arrow keys to ``value``
        (``options`` are its values as text, in order). Each key press is a change, as for a person."""
        handle = self.control(name).locator(".noUi-handle").first
        current = self.slider_value(name)
        steps = options.index(str(value)) - options.index(current)
        handle.focus()
        key = "ArrowRight" if steps > 0 else "ArrowLeft"
        for _ in range(abs(steps)):
            self.page.keyboard.press(key)
        end = time.monotonic() + timeout
        while self.slider_value(name) != str(value):
            if time.monotonic() > end:
                raise TimeoutError(f"{name} shows {self.slider_value(name)!r}, not {value!r}")
            time.sleep(0.05)

    def type_into(self, name_or_css: str, text: str) -> None:
        """A Text control (by control name or CSS): replace its text and commit with Enter."""
        css = name_or_css if name_or_css.startswith((".", "#")) else f".wb-control-{name_or_css}"
        box = self.page.locator(f".wb-explorer {css} input, .wb-explorer {css} textarea").first
        box.fill(str(text))
        box.press("Enter")

    def plot(self, css: str) -> dict | None:
        return self.page.evaluate(_PLOT_JS, f".wb-explorer {css}")

    def wait_for(self, predicate, timeout: float, what: str, poll: float = 0.1):
        """Poll ``predicate()`` until it returns something truthy; that value is returned."""
        end = time.monotonic() + timeout
        last = None
        while time.monotonic() < end:
            last = predicate()
            if last:
                return last
            time.sleep(poll)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
