"""The store over TCP: tokens and their grants, TLS, and what an attacker tries (wrong or
missing tokens, a token without the permission, oversize frames before and after auth, garbage,
idle connections, too many connections); each refused with nothing lost, the owner serving on."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.remote import server as server_mod
from pravega_embedded.remote import wire

ADMIN, WRITER, READER = "admin-0123456789abcdef", "writer-0123456789abcdef", "reader-0123456789abcdef"
TOKENS = {ADMIN: ["admin:*"], WRITER: ["write:iot/sensors"], READER: ["read:iot/*"]}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(owner):
    srv = pe.serve_tcp(owner, "127.0.0.1:0", tokens=pe.TokenTable.of(TOKENS), idle_timeout=2.0)
    owner.create_scope("iot")
    owner.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    owner.create_scope("private")
    owner.create_stream("private", "keys")
    return owner, f"tcp://127.0.0.1:{srv.address[1]}", srv.address


def _still_serving(url):
    with pe.connect(url, token=ADMIN) as c:
        assert "iot" in c.list_scopes()


def test_the_same_api_over_tcp(served):
    owner, url, _ = served
    with pe.connect(url, token=ADMIN) as c:
        assert isinstance(c, pe.RemoteStore)
        w = c.create_writer("iot", "sensors", writer_id="gw")
        for i in range(500):
            w.write_event(b"%d" % i, routing_key=f"k{i % 3}")
        assert w.flush() == 499
        assert c.read_slice("iot", "sensors").to_arrow().num_rows == 500
        g = c.create_reader_group("g", [("iot", "sensors")])
        r = g.create_reader("r")
        got = []
        while (ev := r.read_next_event(0.5)) is not None:
            got.append(int(ev.event))
        assert sorted(got) == list(range(500))
        r.close()
    assert owner.create_writer("iot", "sensors", writer_id="gw").last_sequence == 499


def test_grants_are_enforced_and_lists_filtered(served):
    _, url, _ = served
    with pe.connect(url, token=READER) as c:
        assert c.list_scopes() == ["iot"]  # "private" is not listed
        assert c.list_streams("iot") == ["sensors"]
        assert c.stream_info("iot", "sensors").scope == "iot"
        with pytest.raises(errors.PermissionDeniedError, match="write on 'iot/sensors'"):
            c.create_writer("iot", "sensors")
        with pytest.raises(errors.PermissionDeniedError, match="read on 'private/keys'"):
            c.create_reader("private", "keys")
        with pytest.raises(errors.PermissionDeniedError, match="admin"):
            c.delete_stream("iot", "sensors")
        with pytest.raises(errors.PermissionDeniedError):
            c.create_reader_group("g", [("iot", "sensors"), ("private", "keys")])
        with pytest.raises(errors.PermissionDeniedError):
            c.checkpoint()
        g = c.create_reader_group("g", [("iot", "sensors")])
        with pytest.raises(errors.PermissionDeniedError):  # no way round through a reset
            g.reset(pe.ReaderGroupConfig(streams=[("private", "keys")]))
        assert c.list_reader_groups() == ["g"]
    with pe.connect(url, token=WRITER) as c:
        w = c.create_writer("iot", "sensors")
        w.write_event(b"ok")
        w.flush()
        with pytest.raises(errors.PermissionDeniedError):
            c.create_writer("private", "keys")
        with pytest.raises(errors.PermissionDeniedError):
            c.create_scope("new")
        assert c.list_reader_groups() == ["g"]
    with pe.connect(url, token=ADMIN) as c:
        assert sorted(c.list_scopes()) == ["iot", "private"]


def test_missing_and_wrong_tokens_are_refused(served):
    _, url, _ = served
    for token in (None, "", "admin-0123456789abcdeX", ADMIN[:-1], ADMIN + "x", "\0" * 1024):
        with pytest.raises(errors.PermissionDeniedError, match="valid token"):
            pe.connect(url, token=token)
    _still_serving(url)


def _raw(address):
    s = socket.create_connection(address, timeout=10)
    return s


def _answer(s):
    data = b""
    while len(data) < wire.HEADER_SIZE:
        chunk = s.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    header = wire.parse_header(data, wire.FRAME_MAX)
    while len(data) < 4 + header.length:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return header, data[wire.HEADER_SIZE:4 + header.length]


def test_nothing_but_a_small_hello_is_read_before_the_token(served):
    _, url, address = served
    s = _raw(address)  # a frame over HELLO_MAX before auth: refused on its header
    s.sendall(wire.HEADER.pack(wire.FRAME_MAX, wire.Kind.HELLO, 1))
    header, body = _answer(s)
    assert header.kind == wire.Kind.ERROR and b"over the limit" in body
    s = _raw(address)  # a CALL before the HELLO: refused
    s.sendall(wire.encode_frame(wire.Kind.CALL, 1, b'{"h":0,"m":"list_scopes"}'))
    header, body = _answer(s)
    assert header.kind == wire.Kind.ERROR and b"HELLO" in body
    s = _raw(address)  # garbage
    s.sendall(os.urandom(64))
    header, _ = _answer(s)
    assert header is None or header.kind == wire.Kind.ERROR
    s = _raw(address)  # a HELLO with a wrong token, then a CALL: the CALL is never answered
    s.sendall(wire.encode_frame(wire.Kind.HELLO, 1, wire.encode_hello(b"nope"))
              + wire.encode_frame(wire.Kind.CALL, 2, b'{"h":0,"m":"list_scopes"}'))
    header, body = _answer(s)
    assert header.kind == wire.Kind.ERROR and b"PermissionDeniedError" in body
    assert _answer(s) == (None, b"")
    _still_serving(url)


def test_oversize_and_bad_frames_after_auth_are_refused(served):
    _, url, address = served
    s = _raw(address)
    s.sendall(wire.encode_frame(wire.Kind.HELLO, 1, wire.encode_hello(ADMIN.encode())))
    header, _ = _answer(s)
    assert header.kind == wire.Kind.WELCOME
    s.sendall(wire.HEADER.pack(server_mod.CALL_MAX + 100, wire.Kind.CALL, 2))  # a CALL over its cap
    header, body = _answer(s)
    assert header.kind == wire.Kind.ERROR and b"over its limit" in body
    s = _raw(address)
    s.sendall(wire.encode_frame(wire.Kind.HELLO, 1, wire.encode_hello(ADMIN.encode())))
    _answer(s)
    s.sendall(wire.HEADER.pack(wire.FRAME_MAX + 1, wire.Kind.WRITE, 2))
    header, body = _answer(s)
    assert header.kind == wire.Kind.ERROR and b"over the limit" in body
    _still_serving(url)


def test_idle_and_slow_connections_are_dropped(served, monkeypatch):
    _, url, address = served
    idle = _raw(address)  # authenticated, then silent past the idle timeout (2 s here)
    idle.sendall(wire.encode_frame(wire.Kind.HELLO, 1, wire.encode_hello(ADMIN.encode())))
    assert _answer(idle)[0].kind == wire.Kind.WELCOME
    header, body = _answer(idle)
    assert header.kind == wire.Kind.ERROR and b"idle" in body
    monkeypatch.setattr(server_mod, "HANDSHAKE_TIMEOUT", 1.0)
    slow = _raw(address)  # slowloris: a HELLO a byte at a time does not make its deadline
    frame = wire.encode_frame(wire.Kind.HELLO, 1, wire.encode_hello(ADMIN.encode()))
    started = time.monotonic()
    try:
        for b in frame[:-1]:
            slow.sendall(bytes([b]))
            time.sleep(0.1)  # 41 bytes: over 4 s in all
    except OSError:
        pass  # refused while still sending
    header, body = _answer(slow)
    assert header is None or (header.kind == wire.Kind.ERROR and b"HELLO" in body)
    assert time.monotonic() - started < 60
    _still_serving(url)


def test_too_many_connections_are_refused(served, monkeypatch):
    _, url, address = served
    monkeypatch.setattr(server_mod, "MAX_CONNECTIONS", 3)
    held = [pe.connect(url, token=ADMIN) for _ in range(3)]
    with pytest.raises(errors.InvalidConfigurationError, match="at most 3"):
        pe.connect(url, token=ADMIN)
    held.pop().close()
    deadline = time.monotonic() + 30
    while True:  # the slot comes back once the owner saw the close
        try:
            pe.connect(url, token=ADMIN).close()
            break
        except errors.InvalidConfigurationError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    for c in held:
        c.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for a certificate")
def test_tls(owner, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    srv = pe.serve_tcp(owner, "127.0.0.1:0", tokens=pe.TokenTable.of(TOKENS), tls_cert=cert, tls_key=key)
    url = f"tls://127.0.0.1:{srv.address[1]}"
    with pe.connect(url, token=ADMIN, cafile=cert) as c:
        c.create_scope("t")
        assert c.list_scopes() == ["t"]
    with pytest.raises(errors.ConnectionLostError, match="TLS"):  # not our CA: refused
        pe.connect(url, token=ADMIN)
    with pytest.raises(errors.ConnectionLostError):  # plain TCP to a TLS port: no WELCOME
        pe.connect(f"tcp://127.0.0.1:{srv.address[1]}", token=ADMIN, timeout=3)
    ctx = ssl.create_default_context(cafile=str(cert))
    with pe.connect(url, token=READER, ssl_context=ctx) as c:
        with pytest.raises(errors.PermissionDeniedError):
            c.create_scope("u")


def test_the_cli_serves_over_tcp(tmp_path):
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[[token]]\nname = "ops"\nsecret = "{ADMIN}"\ngrants = ["admin:*"]\n')
    store = tmp_path / "data"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "pravega_embedded", "--durability", "none", "serve",
                             str(store), "--listen", "127.0.0.1:0", "--token-file", str(tokens)],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert "serving" in line, line + proc.stderr.read()
        url = line.split(" on ")[1].split()[0]
        with pe.connect(url, token=ADMIN) as c:
            c.create_scope("iot")
            c.create_stream("iot", "s")
            with c.create_writer("iot", "s") as w:
                w.write_event(b"over tcp")
        with pe.open(store) as local:  # the same store, from this machine's socket
            assert isinstance(local, pe.RemoteStore)
            assert [ev.event for ev in local.read_slice("iot", "s")] == [b"over tcp"]
    finally:
        proc.terminate()
        assert proc.wait(60) == 0


def test_token_files_are_checked(tmp_path):
    bad = tmp_path / "t.toml"
    for text, match in [("", "no \\[\\[token\\]\\]"), ("[[token]]\nsecret='short'\ngrants=['read:a/b']", "16"),
                        (f"[[token]]\nsecret='{ADMIN}'\ngrants=['root:a/b']", "grant"),
                        (f"[[token]]\nsecret='{ADMIN}'\nsha256='00'\ngrants=['read:*']", "exactly one"),
                        ("not toml [", "not TOML")]:
        bad.write_text(text)
        with pytest.raises(errors.InvalidConfigurationError, match=match):
            pe.remote.load_tokens(bad)
    import hashlib
    bad.write_text(f"[[token]]\nname='x'\nsha256='{hashlib.sha256(ADMIN.encode()).hexdigest()}'\n"
                   "grants=['read:iot/*']\n")
    table = pe.remote.load_tokens(bad)
    assert table.lookup(ADMIN.encode()).name == "x" and table.lookup(b"other") is None
    with pe.open_temporary() as tmp, pytest.raises(errors.InvalidConfigurationError, match="tokens"):
        pe.remote.OwnerServer(tmp, address=("127.0.0.1", 0))


def test_struct_of_a_hello_token_cap():
    # a HELLO claiming a token over TOKEN_MAX is refused by the parser before any lookup
    body = struct.pack(">4sHHH", wire.MAGIC, 1, 1, wire.TOKEN_MAX + 1) + b"x" * (wire.TOKEN_MAX + 1)
    with pytest.raises(errors.ProtocolError):
        wire.parse_hello(body)
