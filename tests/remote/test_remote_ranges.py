"""A client group reader on the store's machine reads journal ranges itself: the owner hands
out where a chunk lies in the journal files and does no work per event; every event still comes
exactly once, in order, with the owner's positions; a range whose file went away is read
through the owner; a damaged section is CorruptDataError; TCP clients never get ranges; a
forged position inside a range is refused; large events and tiered history still read."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import pravega_embedded as pe
from pravega_embedded import journalrange
from pravega_embedded.errors import CorruptDataError, ReaderClosedError
from pravega_embedded.journal import FILE_HEADER_SIZE, SECTION_HEADER_SIZE
from pravega_embedded.journalrange import JournalRange, RangeFiles, RangeGone
from pravega_embedded.remote import session as session_mod

N = 20_000


def _fill(store, n: int = N, segments: int = 3, payload=lambda i: b"e%06d" % i) -> None:
    store.create_scope("iot", exist_ok=True)
    store.create_stream("iot", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)))
    with store.create_writer("iot", "s") as w:
        for i in range(n):
            w.write_event(payload(i), routing_key=f"k{i % 7}")
    store.seal_stream("iot", "s")


def _read_group(store, group: str = "g", reader: str = "r1") -> list:
    """Every event of a group of iot/s; every 997th event's position checked against the
    reader's (the owner's, for a client)."""
    store.create_reader_group(group, pe.ReaderGroupConfig(streams=[("iot", "s")],
                                                           automatic_checkpoint_interval=None))
    out = []
    with store.get_reader_group(group).create_reader(reader) as r:
        while True:
            ev = r.read_next_event(5)
            assert ev is not None, f"the reader stopped after {len(out)} events"
            if ev.is_read_completed:
                return out
            if not ev.is_checkpoint:
                out.append(ev)
                if len(out) % 997 == 0:
                    assert r.position() == ev.position
                    assert ev.position.as_dict()[f"iot/s/{ev.segment_id}"] == ev.offset + ev.length


def _check_exactly_once_in_order(events) -> None:
    got = [int(ev.event[1:7]) for ev in events]
    assert sorted(got) == list(range(N)), "every event exactly once"
    per_key: dict[str, list[int]] = {}
    for ev, i in zip(events, got):
        per_key.setdefault(ev.routing_key, []).append(i)
    assert all(v == sorted(v) for v in per_key.values()), "per-key order"


@pytest.fixture
def spies(monkeypatch):
    """Counts the ranges clients read from files and the events the owner sent itself."""
    counts = {"ranges": 0, "wire_events": 0}
    read = RangeFiles.runs
    wire = session_mod.Session._wire_event

    def events(self, *a):
        counts["ranges"] += 1
        return read(self, *a)

    def wire_event(self, *a):
        counts["wire_events"] += 1
        return wire(self, *a)

    monkeypatch.setattr(RangeFiles, "runs", events)
    monkeypatch.setattr(session_mod.Session, "_wire_event", wire_event)
    return counts


def test_a_local_group_reader_reads_the_files_itself_exactly_once_in_order(owner, client, spies):
    _fill(owner)
    events = _read_group(client)
    _check_exactly_once_in_order(events)
    assert spies["ranges"] >= 3 and spies["wire_events"] == 0, spies


def test_close_mid_range_releases_just_after_what_was_handed_out(owner, client, spies):
    _fill(owner)
    owner.create_reader_group("g", pe.ReaderGroupConfig(streams=[("iot", "s")],
                                                         automatic_checkpoint_interval=None))
    r = client.get_reader_group("g").create_reader("r1")
    first = [r.read_next_event(5) for _ in range(1234)]
    assert spies["ranges"] >= 1 and all(ev.event is not None for ev in first)
    pos = r.position()
    assert pos == first[-1].position
    r.close()
    rest = []
    with owner.get_reader_group("g").create_reader("r2") as r2:
        while (ev := r2.read_next_event(5)) is not None and not ev.is_read_completed:
            rest.append(ev)
    _check_exactly_once_in_order(first + rest)


def test_a_forged_position_inside_a_range_is_not_taken(owner, client):
    _fill(owner)
    owner.create_reader_group("g", pe.ReaderGroupConfig(streams=[("iot", "s")],
                                                         automatic_checkpoint_interval=None))
    r = client.get_reader_group("g").create_reader("r1")
    ev = r.read_next_event(5)
    seg_key = next(k for k in ev.position.as_dict() if k.endswith(f"/{ev.segment_id}"))
    conn, h = r._conn, r._h
    # an offset inside the first event is no event boundary: the owner ignores it
    forged = conn.call(h, "position_before", {seg_key: ev.offset + 1})
    assert forged.as_dict()[seg_key] != ev.offset + 1
    honest = conn.call(h, "position_before", {seg_key: ev.offset + ev.length})
    assert honest.as_dict()[seg_key] == ev.offset + ev.length
    r.close()


def test_a_range_whose_file_is_gone_is_read_through_the_owner(owner, client, spies, monkeypatch):
    _fill(owner)
    real = RangeFiles._file
    gone = {"n": 0}

    def flaky(self, base):
        if gone["n"] < 2:
            gone["n"] += 1
            raise RangeGone("reclaimed meanwhile (test)")
        return real(self, base)

    monkeypatch.setattr(RangeFiles, "_file", flaky)
    events = _read_group(client)
    _check_exactly_once_in_order(events)
    assert gone["n"] == 2 and spies["wire_events"] > 0, "two ranges were read through the owner"


def _gone_at_piece(monkeypatch, k: int) -> dict[str, int]:
    """The k-th section a client reads from the files (counting from 1) is gone."""
    real = RangeFiles._piece
    calls = {"n": 0}

    def flaky(self, p):
        calls["n"] += 1
        if calls["n"] == k:
            raise RangeGone("reclaimed meanwhile (test)")
        return real(self, p)

    monkeypatch.setattr(RangeFiles, "_piece", flaky)
    return calls


def test_a_section_gone_in_the_middle_of_a_range_is_read_through_the_owner_from_there(
        owner, client, spies, monkeypatch):
    _fill(owner)
    calls = _gone_at_piece(monkeypatch, 3)
    events = _read_group(client)
    _check_exactly_once_in_order(events)
    assert calls["n"] >= 3 and spies["wire_events"] > 0


@pytest.mark.parametrize("then", ["position", "close"])
def test_position_and_close_read_no_further_and_a_gone_section_after_them_loses_nothing(
        owner, client, spies, monkeypatch, then):
    _fill(owner)
    calls = _gone_at_piece(monkeypatch, 2)
    owner.create_reader_group("g", pe.ReaderGroupConfig(streams=[("iot", "s")],
                                                         automatic_checkpoint_interval=None))
    r = client.get_reader_group("g").create_reader("r1")
    first = r.read_next_event(5)
    assert calls["n"] == 1 and first.event is not None
    assert r.position() == first.position
    assert calls["n"] == 1  # the rest of the range is not read to answer it
    rest = []
    if then == "position":
        while not (ev := r.read_next_event(5)).is_read_completed:
            rest.append(ev)
        r.close()
    else:
        r.close()
        with owner.get_reader_group("g").create_reader("r2") as r2:
            while (ev := r2.read_next_event(5)) is not None and not ev.is_read_completed:
                rest.append(ev)
    _check_exactly_once_in_order([first] + rest)


def test_close_from_another_thread_while_a_range_is_read_loses_nothing(owner, client, spies):
    _fill(owner)
    owner.create_reader_group("g", pe.ReaderGroupConfig(streams=[("iot", "s")],
                                                         automatic_checkpoint_interval=None))
    r = client.get_reader_group("g").create_reader("r1")
    got, some = [], threading.Event()

    def read() -> None:
        try:
            while (ev := r.read_next_event(5)) is not None and not ev.is_read_completed:
                got.append(ev)
                if len(got) == 3000:
                    some.set()
        except ReaderClosedError:
            pass

    t = threading.Thread(target=read)
    t.start()
    assert some.wait(30)
    r.close()  # while the reading thread takes runs of the range
    t.join(30)
    assert not t.is_alive() and spies["ranges"] >= 1
    rest = []
    with owner.get_reader_group("g").create_reader("r2") as r2:
        while (ev := r2.read_next_event(5)) is not None and not ev.is_read_completed:
            rest.append(ev)
    _check_exactly_once_in_order(got + rest)


def test_a_segment_of_more_sections_than_a_range_may_name_is_read_in_ranges(owner, client, spies,
                                                                           monkeypatch):
    monkeypatch.setattr(journalrange, "MAX_PIECES", 40)  # in the owner and the client alike
    owner.create_scope("iot")
    owner.create_stream("iot", "s")
    with owner.create_writer("iot", "s") as w:
        for i in range(300):  # a device that flushes every reading: a section per event
            w.write_event(b"e%06d" % i, routing_key=f"k{i % 7}")
            w.flush()
    owner.seal_stream("iot", "s")
    events = _read_group(client)
    assert sorted(int(ev.event[1:7]) for ev in events) == list(range(300))
    assert [int(ev.event[1:7]) for ev in events] == list(range(300))  # one segment: in order
    assert spies["ranges"] >= 300 // 40 and spies["wire_events"] == 0


def test_a_damaged_section_is_corrupt_data_in_the_client(owner, client):
    _fill(owner, n=2000, segments=1)
    jfile = sorted(Path(owner.path, "journal").glob("*.pej"))[0]
    with open(jfile, "r+b") as f:  # a payload byte of the first section, under the owner's cache
        f.seek(FILE_HEADER_SIZE + 200)
        b = f.read(1)
        f.seek(FILE_HEADER_SIZE + 200)
        f.write(bytes([b[0] ^ 0xFF]))
    owner.create_reader_group("g", pe.ReaderGroupConfig(streams=[("iot", "s")]))
    with client.get_reader_group("g").create_reader("r1") as r:
        with pytest.raises(CorruptDataError, match="fails its check"):
            r.read_next_event(5)


def test_a_damaged_section_inside_a_range_loses_nothing_before_it(owner, client):
    owner.create_scope("iot")
    owner.create_stream("iot", "s")
    with owner.create_writer("iot", "s") as w:  # one key: the segment holds them in order
        for i in range(N):
            w.write_event(b"e%06d" % i, routing_key="k")
    owner.seal_stream("iot", "s")
    from pravega_embedded.segsource import SegmentSource
    jdir = Path(owner.path, "journal")
    seg = next(iter(owner._engine.streams["iot/s"].segments.values()))
    rng = journalrange.plan_range(SegmentSource(owner._engine, seg), 0, seg.length, 16 << 20)
    assert rng is not None and len(rng.pieces) >= 3
    victim = rng.pieces[1]  # a payload byte of the range's second section, in the file
    jfile = jdir / journalrange.file_name(victim.base)
    with open(jfile, "r+b") as f:
        f.seek(victim.pos - victim.base + victim.nbytes - 1)
        b = f.read(1)
        f.seek(victim.pos - victim.base + victim.nbytes - 1)
        f.write(bytes([b[0] ^ 0xFF]))
    owner.create_reader_group("g", pe.ReaderGroupConfig(streams=[("iot", "s")],
                                                         automatic_checkpoint_interval=None))
    r = client.get_reader_group("g").create_reader("r1")
    first = r.read_next_event(5)
    assert r.position() == first.position  # does not parse the rest of the range
    got, errors = [first], 0
    while errors < 3:
        try:
            ev = r.read_next_event(5)
        except CorruptDataError:
            errors += 1
            continue
        if ev is None or ev.is_read_completed:
            break
        got.append(ev)
    r.close()
    indices = [int(ev.event[1:7]) for ev in got]
    assert errors >= 1 and indices == list(range(len(indices)))  # a prefix: nothing skipped


def test_tcp_clients_get_events_not_ranges(owner, tcp_client, spies):
    _fill(owner)
    events = _read_group(tcp_client)
    _check_exactly_once_in_order(events)
    assert spies["ranges"] == 0 and spies["wire_events"] == N


def test_large_events_and_tiered_history_read_through_the_owner(tmp_path, spies):
    MiB = 1 << 20
    path = tmp_path / "data"
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0)
    big = os.urandom(9 * MiB)  # over 8 MiB: a large event, in sections of its own
    with pe.open(path, **opts) as owner:
        _fill(owner, payload=lambda i: b"e%06d" % i + (big if i == 5000 else os.urandom(200)))
        before = len(list((path / "journal").glob("*.pej")))
        owner.flush_tier2()  # history in tier 2, its journal files reclaimed
        assert len(list((path / "journal").glob("*.pej"))) < before
        with pe.open(path) as client:
            events = _read_group(client)
    _check_exactly_once_in_order(events)
    assert [ev.event[7:] for ev in events if int(ev.event[1:7]) == 5000] == [big]
    assert spies["wire_events"] > 0  # tiered and large events came from the owner


def test_plan_range_never_cuts_a_large_event(tmp_path):
    with pe.open(tmp_path / "s", durability="none", tier2=False) as store:
        store.create_scope("iot")
        store.create_stream("iot", "s")
        with store.create_writer("iot", "s") as w:
            w.write_event(b"a" * 100, routing_key="k")
            w.write_event(b"b" * (9 << 20), routing_key="k")
            w.write_event(b"c" * 100, routing_key="k")
        from pravega_embedded.segsource import SegmentSource
        eng = store._engine
        seg = next(iter(eng.streams["iot/s"].segments.values()))
        src = SegmentSource(eng, seg)
        first = journalrange.plan_range(src, 0, seg.length, 1 << 30)
        assert first is not None and first.stop == 107  # the small event only (6 + 1 + 100 bytes)
        assert journalrange.plan_range(src, first.stop, seg.length, 1 << 30) is None
        with RangeFiles(str(Path(store.path, "journal"))) as files:
            evs = [e for run in files.runs(first, seg.segment_id, ("iot", "s")) for e in run]
        assert [e.event for e in evs] == [b"a" * 100]


@pytest.mark.parametrize("bad", [
    None, {}, {"p": []}, {"start": 0, "stop": 1, "p": [[0, 0, 1, 0, 1]]},
    {"start": 0, "stop": 2, "p": [[0, FILE_HEADER_SIZE + SECTION_HEADER_SIZE, 1, 0, 1]]},
    {"start": 0, "stop": 1, "p": [[0, 64, journalrange.MAX_SECTION + 1, 0, 1]]},
    {"start": 1, "stop": 0, "p": [[0, 64, 1, 0, 1]]},
    {"start": 0, "stop": 1, "p": [[0, 64, 1, 0, True]]},
    {"start": 0, "stop": 1, "p": [[0, 64, 1, 1, 1]]},
])
def test_bad_ranges_are_protocol_errors(bad):
    with pytest.raises(pe.errors.ProtocolError):
        JournalRange.from_json(bad)
