"""The Explorer's live view: what it draws for the configuration on display.

:class:`ExplorerView` renders a record into the Explorer's widgets: the status line (compile
time, device time, wall per call, launch overhead, GB/s, % of copy bandwidth, peak memory, UB
estimate where the spec has one) or the error line, the speed figure (p50 with its band along
the chosen x axis for the current variant, peers overlaid, the copy-bandwidth bound), the memory
figure (peak MB per variant beside the bytes the problem must move), the correctness table
(every output and gradient; its caption names the configuration that ran) and the why panel
(:mod:`workbench.reports.why`: the configuration's compile facts per kernel, with a warning line
for spills or an occupancy limit, and Nsight Compute's counters once profiled). Which records
the figures draw, and how a figure widget is updated in place, is
:mod:`widgets.explorer_figures`.

A mixin of :class:`widgets.explorer.Explorer`: it sets the Explorer's ``record`` (the one on
display), ``last_cached``, ``last_latency_s``, ``first_shown_s`` and ``relaunches``; it reads its
``spec``, ``_requested_at``, ``_render_lock`` (the notebook thread and the worker both draw;
every render holds it), ``_ncu`` and the widgets
:mod:`widgets.explorer_panel` builds (``w_status``, ``w_error``, ``w_checks``, ``w_why``,
``w_profile``, ``w_profile_status``, ``w_xaxis``, ``w_metric``, ``w_device``, ``speed_fig``,
``memory_fig``), and calls its ``config``, ``_session_for`` and ``_tile_params``. It also holds
the error line's rule: nothing raises out of a callback (:meth:`ExplorerView._safe`), an
exception becomes one error line.
"""

from __future__ import annotations

import html
import time
from typing import Callable

from widgets.explorer_figures import peer_records, peer_slice, update_figure, variant_slice
from workbench.reports import checks, why
from workbench.reports import figures as F
from workbench.reports.text import short_reason


class ExplorerView:
    """Rendering a record into the Explorer's status line, figures, correctness table and why
    panel (see the module docstring for the state it reads)."""

    def _show_record(self, rec, cached: bool) -> None:
        with self._render_lock:
            self._show_record_locked(rec, cached)

    def _show_record_locked(self, rec, cached: bool) -> None:
        self.last_latency_s = None  # before the record: a reader who sees the record waits for it
        self.record = rec
        self.last_cached = cached
        self.relaunches += 1
        self._render_current()
        # relaunch latency: from the control change to the figures and tables drawn; the first
        # of a request kept apart (a first launch's graph-replay number, before its refinement)
        self.last_latency_s = time.perf_counter() - self._requested_at
        if self.first_shown_s is None:
            self.first_shown_s = self.last_latency_s
        self._render_status()

    def _render_current(self) -> None:
        with self._render_lock:
            self._render_locked()

    def _render_locked(self) -> None:
        rec = self.record
        if rec is None:
            return
        cfg = self.config()
        sess = self._session_for(cfg["device"])
        self._render_status()
        self._render_why()
        peers = peer_records(self.spec, sess, cfg)
        # the caption names the configuration that ran, so the table is never read as another's
        ran = f"{rec.variant} {F.mapping_str(rec.params)}".strip()
        self.w_checks.value = f"<b>correctness</b> of {html.escape(ran)}" + checks.checks_html([rec] + peers)
        axis = self.w_xaxis.value or self.spec.axis
        # a line under the plot (and the line's hover) names the tiles it is drawn at: all the
        # mode's tiles but the axis
        used = {p.name for p in self._tile_params(cfg["mode"])}
        tiles = F.mapping_str({k: v for k, v in cfg["params"].items() if k != axis and k in used})
        with F.template_held():  # the widgets carry the house template from when they were made
            speed = F.speed_figure(
                variant_slice(self.spec, sess, cfg, axis) + peer_slice(self.spec, sess, cfg, axis),
                axis,
                self.w_metric.value,
                order=[v.name for v in self.spec.variants],
                highlight=cfg["variant"],
                title=f"{self.spec.title} {cfg['mode']} {cfg['dtype']} on {cfg['device']}: speed vs {axis}",
                tiles=f"{cfg['variant']} at {tiles}" if tiles else cfg["variant"],
            )
            memory = F.memory_figure(
                [rec] + peers,
                order=[v.name for v in self.spec.variants],
                title=f"memory ({cfg['mode']})" + F.sub_lines(F.mapping_str(rec.problem)),
            )
        update_figure(self.speed_fig, speed)
        update_figure(self.memory_fig, memory)

    def _render_status(self) -> None:
        rec = self.record
        if rec is None:
            return
        if rec.error:
            self.w_error.value = (
                '<div class="wb-error" style="color:#b00;font-family:monospace;white-space:pre-wrap">'
                f"{html.escape(rec.error)}</div>"
            )
            self.w_status.value = status_html(f"{rec.variant}: this configuration cannot run (see below)")
        else:
            self.w_error.value = ""
            text = checks.status_text(
                rec, cached=bool(self.last_cached), ub_bytes=self._ub(rec), elapsed_s=self.last_latency_s
            )
            self.w_status.value = status_html(text, failed=rec.passed is False)

    def _ub(self, rec) -> int | None:
        facts = rec.compile_facts or {}
        if "ub_bytes" in facts:  # the measurement already modelled it (workbench.compile_facts)
            return facts["ub_bytes"]
        est = getattr(self.spec, "ub_estimate", None)
        if est is None or self.spec.variant(rec.variant).backend != "npu":
            return None
        try:
            value = est(rec.problem, rec.params, rec.dtype)
            return None if value is None else int(value)
        except Exception:
            return None

    def _render_why(self) -> None:
        self.w_why.value = why.why_html(self.record)
        can_profile = self._ncu is not None and self.w_device.value == "cuda"
        self.w_profile.layout.display = "" if can_profile else "none"
        self.w_profile_status.layout.display = "" if can_profile else "none"

    @property
    def why_text(self) -> str:
        """Plain text of the why panel."""
        return html.unescape(_strip_tags(self.w_why.value))

    @property
    def error_text(self) -> str:
        """Plain text of the error line ('' when the configuration ran)."""
        return html.unescape(_strip_tags(self.w_error.value))

    @property
    def status_text(self) -> str:
        return html.unescape(_strip_tags(self.w_status.value))

    def _show_exception(self, exc: BaseException) -> None:
        self.w_error.value = (
            '<div class="wb-error" style="color:#b00;font-family:monospace;white-space:pre-wrap">'
            f"{html.escape(type(exc).__name__)}: {html.escape(short_reason(str(exc), 600))}</div>"
        )

    def _safe(self, fn: Callable[[], None]) -> None:
        """Run a callback; any exception becomes error text (nothing raises out of a callback)."""
        try:
            fn()
        except Exception as exc:
            self._show_exception(exc)


def status_html(text: str, busy: bool = False, failed: bool = False) -> str:
    """The status line's HTML (``.wb-status``): grey while busy, red where a check failed."""
    color = "#b00" if failed else ("#555" if busy else "#222")
    # wraps at the window's edge (and inside a long token), so the whole line is always in view
    return (
        f'<div class="wb-status" style="font-family:monospace;font-size:12px;color:{color};'
        f'white-space:normal;overflow-wrap:anywhere">{html.escape(text)}</div>'
    )


def _strip_tags(text: str) -> str:
    import re

    return re.sub(r"<[^>]+>", "", text or "")
