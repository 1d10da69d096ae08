"""Reading BiShengIR's verdict from its output (no triton-ascend needed: plain text parsing).

``bishengir-compile`` exits 1 in both interesting cases on a machine without CANN, so the verdict
comes from what it prints:

- it planned memory, lowered through BiShengHIR and then failed only because CANN's ``hivmc``
  (the final code generator) is not installed: **OK** — on a machine with CANN this compiles;
- ``ub overflow, requires N bits while M bits available``: **UB overflow**;
- anything else: **compile error**, with the first error lines as the message.

When the first attempt overflows, the compiler retries with code motion and then multi-buffering
switched off; a kernel that fits only that way is still OK, flagged ``single_buffered``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

OK = "OK"
UB_OVERFLOW = "UB overflow"
COMPILE_ERROR = "compile error"
VERDICTS = (OK, UB_OVERFLOW, COMPILE_ERROR)

UB_BITS_910B = 192 * 1024 * 8  # 1572864: what the compiler reports as available on Ascend910B

_OVERFLOW = re.compile(r"ub overflow, requires (\d+) bits while (\d+) bits available", re.IGNORECASE)
_HIVMC = re.compile(r"hivmc", re.IGNORECASE)
_ERROR_LINE = re.compile(r"error:\s*(.*)", re.IGNORECASE)
_RETRY_SINGLE = "set enable-auto-multi-buffer to false"


@dataclass(frozen=True)
class Verdict:
    verdict: str
    message: str = ""
    required_bits: int | None = None  # from an overflow message
    available_bits: int | None = None
    used_bits: int | None = None  # peak UB the memory plan used (OK cases, from --enable-memory-display)
    single_buffered: bool = False  # fitted only after the compiler dropped multi-buffering

    def as_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "message": self.message,
            "required_bits": self.required_bits,
            "available_bits": self.available_bits,
            "used_bits": self.used_bits,
            "single_buffered": self.single_buffered,
        }


def _error_lines(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        m = _ERROR_LINE.search(line)
        if m and m.group(1).strip():
            lines.append(m.group(1).strip())
    return lines


def classify_bishengir(returncode: int, stdout: str, stderr: str, used_bits: int | None = None) -> Verdict:
    """The verdict for one ``bishengir-compile`` run from its exit code and output."""
    text = f"{stdout}\n{stderr}"
    m = _OVERFLOW.search(text)
    if m:
        return Verdict(
            UB_OVERFLOW,
            message=f"ub overflow, requires {m.group(1)} bits while {m.group(2)} bits available",
            required_bits=int(m.group(1)),
            available_bits=int(m.group(2)),
        )
    single = _RETRY_SINGLE in text
    if returncode == 0:
        return Verdict(OK, "compiled (CANN present)", used_bits=used_bits, single_buffered=single)
    errors = _error_lines(text)
    real = [e for e in errors if not _HIVMC.search(e)]
    if not real and _HIVMC.search(text) and "Failed to run BiShengHIR pipeline" not in text:
        return Verdict(
            OK,
            "stopped only at the missing CANN hivmc",
            available_bits=UB_BITS_910B,
            used_bits=used_bits,
            single_buffered=single,
        )
    message = "; ".join(dict.fromkeys(real)) if real else _tail(text)
    return Verdict(COMPILE_ERROR, _shorten(message))


def used_ub_bits(workdir: str | Path) -> int | None:
    """Peak UB (bits) of the successful memory plans that ``--enable-memory-display`` wrote.

    ``memory_info_*.json`` lists every UB buffer with its byte offsets (one per multi-buffer copy)
    and its extent in bits; the peak is the highest end of any buffer.
    """
    peak = None
    for path in sorted(Path(workdir).glob("memory_info_*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for record in data.get("Record", []):
            if record.get("status") != "success" or record.get("scope", "ub") != "ub":
                continue
            for buf in record.get("memory_info_array", []):
                extent = int(buf.get("extent", 0))
                for offset in buf.get("offset", []) or [0]:
                    end = int(offset) * 8 + extent
                    peak = end if peak is None else max(peak, end)
    return peak


def front_end_error(message: str) -> Verdict:
    """A failure before BiShengIR (Triton front end or the triton-adapter lowering)."""
    return Verdict(COMPILE_ERROR, _shorten(_clean_triton_message(message)))


def _clean_triton_message(message: str) -> str:
    keep = [
        line.strip()
        for line in message.splitlines()
        if line.strip() and not line.startswith("///") and "compiled kernel cache" not in line
    ]
    return " | ".join(keep)


def _tail(text: str, n: int = 3) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-n:])


def _shorten(text: str, limit: int = 400) -> str:
    text = re.sub(r'loc\("[^"]*"(:\d+:\d+)?\)(:\s*)?', "", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
