"""What an attacker (or a broken client) can send to an owner: each is refused with a clear
error, nothing acknowledged is lost, and the owner goes on serving everyone else."""

from __future__ import annotations

import os
import socket
import stat
import struct
import tempfile
import time

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.remote import server as server_mod
from pravega_embedded.remote import values, wire


def _raw(store_path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(os.path.join(store_path, server_mod.SOCKET_NAME))
    return s


def _recv_frame(s: socket.socket):
    head = _exactly(s, wire.HEADER_SIZE)
    if head is None:
        return None
    length, kind, request = wire.HEADER.unpack(head)
    return kind, request, _exactly(s, length - 5)


def _exactly(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None if not buf else buf
        buf += chunk
    return buf


def _expect_refusal(s, error_type, match=""):
    """An ERROR of ``error_type`` and then the end of the connection."""
    frame = _recv_frame(s)
    assert frame is not None and frame[0] == wire.Kind.ERROR, frame
    exc = values.decode_error(frame[2])
    assert isinstance(exc, error_type) and match in str(exc), exc
    try:
        assert s.recv(1) == b""  # closed by the owner
    except ConnectionResetError:
        pass  # closed with bytes of ours unread: the same end


def _handshake(s):
    s.sendall(wire.encode_frame(wire.Kind.HELLO, 1, wire.encode_hello()))
    kind, _, _ = _recv_frame(s)
    assert kind == wire.Kind.WELCOME


def _still_serving(owner, client=None):
    with pe.open(owner.path) as c:
        c.create_scope("alive", exist_ok=True)
        assert "alive" in c.list_scopes()


def test_the_socket_is_private_to_the_owner_user(owner):
    st = os.stat(os.path.join(owner.path, server_mod.SOCKET_NAME))
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.geteuid()
    owner.close()
    assert not os.path.exists(os.path.join(owner.path, server_mod.SOCKET_NAME))  # removed at close


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
def test_a_process_of_another_user_is_refused():
    d = tempfile.mkdtemp(prefix="pe-uid-")
    os.chmod(d, 0o755)
    try:
        with pe.open(d, durability="none", tier2=False) as owner:
            owner.create_scope("secret")
            sock_path = os.path.join(d, server_mod.SOCKET_NAME)
            for mode, expect in ((0o600, "EACCES"), (0o666, "REFUSED")):  # the mode, then the uid check
                os.chmod(sock_path, mode)
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:  # the child: user nobody
                    os.close(r)
                    try:
                        os.setgid(65534)
                        os.setuid(65534)
                        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        s.settimeout(30)
                        try:
                            s.connect(sock_path)
                        except PermissionError:
                            os.write(w, b"EACCES")
                            os._exit(0)
                        frame = _recv_frame(s)
                        ok = frame is not None and frame[0] == wire.Kind.ERROR and isinstance(
                            values.decode_error(frame[2]), errors.PermissionDeniedError)
                        os.write(w, b"REFUSED" if ok and s.recv(1) == b"" else b"SERVED")
                    finally:
                        os._exit(0)
                os.close(w)
                got = os.read(r, 100).decode()
                os.close(r)
                os.waitpid(pid, 0)
                assert got == expect
            assert owner.list_scopes() == ["secret"]
            _still_serving(owner)
    finally:
        import shutil
        shutil.rmtree(d, ignore_errors=True)


def test_garbage_before_the_handshake_is_refused(owner):
    s = _raw(owner.path)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # its first 4 bytes read as a huge length
    _expect_refusal(s, errors.ProtocolError, "over the limit")
    s = _raw(owner.path)
    s.sendall(wire.encode_frame(wire.Kind.CALL, 1, b"{}"))  # a call before the HELLO
    _expect_refusal(s, errors.ProtocolError, "first message must be a HELLO")
    s = _raw(owner.path)
    s.sendall(wire.encode_frame(wire.Kind.HELLO, 1, b"PEW1" + struct.pack(">HHH", 7, 9, 0)))
    _expect_refusal(s, errors.ProtocolError, "version")
    _still_serving(owner)


def test_oversize_truncated_and_unknown_frames_after_the_handshake(owner):
    s = _raw(owner.path)
    _handshake(s)
    s.sendall(struct.pack(">IBI", wire.FRAME_MAX + 1, wire.Kind.WRITE, 2))  # nothing more is read
    _expect_refusal(s, errors.ProtocolError, "over the limit")
    s = _raw(owner.path)
    _handshake(s)
    s.sendall(struct.pack(">IBI", server_mod.CALL_MAX + 6, wire.Kind.CALL, 2))  # refused on its header
    _expect_refusal(s, errors.ProtocolError, "over its limit")
    s = _raw(owner.path)
    _handshake(s)
    s.sendall(struct.pack(">IBI", 100, wire.Kind.CALL, 2) + b"{")  # then the client goes away
    s.close()
    s = _raw(owner.path)
    _handshake(s)
    s.sendall(wire.encode_frame(wire.Kind.RESULT, 3, b"null"))  # a kind a client never sends
    _expect_refusal(s, errors.ProtocolError, "kind")
    s = _raw(owner.path)
    _handshake(s)
    s.sendall(wire.encode_frame(wire.Kind.CALL, 4, b"\xff\xfe not json"))
    _expect_refusal(s, errors.ProtocolError, "not JSON")
    _still_serving(owner)


@pytest.mark.parametrize("method", ["close", "_engine", "__class__", "open", "register_server", "_service"])
def test_calls_off_the_allowlist_are_refused_and_the_connection_goes_on(owner, method):
    s = _raw(owner.path)
    _handshake(s)
    s.sendall(wire.encode_frame(wire.Kind.CALL, 5, values.dumps({"h": 0, "m": method, "a": []})))
    kind, request, body = _recv_frame(s)
    assert (kind, request) == (wire.Kind.ERROR, 5)
    assert isinstance(values.decode_error(body), errors.InvalidConfigurationError)
    s.sendall(wire.encode_frame(wire.Kind.CALL, 6, values.dumps({"h": 0, "m": "list_scopes"})))
    assert _recv_frame(s)[:2] == (wire.Kind.RESULT, 6)
    assert not owner.closed


def test_a_handle_of_another_connection_cannot_be_used(owner, client):
    client.create_scope("a")
    client.create_stream("a", "s")
    w = client.create_writer("a", "s")
    w.write_event(b"mine")
    w.flush()
    s = _raw(owner.path)
    _handshake(s)
    for h in range(1, 5):  # guess handle ids
        s.sendall(wire.encode_frame(wire.Kind.CALL, h, values.dumps({"h": h, "m": "flush", "a": []})))
        kind, _, body = _recv_frame(s)
        assert kind == wire.Kind.ERROR and "no open handle" in str(values.decode_error(body))
    s.sendall(wire.encode_frame(wire.Kind.WRITE, 9, wire.encode_write(1, 0, [(None, b"forged")])))
    kind, request, body = _recv_frame(s)
    assert (kind, request) == (wire.Kind.ERROR, 9)
    w.close()
    with client.create_reader("a", "s") as r:
        assert r.read_next_event(timeout=0).event == b"mine" and r.read_next_event(timeout=0) is None


def test_a_silent_connection_is_dropped_after_the_handshake_timeout(owner, monkeypatch):
    monkeypatch.setattr(server_mod, "HANDSHAKE_TIMEOUT", 0.5)
    s = _raw(owner.path)  # slowloris: connects, sends nothing
    half = _raw(owner.path)
    half.sendall(wire.encode_frame(wire.Kind.HELLO, 1, wire.encode_hello())[:7])  # half a header
    _still_serving(owner)  # others are served meanwhile
    t0 = time.monotonic()
    _expect_refusal(s, errors.ProtocolError, "no HELLO")
    _expect_refusal(half, errors.ProtocolError, "no HELLO")
    assert time.monotonic() - t0 < 25


def test_connections_over_the_cap_are_refused(owner, monkeypatch):
    monkeypatch.setattr(server_mod, "MAX_CONNECTIONS", 3)
    held = [_raw(owner.path) for _ in range(3)]
    for s in held:
        _handshake(s)
    extra = _raw(owner.path)
    _expect_refusal(extra, errors.InvalidConfigurationError, "at most 3")
    with pytest.raises(errors.PravegaEmbeddedError):
        pe.open(owner.path, connect_timeout=0.2)  # refused while full: nothing hangs
    held.pop().close()
    deadline = time.monotonic() + 30
    while True:  # the owner notices the closed connection
        try:
            _still_serving(owner)
            break
        except errors.PravegaEmbeddedError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    for s in held:
        s.close()
