"""Regressions of an adversarial review of the remote layer: grants that could be got round,
large events cut short or mixed up, batches lost, owner resources a client could pin, a client's
close that waited on its own read. Each failed before its fix."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.remote import server as server_mod
from pravega_embedded.remote import wire

ADMIN, READER, WRITER = "admin-0123456789abcdef", "reader-0123456789abcdef", "writer-0123456789abcdef"


@pytest.fixture
def tcp(owner):
    srv = pe.serve_tcp(owner, "127.0.0.1:0", tokens=pe.TokenTable.of({
        ADMIN: ["admin:*"], READER: ["read:iot/*"], WRITER: ["write:iot/*"], "scopeq-0123456789abcdef": ["admin:iot/?"]}))
    for scope, stream in (("iot", "x"), ("secret", "y")):
        owner.create_scope(scope, exist_ok=True)
        owner.create_stream(scope, stream)
        with owner.create_writer(scope, stream) as w:
            w.write_event(f"{scope}-0".encode())
    return owner, f"tcp://127.0.0.1:{srv.address[1]}", srv.address


def _cfg(*streams):
    return pe.ReaderGroupConfig(streams=list(streams), automatic_checkpoint_interval=None)


def test_a_group_cannot_be_reset_onto_a_stream_outside_the_grants(tcp):
    owner, url, _ = tcp
    with pe.connect(url, token=READER) as c:
        g = c.create_reader_group("mine", _cfg(("iot", "x")))
        for call in (lambda: g.reset(_cfg(("secret", "y"))),
                     lambda: g._call("reset", target=_cfg(("secret", "y")))):  # keyword form too
            with pytest.raises(errors.PermissionDeniedError):
                call()
        assert owner.get_reader_group("mine").config.streams == (("iot", "x"),)
        owner.get_reader_group("mine").reset(_cfg(("secret", "y")))  # reset by someone allowed
        with pytest.raises(errors.PermissionDeniedError):  # the handle follows the group
            g.online_readers()
        with pytest.raises(errors.PermissionDeniedError):
            g.create_reader("r")


def test_exist_ok_does_not_hand_over_another_group(tcp):
    owner, url, _ = tcp
    owner.create_reader_group("victim", _cfg(("secret", "y")))
    with pe.connect(url, token=READER) as c:
        with pytest.raises(errors.PermissionDeniedError):
            c.create_reader_group("victim", _cfg(("iot", "x")), exist_ok=True)
    assert owner.get_reader_group("victim").config.streams == (("secret", "y"),)


def test_byte_streams_status_and_scope_patterns_keep_to_the_grants(tcp):
    _, url, _ = tcp
    with pe.connect(url, token=WRITER) as c:
        with pytest.raises(errors.PermissionDeniedError, match="admin"):  # it would create a stream
            c.create_byte_stream("iot", "new")
        with pytest.raises(errors.PermissionDeniedError):
            c.status()
        with pytest.raises(errors.PermissionDeniedError):
            c.tiering_status()
    with pe.connect(url, token=ADMIN) as a:
        a.create_byte_stream("iot", "bytes").close()
    with pe.connect(url, token=WRITER) as c:
        bs = c.create_byte_stream("iot", "bytes")
        bs.write(b"abc")
        bs.flush()
        for call in (bs.seal, lambda: bs.truncate_before(1)):
            with pytest.raises(errors.PermissionDeniedError, match="admin"):
                call()
        bs.close()
        assert c.list_streams(scope="iot") == ["bytes", "x"]  # keyword form of a filtered list
    with pe.connect(url, token="scopeq-0123456789abcdef") as c:
        with pytest.raises(errors.PermissionDeniedError):
            c.delete_scope("iot")


def test_a_large_event_over_the_limit_is_refused_whole_and_the_writer_goes_on(tmp_path):
    owner = pe.open(tmp_path / "s", durability="none", tier2=False, large_event_limit=20 << 20)
    try:
        owner.create_scope("a")
        owner.create_stream("a", "s")
        with pe.open(owner.path) as c:
            w = c.create_writer("a", "s")
            with pytest.raises(errors.EventTooLargeError):  # the client knows the limit
                w.write_event(b"A" * (40 << 20))
            w._conn.info["large_event_limit"] = None  # a client that does not: the owner refuses
            with pytest.raises(errors.EventTooLargeError):
                w.write_event(b"B" * (16 << 20) + b"C" * (16 << 20) + b"D" * (8 << 20))
            assert w.write_event(b"after") == 0
            assert w.flush() == 0
            w.close()
        assert [ev.event for ev in owner.read_slice("a", "s")] == [b"after"]
    finally:
        owner.close()


def test_large_events_from_slices_and_from_threads_are_the_right_ones(owner, client):
    owner.create_scope("a")
    owner.create_stream("a", "s")
    bigs = [bytes([i]) * ((9 << 20) + i) for i in range(3)]
    with owner.create_writer("a", "s") as w:
        for b in bigs:
            w.write_event(b)
    sl = client.read_slice("a", "s")
    assert [ev.event for ev in sl] == bigs
    pointers = [ev.event_pointer for ev in sl]
    bad = []

    def fetch(i):
        for _ in range(3):
            if client.fetch_event(pointers[i]).event != bigs[i]:
                bad.append(i)

    threads = [threading.Thread(target=fetch, args=(i % 3,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []


def test_a_payload_that_does_not_deserialize_loses_no_event(handle):
    handle.create_scope("a")
    handle.create_stream("a", "s")
    with handle.create_writer("a", "s") as w:
        for p in (b'{"n":1}', b'{"n":2}', b"not json", b'{"n":4}'):
            w.write_event(p)
    g = handle.create_reader_group("g", _cfg(("a", "s")))
    r = g.create_reader("r", serializer="json")
    got, failures = [], 0
    for _ in range(6):
        try:
            ev = r.read_next_event(0.5)
        except errors.SerializationError:
            failures += 1
            continue
        if ev is not None:
            got.append(ev.event)
    assert failures >= 2  # it stays at the bad event, as in process
    assert got == [{"n": 1}, {"n": 2}][:len(got)]


def test_abandoned_readers_share_one_thread(owner, client):
    owner.create_scope("a")
    owner.create_stream("a", "s")
    g = client.create_reader_group("g", _cfg(("a", "s")))
    readers = [g.create_reader(f"r{i}") for i in range(40)]
    before = threading.active_count()
    for r in readers:
        r._conn.close()  # as if the client died
    deadline = time.monotonic() + 30
    while len(owner.get_reader_group("g").online_readers()) != 40 or threading.active_count() > before + 2:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert threading.active_count() <= before + 2, threading.active_count() - before


def test_waits_time_out_as_timeout_error_and_end_with_their_client(owner, client):
    owner.create_scope("a")
    owner.create_stream("a", "s")
    g = client.create_reader_group("g", _cfg(("a", "s")))
    g.create_reader("idle")  # never reads: no checkpoint completes
    with pytest.raises(TimeoutError):
        g.generate_stream_cuts(0.3)
    fut = g.initiate_checkpoint("cp")
    with pytest.raises(TimeoutError):
        fut.result(0.3)


def test_close_before_moves_nothing_but_the_last_batch(owner, client):
    owner.create_scope("a")
    owner.create_stream("a", "s")
    with owner.create_writer("a", "s") as w:
        for i in range(10):
            w.write_event(b"%d" % i)
    g = client.create_reader_group("g", _cfg(("a", "s")))
    r = g.create_reader("r")
    assert r.read_next_event(1).event == b"0"
    r._close("close_before", {"a/s/0": -7})  # a forged offset: ignored
    cp = owner.get_reader_group("g").initiate_checkpoint("after")
    r2 = g.create_reader("r2")
    got = []
    while (ev := r2.read_next_event(0.5)) is not None:
        if not ev.is_checkpoint:
            got.append(ev.event)
    assert got == []  # the forged offset was ignored: released after the batch it was sent
    assert cp.result(5).name == "after"  # and the group's state is whole
    assert owner.get_reader_group("g").last_checkpoint().name == "after"


def test_silent_sockets_from_one_host_cannot_lock_out_others(tcp, monkeypatch):
    _, url, address = tcp
    silent = [socket.create_connection(address, timeout=10) for _ in range(server_mod.PENDING_PER_PEER + 4)]
    try:
        other = socket.socket()
        other.bind(("127.0.0.2", 0))
        other.settimeout(10)
        other.connect(address)
        other.sendall(wire.encode_frame(wire.Kind.HELLO, 1, wire.encode_hello(ADMIN.encode())))
        head = other.recv(wire.HEADER_SIZE, socket.MSG_WAITALL)
        assert wire.parse_header(head, wire.FRAME_MAX).kind == wire.Kind.WELCOME
        other.close()
    finally:
        for s in silent:
            s.close()


def test_close_while_another_thread_reads_returns_at_once(owner, client):
    owner.create_scope("a")
    owner.create_stream("a", "s")
    g = client.create_reader_group("g", _cfg(("a", "s")))
    r = g.create_reader("r")
    raised = []

    def read():
        try:
            r.read_next_event(None)
        except errors.ReaderClosedError:
            raised.append(True)

    t = threading.Thread(target=read)
    t.start()
    time.sleep(0.2)  # not a timing assertion: the read is (most likely) waiting by now
    started = time.monotonic()
    r.close()
    t.join(30)
    assert not t.is_alive() and raised == [True]
    assert time.monotonic() - started < 30
