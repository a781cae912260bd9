"""What processes and threads wait in, and a watchdog that ends a test that hangs.

A test that hangs costs a whole CI run (it ends at CI's own limit with no word of where). Two
places waited forever before: a SIGKILLed child of the power-cut loop that LazyFS never
answered (``tests/powercut/lazyfs.py`` now kills LazyFS then), and nothing else known; the
:class:`Watchdog` covers the unknown ones. Used by ``tests/conftest.py`` and the power-cut
harness; nothing here imports pravega_embedded.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import traceback

__all__ = ["Watchdog", "child_pids", "python_stacks", "thread_states"]


def thread_states(pid: int) -> str:
    """What each thread of process ``pid`` waits in: its name and state, its wait channel and
    the top of its kernel stack (readable by root)."""
    out = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as exc:
        return f"pid {pid}: {exc}"
    for tid in tids:
        parts = []
        for name in ("stat", "wchan", "stack"):
            try:
                with open(f"/proc/{pid}/task/{tid}/{name}") as f:
                    text = f.read()
            except OSError:
                continue
            if name == "stat":  # "tid (comm) S ...": the name and the state
                text = text[text.find("("): text.rfind(")") + 3]
            elif name == "stack":
                text = " < ".join(ln.split()[-1] for ln in text.splitlines()[:6] if ln.strip())
            if text.strip():
                parts.append(text.strip())
        out.append(f"{tid} " + " | ".join(parts))
    return f"pid {pid}: " + "; ".join(out)


def python_stacks() -> str:
    """The Python stack of every thread of this process."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        out.append(f"--- thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame)))
    return "\n".join(out)


def child_pids(pid: int | None = None) -> list[int]:
    """The direct children of process ``pid`` (this one by default)."""
    pid = os.getpid() if pid is None else pid
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


class Watchdog:
    """Ends a test that runs longer than ``limit`` seconds instead of letting it hang: writes
    what every thread of this process and of its children waits in to ``fd`` (the real stderr,
    not pytest's capture), then SIGKILLs the children (a FUSE daemon that deadlocked among
    them: its death ends every request waiting on it, so the test fails with the errors that
    follow). If the test still runs ``grace`` seconds later, it dumps the stacks again and ends
    the process with status 70."""

    def __init__(self, fd: int, limit: float, grace: float = 120.0) -> None:
        self.fd = fd
        self.limit = limit
        self.grace = grace
        self._timer: threading.Timer | None = None

    def start(self, name: str) -> None:
        self.cancel()
        self._timer = threading.Timer(self.limit, self._fire, (name,))
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _write(self, text: str) -> None:
        os.write(self.fd, text.encode(errors="replace"))

    def _fire(self, name: str) -> None:
        kids = child_pids()
        self._write(f"\n[watchdog] {name} has run for {self.limit:.0f}s: killing its child "
                    f"processes {kids}.\n{python_stacks()}\n[watchdog] this process "
                    f"{thread_states(os.getpid())}\n"
                    + "".join(f"[watchdog] child {thread_states(k)}\n" for k in kids))
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except OSError:
                pass
        self._timer = threading.Timer(self.grace, self._end, (name,))
        self._timer.daemon = True
        self._timer.start()

    def _end(self, name: str) -> None:
        self._write(f"\n[watchdog] {name} still runs {self.grace:.0f}s later: ending the test "
                    "session.\n")
        faulthandler.dump_traceback(file=self.fd, all_threads=True)
        os._exit(70)
