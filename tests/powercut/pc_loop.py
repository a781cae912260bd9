"""The power-cut loop: start the child on the store inside LazyFS, wait until it acknowledged
something, cut the power (or let a targeted fault cut it), remount, check, repeat on the same
store (it accumulates history across cuts).

The number of cuts per test is its default times ``PE_POWERCUT_CUTS`` (default 1; e.g. 20 for a
long run outside CI, with ``PE_TEST_TIMEOUT=0``: tests/hangs.py ends a test after 900 s).
``PE_POWERCUT_SEED`` (default 1) varies every test's seed; the seed of a test, of its cut and of
its child are in every failure message.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pravega_embedded as pe

import pc_check
import pc_common
from lazyfs import LazyFS, LazyFSError, LazyFSHung, kill_process
from pc_common import AckLog

HERE = Path(__file__).resolve().parent
CHILD = HERE / "pc_child.py"
CUTS_FACTOR = float(os.environ.get("PE_POWERCUT_CUTS", "1"))
BASE_SEED = int(os.environ.get("PE_POWERCUT_SEED", "1"))
ACK_TIMEOUT = 90.0  # for the child's first acknowledgements (a loaded CI machine)
FAULT_TIMEOUT = 20.0  # for a targeted fault to fire before falling back to a plain cut
EXIT_GRACE = 5.0  # a FUSE client sees ENOTCONN a moment before LazyFS's exit can be reaped
ACK_TAGS = tuple(f"{p}{t} ".encode() for t in pc_common.ACK_TAGS for p in ("", pc_common.NOT_DURABLE))
CACHE_FULL = 99.0
UNITS = {"bytes": "bytes", "txn": "transactional events", "createdelete": "events and scopes"}
SUMMARIES: list[str] = []  # printed at the end of the session by conftest.py


class LazyFSDied(Exception):
    """LazyFS exited by itself with no fault armed (once in ~100 CI runs it has), or hung: a
    killed child stayed in a request LazyFS never answered (once in a CI run and once here; the
    loop then waited forever), and the harness killed LazyFS (``lazyfs.LazyFSHung``). Its cache,
    the data not fsynced, died with it: that is a power cut at that moment, and the loop checks
    it as one (the cut's kind and the session summary say so, with LazyFS's exit status, or
    what the child and LazyFS waited in)."""


def n_cuts(default: int) -> int:
    """How many cuts a test runs: its default times PE_POWERCUT_CUTS, at least 1."""
    return max(1, round(default * CUTS_FACTOR))


def seed_of(name: str) -> int:
    """A test's seed: a function of its name and PE_POWERCUT_SEED."""
    return zlib.crc32(f"{BASE_SEED}:{name}".encode()) % 1_000_000


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: this directory and the pravega_embedded being tested first."""
    lib = str(Path(pe.__file__).resolve().parent.parent)
    path = [str(HERE), lib] + [p for p in sys.path if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), **(extra or {}))


@dataclass
class Cut:
    index: int
    child_seed: int
    kind: str  # "random" or the fault command
    fired: bool | None = None  # for a fault: whether it fired (else a plain cut followed)
    acks: int = 0  # acknowledgement lines the child logged in this run
    verified: int = 0  # acknowledged items the checker verified after this cut
    seconds: float = 0.0


@dataclass
class PowerCutLoop:
    """Cuts on one store at ``lfs.mnt/s`` with the child running ``workload``."""

    lfs: LazyFS
    tmp: Path
    workload: str
    name: str
    env: dict[str, str] | None = None
    seed: int = 0
    cuts: list[Cut] = field(default_factory=list)
    unplanned: int = 0  # cuts where LazyFS died by itself

    def __post_init__(self) -> None:
        self.seed = seed_of(self.name)
        self.rnd = random.Random(self.seed)
        self.store_dir = self.lfs.mnt / "s"
        self.ack_log = self.tmp / "acks.log"
        self.ack_log.touch()
        self.started = time.monotonic()
        self._current: tuple[subprocess.Popen[bytes], int] | None = None
        self._hung: str | None = None  # why the harness killed LazyFS (LazyFSHung), until reported

    # ---------------------------------------------------------------- context for messages
    def where(self, cut: Cut) -> str:
        return (f"[{self.name}: workload={self.workload} seed={self.seed} (PE_POWERCUT_SEED={BASE_SEED}) "
                f"cut #{cut.index} child seed {cut.child_seed}, {cut.kind}"
                + ("" if cut.fired is None else f", fault {'fired' if cut.fired else 'did not fire'}") + "]")

    def _stderr(self, cut: Cut) -> str:
        out = []
        for second in (False, True):
            p = self._err_path(cut, second)
            if p.exists() and p.stat().st_size:
                out.append(f"--- {p.name}:\n" + p.read_text(errors="replace")[-2000:])
        return "\n".join(out)

    # ---------------------------------------------------------------- one run of the child
    def _start(self, cut: Cut, second: bool = False, env: dict[str, str] | None = None
               ) -> tuple[subprocess.Popen[bytes], int]:
        """Start the child (``second``: the run after a process crash in the same cut; ``env``:
        more environment variables for this run)."""
        offset = self.ack_log.stat().st_size
        seed = cut.child_seed + 500 * second
        with open(self._err_path(cut, second), "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(CHILD), str(self.store_dir), str(self.ack_log), self.workload,
                 str(seed)], env=child_env({**(self.env or {}), **(env or {})}),
                stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT)
        self._current = (proc, offset)  # until _killed counted its acknowledgements
        return proc, offset

    def _err_path(self, cut: Cut, second: bool = False) -> Path:
        return self.tmp / f"child-{cut.index}{'b' if second else ''}.err"

    def _run_lines(self, offset: int) -> list[bytes]:
        with open(self.ack_log, "rb") as f:
            f.seek(offset)
            return f.read().split(b"\n")[:-1]

    def _wait_acks(self, proc: subprocess.Popen[bytes], offset: int, want: int, cut: Cut,
                   tags: tuple[bytes, ...] = ACK_TAGS) -> None:
        """Until the child logged ``want`` lines starting with one of ``tags`` (acknowledgements)
        in this run (failing on its errors)."""
        deadline = time.monotonic() + ACK_TIMEOUT
        while True:
            lines = self._run_lines(offset)
            errors = [ln for ln in lines if ln.startswith(b"error")]
            if (errors or proc.poll() is not None) and self._lazyfs_died():
                raise LazyFSDied()
            assert not errors, f"{self.where(cut)} the child failed: {errors[:3]}\n{self._stderr(cut)}"
            if sum(ln.startswith(tags) for ln in lines) >= want:
                return
            assert proc.poll() is None, (
                f"{self.where(cut)} the child exited ({proc.returncode}) before acknowledging anything\n"
                f"{self._stderr(cut)}")
            assert time.monotonic() < deadline, (
                f"{self.where(cut)} the child acknowledged only {cut.acks} of {want} in {ACK_TIMEOUT:.0f}s")
            time.sleep(0.005)

    def _cut_power(self, cut: Cut) -> None:
        """Drop what was not fsynced (the child is dead already), after checking LazyFS's cache
        never filled (then it would have written through, and the cut would keep data)."""
        try:
            usage = self.lfs.cache_usage()
        except LazyFSError:
            if self._lazyfs_died():  # between the child's last operation and now
                raise LazyFSDied() from None
            raise
        if usage >= CACHE_FULL:
            raise LazyFSError(f"{self.where(cut)} LazyFS's cache is {usage}% full: raise cache_size")
        self.lfs.clear_cache()

    def _check(self, cut: Cut, t0: float) -> None:
        """Remount and check the store (pc_check.py) in this process. (A check that waits on a
        LazyFS that stopped answering is ended by the test watchdog, tests/hangs.py.)"""
        self.lfs.remount()
        log = AckLog.read(self.ack_log)
        try:
            cut.verified = pc_check.check(self.workload, self.store_dir, log)
        except AssertionError as exc:
            raise AssertionError(f"{self.where(cut)} {exc}") from exc
        except Exception as exc:  # the store did not open, or an operation failed
            raise AssertionError(f"{self.where(cut)} after the cut: {type(exc).__name__}: {exc}") from exc
        cut.seconds = time.monotonic() - t0
        self.cuts.append(cut)

    def _new_cut(self, kind: str) -> Cut:
        i = len(self.cuts)
        return Cut(i, self.seed * 1000 + i, kind)

    # ---------------------------------------------------------------- the kinds of cut
    def _run_until_acked(self, cut: Cut, max_delay: float, env: dict[str, str] | None = None
                         ) -> tuple[subprocess.Popen[bytes], int]:
        """Start the child and return once it acknowledged 1-4 times and then a random moment
        (up to ``max_delay`` seconds) passed, with the child still running."""
        proc, offset = self._start(cut, env=env)
        try:
            self._wait_acks(proc, offset, self.rnd.randint(1, 4), cut)
            time.sleep(self.rnd.uniform(0.0, max_delay))
            if proc.poll() is not None:
                if self._lazyfs_died():
                    raise LazyFSDied()
                errors = [ln for ln in self._run_lines(offset) if ln.startswith(b"error")]
                raise AssertionError(f"{self.where(cut)} the child died by itself ({proc.returncode}): "
                                     f"{errors[:3]}\n{self._stderr(cut)}")
        except BaseException as exc:
            self._kill(proc, exc)
            raise
        return proc, offset

    def _kill(self, proc: subprocess.Popen[bytes], failing: BaseException | None = None) -> None:
        """SIGKILL and reap the child. If LazyFS hung and was killed to reap it: LazyFSDied, or
        with ``failing`` (an exception on its way out, which must not be hidden) a note on it."""
        try:
            kill_process(proc, self.lfs)
        except LazyFSHung as exc:
            if failing is not None and not isinstance(failing, LazyFSDied):
                failing.add_note(f"then, killing the child: {exc}")
                return
            self._hung = str(exc)
            if failing is None:
                raise LazyFSDied() from exc

    def _killed(self, proc: subprocess.Popen[bytes], offset: int, cut: Cut, *, errors_ok: bool,
                failing: BaseException | None = None) -> None:
        """SIGKILL the child, count its acknowledgements, fail on its errors (unless LazyFS died
        under it; ``failing``: see _kill)."""
        try:
            self._kill(proc, failing)
        except LazyFSDied:  # LazyFS hung: errors the child logged before that are its own
            errors = [ln for ln in self._run_lines(offset) if ln.startswith(b"error")]
            assert errors_ok or not errors, (
                f"{self.where(cut)} the child failed: {errors[:3]} (and then {self._hung})\n"
                f"{self._stderr(cut)}")
            raise
        lines = self._run_lines(offset)
        errors = [ln for ln in lines if ln.startswith(b"error")]
        if errors and not errors_ok and self._lazyfs_died():
            raise LazyFSDied()
        assert errors_ok or not errors, f"{self.where(cut)} the child failed: {errors[:3]}\n{self._stderr(cut)}"
        cut.acks += sum(ln.startswith(ACK_TAGS) for ln in lines)
        self._current = None

    def _lazyfs_died(self) -> bool:
        """Whether LazyFS exited (waiting up to EXIT_GRACE seconds for it: asked when the child
        failed or died, which it does at once when LazyFS is gone)."""
        return self.lfs.wait_exit(EXIT_GRACE) is not None

    def _unplanned(self, cut: Cut) -> None:
        """LazyFS died by itself: kill the child of this cut, count its acknowledgements, and
        say so in the cut and the session summary. The data not fsynced died with LazyFS's
        cache, so this was the power cut; the caller then checks as after any cut."""
        status = self.lfs.wait_exit(0)
        if self._current is not None:
            proc, offset = self._current
            try:
                kill_process(proc, self.lfs)
            except LazyFSHung as exc:
                self._hung = str(exc)
            cut.acks += sum(ln.startswith(ACK_TAGS) for ln in self._run_lines(offset))
            self._current = None
        hung, self._hung = self._hung, None
        cut.kind += (", then LazyFS hung and was killed" if hung
                     else f", then LazyFS died by itself (exit status {status})")
        self.unplanned += 1
        tail = self.lfs.log_text().strip().splitlines()[-3:]
        SUMMARIES.append(f"[powercut] {self.where(cut)}: an unplanned power cut; "
                         + (f"{hung}; " if hung else "") + f"LazyFS's log ends: {tail}")

    def _fire(self, cut: Cut, fault: str, timeout: float) -> None:
        """Arm the fault and wait until LazyFS fires it and exits (cut.fired)."""
        cut.kind = fault if cut.kind == "fault" else f"{cut.kind}, then {fault}"
        self.lfs.inject(fault)
        cut.fired = self.lfs.wait_exit(timeout) is not None
        if cut.fired and not self.lfs.fault_fired():
            cut.fired = False
            raise LazyFSDied()

    def random_cut(self, max_delay: float = 0.8) -> Cut:
        """Run the child until it acknowledged 1-4 times, then a random moment later SIGKILL it
        and drop LazyFS's un-fsynced data (the power cut); remount; check.

        The child is reaped before the cache is cleared: a dying process's FUSE requests already
        handed to LazyFS still complete, and one completing after the clear (say an fsync) would
        persist later writes without the earlier ones the clear dropped, a state no power cut
        leaves. Reaped first, nothing of the child reaches LazyFS after the cut; the cut is
        then at the moment the child died."""
        cut = self._new_cut("random")
        t0 = time.monotonic()
        try:
            proc, offset = self._run_until_acked(cut, max_delay)
            self._killed(proc, offset, cut, errors_ok=False)  # the power goes: the process first ...
            self._cut_power(cut)  # ... then the data not fsynced
        except LazyFSDied:
            self._unplanned(cut)
        self._check(cut, t0)
        return cut

    def fault_cut(self, make_fault: Callable[[], str], max_delay: float = 0.3,
                  timeout: float = FAULT_TIMEOUT) -> Cut:
        """Run the child until it acknowledged, then arm the fault command ``make_fault()``
        (crash, torn-seq, torn-op) and wait for LazyFS to fire it and exit. If it does not
        within ``timeout`` seconds, cut the power plainly instead (the cut says so). Then kill
        the child, remount, check. Errors the child logs once LazyFS is gone are expected."""
        cut = self._new_cut("fault")
        t0 = time.monotonic()
        try:
            proc, offset = self._run_until_acked(cut, max_delay)
            try:
                self._fire(cut, make_fault(), timeout)
            except BaseException as exc:
                self._killed(proc, offset, cut, errors_ok=True, failing=exc)
                raise
            self._killed(proc, offset, cut, errors_ok=True)
            if not cut.fired:
                self._cut_power(cut)
        except LazyFSDied:
            self._unplanned(cut)
        self._check(cut, t0)
        return cut

    def restart_cut(self, make_fault: Callable[[], str] | None = None, max_delay: float = 0.5,
                    first_env: dict[str, str] | None = None) -> Cut:
        """A process crash, then a power cut: run the child (with ``first_env`` added to its
        environment) until it acknowledged, SIGKILL it (its un-fsynced writes stay in LazyFS's
        cache, as in the page cache after kill -9), start it again (its open recovers from that
        cache) and cut the power: with ``make_fault``, by that fault (armed before the restart);
        else a random moment (up to 0.1 s) after the restarted child logged ``ready``. Remount,
        check."""
        first = "" if not first_env else f" ({' '.join(f'{k}={v}' for k, v in first_env.items())})"
        cut = self._new_cut(f"process crash{first}, restart" + ("" if make_fault else ", random cut"))
        t0 = time.monotonic()
        try:
            self._crash_and_restart(cut, make_fault, max_delay, first_env)
            if not cut.fired:
                self._cut_power(cut)
        except LazyFSDied:
            self._unplanned(cut)
        self._check(cut, t0)
        return cut

    def _crash_and_restart(self, cut: Cut, make_fault: Callable[[], str] | None, max_delay: float,
                           first_env: dict[str, str] | None) -> None:
        """restart_cut up to the cut: the process crash, the restart, the fault or the moment."""
        proc, offset = self._run_until_acked(cut, max_delay, env=first_env)
        self._killed(proc, offset, cut, errors_ok=False)
        if make_fault is not None:
            self.lfs.inject(fault := make_fault())
            cut.kind = f"{cut.kind}, then {fault}"
        proc, offset = self._start(cut, second=True)
        try:
            if make_fault is not None:
                cut.fired = self.lfs.wait_exit(FAULT_TIMEOUT) is not None
                if cut.fired and not self.lfs.fault_fired():
                    cut.fired = False
                    raise LazyFSDied()
            else:
                self._wait_acks(proc, offset, 1, cut, tags=(b"ready",))
                time.sleep(self.rnd.uniform(0.0, 0.1))
        except BaseException as exc:
            self._killed(proc, offset, cut, errors_ok=make_fault is not None, failing=exc)
            raise
        self._killed(proc, offset, cut, errors_ok=make_fault is not None)

    # ---------------------------------------------------------------- the end
    def summary(self) -> str:
        fired = sum(1 for c in self.cuts if c.fired)
        faults = sum(1 for c in self.cuts if c.fired is not None)
        acks = sum(c.acks for c in self.cuts)
        last = self.cuts[-1].verified if self.cuts else 0
        unit = UNITS.get(self.workload, "items")
        return (f"[powercut] {self.name}: {len(self.cuts)} cuts"
                + (f" ({fired} of {faults} targeted faults fired)" if faults else "")
                + (f" ({self.unplanned} where LazyFS died by itself or hung)" if self.unplanned else "")
                + f", {acks} acknowledgement lines, {last} acknowledged {unit} verified at the last "
                f"check ({sum(c.verified for c in self.cuts)} over all checks), "
                f"{time.monotonic() - self.started:.1f}s, seed {self.seed}")

    def finish(self, *, min_fired: int = 0) -> None:
        """Print the summary; fail if the loop exercised nothing."""
        line = self.summary()
        print(line)
        SUMMARIES.append(line)
        acks = sum(c.acks for c in self.cuts)
        assert self.cuts and acks > 0, f"{self.name}: no acknowledgement in any cut: the test exercised nothing"
        assert self.cuts[-1].verified > 0, f"{self.name}: no acknowledged item verified: the test exercised nothing"
        fired = sum(1 for c in self.cuts if c.fired)
        assert fired >= min_fired, (
            f"{self.name}: only {fired} of {len(self.cuts)} targeted faults fired "
            f"({[c.kind for c in self.cuts if not c.fired][:3]}): the test exercised too little")
