"""Failures between a client and the owner: a failed batch is never skipped, a large event is
never skipped, a claimed size allocates nothing, bad values and private arguments are refused.
Each of these was a bug found by review; each test fails without its fix."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
import tracemalloc

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.reader import EventStreamReader
from pravega_embedded.remote import server as server_mod
from pravega_embedded.remote import values, wire
from pravega_embedded.remote.framing import FramedSocket
from pravega_embedded.writer import EventStreamWriter


def _stream(store, segments=1):
    store.create_scope("a", exist_ok=True)
    store.create_stream("a", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)))


def _all(store):
    with store.create_reader("a", "s") as r:
        out = []
        while (ev := r.read_next_event(timeout=0)) is not None:
            out.append(ev.event)
        return out


def _fail_once(monkeypatch):
    real = EventStreamWriter.write_frames
    state = {"armed": True}

    def flaky(self, first, frames, count):
        if state["armed"]:
            state["armed"] = False
            raise errors.StorageFullError(28, "simulated: the disk is full")
        return real(self, first, frames, count)
    monkeypatch.setattr(EventStreamWriter, "write_frames", flaky)


@pytest.mark.parametrize("linger", [0.0, 0.05])
def test_a_failed_batch_is_sent_again_never_skipped(owner, client, monkeypatch, linger):
    _stream(owner)
    w = client.create_writer("a", "s", writer_id="w", linger=linger)
    for i in range(4):
        w.write_event(b"%d" % i)
    assert w.flush() == 3
    _fail_once(monkeypatch)
    w.write_event(b"4")
    w.write_event(b"5")
    if linger:  # the linger thread sends the batch and meets the failure: it must not eat it
        deadline = time.monotonic() + 30
        while w._conn.collect() is False and time.monotonic() < deadline:
            time.sleep(0.01)
    with pytest.raises(errors.StorageFullError):
        w.flush()
    w.write_event(b"6")
    assert w.flush() == 6  # the failed batch went again, before the new one
    w.close()
    assert _all(owner) == [b"%d" % i for i in range(7)]


def test_a_claimed_size_allocates_nothing_until_bytes_arrive():
    a, b = socket.socketpair()
    fs = FramedSocket(a, "a peer")
    b.sendall(struct.pack(">IBI", wire.FRAME_MAX, wire.Kind.WRITE, 1) + b"abc")
    b.close()
    tracemalloc.start()
    try:
        with pytest.raises(errors.ConnectionLostError, match="middle of a message"):
            fs.recv(wire.FRAME_MAX)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        fs.close()
    assert peak < 4 << 20, peak  # not the 72 MiB the header claimed


def test_an_error_after_some_events_were_taken_loses_none(owner, client, monkeypatch):
    _stream(owner)
    with owner.create_writer("a", "s") as w:
        for i in range(10):
            w.write_event(b"%d" % i)
    real = EventStreamReader.read_next_event
    calls = {"n": 0}

    def flaky(self, timeout=None):
        calls["n"] += 1
        if calls["n"] == 4:
            raise errors.TruncatedDataError("simulated: a segment was truncated under the reader")
        return real(self, timeout)
    monkeypatch.setattr(EventStreamReader, "read_next_event", flaky)
    r = client.create_reader("a", "s")
    got = [r.read_next_event(timeout=0).event for _ in range(3)]  # the three taken before
    with pytest.raises(errors.TruncatedDataError):
        r.read_next_event(timeout=0)
    while (ev := r.read_next_event(timeout=0)) is not None:
        got.append(ev.event)
    assert got == [b"%d" % i for i in range(10)]
    r.close()


def test_configurations_from_a_client_are_checked_by_their_factories(owner, client):
    client.create_scope("a")
    for bad in (pe.ScalingPolicy(kind="fixed", min_segments=20000), pe.ScalingPolicy(kind="bogus"),
                pe.RetentionPolicy(kind="size", min=-5.0)):
        cfg = (pe.StreamConfiguration(scaling=bad) if isinstance(bad, pe.ScalingPolicy)
               else pe.StreamConfiguration(retention=bad))
        with pytest.raises(errors.InvalidConfigurationError):
            client.create_stream("a", "s", cfg)
    assert owner.list_streams("a") == []


def test_private_arguments_and_unsendable_values_are_refused(owner, client):
    client.create_scope("a")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(os.path.join(owner.path, server_mod.SOCKET_NAME))
    fs = FramedSocket(s, "owner")
    fs.send(wire.Kind.HELLO, 1, wire.encode_hello())
    assert fs.recv(wire.FRAME_MAX)[0].kind == wire.Kind.WELCOME
    fs.send(wire.Kind.CALL, 2, values.dumps({"h": 0, "m": "create_stream", "a": ["a", "x"],
                                             "k": {"_kind": "no-such-kind"}}))
    header, body = fs.recv(wire.FRAME_MAX)
    assert header.kind == wire.Kind.ERROR
    assert isinstance(values.decode_error(body), errors.InvalidConfigurationError)
    fs.close()
    assert owner.list_streams("a") == []
    with pytest.raises(errors.InvalidConfigurationError):
        client.create_stream("a", "s", object())
    with pytest.raises(errors.InvalidEventPointerError):
        client._conn.read(0, "fetch_event", 123)


def test_an_atomic_batch_of_megabytes_goes_in_whole(owner, client):
    _stream(owner)
    evs = [os.urandom(100_000) for _ in range(30)]  # 3 MB: over one CALL, under one WRITE
    with client.create_writer("a", "s", writer_id="b") as w:
        assert w.write_events(evs, routing_key="k") == 29
        assert w.flush() == 29
    assert _all(owner) == evs


def test_a_hello_dripped_byte_by_byte_is_cut_at_the_deadline(owner, monkeypatch):
    monkeypatch.setattr(server_mod, "HANDSHAKE_TIMEOUT", 0.5)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(os.path.join(owner.path, server_mod.SOCKET_NAME))
    hello = wire.encode_frame(wire.Kind.HELLO, 1, wire.encode_hello())
    stop = threading.Event()

    def drip():
        for byte in hello[:-1]:
            if stop.wait(0.2):
                return
            try:
                s.send(bytes([byte]))
            except OSError:
                return
    t = threading.Thread(target=drip)
    t.start()
    t0 = time.monotonic()
    try:
        head = s.recv(9)  # the ERROR, within the deadline, not after len(hello) x 0.2 s
        assert head and struct.unpack(">IBI", head)[1] == wire.Kind.ERROR
        assert time.monotonic() - t0 < 0.2 * len(hello) - 1
    finally:
        stop.set()
        t.join()
        s.close()


def test_a_store_with_a_long_non_ascii_path_is_served(tmp_path):
    d = tmp_path.joinpath(*["店" * 80] * 9)  # 720 non-ASCII characters: 4,320 bytes as JSON escapes
    with pe.open(d, durability="none", tier2=False) as owner:
        with pe.open(d) as client:
            assert isinstance(client, pe.RemoteStore) and client.list_scopes() == []
        assert not owner.closed
