"""Crash test for retention's disk reclamation: SIGKILL a writing process at random moments
(while retention records marks, truncates, deletes journal files and the journal rolls), reopen,
verify.

The child (retention_crash_child.py) writes the 4-segment stream ``rc/ret`` (by_size retention,
2 MiB) with writers w0 and w1, logging every acknowledged (flushed) sequence number and the time
the flush returned; some runs also truncate by hand at a reader's position, some write a little
to ``rc/keep`` (no retention) so journal files hold both retained and unexpired data.

After every kill the store must reopen, and:

(a) every event of ``rc/ret`` is intact (its payload is a function of writer, sequence, key), is
    in the segment its key routes to, and appears once;
(b) nothing at or after the head is missing: per (writer, key) the sequence numbers present are
    every one of that writer's sequences with that key from the first present one up to the
    writer's last durable sequence, which is at least its last acknowledged one (per key, not
    per segment: one batch puts a segment's events in key groups, and a cut may fall between
    them); and an acknowledged event that is missing must lie before the head: no event present
    in its segment may have been acknowledged before the missing one was made (else the missing
    one was appended after it, i.e. after the head);
(c) per key, events come in write order (read both with ``read_slice`` and a reader bounded at
    the tail, which must see the same events);
(d) the disk is bounded: journal bytes <= retention bytes + 4 x roll_bytes + one file per burst
    written to ``rc/keep`` (whose data pins its file), measured right after the kill and after
    the reopen;
(e) ``rc/keep`` holds every acknowledged event: its sequences are a gap-free prefix;
(f) while nobody ever truncated by hand, retention keeps at least its 2 MiB (or everything).

At the end the store is opened once more with retention running and no writers, then closed
and reopened twice, checking everything again (and that the two reopens see the same).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from bisect import bisect_left
from pathlib import Path

import pytest

# pytest puts tests/retention (no __init__.py) on sys.path
from retention_crash_child import (
    GROUP,
    KEEP,
    KEYS,
    OPTIONS,
    RETAINED,
    RETENTION_BYTES,
    ROLL_BYTES,
    SCOPE,
    key_of,
    parse,
    payload,
)

import pravega_embedded as pe
from pravega_embedded.routing import key_point

CHILD = Path(__file__).with_name("retention_crash_child.py")
ITERATIONS = int(os.environ.get("PE_RETENTION_CRASH_ITERATIONS", "16"))
SEED = int(os.environ.get("PE_RETENTION_CRASH_SEED", "20240"))
WRITERS = ("w0", "w1")
# verification opens without maintenance, so nothing truncates while it reads
VERIFY_OPTIONS = dict(OPTIONS, maintenance_interval=3600.0, retention_interval=3600.0,
                      checkpoint_interval=3600.0)
FILE_MAX = ROLL_BYTES + (256 << 10)  # a journal file: roll_bytes plus at most one record


def journal_bytes(store_dir: Path) -> int:
    d = store_dir / "journal"
    return sum(f.stat().st_size for f in d.iterdir()) if d.exists() else 0


def journal_end(store_dir: Path) -> int:
    """How many journal bytes were ever written (base of the newest file plus its size)."""
    files = sorted((store_dir / "journal").glob("*.pej"))
    return int(files[-1].stem) + files[-1].stat().st_size if files else 0


class AckLog:
    """The child's log: per writer the (durable sequence, monotonic ns) of every flush."""

    def __init__(self, path: Path) -> None:
        self.acks: dict[str, list[tuple[int, int]]] = {}
        self.ready = self.keep_bursts = self.truncations = 0
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            parts = line.split()
            if parts == ["ready"]:
                self.ready += 1
            elif parts == ["KEEPSTART"]:
                self.keep_bursts += 1
            elif len(parts) == 3 and parts[0] == "T":
                self.truncations += 1
            elif len(parts) == 4 and parts[0] == "A":
                self.acks.setdefault(parts[1], []).append((int(parts[2]), int(parts[3])))

    def last(self, wid: str) -> int:
        return max((d for d, _ in self.acks.get(wid, ())), default=-1)

    def bounds(self, wid: str):
        """(made_after(seq), acked_by(seq)): the latest flush return before which ``seq`` was
        not yet made (-1 if none), and the earliest flush return by which it was durable (None
        if it never was acknowledged)."""
        lines = sorted(self.acks.get(wid, ()))
        ds = [d for d, _ in lines]
        prefix_max, m = [], -1
        for _, t in lines:
            m = max(m, t)
            prefix_max.append(m)
        suffix_min, m = [0] * len(lines), None
        for i in range(len(lines) - 1, -1, -1):
            m = lines[i][1] if m is None else min(m, lines[i][1])
            suffix_min[i] = m

        def made_after(seq: int) -> int:
            i = bisect_left(ds, seq)  # lines[:i] have durable < seq
            return prefix_max[i - 1] if i else -1

        def acked_by(seq: int) -> int | None:
            i = bisect_left(ds, seq)  # lines[i:] have durable >= seq
            return suffix_min[i] if i < len(lines) else None

        return made_after, acked_by


def _stream_exists(store: pe.Store, stream: str) -> bool:
    return SCOPE in store.list_scopes() and stream in store.list_streams(SCOPE)


def _segment_router(info: pe.StreamInfo):
    segs = sorted(info.current_segments, key=lambda s: s.key_low)
    cache: dict[str, int] = {}

    def seg_of(key: str) -> int:
        sid = cache.get(key)
        if sid is None:
            p = key_point(key)
            sid = cache[key] = next(s.segment_id for s in segs if s.key_low <= p < s.key_high)
        return sid

    return seg_of


def verify(store_dir: Path, log: AckLog, *, options=VERIFY_OPTIONS) -> dict:
    """Reopen the store and check (a)-(c), (e); return a snapshot of what it holds."""
    with pe.open(store_dir, **options) as store:  # (must not raise)
        if not _stream_exists(store, RETAINED):
            assert not log.acks, "acknowledged events but the stream is gone"
            return {"length": 0, "head": 0, "total": 0, "present": {}, "durable": {}}
        info = store.stream_info(SCOPE, RETAINED)
        assert len(info.segments) == 4 and not info.sealed
        seg_of = _segment_router(info)

        # (a), (c): read_slice, segment by segment
        present: dict[str, dict[int, int]] = {w: {} for w in WRITERS}  # writer -> seq -> segment
        order: list[tuple[str, int]] = []
        last_in_key: dict[str, int] = {}
        for ev in store.read_slice(SCOPE, RETAINED):
            w, s, k = parse(ev.event)
            assert w in present, f"unknown writer {w}"
            assert ev.routing_key == k == key_of(w, s), f"{w}:{s} has key {ev.routing_key!r}"
            assert ev.segment_id == seg_of(k), f"{w}:{s} ({k}) in segment {ev.segment_id}"
            assert s not in present[w], f"{w}:{s} appears twice"
            assert s > last_in_key.get(k, -1), f"per-key order broken for {k}: {s} after {last_in_key[k]}"
            last_in_key[k] = s
            present[w][s] = ev.segment_id
            order.append((w, s))
        # (c) again with a reader bounded at the tail: the same events, per key in order
        seen: list[tuple[str, int]] = []
        last_in_key = {}
        with store.create_reader(SCOPE, RETAINED, end=info.tail) as r:
            for ev in r:
                w, s, k = parse(ev.event)
                assert s > last_in_key.get(k, -1), f"reader: per-key order broken for {k}"
                last_in_key[k] = s
                seen.append((w, s))
        assert sorted(seen) == sorted(order), "the reader and read_slice disagree"

        # (b)
        durable = {}
        for w in WRITERS:
            writer = store.create_writer(SCOPE, RETAINED, writer_id=w)
            durable[w] = writer.last_sequence
            writer.close()
        min_acked_by: dict[int, int] = {}  # segment -> earliest ack of an event present in it
        bounds = {w: log.bounds(w) for w in WRITERS}
        for w in WRITERS:
            acked, d = log.last(w), durable[w]
            assert d >= acked, f"{w}: acknowledged {acked} but the store's last sequence is {d}"
            assert max(present[w], default=-1) <= d, f"{w}: events after its last sequence {d}"
            for s, sid in present[w].items():
                t = bounds[w][1](s)
                if t is not None:
                    min_acked_by[sid] = min(min_acked_by.get(sid, t), t)
        for w in WRITERS:
            acked, d = log.last(w), durable[w]
            made_after = bounds[w][0]
            for j in range(KEYS):
                k = f"{w}-k{j}"
                g = seg_of(k)
                mine = sorted(s for s in present[w] if key_of(w, s) == k)
                if mine:  # a contiguous suffix of the key's sequences up to the last durable one
                    want = [s for s in range(mine[0], d + 1) if key_of(w, s) == k]
                    assert mine == want, (
                        f"{w} key {k}: present {len(mine)} of the {len(want)} sequences "
                        f"{mine[0]}..{d}; first missing {sorted(set(want) - set(mine))[:1]}")
                # the key's newest acknowledged event that is missing must lie before the head:
                # made before any event present in its segment was acknowledged (else it was
                # appended after that event, so after the head)
                top = min(acked, (mine[0] - 1) if mine else acked)
                missing = next((s for s in range(top, max(-1, top - GROUP * KEYS), -1)
                                if key_of(w, s) == k), None)
                if missing is not None and g in min_acked_by:
                    assert made_after(missing) <= min_acked_by[g], (
                        f"{w}:{missing} ({k}, acknowledged) is missing from segment {g}, yet it "
                        f"was made after an event still present there was acknowledged")

        # (e) the stream without retention keeps everything
        if _stream_exists(store, KEEP):
            keep = sorted(parse(ev.event)[1] for ev in store.read_slice(SCOPE, KEEP))
            writer = store.create_writer(SCOPE, KEEP, writer_id="k0")
            kd = writer.last_sequence
            writer.close()
            assert keep == list(range(kd + 1)), f"rc/keep: {len(keep)} events, last sequence {kd}"
            assert kd >= log.last("k0"), f"rc/keep: acknowledged {log.last('k0')}, durable {kd}"
        else:
            assert log.last("k0") == -1

        info = store.stream_info(SCOPE, RETAINED)
        return {"length": info.length, "head": sum(s.head for s in info.segments),
                "total": sum(s.length for s in info.segments),
                "present": present, "durable": durable}


def disk_bound(log: AckLog) -> int:
    return RETENTION_BYTES + 4 * ROLL_BYTES + log.keep_bursts * FILE_MAX


def _wait_ready(proc: subprocess.Popen, ack_log: Path, before: int, err: Path) -> None:
    deadline = time.monotonic() + 20
    while AckLog(ack_log).ready <= before:
        if proc.poll() is not None:
            pytest.fail(f"child exited with {proc.returncode} before it was ready:\n{err.read_text()}")
        assert time.monotonic() < deadline, "child not ready after 20 s"
        time.sleep(0.01)


ACKED_PER_RUN = 4 << 20  # acknowledged bytes per ready run, so the volume written is machine-independent


def acked_bytes(log: AckLog) -> int:
    """Bytes of ``rc/ret`` events up to each writer's last acknowledged sequence."""
    return sum(len(payload(w, s, key_of(w, s))) for w in WRITERS for s in range(log.last(w) + 1))


def _wait_acked(proc: subprocess.Popen, ack_log: Path, goal: int, err: Path) -> None:
    deadline = time.monotonic() + 60  # only bounds a hang: a loaded machine writes more slowly
    while acked_bytes(AckLog(ack_log)) < goal:
        if proc.poll() is not None:
            pytest.fail(f"child exited with {proc.returncode} while writing:\n{err.read_text()}")
        assert time.monotonic() < deadline, f"the child acknowledged < {goal} bytes in 60 s"
        time.sleep(0.1)


@pytest.mark.slow
def test_sigkill_during_retention_and_reclaim(tmp_path):
    store_dir, ack_log = tmp_path / "store", tmp_path / "acks"
    rnd = random.Random(SEED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(CHILD.parent)] + sys.path))
    hand_truncated = False
    max_disk = 0
    kills = []
    ready_runs = 0
    for it in range(ITERATIONS):
        truncate = it >= 4 and rnd.random() < 0.6
        keep = rnd.random() < 0.4
        early = it % 5 == 3  # 1 in 5: kill while opening (recovery, dropping rows), not ready yet
        hand_truncated |= truncate
        err = tmp_path / f"child-{it}.err"
        before = AckLog(ack_log).ready
        with err.open("w") as err_f:
            proc = subprocess.Popen([sys.executable, str(CHILD), str(store_dir), str(ack_log),
                                     str(SEED * 1000 + it), str(int(truncate)), str(int(keep))],
                                    env=env, stderr=err_f)
            if early:
                delay = rnd.uniform(0.05, 0.5)
            else:
                _wait_ready(proc, ack_log, before, err)
                ready_runs += 1
                # the runs so far wrote their share of data (the checks after the loop need it)
                _wait_acked(proc, ack_log, ready_runs * ACKED_PER_RUN, err)
                delay = rnd.uniform(0.2, 1.5)
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        kills.append((round(delay, 2), early, truncate, keep))
        assert "Traceback" not in err.read_text(), f"iteration {it}: the child failed:\n{err.read_text()}"
        log = AckLog(ack_log)

        # (d) right after the kill, and after recovery
        disk = journal_bytes(store_dir)
        max_disk = max(max_disk, disk / disk_bound(log))
        assert disk <= disk_bound(log), f"iteration {it}: {disk} journal bytes > {disk_bound(log)}"
        snap = verify(store_dir, log)
        disk = journal_bytes(store_dir)
        assert disk <= disk_bound(log), f"iteration {it}: {disk} journal bytes after reopen"
        # (f) retention alone keeps at least its bytes (or everything, while there is less)
        if not hand_truncated:
            assert snap["length"] >= min(RETENTION_BYTES, snap["total"]), (
                f"iteration {it}: retention kept {snap['length']} of {snap['total']} bytes")

    log = AckLog(ack_log)
    # the run exercised what it is about: data truncated, journal files deleted
    written = journal_end(store_dir)
    assert sum(len(a) for a in log.acks.values()) > 100, "the children acknowledged almost nothing"
    assert snap["head"] > 0, "retention never truncated"
    assert written > 4 * journal_bytes(store_dir), f"little reclaimed: {written} written, {journal_bytes(store_dir)} on disk"
    if any(k[2] and not k[1] for k in kills):
        assert log.truncations > 0, "the hand truncations never happened"

    # once more with retention running and no writers: it may truncate and reclaim, nothing
    # acknowledged after the head goes; then close, reopen (twice) and check again
    with pe.open(store_dir, **OPTIONS) as store:
        time.sleep(0.5)
        store.reclaim()
    assert journal_bytes(store_dir) <= disk_bound(log)
    first = verify(store_dir, log)
    if not hand_truncated:
        assert first["length"] >= min(RETENTION_BYTES, first["total"])
    second = verify(store_dir, log)
    assert first == second, "two reopens see different stores"
    print(f"\n{ITERATIONS} kills (delay s, early, hand-truncate, keep): {kills}; acks "
          f"{ {w: log.last(w) for w in log.acks} }, hand truncations {log.truncations}, keep bursts "
          f"{log.keep_bursts}, journal at most {max_disk:.0%} of its bound, {written} bytes written")


def test_payload_check_catches_damage():
    """The checker itself: a payload with one flipped byte, or moved to another key, is rejected."""
    ev = payload("w0", 1234, key_of("w0", 1234))
    assert parse(ev) == ("w0", 1234, key_of("w0", 1234))
    for bad in (ev[:-1] + bytes([ev[-1] ^ 1]), ev[:-1], ev.replace(b":1234:", b":1235:", 1)):
        with pytest.raises(AssertionError):
            parse(bad)
