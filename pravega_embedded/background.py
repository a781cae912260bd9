"""The store's background threads, what they failed at, and the status a user can ask for.

Owns: three daemon threads per open store — linger (drains writers whose batch is older than
their linger), checkpoint (``Engine.checkpoint`` every ``checkpoint_interval`` seconds) and
maintenance (auto-scaling, retention, watermarks, transaction leases, every
``maintenance_interval`` seconds) — the record of their failures, and ``StoreStatus``.

Invariants:
  1. A failure is never swallowed: it is logged with its traceback (logger
     ``pravega_embedded.streams``, ERROR), kept as a ``BackgroundFailure`` (the last 32, shown
     by ``store.status()``), and a failed sync also trips the fail-stop latch, so every later
     call raises it.
  2. Once the latch has tripped the threads do no more work (nothing more may be written).
  3. ``stop`` ends and joins them: no thread outlives its store.
  4. A batch is drained within its writer's linger: a writer starting one wakes the linger
     thread unless it will wake by itself before the batch is due. The thread marks itself
     looking before it reads the writers and sets its wake time before it sleeps, so a batch
     started while it looks wakes the sleep that follows. Woken for a batch that a flush took
     meanwhile, it sleeps ``ARMED_S`` on a timer instead of until the next batch, so a writer
     that flushes all the time does not wake it (and take the GIL) once per flush; a batch due
     before that timer still wakes it.

Thread-safety: ``failures`` and ``wake_linger`` from any thread; ``start``/``stop`` by the
store's open and close.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .failstop import STREAMS_LOG

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["Background", "BackgroundFailure", "StoreStatus"]

_KEEP = 32
ARMED_S = 0.001  # how long the linger thread stays awake-by-timer after a wake that found nothing


@dataclass(frozen=True, slots=True)
class BackgroundFailure:
    """One failure of a background task: which task, when, the error and its traceback."""

    task: str
    time_ns: int
    error: str
    traceback: str


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """The health of an open store (``store.status()``)."""

    path: str
    durability: str
    failed: str | None  # the fail-stop error (a failed sync): the store must be reopened
    background_failures: tuple[BackgroundFailure, ...]  # recent failures of background tasks
    journal_written: int  # journal position after the last appended record
    journal_durable: int  # journal position up to which everything is fdatasynced
    recovered_records: int  # journal records replayed at open
    torn_bytes_cut: int  # bytes of torn journal tail cut at open

    @property
    def healthy(self) -> bool:
        return self.failed is None

    def _repr_html_(self) -> str:
        import html
        state = ("<b style='color:green'>healthy</b>" if self.failed is None else
                 f"<b style='color:red'>stopped</b>: {html.escape(self.failed)}")
        rows = "".join(
            f"<tr><td>{html.escape(f.task)}</td><td>{time.strftime('%H:%M:%S', time.localtime(f.time_ns / 1e9))}"
            f"</td><td>{html.escape(f.error)}</td></tr>" for f in self.background_failures)
        table = (f"<table><tr><th>task</th><th>time</th><th>error</th></tr>{rows}</table>"
                 if rows else "")
        return (f"<b>Store</b> {html.escape(self.path)} (durability={self.durability}): {state}<br>"
                f"journal written {self.journal_written:,}, durable {self.journal_durable:,}{table}")


class Background:
    """The background threads of one store (module docstring)."""

    def __init__(self, engine: "Engine", *, checkpoint_interval: float, maintenance_interval: float,
                 maintenance: list[tuple[str, Callable[[], None]]]) -> None:
        self._engine = engine
        self._ckpt_interval = checkpoint_interval
        self._maint_interval = maintenance_interval
        self._maintenance = maintenance
        self._failures: deque[BackgroundFailure] = deque(maxlen=_KEEP)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._linger_wake = threading.Event()
        # when the linger thread wakes next by itself (monotonic; inf while it looks at the
        # writers and while it sleeps until woken): a batch due later needs no wake (invariant 4)
        self._linger_until = float("inf")
        self._threads = [
            threading.Thread(target=self._linger_loop, name="pe-linger", daemon=True),
            threading.Thread(target=self._checkpoint_loop, name="pe-checkpoint", daemon=True),
            threading.Thread(target=self._maintenance_loop, name="pe-maintenance", daemon=True),
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        self._linger_wake.set()
        for t in self._threads:
            if t.is_alive():
                t.join()

    def wake_linger(self, due: float) -> None:
        """A writer started a batch to be drained at ``due`` (monotonic)."""
        if due < self._linger_until:
            self._linger_wake.set()

    @property
    def failures(self) -> tuple[BackgroundFailure, ...]:
        with self._lock:
            return tuple(self._failures)

    def _failed(self, task: str, exc: BaseException) -> None:
        """Invariant 1."""
        STREAMS_LOG.error("store %s: background task %s failed", self._engine.path, task, exc_info=exc)
        rec = BackgroundFailure(task, time.time_ns(), repr(exc),
                                "".join(traceback.format_exception(exc)))
        with self._lock:
            self._failures.append(rec)

    def _run(self, task: str, fn: Callable[[], None]) -> None:
        if self._engine.latch.tripped or self._engine.closed:
            return  # invariant 2
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - invariant 1: logged, kept, surfaced
            if not self._engine.closed:
                self._failed(task, exc)

    def _linger_loop(self) -> None:
        wake = self._linger_wake
        engine = self._engine
        engine.latch.quiet()
        woken = False
        while not self._stop.is_set():
            self._linger_until = float("inf")  # looking: a batch started now wakes the next wait
            now = time.monotonic()
            nxt = None
            for w in list(engine.writers):
                due = w.tick(now)
                if due is not None and (nxt is None or due < nxt):
                    nxt = due
            if nxt is None and woken:
                # a writer woke this thread and has flushed the batch itself meanwhile: look
                # again after ARMED_S rather than at the next batch it starts, so a writer that
                # flushes often does not wake this thread once per flush (invariant 4 holds: a
                # batch due before then still wakes it)
                nxt = time.monotonic() + ARMED_S
            timeout = None if nxt is None else max(0.0, nxt - time.monotonic())
            self._linger_until = float("inf") if nxt is None else nxt
            woken = False
            if timeout is None or timeout > 0:
                woken = wake.wait(timeout)
            wake.clear()

    def _checkpoint_loop(self) -> None:
        self._engine.latch.quiet()
        while not self._stop.wait(self._ckpt_interval):
            self._run("checkpoint", self._checkpoint)

    def _checkpoint(self) -> None:
        self._engine.checkpoint()

    def _maintenance_loop(self) -> None:
        self._engine.latch.quiet()
        while not self._stop.wait(self._maint_interval):
            for task, fn in self._maintenance:
                self._run(task, fn)
