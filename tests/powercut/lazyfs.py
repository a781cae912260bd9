"""A harness for LazyFS: a FUSE file system that keeps un-fsynced writes in its own cache and
drops them on command, which is what a power cut does to a real disk.

Typical use (see ``conftest.py`` for the fixtures)::

    binary = build()                           # once per session; raises LazyFSBuildError
    with LazyFS(binary, root, mnt, workdir) as lfs:
        ...                                    # write under ``mnt``
        lfs.clear_cache()                      # the power cut: un-fsynced data is gone
        lfs.remount()                          # a fresh mount over what reached ``root``

What LazyFS does and does not simulate (found by reading its source and by
``test_powercut_harness.py``):

- Only file *data* is cached. ``create``, ``mkdir``, ``rename``, ``unlink``, ``truncate`` pass
  straight through to ``root``, so they are durable at once: a missing directory fsync can not
  be seen with LazyFS (a file created and never fsynced survives a cut, empty).
- A cut (``clear_cache``, or LazyFS killing itself for a crash/torn fault) drops every data
  block not fsynced. Unmounting does **not** write the cache back either: un-fsynced data is lost
  on unmount as well (LazyFS's ``destroy`` only logs).
- ``fsync``/``fdatasync`` of a file writes that file's cached blocks to ``root``.
- Fault paths: LazyFS sees paths as ``<subdir>/<path in the mount>`` (the ``subdir`` module
  prefixes them). ``torn-seq``/``torn-op`` ``file=`` is compared for *equality* with that path,
  so it must be the path under ROOT as passed to ``subdir=``, never the path under the mount
  (:meth:`LazyFS.fault_path` converts). ``crash`` ``from_rgx=R`` is matched as ``.*R.*`` against the
  same path.
- Fault commands are read from the FIFO in chunks of at most 100 bytes, one command per read:
  a command (with its newline) must fit in 100 bytes, and two commands written back to back
  may be read as one. :meth:`LazyFS.inject` checks the length and waits until LazyFS logged the
  command as accepted before returning. To keep fault paths short, LazyFS is given a short
  symlink to ROOT (``/tmp/pc-XXXXXXXX``) as its subdir.
- ``--config-path P`` is silently ignored (LazyFS then looks for ``config/default.toml`` and
  aborts) when P contains ``-o`` anywhere, case-insensitively, as every path under pytest's
  ``/tmp/pytest-of-root`` does: the configs are written to ``/tmp/pc-XXXXXXXX.d``.
- LazyFS passes at most 10 arguments on to FUSE: :meth:`LazyFS.mount` uses 9.
- ``occurrence=`` is *not* accepted on the FIFO for ``torn-seq``/``torn-op``, although LazyFS's
  README shows it: LazyFS then ignores the whole command yet logs "configured successfully"
  (:func:`check_command` refuses such commands). The occurrence is always 1: torn-seq acts on
  the first run of two or more writes to the file between two fsyncs of it after the command
  (if that run is shorter than the largest ``persist`` index, the fault never fires), torn-op on
  the first write.
- Writes are counted in FUSE write requests, not in application writes: the kernel hands a
  write that crosses a page boundary over as a request up to that boundary, then requests of at
  most 1 MiB (``max_write``). So a journal record of more than a few bytes is usually two
  "writes" (its head up to a page boundary, then the rest).
- When the cache is full and eviction is off, LazyFS writes straight through to ``root`` (the
  data then survives a cut): the cache is made large (``cache_size``).
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import pytest

from hangs import thread_states

ENV_DIR = "PE_LAZYFS_DIR"
DEFAULT_DIR = Path("/work/shared/tools/lazyfs")
REPO_ROOT = Path(__file__).resolve().parents[2]
FIFO_CHUNK = 100  # LazyFS reads fault commands with read(fd, buf, 100)
MOUNT_TIMEOUT = 60.0
CLEAR_TIMEOUT = 60.0
INJECT_TIMEOUT = 30.0
EXIT_TIMEOUT = 30.0
KILL_TIMEOUT = 30.0  # a SIGKILLed child not reaped by then waits on a request LazyFS never answers
_POLL = 0.005
FIRED = "Triggered fault condition"  # LazyFS's log line when a fault fires (it then exits)


class LazyFSError(RuntimeError):
    """LazyFS did not do what the harness asked (did not mount, refused a command, died)."""


class LazyFSBuildError(LazyFSError):
    """build.sh failed: fails the tests (it is not a reason to skip them)."""


class LazyFSHung(LazyFSError):
    """A SIGKILLed process was not reaped within KILL_TIMEOUT: it waits in the kernel for a
    request LazyFS took and never answers (LazyFS deadlocked; a FUSE request already handed to
    the daemon cannot be interrupted, not even by SIGKILL). :func:`kill_process` then killed
    LazyFS, which ends every request of its mount, and the message holds what the process's and
    LazyFS's threads were waiting in."""


# ---------------------------------------------------------------------------------- locating
def find_build_script(env: dict[str, str] | None = None, repo_root: Path = REPO_ROOT) -> Path | None:
    """build.sh of LazyFS: in ``$PE_LAZYFS_DIR`` if that is set (and then only there), else in
    ``shared/tools/lazyfs/`` of the repository root or of any directory above it, else in
    /work/shared/tools/lazyfs. None if there is none."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_DIR)
    if explicit:
        cand = Path(explicit) / "build.sh"
        return cand if cand.is_file() else None
    for d in (repo_root, *repo_root.parents):
        cand = d / "shared" / "tools" / "lazyfs" / "build.sh"
        if cand.is_file():
            return cand
    cand = DEFAULT_DIR / "build.sh"
    return cand if cand.is_file() else None


def available() -> str | None:
    """None if LazyFS can be built and mounted here, else why not (for ``skipif`` reasons)."""
    if not os.path.exists("/dev/fuse"):
        return "LazyFS needs /dev/fuse, which this machine does not have"
    if find_build_script() is None:
        where = os.environ.get(ENV_DIR) or f"shared/tools/lazyfs above {REPO_ROOT} or {DEFAULT_DIR}"
        return f"no LazyFS build.sh found (looked in {where}; set {ENV_DIR})"
    return None


requires_lazyfs = pytest.mark.skipif(available() is not None, reason=available() or "")
"""Marks a test that needs LazyFS: skipped where it cannot run here (see :func:`available`)."""


@functools.cache
def build() -> Path:
    """Build LazyFS once per process (build.sh is idempotent) and return the binary's path.
    Raises LazyFSBuildError with build.sh's output if the build fails."""
    script = find_build_script()
    if script is None:
        raise LazyFSBuildError(f"no LazyFS build.sh: {available()}")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=1800)
    lines = proc.stdout.strip().splitlines()
    binary = Path(lines[-1]) if lines else None
    if proc.returncode != 0 or binary is None or not os.access(binary, os.X_OK):
        raise LazyFSBuildError(
            f"{script} failed (exit {proc.returncode}); stdout tail:\n{proc.stdout[-3000:]}\n"
            f"stderr tail:\n{proc.stderr[-6000:]}")
    if shutil.which("fusermount3") is None:
        raise LazyFSBuildError("build.sh succeeded but fusermount3 is not on PATH")
    return binary


# ---------------------------------------------------------------------------------- helpers
def is_mounted(mnt: Path) -> bool:
    """Whether ``mnt`` is a mount point (listed in /proc/mounts)."""
    target = str(mnt).replace(" ", "\\040")
    with open("/proc/mounts") as f:
        return any(line.split()[1] == target for line in f if line.strip())


def wait_for(cond: Callable[[], bool], timeout: float, what: str,
             alive: Callable[[], bool] | None = None) -> None:
    """Poll ``cond()`` until true; LazyFSError after ``timeout`` seconds, or as soon as
    ``alive()`` (if given) says the process it depends on is gone."""
    deadline = time.monotonic() + timeout
    while not cond():
        if alive is not None and not alive():
            if cond():
                return
            raise LazyFSError(f"LazyFS exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise LazyFSError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(_POLL)


_TORN_KEYS = {"lazyfs::torn-seq": {"op", "file", "persist"},
              "lazyfs::torn-op": {"file", "persist", "parts", "parts_bytes"}}


def check_command(line: str) -> None:
    """ValueError for a torn-seq/torn-op command with an attribute LazyFS does not accept on
    the FIFO (``occurrence=``, as its README shows, among them): LazyFS then ignores the command
    but still logs "configured successfully"."""
    for prefix, keys in _TORN_KEYS.items():
        if line.startswith(prefix + "::"):
            attrs = line[len(prefix) + 2:].split("::")
            bad = [a for a in attrs if a.split("=", 1)[0] not in keys or "=" not in a]
            if bad:
                raise ValueError(f"LazyFS ignores {prefix} with {bad} (accepted: {sorted(keys)})")


def config_text(fifo: Path, done_fifo: Path, log: Path, cache_size: str, log_all: bool = False) -> str:
    """The TOML configuration of one mount."""
    return (
        "[faults]\n"
        f'fifo_path="{fifo}"\n'
        f'fifo_path_completed="{done_fifo}"\n'
        "[cache]\n"
        "apply_eviction=false\n"
        "[cache.simple]\n"
        f'custom_size="{cache_size}"\n'
        "blocks_per_page=1\n"
        "[filesystem]\n"
        f"log_all_operations={'true' if log_all else 'false'}\n"
        f'logfile="{log}"\n'
    )


def make_alias(root: Path) -> tuple[Path, Path]:
    """A new symlink ``/tmp/pc-XXXXXXXX`` to ``root`` and a new directory beside it
    (``/tmp/pc-XXXXXXXX.d``) for configs: short paths without "-o" in them."""
    while True:
        token = secrets.token_hex(4)
        alias, cfg_dir = Path(f"/tmp/pc-{token}"), Path(f"/tmp/pc-{token}.d")
        try:
            os.symlink(root, alias)
        except FileExistsError:
            continue
        cfg_dir.mkdir(exist_ok=True)
        return alias, cfg_dir


# ---------------------------------------------------------------------------------- LazyFS
class LazyFS:
    """One LazyFS file system: ROOT (a real directory) shown at MNT. Mounted by the
    constructor; :meth:`close` (or the ``with`` block's end) unmounts it. Each (re)mount uses
    its own FIFOs, LazyFS log and output (``workdir/<name>-<generation>``; never reused, so a
    command left in a dead LazyFS's FIFO cannot reach the next one) and config
    (``/tmp/pc-XXXXXXXX.d/config.toml-<generation>``)."""

    def __init__(self, binary: Path, root: Path, mnt: Path, workdir: Path, *,
                 cache_size: str = "512mb", log_all_operations: bool = False, mount: bool = True) -> None:
        self.binary = Path(binary)
        self.root = Path(root)
        self.mnt = Path(mnt)
        self.workdir = Path(workdir)
        self.cache_size = cache_size
        self.log_all_operations = log_all_operations
        for d in (self.root, self.mnt, self.workdir):
            d.mkdir(parents=True, exist_ok=True)
        # a short name for ROOT (fault commands, with their paths, must fit in 100 bytes) and a
        # directory for the configs whose path has no "-o" (LazyFS ignores --config-path then)
        self.alias, self.cfg_dir = make_alias(self.root)
        self.generation = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._fault_fd = -1
        self._done_fd = -1
        self._done_buf = b""
        self._closed = False
        if mount:
            try:
                self.mount()
            except BaseException:
                self.close()
                raise

    # -------------------------------------------------------------- paths of this mount
    def _file(self, name: str) -> Path:
        return self.workdir / f"{name}-{self.generation}"

    @property
    def fifo(self) -> Path:
        return self._file("faults.fifo")

    @property
    def done_fifo(self) -> Path:
        return self._file("done.fifo")

    @property
    def log(self) -> Path:
        return self._file("lazyfs.log")

    @property
    def output(self) -> Path:
        return self._file("stdout.txt")

    def fault_path(self, path: Path | str) -> str:
        """The path LazyFS sees for ``path`` (under MNT or ROOT): what ``file=`` of torn-seq and
        torn-op must name and what ``from_rgx`` is matched against."""
        p = Path(path)
        for base in (self.mnt, self.root, self.alias):
            try:
                return str(self.alias / p.relative_to(base))
            except ValueError:
                continue
        raise ValueError(f"{path} is under neither {self.mnt} nor {self.root}")

    def log_text(self) -> str:
        """This mount's LazyFS log (for failure messages)."""
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # -------------------------------------------------------------- mounting
    def alive(self) -> bool:
        """Whether the LazyFS process of the current mount is running."""
        return self.proc is not None and self.proc.poll() is None

    def mount(self) -> None:
        """Start LazyFS (a child process in the foreground) and wait until it is mounted and its
        fault worker is listening on both FIFOs."""
        if self._closed:
            raise LazyFSError("LazyFS was closed")
        if self.proc is not None:
            raise LazyFSError("already mounted")
        if is_mounted(self.mnt):
            raise LazyFSError(f"{self.mnt} is already a mount point")
        self.generation += 1
        cfg = self.cfg_dir / f"config.toml-{self.generation}"
        cfg.write_text(config_text(self.fifo, self.done_fifo, self.log, self.cache_size,
                                   self.log_all_operations))
        with open(self.output, "wb") as out:
            self.proc = subprocess.Popen(
                [str(self.binary), str(self.mnt), "--config-path", str(cfg), "-o", "allow_other",
                 "-o", "modules=subdir", "-o", f"subdir={self.alias}", "-f"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: is_mounted(self.mnt) and self.done_fifo.exists(), MOUNT_TIMEOUT,
                     f"{self.mnt} to be mounted", self.alive)
            # the fault worker opens the completion FIFO for writing and blocks until a reader
            # exists: keep one open (non-blocking) for the life of the mount
            self._done_fd = os.open(self.done_fifo, os.O_RDONLY | os.O_NONBLOCK)
            self._done_buf = b""
            wait_for(lambda: "waiting for fault commands" in self.log_text(), MOUNT_TIMEOUT,
                     "the LazyFS fault worker", self.alive)
            self._fault_fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        except BaseException:
            self._stop()
            raise

    def unmount(self) -> int | None:
        """``fusermount3 -u -z MNT``, then wait for LazyFS to exit (SIGKILL after a timeout).
        Returns LazyFS's exit status (None if it was not mounted). Works on a mount whose LazyFS
        died (a crash fault). Un-fsynced data is lost: LazyFS writes nothing back on unmount."""
        if self.proc is None:
            return None
        return self._stop()

    def _stop(self) -> int | None:
        proc, self.proc = self.proc, None
        for fd in (self._fault_fd, self._done_fd):
            if fd >= 0:
                os.close(fd)
        self._fault_fd = self._done_fd = -1
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True, check=False)
        status = None
        if proc is not None:
            try:
                status = proc.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    status = proc.wait(timeout=EXIT_TIMEOUT)
                except subprocess.TimeoutExpired:
                    raise LazyFSError(f"LazyFS did not die: {thread_states(proc.pid)}") from None
        wait_for(lambda: not is_mounted(self.mnt), MOUNT_TIMEOUT, f"{self.mnt} to be unmounted")
        return status

    def remount(self) -> None:
        """Unmount (what was not fsynced is lost) and mount ROOT again."""
        self.unmount()
        self.mount()

    def close(self) -> None:
        """Unmount and remove the ROOT alias. Idempotent."""
        if self._closed:
            return
        try:
            self.unmount()
        finally:
            self._closed = True
            if self.alias.is_symlink():
                self.alias.unlink()
            shutil.rmtree(self.cfg_dir, ignore_errors=True)

    def __enter__(self) -> "LazyFS":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -------------------------------------------------------------- faults
    def _send(self, line: str) -> None:
        data = (line + "\n").encode()
        if "\n" in line or len(data) > FIFO_CHUNK:
            raise ValueError(f"a LazyFS command is one line of at most {FIFO_CHUNK} bytes with its "
                             f"newline (LazyFS reads {FIFO_CHUNK} at a time): {line!r}")
        if not self.alive():
            raise LazyFSError(f"LazyFS is not running (cannot send {line!r})")
        try:
            n = os.write(self._fault_fd, data)
        except OSError as exc:
            raise LazyFSError(f"could not send {line!r} to LazyFS: {exc}") from exc
        if n != len(data):
            raise LazyFSError(f"short write of {line!r} to the faults FIFO")

    def _read_done_line(self, deadline: float) -> str | None:
        """The next line on the completion FIFO; None if LazyFS closed it (it died)."""
        while b"\n" not in self._done_buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LazyFSError("timed out waiting for LazyFS's completion FIFO")
            ready, _, _ = select.select([self._done_fd], [], [], min(left, 0.2))
            if not ready:
                if not self.alive():
                    return None
                continue
            try:
                chunk = os.read(self._done_fd, 4096)
            except BlockingIOError:
                continue
            if not chunk:
                return None
            self._done_buf += chunk
        line, self._done_buf = self._done_buf.split(b"\n", 1)
        return line.decode(errors="replace")

    def clear_cache(self, timeout: float = CLEAR_TIMEOUT) -> None:
        """Drop every un-fsynced block now (the power cut) and wait until LazyFS says it is done."""
        self._send("lazyfs::clear-cache")
        deadline = time.monotonic() + timeout
        while True:
            line = self._read_done_line(deadline)
            if line is None:
                raise LazyFSError(f"LazyFS died during clear-cache:\n{self.log_text()[-3000:]}")
            if line.strip() == "finished::clear-cache":
                return

    def inject(self, line: str, timeout: float = INJECT_TIMEOUT) -> None:
        """Send a fault command (``lazyfs::crash::...``, ``lazyfs::torn-seq::...``,
        ``lazyfs::torn-op::...`` or any other) and wait until LazyFS logged that it accepted it.
        Raises LazyFSError with LazyFS's reasons if it rejected it. LazyFS then exits by itself
        when the fault fires (see :meth:`wait_exit`)."""
        check_command(line)
        start = len(self.log.read_bytes()) if self.log.exists() else 0
        self._send(line)
        if line.startswith("lazyfs::crash"):
            ok, bad = "received: VALID crash fault", "INVALID crash fault"
        elif line.startswith(("lazyfs::torn-seq", "lazyfs::torn-op")):
            ok, bad = "configured successfully", "INVALID torn"
        else:
            ok, bad = "received '", "command unknown"

        def new() -> str:
            return self.log.read_bytes()[start:].decode(errors="replace")

        deadline = time.monotonic() + timeout
        while True:
            text = new()
            if bad in text:
                raise LazyFSError(f"LazyFS rejected {line!r}:\n{text}")
            if ok in text or FIRED in text:
                return  # accepted (a fault may fire before LazyFS logs that it was configured)
            if not self.alive():
                raise LazyFSError(f"LazyFS exited before accepting {line!r}:\n{text}")
            if time.monotonic() > deadline:
                raise LazyFSError(f"LazyFS did not acknowledge {line!r} in {timeout}s:\n{text}")
            time.sleep(_POLL)

    def cache_usage(self, timeout: float = INJECT_TIMEOUT) -> float:
        """The percentage of LazyFS's cache pages in use. At 100% LazyFS writes through to ROOT
        (un-fsynced data would then survive a cut): power-cut tests check it stays below."""
        start = len(self.log.read_bytes()) if self.log.exists() else 0
        self._send("lazyfs::display-cache-usage")
        found: list[float] = []

        def done() -> bool:
            text = self.log.read_bytes()[start:].decode(errors="replace")
            m = re.search(r"cache usage \(.?%pages\) is ([0-9.]+)%", text)
            if m:
                found.append(float(m.group(1)))
            return bool(found)

        wait_for(done, timeout, "LazyFS's cache usage report", self.alive)
        return found[0]

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for LazyFS to exit (as it does when a crash, torn-seq or
        torn-op fault fires). Returns its exit status, or None if it is still running. The mount
        stays (dead) until :meth:`unmount`."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL LazyFS now (what was not fsynced is gone: a power cut at this moment). Its
        mount stays (dead) until :meth:`unmount`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            try:
                self.proc.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                raise LazyFSError(f"LazyFS did not die: {thread_states(self.proc.pid)}") from None

    def fault_fired(self) -> bool:
        """Whether this mount's LazyFS logged that a fault condition triggered."""
        text = self.log_text()
        return FIRED in text or "Killing LazyFS" in text


def kill_process(proc: subprocess.Popen[bytes], lfs: LazyFS | None = None) -> None:
    """SIGKILL a child we started and reap it. If it is not reaped within KILL_TIMEOUT it waits
    on a request its file system never answers: with ``lfs`` (the LazyFS it works in) LazyFS is
    killed, the child reaped, and LazyFSHung raised saying what both waited in; else
    LazyFSError."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    try:
        proc.wait(timeout=KILL_TIMEOUT)
        return
    except subprocess.TimeoutExpired:
        pass
    stuck = f"the child {thread_states(proc.pid)}"
    if lfs is None or lfs.proc is None:
        raise LazyFSError(f"a SIGKILLed child was not reaped in {KILL_TIMEOUT:.0f}s: {stuck}")
    stuck += f"; LazyFS {thread_states(lfs.proc.pid)}"
    was_alive = lfs.alive()
    lfs.kill()
    try:
        proc.wait(timeout=KILL_TIMEOUT)
    except subprocess.TimeoutExpired:
        after = "after LazyFS was killed" if was_alive else "and LazyFS is not running"
        raise LazyFSError(f"a SIGKILLed child was not reaped, even {after}: {stuck}") from None
    raise LazyFSHung(f"a SIGKILLed child was not reaped in {KILL_TIMEOUT:.0f}s: {stuck}")
