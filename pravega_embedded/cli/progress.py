"""The progress line of long writes and reads: events, bytes and rate, redrawn in place on
stderr while stderr is a terminal (and, for ``read``, stdout is not: its events go there).

Owns: deciding whether to show it (:func:`wanted`) and drawing it at most a few times a
second; ``close`` clears it.

Thread-safety: one Progress per command, used by one thread.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress", "wanted"]

_EVERY = 0.25  # seconds between redraws


def wanted(*, stdout_is_output: bool) -> bool:
    """True when a person watches stderr and it does not mix with the command's output."""
    if not sys.stderr.isatty():
        return False
    return not (stdout_is_output and sys.stdout.isatty())


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"  # pragma: no cover - the loop returns


class Progress:
    """``verb N events (B bytes), R events/s`` on one line of ``stream`` (when enabled)."""

    def __init__(self, verb: str, enabled: bool, stream: TextIO | None = None) -> None:
        self.verb = verb
        self.enabled = enabled
        self._out = stream or sys.stderr
        self._start = self._last = time.monotonic()
        self.events = 0
        self.nbytes = 0
        self._drawn = False

    def add(self, events: int, nbytes: int) -> None:
        self.events += events
        self.nbytes += nbytes
        if self.enabled:
            now = time.monotonic()
            if not self._drawn or now - self._last >= _EVERY:  # at once, then a few times a second
                self._last = now
                self._draw(now)

    def _draw(self, now: float) -> None:
        dt = max(now - self._start, 1e-9)
        if self.events:
            text = f"{self.events:,} events ({_size(self.nbytes)}), {self.events / dt:,.0f} events/s"
        else:  # a byte stream
            text = f"{_size(self.nbytes)}, {_size(self.nbytes / dt)}/s"
        self._out.write(f"\r\033[K{self.verb} {text}")
        self._out.flush()
        self._drawn = True

    def close(self) -> None:
        """Clear the line (idempotent)."""
        if self._drawn:
            self._out.write("\r\033[K")
            self._out.flush()
            self._drawn = False
