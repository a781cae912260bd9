"""Shared code of the damage battery (tests/damage): the reference stores, their expected
content, the journal layout parsed independently of the library, and the checker that opens a
damaged copy in a subprocess and judges the verdict.

Reference stores (``build``)
----------------------------
One scope ``d`` with three event streams: ``s1`` (3 segments, writers ``wa`` and ``wb``),
``s2`` (2 segments, writer ``wc``; segment 0 is scaled into two successors at round 25) and
``s3`` (2 segments, writer ``wd``, a transaction ``tx1`` committed at round 40 and a
transaction ``tx2`` left OPEN with a one-hour lease). A reader group ``g`` reads ``d/s1`` and
completed checkpoint ``cp1`` at round 45. Every round, every writer writes PER_FLUSH events
over 7 routing keys and flushes (one EVENTS record per flush: the writers linger 60 s so
nothing else drains them); ROUNDS rounds make 20,000 events. After PHASE1 rounds the store is
checkpointed explicitly (``applied_pos`` lands in the middle of the journal; automatic
checkpoints are off), then phase 2 writes the other half. Then:

* the *crash snapshot*: the directory copied while the store is open, after the flushes,
  without LOCK and LMDB's lock.mdb (tests/core/test_corruption.py ``_snapshot``): recovery
  must replay phase 2 from the journal;
* the *cleanly closed* store: the same store after ``close()`` (everything checkpointed).

Both are built with the default roll size (one journal file) and with ``roll_bytes`` = 1 MiB
(three journal files). An event's payload is ``<tag>|<sha256(tag) hex x2>`` with
``tag = <writer>|<key>|<n>``; the child reports each event by its tag (or ``BAD:...`` if the
payload does not match its tag), so content is compared exactly, per (stream, key), in order.

The expected content is recorded while building (not read back from the store), and every
fixture checks that an undamaged copy opens to exactly it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

HERE = Path(__file__).resolve().parent
CHILD = HERE / "damage_child.py"

SCOPE = "d"
STREAMS = {"s1": 3, "s2": 2, "s3": 2}
WRITERS = {"wa": "s1", "wb": "s1", "wc": "s2", "wd": "s3"}
KEYS = [f"k{i}" for i in range(7)]
ROUNDS = 100
PHASE1 = 50
PER_FLUSH = 50
SCALE_ROUND = 25
TXN_ROUND = 40
GROUP_ROUND = 45
GROUP = "g"
CHECKPOINT = "cp1"
TXN_WRITER = "tx"
TXN_EVENTS = 70
SMALL_ROLL = 1 << 20
DEFAULT_ROLL = 64 << 20

HEADER = 32
REC = struct.Struct("<IIQBBHI")  # crc, payload len, position, type, flags, magic, durable lag
EVH = struct.Struct("<QQQIH")  # first_seq, last_seq, timestamp, n_sections, writer id length
T_EVENTS, T_BYTES, T_MERGE, T_ROLL = 1, 2, 3, 4
F_DURABLE = 1

TIMEOUT = 120.0  # seconds an open + read of a damaged copy may take before it counts as a hang


def payload(tag: str) -> bytes:
    return (tag + "|" + hashlib.sha256(tag.encode()).hexdigest() * 2).encode()


def tag_of(event: Any) -> str:
    """The tag of an event as read, or ``BAD:...`` if its bytes are not the payload of a tag."""
    if not isinstance(event, (bytes, bytearray, memoryview)):
        return f"BAD:{type(event).__name__}"
    ev = bytes(event)
    tag = ev.rsplit(b"|", 1)[0].decode("ascii", "replace")
    return tag if payload(tag) == ev else f"BAD:{ev[:40]!r}"


# ---------------------------------------------------------------------------- journal layout
@dataclass(frozen=True)
class JRecord:
    """One journal record, parsed by the documented layout (csrc/journal.c), not the library."""

    file_base: int
    pos: int
    end: int
    type: int
    mark: int | None  # position - durable lag, if the record carries one
    writer: str | None = None  # EVENTS: writer id and last sequence
    last_seq: int | None = None


def parse_journal_file(data: bytes, base: int) -> list[JRecord]:
    assert data[:8] == b"PEJOURNL", "not a journal file"
    assert struct.unpack_from("<Q", data, 16)[0] == base
    out, off = [], HEADER
    while off < len(data):
        _, plen, rpos, rtype, flags, magic, lag = REC.unpack_from(data, off)
        assert (rpos, magic) == (base + off, 0x4550), f"unparsable record at {base + off}"
        end = off + REC.size + plen
        writer = last = None
        if rtype == T_EVENTS:
            _, last, _, _, wlen = EVH.unpack_from(data, off + REC.size)
            p = off + REC.size + EVH.size
            writer = data[p:p + wlen].decode()
        out.append(JRecord(base, base + off, base + end, rtype,
                           base + off - lag if flags & F_DURABLE else None, writer, last))
        off = end
    assert off == len(data), "journal file does not end at a record boundary"
    return out


def journal_files(store: Path) -> list[Path]:
    return sorted((store / "journal").glob("*.pej"))


def parse_journal(store: Path) -> dict[int, list[JRecord]]:
    """{file base: its records} of every journal file."""
    return {int(p.stem): parse_journal_file(p.read_bytes(), int(p.stem)) for p in journal_files(store)}


def applied_pos(store: Path) -> int:
    """The metadata's applied position, read with lmdb directly (read-only, no lock file)."""
    import lmdb
    env = lmdb.open(str(store / "meta"), readonly=True, lock=False, max_dbs=16, subdir=True)
    try:
        db = env.open_db(b"store", create=False)
        with env.begin() as txn:
            return struct.unpack_from("<Q", txn.get(b"applied_pos", db=db))[0]
    finally:
        env.close()


# ---------------------------------------------------------------------------- expected content
def empty_events() -> dict[str, dict[str, list[str]]]:
    return {f"{SCOPE}/{s}": {} for s in STREAMS}


@dataclass
class Batch:
    """One flush of phase 2: one EVENTS record."""

    writer: str
    stream: str
    events: dict[str, list[str]]  # key -> tags, in order
    last_seq: int
    end: int = 0  # end position of its record (filled from the parsed journal)


@dataclass
class Reference:
    """A reference store (one variant) and what it must open to."""

    name: str
    path: Path
    roll_bytes: int
    crash: bool  # the crash snapshot (phase 2 is replayed from the journal) or the clean close
    applied: int  # the metadata's applied position
    full: dict[str, Any]  # the whole expected content (the child's "content" form)
    base: dict[str, Any]  # the content at the end of phase 1 (everything applied, crash variant)
    batches: list[Batch]  # phase 2, in journal order
    records: dict[int, list[JRecord]] = field(default_factory=dict)

    @property
    def bases(self) -> list[int]:
        return sorted(self.records)

    def prefix(self, t: int) -> dict[str, Any]:
        """The content if the journal keeps exactly the records that end at or before ``t``
        (only phase-2 records may go: ``t`` is at or after the applied position)."""
        assert t >= self.applied
        out = json.loads(json.dumps(self.base))
        for b in self.batches:
            if b.end <= t:
                evs = out["events"][f"{SCOPE}/{b.stream}"]
                for k, tags in b.events.items():
                    evs.setdefault(k, []).extend(tags)
                out["writers"][b.writer] = b.last_seq
        return out


def build(root: Path, roll_bytes: int) -> tuple[Reference, Reference]:
    """Build the store in ``root/live``; returns (crash snapshot, cleanly closed) references."""
    import pravega_embedded as pe

    live, crash_dir, clean_dir = root / "live", root / "crash", root / "clean"
    store = pe.open(live, durability="fsync", roll_bytes=roll_bytes, checkpoint_interval=3600,
                    maintenance_interval=86400, retention_interval=86400)
    store.create_scope(SCOPE)
    for s, n in STREAMS.items():
        store.create_stream(SCOPE, s, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n)))
    writers = {w: store.create_writer(SCOPE, s, writer_id=w, linger=60) for w, s in WRITERS.items()}
    counts = dict.fromkeys(WRITERS, 0)
    events = empty_events()
    batches: list[Batch] = []
    txns: dict[str, str] = {}
    group_cut = ""
    for rnd in range(ROUNDS):
        for w, writer in writers.items():
            per: dict[str, list[str]] = {}
            for j in range(PER_FLUSH):
                n = counts[w]
                key = KEYS[(n * 3 + j + rnd) % len(KEYS)]
                tag = f"{w}|{key}|{n}"
                writer.write_event(payload(tag), routing_key=key)
                counts[w] += 1
                per.setdefault(key, []).append(tag)
            writer.flush()
            for k, tags in per.items():
                events[f"{SCOPE}/{WRITERS[w]}"].setdefault(k, []).extend(tags)
            if rnd >= PHASE1:
                batches.append(Batch(w, WRITERS[w], per, counts[w] - 1))
        if rnd == SCALE_ROUND:
            store.scale_stream(SCOPE, "s2", [0], [(0.0, 0.25), (0.25, 0.5)])
        if rnd == TXN_ROUND:
            tw = store.create_transactional_writer(SCOPE, "s3", writer_id=TXN_WRITER)
            for name, commit in (("tx1", True), ("tx2", False)):
                t = tw.begin_txn(lease=3600)
                per = {}
                for n in range(TXN_EVENTS):
                    key = KEYS[n % len(KEYS)]
                    tag = f"{name}|{key}|{n}"
                    t.write_event(payload(tag), routing_key=key)
                    per.setdefault(key, []).append(tag)
                t.flush()
                if commit:
                    t.commit()
                    for k, tags in per.items():
                        events[f"{SCOPE}/s3"].setdefault(k, []).extend(tags)
                txns[name] = t.txn_id.hex
        if rnd == GROUP_ROUND:
            group = store.create_reader_group(GROUP, pe.ReaderGroupConfig(
                streams=[(SCOPE, "s1")], automatic_checkpoint_interval=None))
            reader = group.create_reader("r1")
            for _ in range(500):
                assert reader.read_next_event(timeout=5) is not None
            fut = group.initiate_checkpoint(CHECKPOINT)
            while True:
                ev = reader.read_next_event(timeout=5)
                assert ev is not None
                if ev.is_checkpoint:
                    break
            reader.read_next_event(timeout=0)  # records the checkpoint
            cp = fut.result(10)
            group_cut = str(cp.stream_cut(SCOPE, "s1"))
            reader.close()
            group.close()
        if rnd == PHASE1 - 1:
            store.checkpoint()
            base_events = json.loads(json.dumps(events))
            base_writers = {w: counts[w] - 1 for w in WRITERS}
    segments = {f"{SCOPE}/{s}": segments_of(store.stream_info(SCOPE, s)) for s in STREAMS}
    common = {"scopes": [SCOPE], "streams": sorted(STREAMS), "segments": segments,
              "txns": {txns["tx1"]: "COMMITTED", txns["tx2"]: "OPEN"},
              "groups": {GROUP: {"last_checkpoint": CHECKPOINT, "cut": group_cut}}}
    full = dict(common, events=events, writers={w: counts[w] - 1 for w in WRITERS})
    base = dict(common, events=base_events, writers=base_writers)
    assert sum(len(v) for s in events.values() for v in s.values()) == \
        len(WRITERS) * ROUNDS * PER_FLUSH + TXN_EVENTS

    shutil.copytree(live, crash_dir, ignore=shutil.ignore_patterns("LOCK", "lock.mdb", "owner.sock"))
    store.close()
    shutil.copytree(live, clean_dir)  # LOCK stays, as after any close
    kind = "rolled" if roll_bytes == SMALL_ROLL else "single"
    refs = []
    for crash, path in ((True, crash_dir), (False, clean_dir)):
        recs = parse_journal(path)
        ref = Reference(f"{kind}-{'crash' if crash else 'clean'}", path, roll_bytes, crash,
                        applied_pos(path), full, base, [Batch(b.writer, b.stream, b.events, b.last_seq)
                                                        for b in batches], recs)
        _match_batches(ref)
        refs.append(ref)
    crash_ref, clean_ref = refs
    last_end = max(r.end for rs in clean_ref.records.values() for r in rs)
    assert clean_ref.applied == last_end, "a clean close checkpoints the whole journal"
    assert crash_ref.applied < crash_ref.batches[0].end, "phase 2 must be replayed"
    if roll_bytes == SMALL_ROLL:
        assert len(crash_ref.records) >= 3, "the rolled store needs several journal files"
    return crash_ref, clean_ref


def _match_batches(ref: Reference) -> None:
    """Find each phase-2 batch's EVENTS record by (writer, last sequence): one flush, one record."""
    by_id = {(r.writer, r.last_seq): r for rs in ref.records.values() for r in rs if r.type == T_EVENTS}
    for b in ref.batches:
        rec = by_id[(b.writer, b.last_seq)]
        b.end = rec.end
    ends = [b.end for b in ref.batches]
    assert ends == sorted(ends)
    after = [r for rs in ref.records.values() for r in rs if r.pos >= ref.batches[0].end - 1 and r.type != T_ROLL]
    assert all(r.type == T_EVENTS for r in after), "phase 2 holds EVENTS records only"


def segments_of(info: Any) -> list[list[Any]]:
    return [[s.segment_id, s.key_low, s.key_high, bool(s.sealed)] for s in info.segments]


# ---------------------------------------------------------------------------- disk state
IGNORED = {"LOCK", "meta/lock.mdb"}
"""Files the byte-identity check leaves out. LOCK is rewritten (pid) by every open attempt.
meta/lock.mdb is LMDB's lock file: its reader table is rewritten (and the file created if
missing, as in every crash snapshot) by every environment open, and it holds no data (deleting
it or filling it with garbage must open fine: test_damage_meta). Every other file and directory
must stay byte-identical, and none may appear or disappear, after a refused open."""


def disk_state(store: Path) -> dict[str, str]:
    """{relative path: sha256 (files) or "dir"} of everything under ``store`` but IGNORED."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(store):
        rel_dir = os.path.relpath(dirpath, store)
        for d in dirnames:
            out[os.path.normpath(os.path.join(rel_dir, d))] = "dir"
        for f in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, f))
            if rel in IGNORED:
                continue
            p = os.path.join(dirpath, f)
            try:
                with open(p, "rb") as fh:
                    out[rel] = hashlib.file_digest(fh, "sha256").hexdigest()
            except OSError as exc:  # e.g. unreadable to us: compare stat instead
                st = os.lstat(p)
                out[rel] = f"unreadable:{exc.errno}:{st.st_size}:{st.st_mtime_ns}"
    return out


def disk_diff(before: dict[str, str], after: dict[str, str]) -> list[str]:
    out = []
    for k in sorted(set(before) | set(after)):
        if k not in after:
            out.append(f"removed {k}")
        elif k not in before:
            out.append(f"created {k}")
        elif before[k] != after[k]:
            out.append(f"changed {k}")
    return out


def fresh_copy(ref: Reference, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(ref.path, dest)
    return dest


# ---------------------------------------------------------------------------- running the child
def child_cmd(worker: bool = False) -> list[str]:
    return [sys.executable, str(CHILD)] + (["--worker"] if worker else [])


def request(store: Path, ref: Reference | None, **extra: Any) -> dict[str, Any]:
    return dict({"path": str(store), "roll_bytes": ref.roll_bytes if ref else DEFAULT_ROLL}, **extra)


def run_single(req: dict[str, Any], *, prefix: list[str] | None = None,
               timeout: float = TIMEOUT) -> dict[str, Any]:
    """Run one open in a fresh interpreter (``prefix``: e.g. setpriv to change user). Returns the
    verdict, or {"crash": signal} / {"hang": ...} / {"died": rc}, with "stderr" tail."""
    cmd = (prefix or []) + child_cmd() + ["--request", json.dumps(req)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=_child_env(), cwd="/")
    except subprocess.TimeoutExpired as exc:
        return {"hang": timeout, "stderr": (exc.stderr or b"")[-2000:] if isinstance(exc.stderr, bytes)
                else str(exc.stderr)[-2000:]}
    return _verdict_of(proc.returncode, proc.stdout, proc.stderr)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"
    return env


def _verdict_of(rc: int, stdout: str, stderr: str) -> dict[str, Any]:
    for line in stdout.splitlines():
        if line.startswith("VERDICT "):
            v = json.loads(line[len("VERDICT "):])
            if rc < 0:
                v = {"crash": -rc, "after": v}
            v["stderr"] = stderr[-2000:]
            return v
    if rc < 0:
        return {"crash": -rc, "stderr": stderr[-4000:]}
    return {"died": rc, "stderr": stderr[-4000:]}


class Worker:
    """A child interpreter that runs many opens, one per request line (the journal sweeps have
    hundreds of cases; a fresh interpreter each costs ~0.3 s). A crash kills only the worker: the
    case it was running gets the crash verdict and the next case starts a new worker. A case
    whose verdict is not what the test expects is re-run in a fresh interpreter
    (``run_single``) before it is reported, so no state carried between cases decides a failure."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.err = tempfile.TemporaryFile()
        self.buf = b""

    def _start(self) -> subprocess.Popen[bytes]:
        self.err.seek(0)
        self.err.truncate()
        self.buf = b""
        return subprocess.Popen(child_cmd(worker=True), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=self.err, env=_child_env(), cwd="/")

    def run(self, req: dict[str, Any], timeout: float = TIMEOUT) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps(req) + "\n").encode())
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        deadline = time.monotonic() + timeout
        fd = proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                proc.wait()
                self.proc = None
                return {"hang": timeout, "stderr": self._stderr()}
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:  # the worker died
                rc = proc.wait()
                self.proc = None
                return _verdict_of(rc, "", self._stderr())
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        text = line.decode()
        if not text.startswith("VERDICT "):
            return {"died": "garbage on stdout", "stderr": text[:2000]}
        return json.loads(text[len("VERDICT "):])

    def _stderr(self) -> str:
        self.err.seek(0)
        return self.err.read()[-4000:].decode(errors="replace")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.err.close()


# ---------------------------------------------------------------------------- judging
@dataclass
class Expect:
    """What a damaged copy may do.

    ``refuse``: a library error at open is allowed (it must name one of ``names`` and leave the
    disk byte-identical); ``content``: the content a successful open must give exactly (None: the
    open must be refused); ``read_error``: class names of library errors that may be raised after
    a successful open, while reading the data (damage found lazily, e.g. by a section's CRC;
    the message must name one of ``names`` too); ``error_classes``: if set, a refusal must be
    an instance of one of these classes."""

    content: dict[str, Any] | None
    refuse: bool = True
    names: tuple[str, ...] = ()
    read_error: tuple[str, ...] = ()
    error_classes: tuple[str, ...] = ()

    @staticmethod
    def refused(*names: str, classes: tuple[str, ...] = ()) -> "Expect":
        return Expect(None, True, names, (), classes)

    @staticmethod
    def opens(content: dict[str, Any]) -> "Expect":
        return Expect(content, False)


@dataclass
class Outcome:
    ok: bool
    kind: str  # "opened", "refused <Class>", "read error <Class>", "crash", ...
    detail: str = ""
    verdict: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.kind}{': ' + self.detail if self.detail else ''}"

    def __repr__(self) -> str:
        return f"<Outcome ok={self.ok} {self.kind}>"


def judge(verdict: dict[str, Any], expect: Expect, before: dict[str, str] | None,
          after: dict[str, str] | None) -> Outcome:
    """Apply the rules of the battery to one verdict (module docstring of test files)."""
    if "crash" in verdict:
        sig = verdict["crash"]
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return Outcome(False, "crash", f"the interpreter died with {name}; stderr: "
                       f"{_tail(verdict.get('stderr', ''))}", verdict)
    if "hang" in verdict:
        return Outcome(False, "hang", f"no verdict in {verdict['hang']} s", verdict)
    if "died" in verdict:
        return Outcome(False, "died", f"exit status {verdict['died']}; stderr: "
                       f"{_tail(verdict.get('stderr', ''))}", verdict)
    if "error" in verdict:
        phase, cls, msg = verdict["phase"], verdict["error"], verdict["message"]
        what = f"{'refused' if phase == 'open' else phase + ' error'} {cls}"
        issues = []
        if not verdict["is_library"]:
            issues.append(f"not a pravega_embedded error ({' < '.join(verdict['mro'][:4])})")
        if phase == "open":
            if not expect.refuse:
                issues.append("the open must succeed here")
            elif expect.error_classes and not set(expect.error_classes) & set(verdict["mro"]):
                issues.append(f"expected one of {list(expect.error_classes)}")
        elif phase == "read":
            if not set(expect.read_error) & set(verdict["mro"]):
                issues.append("the store opened, then reading its data raised")
        else:
            issues.append("raised while closing")
        if expect.names and not any(n in msg for n in expect.names):
            issues.append(f"the message names none of {list(expect.names)}")
        if phase == "open" and before is not None and after is not None:
            diff = disk_diff(before, after)
            if diff:
                issues.append(f"refused but changed the disk: {diff[:8]}")
        if issues:
            tb = "" if verdict["is_library"] else "\n" + verdict.get("traceback", "")
            return Outcome(False, what, "; ".join(issues) + f"; message: {msg}{tb}", verdict)
        return Outcome(True, what, msg, verdict)
    got = verdict["content"]
    if expect.content is None:
        return Outcome(False, "opened", "the open must be refused, but it succeeded: "
                       + summarize(got, None), verdict)
    diff = compare(got, expect.content)
    if diff:
        return Outcome(False, "opened wrong", diff, verdict)
    return Outcome(True, "opened", "", verdict)


def _tail(s: str, n: int = 600) -> str:
    return s[-n:].replace("\n", " | ")


def count_events(content: dict[str, Any]) -> int:
    return sum(len(v) for s in content["events"].values() for v in s.values())


def summarize(got: dict[str, Any], want: dict[str, Any] | None) -> str:
    n = count_events(got)
    text = f"{n} events, writers {got['writers']}"
    if want is not None:
        text = f"{n} of {count_events(want)} events, writers {got['writers']} (want {want['writers']})"
    return text


def compare(got: dict[str, Any], want: dict[str, Any]) -> str:
    """'' if equal; else a short description of every difference."""
    out = []
    for k in ("scopes", "streams", "segments", "txns", "groups"):
        if got.get(k) != want.get(k):
            out.append(f"{k}: got {str(got.get(k))[:300]}, want {str(want.get(k))[:300]}")
    if got["writers"] != want["writers"]:
        lower = {w: (got["writers"].get(w), s) for w, s in want["writers"].items()
                 if got["writers"].get(w) is None or got["writers"][w] < s}  # type: ignore[operator]
        out.append(f"writers' last_sequence {got['writers']}, want {want['writers']}"
                   + (f" (LOWER: {lower})" if lower else ""))
    for skey, want_keys in want["events"].items():
        got_keys = got["events"].get(skey, {})
        for key in sorted(set(want_keys) | set(got_keys)):
            g, w = got_keys.get(key, []), want_keys.get(key, [])
            if g == w:
                continue
            gs, ws = set(g), set(w)
            parts = []
            if ws - gs:
                parts.append(f"{len(ws - gs)} missing (e.g. {sorted(ws - gs)[:2]})")
            if gs - ws:
                parts.append(f"{len(gs - ws)} unexpected (e.g. {sorted(gs - ws)[:2]})")
            if len(g) != len(gs):
                parts.append(f"{len(g) - len(gs)} duplicates")
            if not parts:
                parts.append("order differs")
            out.append(f"{skey} key {key}: {len(g)} of {len(w)} events: " + ", ".join(parts))
    if out:
        out.insert(0, summarize(got, want))
    return "; ".join(out[:12]) + (f"; ... {len(out) - 12} more" if len(out) > 12 else "")


def check_case(store: Path, ref: Reference | None, expect: Expect, *, worker: Worker | None = None,
               prefix: list[str] | None = None, req_extra: dict[str, Any] | None = None,
               before: dict[str, str] | None = None) -> Outcome:
    """Open the damaged copy ``store`` in a child (``worker`` or a fresh interpreter) and judge.
    A worker case whose outcome is not ok is re-run in a fresh interpreter on a copy taken
    before the first run (so the re-run sees the same damage)."""
    req = request(store, ref, **(req_extra or {}))
    if before is None:
        before = disk_state(store)
    backup = None
    if worker is not None:
        backup = store.with_name(store.name + ".again")
        if backup.exists():
            shutil.rmtree(backup)
        shutil.copytree(store, backup, symlinks=True)
        verdict = worker.run(req)
    else:
        verdict = run_single(req, prefix=prefix)
    out = judge(verdict, expect, before, disk_state(store))
    if backup is not None:
        if not out.ok:
            shutil.rmtree(store)
            os.rename(backup, store)
            verdict = run_single(req, prefix=prefix)
            out = judge(verdict, expect, before, disk_state(store))
            out.detail += " [confirmed in a fresh interpreter]" if not out.ok else \
                " [worker-only failure, not reproduced in a fresh interpreter]"
            if out.ok:  # state carried over in the worker made it fail: report that too
                out.ok = False
        else:
            shutil.rmtree(backup)
    return out


# ---------------------------------------------------------------------------- users
NOBODY = 65534


def can_switch_user() -> bool:
    """Whether this process can run a child as another user (root and setpriv present)."""
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def as_nobody() -> list[str]:
    """Prefix that runs a command as uid/gid 65534 with no supplementary groups. We run as root,
    which ignores file permissions, so permission cases run the child through setpriv(1)."""
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def chown_tree(path: Path, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, uid, gid)
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), uid, gid)


# ---------------------------------------------------------------------------- sampling
def env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    return default if not v else int(v)


EXHAUSTIVE = os.environ.get("PE_DAMAGE_EXHAUSTIVE", "") not in ("", "0")


def sample_records(recs: list[JRecord], rng: random.Random, n_random: int,
                   keep: Iterable[int] = ()) -> list[JRecord]:
    """All records with EXHAUSTIVE; else the first 2, the last 3, those at ``keep`` positions
    (and their neighbours) and ``n_random`` others, in order."""
    if EXHAUSTIVE or len(recs) <= 5 + n_random:
        return list(recs)
    idx = {0, 1, len(recs) - 3, len(recs) - 2, len(recs) - 1}
    for pos in keep:
        for i, r in enumerate(recs):
            if r.pos <= pos < r.end or r.end == pos:
                idx.update(j for j in (i - 1, i, i + 1) if 0 <= j < len(recs))
    rest = [i for i in range(len(recs)) if i not in idx]
    idx.update(rng.sample(rest, min(n_random, len(rest))))
    return [recs[i] for i in sorted(idx)]


# ---------------------------------------------------------------------------- the journal model
# What a damaged journal must open to, from the rules in pravega_embedded/journal.py's docstring
# (invariant 2), computed from the documented layout:
#
# * recovery scans from the file holding the last applied byte (applied - 1), from the applied
#   position on; K, the position known durable, is the larger of the applied position and every
#   durable mark (position - lag) of a valid record it scans;
# * damage before K, damage in a scanned file that is not the newest, a gap, a missing file: the
#   open is refused and nothing changes;
# * damage at or after K in the newest file is a torn tail: it is cut (and saved under
#   recovery/), and the store opens with exactly the records before it. This is what a power cut
#   leaves of writes that were never synced. A damaged or truncated copy of data that *was*
#   synced looks the same once the records that carried the proof (later durable marks) are
#   gone, so the library cannot tell them apart: accepting exactly the prefix there is correct,
#   and refusing would be wrong (the store could never reopen after an ordinary power cut);
# * bytes before the scanned region (the applied data of a clean close, or of older files) are
#   not read at open. The battery requires (per the issue) that a *truncation* or a *missing
#   file* of applied data is refused at open; damaged *bytes* there may instead surface when the
#   data is read, as a CorruptDataError naming the file (the section CRC), or not at all if they
#   are in a part of a record that is never read again (its header): the content is then intact.
def first_scanned(ref: Reference) -> int:
    """Base of the file recovery starts scanning (holds the last applied byte)."""
    return max(b for b in ref.bases if b < ref.applied)


def all_records(ref: Reference) -> list[JRecord]:
    return [r for b in ref.bases for r in ref.records[b]]


def file_end(ref: Reference, base: int) -> int:
    return ref.records[base][-1].end if ref.records[base] else base + HEADER


def known_durable(ref: Reference, kept: Iterable[JRecord]) -> int:
    """K over the scanned records in ``kept``."""
    return max([ref.applied] + [r.mark for r in kept if r.pos >= ref.applied and r.mark is not None])


def expect_truncated(ref: Reference, base: int, t: int) -> Expect:
    """File ``base`` cut to end at global position ``t``."""
    name = file_name(base)
    last = ref.records[base][-1]
    if base < first_scanned(ref) and last.type == T_ROLL and t >= last.pos:
        # only (part of) the ROLL record of a file recovery does not scan is gone: no event is,
        # so an open with all the content is as good as a refusal (the issue's "a clear error
        # or a correct open")
        return Expect(ref.full, True, (name,))
    if base < first_scanned(ref) or t < ref.applied or base != ref.bases[-1] or t - base < HEADER:
        return Expect.refused(name)
    kept = [r for r in all_records(ref) if r.end <= t]
    if t < known_durable(ref, kept):
        return Expect.refused(name)
    return Expect.opens(ref.prefix(t))


def expect_damaged(ref: Reference, rec: JRecord | None, base: int) -> Expect:
    """Bytes damaged inside record ``rec`` (None: in the header of file ``base``)."""
    name = file_name(base)
    scanned = base >= first_scanned(ref) and (rec is None or rec.pos >= ref.applied)
    if not scanned:
        return Expect(ref.full, True, (name,), ("CorruptDataError",))
    if rec is None or base != ref.bases[-1]:
        return Expect.refused(name)
    others = [r for r in all_records(ref) if r is not rec]
    if rec.pos < known_durable(ref, others):
        return Expect.refused(name)
    return Expect.opens(ref.prefix(rec.pos))


def file_name(base: int) -> str:
    return f"{base:020d}.pej"
