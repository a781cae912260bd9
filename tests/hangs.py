"""What processes and threads wait in, and a watchdog that ends a test that hangs.

A test that hangs costs a whole CI run: it ends at CI's own limit with no word of where. One
such hang is known: a SIGKILLed child of the power-cut loop that LazyFS never answered
(``tests/powercut/lazyfs.py`` kills LazyFS then). The :class:`Watchdog` covers the unknown
ones. It is a separate process, because a thread of the test process cannot be relied on: a
page fault on a memory-mapped file of a FUSE file system that does not answer blocks the
faulting thread while it holds the GIL, and then no other Python thread runs.

Run as a script, this module is that process (``python hangs.py PID``): it reads
``start LIMIT NAME`` and ``stop`` lines from pytest (process PID) on its stdin and exits at EOF.
Used by ``tests/conftest.py`` and the power-cut harness; nothing here imports pravega_embedded.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

__all__ = ["Watchdog", "child_pids", "thread_states"]

GRACE = float(os.environ.get("PE_TEST_GRACE", "120"))  # from killing the children to killing pytest


def _read(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


def thread_states(pid: int) -> str:
    """What each thread of process ``pid`` waits in: its name and state, its wait channel and
    the top of its kernel stack (readable by root)."""
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as exc:
        return f"pid {pid}: {exc}"
    out = []
    for tid in tids:
        parts = []
        for name in ("stat", "wchan", "stack"):
            try:
                text = _read(f"/proc/{pid}/task/{tid}/{name}")
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


def child_pids(pid: int) -> list[int]:
    """The direct children of process ``pid``."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids: list[int] = []
    for tid in tids:
        try:
            kids += [int(k) for k in _read(f"/proc/{pid}/task/{tid}/children").split()]
        except OSError:
            continue
    return kids


class Watchdog:
    """pytest's side of the watchdog process: :meth:`start` before each test, :meth:`stop`
    after it. If a test runs longer than its limit, the watchdog process

    1. kills the test's child processes that were not there when the test started (a FUSE
       daemon that stopped answering among them: its death ends every request waiting on it);
    2. signals pytest (SIGUSR1), whose faulthandler writes every thread's Python stack to the
       real stderr, and writes what pytest's and the children's threads wait in;
    3. if the test still runs ``GRACE`` seconds later, kills pytest (status -9): the run
       fails at once instead of at CI's limit.

    Output goes to ``fd``, the real stderr (pytest captures the test's own)."""

    def __init__(self, fd: int) -> None:
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=fd, stderr=fd)
        assert self.proc.stdin is not None
        self._pipe = self.proc.stdin

    def _send(self, line: str) -> None:
        try:
            self._pipe.write(line.encode(errors="replace") + b"\n")
            self._pipe.flush()
        except OSError:
            pass  # the watchdog is gone: tests run on without it

    def start(self, name: str, limit: float) -> None:
        kids = ",".join(str(k) for k in child_pids(os.getpid())) or "-"
        self._send(f"start {limit} {kids} {name}")

    def stop(self) -> None:
        self._send("stop")

    def close(self) -> None:
        try:
            self._pipe.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _write(text: str) -> None:
    data = text.encode(errors="replace")
    while data:
        try:
            data = data[os.write(2, data):]
        except OSError:
            return


def _fire(pid: int, name: str, limit: float, before: set[int]) -> None:
    me = os.getpid()
    kids = [k for k in child_pids(pid) if k != me]
    new = [k for k in kids if k not in before]
    states = "".join(f"[watchdog] child {thread_states(k)}\n" for k in kids)
    for k in new:
        try:
            os.kill(k, signal.SIGKILL)
        except OSError:
            pass
    _write(f"\n[watchdog] {name} has run for {limit:.0f}s: killed the child processes it started "
           f"{new}; the Python stacks of pytest follow.\n[watchdog] pytest {thread_states(pid)}\n"
           + states)
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        pass


def _watch(pid: int) -> None:
    """The watchdog process's loop (see :class:`Watchdog`)."""
    fd = sys.stdin.fileno()
    buf = b""
    test: tuple[str, float, float, set[int]] | None = None  # name, limit, deadline, children
    fired_at: float | None = None
    while True:
        now = time.monotonic()
        if test is not None and fired_at is None and now >= test[2]:
            _fire(pid, test[0], test[1], test[3])
            fired_at = now
        if fired_at is not None and now >= fired_at + GRACE:
            _write(f"[watchdog] {test[0] if test else '?'} still runs {GRACE:.0f}s later: killing "
                   f"pytest.\n[watchdog] pytest {thread_states(pid)}\n")
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # it ended meanwhile
            return
        wait = None if test is None else max(0.0, (fired_at + GRACE if fired_at else test[2]) - now)
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            return  # pytest closed the pipe or died
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            words = line.decode(errors="replace").split(" ", 3)
            if words[0] == "start" and len(words) == 4:
                limit = float(words[1])
                before = {int(k) for k in words[2].split(",") if k.isdigit()}
                test = (words[3], limit, time.monotonic() + limit, before)
            else:
                test = None
            fired_at = None


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for pytest, which closes the pipe
    _watch(int(sys.argv[1]))
