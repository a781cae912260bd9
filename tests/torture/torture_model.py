"""The torture run's model: what each writer writes (``Plan``), what was acknowledged and read
(``KeyLog``, ``TxnRec``), one open store and its threads' progress (``Gen``, ``Run``), pacing.
The threads are in ``torture_workers.py``, the run and the checker in ``torture_harness.py``.
"""

from __future__ import annotations

import array
import faulthandler
import itertools
import random
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pravega_embedded as pe
from pravega_embedded import errors

if TYPE_CHECKING:
    from torture_workers import Worker

SCOPE = "torture"
STREAM = "events"
GROUP = "torture-group"
N_WRITERS = 4
BLOCK = 8
KEYS_PER_WRITER = 5
XS = N_WRITERS          # source number of the explicit-sequence writer
TX = N_WRITERS + 1      # source number of the transactional writer
TX_SHIFT = 16           # a transaction event's number: txn << 16 | index
MAX_SEGMENTS = 8
N_READERS = 2
N_GROUP_READERS = 2
MAX_FAILURES = 60
_M64 = (1 << 64) - 1


def eid(src: int, n: int) -> int:
    return (src << 48) | n


def src_name(src: int) -> str:
    return f"w{src}" if src < N_WRITERS else ("xs" if src == XS else "tx")


def describe(e: int) -> str:
    src, n = e >> 48, e & ((1 << 48) - 1)
    if src == TX:
        return f"tx txn {n >> TX_SHIFT} event {n & ((1 << TX_SHIFT) - 1)}"
    return f"{src_name(src)} seq {n}"


def _mix(*xs: int) -> int:
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h = ((h ^ (x & _M64)) * 0xBF58476D1CE4E5B9) & _M64
        h ^= h >> 29
    return h


class Plan:
    """What every event is: its payload and routing key are functions of (source, number)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed & _M64
        self._keys: list[list[Any]] = [[] for _ in range(N_WRITERS)]
        self._batch: list[list[bool]] = [[] for _ in range(N_WRITERS)]
        self._lock = threading.Lock()

    def _fill(self, i: int, block: int) -> None:
        with self._lock:
            keys, batch = self._keys[i], self._batch[i]
            while len(keys) <= block:
                b = len(keys)
                h = _mix(self.seed, 1, i, b)
                keys.append(None if i == 0 and h % 11 == 0 else f"w{i}-k{(h >> 8) % KEYS_PER_WRITER}")
                batch.append(_mix(self.seed, 2, i, b) % 3 == 0)

    def writer_key(self, i: int, block: int) -> str | None:
        keys = self._keys[i]
        if block >= len(keys):
            self._fill(i, block)
        return keys[block]

    def writer_batch(self, i: int, block: int) -> bool:
        batch = self._batch[i]
        if block >= len(batch):
            self._fill(i, block)
        return batch[block]

    @staticmethod
    def xs_seq(k: int) -> int:
        return 3 * k + k % 3

    @staticmethod
    def xs_index(n: int) -> int | None:
        j = {0: 0, 4: 1, 8: 2}.get(n % 9)
        return None if n < 0 or j is None else 3 * (n // 9) + j

    @staticmethod
    def xs_key(k: int) -> str:
        return f"xs-k{k % 4}"

    @staticmethod
    def tx_key(t: int, idx: int) -> str:
        return f"tx-k{(t * 7 + idx // 4) % 3}"

    @staticmethod
    def payload(src: int, n: int) -> bytes:
        return b"%d:%d:" % (src, n) + b"." * ((n * 7 + src * 3) % 41)

    def key_of(self, src: int, n: int) -> str | None:
        """The routing key event (src, n) must have; KeyError if the plan has no such event."""
        if 0 <= src < N_WRITERS:
            return self.writer_key(src, n // BLOCK)
        if src == XS:
            k = self.xs_index(n)
            if k is None:
                raise KeyError(n)
            return self.xs_key(k)
        if src == TX:
            return self.tx_key(n >> TX_SHIFT, n & ((1 << TX_SHIFT) - 1))
        raise KeyError(src)


class KeyLog:
    """What one observer saw, per routing key, in the order it saw it; duplicates and per-key
    order violations are reported as they happen."""

    def __init__(self, stamped: bool = False) -> None:
        self.by_key: dict[str, array.array] = {}
        self.stamps: dict[str, array.array] | None = {} if stamped else None
        self.keyless: Counter[int] = Counter()
        self.count = 0

    def add(self, key: str | None, src: int, n: int, stamp: int = 0) -> str | None:
        self.count += 1
        if key is None:
            e = eid(src, n)
            self.keyless[e] += 1
            return None if self.keyless[e] == 1 else f"keyless event {describe(e)} seen twice"
        arr = self.by_key.get(key)
        if arr is None:
            arr = self.by_key[key] = array.array("q")
            if self.stamps is not None:
                self.stamps[key] = array.array("q")
        bad = None
        if arr and n <= arr[-1]:
            what = "a duplicate" if n in arr else "out of order"
            bad = (f"key {key!r}: {describe(eid(src, n))} after {describe(eid(src, arr[-1]))} "
                   f"({what})")
        arr.append(n)
        if self.stamps is not None:
            self.stamps[key].append(stamp)
        return bad

    def ids(self) -> set[int]:
        out = set(self.keyless)
        for key, arr in self.by_key.items():
            src = _src_of_key(key)
            out.update(eid(src, n) for n in arr)
        return out


def _src_of_key(key: str) -> int:
    if key.startswith("xs-"):
        return XS
    if key.startswith("tx-"):
        return TX
    return int(key[1:key.index("-")])


@dataclass
class TxnRec:
    t: int
    txn_id: Any = None
    count: int = 0            # events whose write call returned
    phase: str = "begin"      # begin, writing, flushing, committing, aborting, done
    intent: str | None = None
    status: str = "open"      # open, committed, aborted
    resumed: bool = False     # finished after a store reopen
    interrupted: str = ""     # the phase a store close interrupted, and the status found after it


class Gen:
    """One open store, from open to close."""

    def __init__(self, number: int, store: pe.Store) -> None:
        self.number = number
        self.store = store
        self.closing = threading.Event()   # set just before store.close() is called
        self.closed = threading.Event()    # set when store.close() returned


class Stuck(Exception):
    """A store call of the main thread did not return within the stall limit."""


class Run:
    def __init__(self, path: Path, durability: str, seconds: float, seed: int, stall: float,
                 rate: float, artifacts: Path) -> None:
        self.path = path
        self.durability = durability
        self.seconds = seconds
        self.seed = seed
        self.stall = stall
        self.rate = rate
        self.artifacts = artifacts
        self.plan = Plan(seed)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.gen: Gen | None = None
        self.gens: list[Gen] = []
        self.stop = threading.Event()       # producers finish
        self.finished = threading.Event()   # everything gives up waiting
        self.failed = threading.Event()
        self.aborted = threading.Event()    # a hang: the run stops at once
        self.budget: Counter[str] = Counter()
        self.sealing = threading.Event()    # set just before the stream is sealed
        self.failures: list[str] = []
        self.nfailures = 0
        self.stats: Counter[str] = Counter()
        self.workers: list[Worker] = []
        self.drain: tuple[dict[str, set[int]], set[int]] | None = None
        # truncation: events of every truncation attempted (added before truncate_stream is
        # called), of those that returned, and of those the store's close interrupted
        self.t_any: set[int] = set()
        self.t_done: set[int] = set()
        self.t_maybe: set[int] = set()
        self.cuts: list[tuple[float, pe.StreamCut, str]] = []
        self.txns: dict[int, TxnRec] = {}
        self.txn_visible: set[int] = set()
        self.stamp = itertools.count()
        self.gen_stamps: list[int] = []     # the read stamp at which each store generation's close began
        self.started = time.monotonic()
        self.stack_dumps = 0

    # ------------------------------------------------------------------ bookkeeping
    def count(self, what: str, k: int = 1) -> None:
        with self.lock:
            self.stats[what] += k

    def fail(self, msg: str, exc: BaseException | None = None, *, source: str | None = None,
             abort: bool = False) -> None:
        """Record a failure. At most 5 messages per ``source`` (default: the calling thread)
        are kept; the rest are counted. ``abort`` (hangs) stops the run at once."""
        if exc is not None:
            msg += "\n" + "".join(traceback.format_exception(exc)).rstrip()
        source = source or threading.current_thread().name
        with self.lock:
            self.nfailures += 1
            self.budget[source] += 1
            keep = self.budget[source] <= 5 and len(self.failures) < MAX_FAILURES
            if keep:
                self.failures.append(msg)
            elif self.budget[source] == 6:
                self.failures.append(f"({source}: further failures only counted)")
        self.failed.set()
        if abort:
            self.aborted.set()
        if keep:
            print(f"TORTURE FAILURE: {msg}", file=sys.stderr, flush=True)

    def dump_stacks(self, why: str) -> str:
        self.stack_dumps += 1
        self.artifacts.mkdir(parents=True, exist_ok=True)
        path = self.artifacts / f"stacks-{self.stack_dumps}.txt"
        with open(path, "w+") as f:
            f.write(f"{why}\n\n")
            f.flush()
            faulthandler.dump_traceback(file=f, all_threads=True)
            f.flush()
            f.seek(0)
            text = f.read()
        print(text, file=sys.stderr, flush=True)
        return f"{text}\n(stacks saved in {path})"

    # ------------------------------------------------------------------ generations
    def publish(self, store: pe.Store) -> Gen:
        with self.cond:
            g = Gen(len(self.gens), store)
            self.gens.append(g)
            self.gen = g
            self.cond.notify_all()
            return g

    def next_gen(self, worker: "Worker", prev: Gen | None) -> Gen | None:
        with self.cond:
            worker.waiting = True
            try:
                while True:
                    g = self.gen
                    if g is not None and g is not prev and not g.closing.is_set():
                        return g
                    if self.finished.is_set():
                        return None
                    self.cond.wait(0.25)
            finally:
                worker.waiting = False
                worker.last = time.monotonic()

    def clean_close_error(self, worker: "Worker", gen: Gen, exc: BaseException) -> bool:
        """True if ``exc`` is what a thread may get from a store being closed under it."""
        closing = gen.closing.is_set()
        if isinstance(exc, errors.ClosedError) and closing:
            self.count(f"closed-errors:{type(exc).__name__}")
            return True
        if isinstance(exc, errors.CheckpointFailedError) and closing and worker.checkpoints:
            self.count("closed-errors:CheckpointFailedError")
            return True
        phase = "while the store was being closed" if closing else "while the store was open"
        self.fail(f"{worker.name}: unexpected {type(exc).__name__} {phase} (store generation "
                  f"{gen.number}), in {worker.op!r}: {exc}", exc)
        return False

    # ------------------------------------------------------------------ main-thread calls
    def bounded(self, fn: Callable[[], Any], what: str, limit: float | None = None) -> Any:
        """Run a store call of the main thread in a helper thread; raise Stuck (after dumping
        every thread's stack) if it does not return within ``limit`` (the stall limit)."""
        limit = self.stall if limit is None else limit
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["v"] = fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                box["e"] = exc

        t = threading.Thread(target=target, name=f"main:{what}", daemon=True)
        t0 = time.monotonic()
        t.start()
        while t.is_alive():
            t.join(0.25)
            if t.is_alive() and time.monotonic() - t0 > limit:
                stacks = self.dump_stacks(f"main thread: {what} did not return within {limit:.0f} s")
                self.fail(f"HANG: main thread: {what} did not return within {limit:.0f} s\n{stacks}", abort=True)
                raise Stuck(what)
        if "e" in box:
            raise box["e"]
        return box.get("v")

    # ------------------------------------------------------------------ checking events
    def classify(self, where: str, key: Any, payload: Any) -> tuple[int, int] | None:
        """(source, number) of an event read back, after checking payload and key against
        the plan; None (and a failure) for anything else."""
        try:
            a, b, _ = payload.split(b":", 2)
            src, n = int(a), int(b)
            want_key = self.plan.key_of(src, n)
        except (ValueError, KeyError, AttributeError, TypeError):
            self.fail(f"{where}: an event that was never written: key={key!r} payload={payload[:60]!r}")
            return None
        if payload != self.plan.payload(src, n):
            self.fail(f"{where}: damaged payload of {describe(eid(src, n))}: {payload[:80]!r}")
            return None
        if key != want_key:
            self.fail(f"{where}: {describe(eid(src, n))} has routing key {key!r}, written with {want_key!r}")
            return None
        return src, n

    def add_cut(self, cut: pe.StreamCut, source: str) -> None:
        with self.lock:
            self.cuts.append((time.monotonic(), cut, source))


class Pacer:
    """Keeps a producer near ``rate`` events per second, with jitter."""

    def __init__(self, rate: float, rng: random.Random) -> None:
        self.rate, self.rng, self.debt = rate, rng, 0.0

    def pace(self, k: int, stop: threading.Event) -> None:
        self.debt += k / self.rate
        if self.debt > 0.02:
            stop.wait(self.debt * self.rng.uniform(0.3, 1.7))
            self.debt = 0.0
