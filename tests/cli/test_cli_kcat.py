"""The CLI as kcat and redis-cli users use it, each command a subprocess: where ``read``
starts (``-o beginning|end|-N|@TIME|CUT``), ``-c``, ``-e``, ``-s``, ``-f`` formats, ``-J``
envelopes and ``-D`` delimiters that keep binary and multi-line events whole, ``write -D/-K``,
``list -l`` and ``info`` with events and policies, ``--version``, global options after the
command, one-line failures (no traceback), read commands that never create a store,
``create-stream`` conflicts, what ``seal``/``delete``/``truncate`` say, transactions, byte
streams, and the progress line on a terminal only."""

from __future__ import annotations

import base64
import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pravega_embedded as pe
from pravega_embedded.streamcut import segment_name

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))
CMD = [sys.executable, "-m", "pravega_embedded"]


def run(store: Path, *args: str, stdin: bytes = b"", code: int = 0) -> subprocess.CompletedProcess:
    out = subprocess.run([*CMD, "--store", str(store), "--durability", "none", *args], input=stdin,
                         capture_output=True, env=ENV, timeout=180)
    assert out.returncode == code, (args, out.stdout, out.stderr)
    assert b"Traceback" not in out.stderr, out.stderr
    if code:
        assert len(out.stderr.splitlines()) == 1, out.stderr  # one clear line
        assert out.stderr.startswith(b"pravega-embedded: error:"), out.stderr
    return out


def make(store: Path) -> None:
    """iot/s: 2 segments; keys a (10 events) and b (5 events), numbered payloads."""
    run(store, "create-stream", "iot/s", "--segments", "2")
    lines = b"".join(b"%s:%d\n" % (k, i) for i, k in enumerate([b"a"] * 10 + [b"b"] * 5))
    run(store, "write", "iot/s", "-K", ":", stdin=lines)


def lines(out: subprocess.CompletedProcess) -> list[str]:
    return out.stdout.decode().splitlines()


def test_start_positions_count_and_segments(tmp_path):
    store = tmp_path / "s"
    make(store)
    everything = lines(run(store, "read", "iot/s", "-f", "%k %s\\n"))
    assert sorted(everything) == sorted([f"a {i}" for i in range(10)] + [f"b {i}" for i in range(10, 15)])
    assert lines(run(store, "read", "iot/s", "-o", "beginning", "-e", "-f", "%k %s\\n")) == everything
    # -o -N: the last N events of each segment, in order
    last = lines(run(store, "read", "iot/s", "-o", "-2", "-f", "%k %s\\n"))
    assert sorted(last) == ["a 8", "a 9", "b 13", "b 14"]
    # -c: the first N events a reader returns; -o end -e: nothing new, exit at once
    assert lines(run(store, "read", "iot/s", "-c", "3", "-f", "%s\\n")) == [e.split()[1] for e in everything[:3]]
    assert run(store, "read", "iot/s", "-o", "end", "-e").stdout == b""
    # -s: one segment only (its id as info prints it)
    with pe.open(store, "none") as s:
        seg_of = {ev.routing_key: ev.segment_id for ev in s.read_slice("iot", "s")}
    assert seg_of["a"] != seg_of["b"]
    only_b = lines(run(store, "read", "iot/s", "-s", segment_name(seg_of["b"]), "-f", "%k %p\\n"))
    assert only_b == [f"b {segment_name(seg_of['b'])}"] * 5
    # @TIME: a time after every write finds nothing; one before all finds everything
    assert run(store, "read", "iot/s", "-o", f"@{int(time.time() * 1000) + 60_000}").stdout == b""
    assert len(lines(run(store, "read", "iot/s", "-o", "@2000-01-01T00:00:00Z"))) == 15
    # a cut: --show-cut after 3 events, then -o CUT reads the other 12
    out = run(store, "read", "iot/s", "-c", "3", "--show-cut")
    rest = lines(run(store, "read", "iot/s", "-o", out.stderr.decode().strip(), "-f", "%k %s\\n"))
    assert sorted(everything[:3] + rest) == sorted(everything)


def test_formats_json_and_delimiters_keep_framing(tmp_path):
    store = tmp_path / "s"
    run(store, "create-stream", "bin/x")
    events = [b"line one\nline two", bytes(range(1, 256)), b"", "caf\u00e9".encode()]  # no NUL inside
    run(store, "write", "bin/x", "-D", "\\0", stdin=b"\0".join(events) + b"\0")
    raw = run(store, "read", "bin/x", "-D", "\\0").stdout
    assert raw.split(b"\0")[:-1] == events and raw.endswith(b"\0")
    envs = [json.loads(line) for line in run(store, "read", "bin/x", "-J").stdout.splitlines()]
    got = [e["payload"].encode() if "payload" in e else base64.b64decode(e["payload_base64"]) for e in envs]
    assert got == events
    assert "payload_base64" in envs[1] and envs[3]["payload"] == "caf\u00e9"
    first = envs[0]
    assert first["stream"] == "bin/x" and first["offset"] == 0 and first["key"] is None
    assert first["write_time"].startswith(time.strftime("%Y-", time.gmtime()))
    ptr = pe.EventPointer.from_bytes(base64.b64decode(first["pointer"]))
    with pe.open(store, "none") as s:
        assert s.fetch_event(ptr).event == events[0]
    fmt = run(store, "read", "bin/x", "-c", "1", "-f", "%t|%p|%o|%S|%K|%T|%P|100%%\\n").stdout.decode()
    t, p, o, size, klen, ms, pointer, pct = fmt.strip().split("|")
    assert (t, o, size, klen, pct) == ("bin/x", "0", str(len(events[0])), "-1", "100%")
    assert abs(int(ms) / 1000 - time.time()) < 3600 and pointer.startswith("bin/x/0@0+") and p == "0#0"
    run(store, "read", "bin/x", "-f", "%Q", code=2)


def test_listing_info_version_and_global_options_after_the_command(tmp_path):
    store = tmp_path / "s"
    make(store)
    run(store, "update-stream", "iot/s", "--retention-days", "7")
    listing = lines(run(store, "list", "-l"))
    assert listing[0].split() == ["STREAM", "SEGMENTS", "EVENTS", "BYTES", "SCALING", "RETENTION", "STATE"]
    row = listing[1].split()
    assert row[:4] == ["iot/s", "2", "15"] + [row[3]] and int(row[3]) > 0 and "by_time(7" in listing[1]
    info = json.loads(run(store, "info", "iot/s", "--json").stdout)
    assert info["events"] == 15 and sum(s["events"] for s in info["segments"]) == 15
    assert info["scaling"] == "fixed(2)" and info["retention"].startswith("by_time(7")
    text = run(store, "info", "iot/s").stdout.decode()
    assert "events: 15 in" in text and "retention: by_time(7 days)" in text
    version = subprocess.run([*CMD, "--version"], capture_output=True, text=True, env=ENV)
    assert version.returncode == 0 and version.stdout.strip() == f"pravega-embedded {pe.__version__}"
    # global options after the command, and they win over the ones before it
    after = subprocess.run([*CMD, "--store", str(tmp_path / "typo"), "info", "iot/s", "--store", str(store),
                            "--durability", "none", "--json"], capture_output=True, env=ENV)
    assert after.returncode == 0 and json.loads(after.stdout)["events"] == 15, after.stderr


def test_failures_are_one_line_and_reads_never_create_a_store(tmp_path):
    typo = tmp_path / "typo"
    for args in (("info", "x/y"), ("list",), ("read", "x/y"), ("tier2", "status"), ("seal", "x/y"),
                 ("reader-group", "list"), ("txn", "list", "x/y"), ("bytes", "cat", "x/y")):
        err = run(typo, *args, code=1).stderr.decode()
        assert f"no store at {typo}" in err, (args, err)
    assert not typo.exists()
    afile = tmp_path / "afile"
    afile.write_text("not a store")
    assert "is a file" in run(afile, "list", code=1).stderr.decode()
    assert "is a file" in run(afile, "create-stream", "a/b", code=1).stderr.decode()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "holds no store" in run(empty, "info", "a/b", code=1).stderr.decode()
    store = tmp_path / "s"
    make(store)
    assert "iot/nope" in run(store, "read", "iot/nope", code=1).stderr.decode()
    assert "-o" in run(store, "read", "iot/s", "-o", "sometime", code=1).stderr.decode()
    run(store, "read", "iot/s", "-c", "-1", code=2)
    run(store, "read", "iot/s", "-e", "--follow", code=1)


def test_admin_commands_say_what_they_did(tmp_path):
    store = tmp_path / "s"
    assert b"created stream iot/s (fixed(2))" in run(store, "create-stream", "iot/s", "--segments", "2").stderr
    assert b"already exists (fixed(2)); left as it is" in run(store, "create-stream", "iot/s").stderr
    err = run(store, "create-stream", "iot/s", "--segments", "3", code=1).stderr.decode()
    assert "already exists with scaling fixed(2), not fixed(3)" in err and "update-stream" in err
    run(store, "write", "iot/s", "--key", "k", stdin=b"1\n2\n3\n4\n")
    cut = run(store, "read", "iot/s", "-c", "3", "--show-cut").stderr.decode().strip()
    err = run(store, "truncate", "iot/s", cut).stderr.decode()
    assert "truncated iot/s: head is now" in err and "3 events" in err
    assert lines(run(store, "read", "iot/s")) == ["4"]
    assert b"sealed stream iot/s" in run(store, "seal", "iot/s").stderr
    assert b"deleted stream iot/s" in run(store, "delete", "iot/s").stderr
    assert lines(run(store, "list", "iot")) == []


def test_transactions_list_and_abort(tmp_path):
    store = tmp_path / "s"
    run(store, "create-stream", "iot/s")
    with pe.open(store, "none") as s:
        w = s.create_transactional_writer("iot", "s")
        t = w.begin_txn()
        t.write_event(b"staged", routing_key="k")
        t.flush()
        txn_id = t.txn_id.hex
        table = lines(run(store, "txn", "list", "iot/s"))  # through this process, which owns the store
        assert table[0].split()[:3] == ["TXN_ID", "STATUS", "BYTES"]
        assert table[1].split()[:2] == [txn_id, "OPEN"] and int(table[1].split()[2]) > 0
        assert b"aborted transaction" in run(store, "txn", "abort", "iot/s", txn_id).stderr
        assert t.status().value == "ABORTED"
        got = [json.loads(x) for x in run(store, "txn", "list", "iot/s", "--json").stdout.splitlines()]
        assert [(g["txn_id"], g["status"]) for g in got] == [(txn_id, "ABORTED")]
        w.close()
    assert "nope" in run(store, "txn", "abort", "iot/s", "nope", code=1).stderr.decode()
    assert lines(run(store, "read", "iot/s")) == []


def test_byte_streams_cat_and_write(tmp_path):
    store = tmp_path / "s"
    blob = os.urandom(300_000)
    err = run(store, "bytes", "write", "files/blob", stdin=blob).stderr.decode()
    assert "appended 300000 bytes" in err
    run(store, "bytes", "write", "files/blob", stdin=b"tail")
    assert run(store, "bytes", "cat", "files/blob").stdout == blob + b"tail"
    assert run(store, "bytes", "cat", "files/blob", "--offset", "299998").stdout == blob[-2:] + b"tail"
    run(store, "create-stream", "iot/s")
    assert "not a byte stream" in run(store, "bytes", "cat", "iot/s", code=1).stderr.decode()
    assert "files/nope" in run(store, "bytes", "cat", "files/nope", code=1).stderr.decode()


def _with_tty_stderr(args: list[str], stdin: bytes) -> tuple[bytes, bytes]:
    """Run with stderr on a pseudo-terminal (stdout piped): (stdout, what the terminal got)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=follower, env=ENV)
    os.close(follower)
    proc.stdin.write(stdin)
    proc.stdin.close()
    out = proc.stdout.read()
    tty = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        tty += chunk
    assert proc.wait(timeout=180) == 0, tty
    os.close(leader)
    return out, tty


def test_progress_line_on_a_terminal_only(tmp_path):
    store = tmp_path / "s"
    run(store, "create-stream", "iot/s")
    data = b"".join(b"event %d\n" % i for i in range(300_000))
    base = [*CMD, "--store", str(store), "--durability", "none"]
    _, tty = _with_tty_stderr([*base, "write", "iot/s"], data)
    assert b"\r\x1b[Kwrote " in tty and b"events/s" in tty  # the line, redrawn in place
    assert b"wrote 300000 events to iot/s" in tty and b"Traceback" not in tty
    out, tty = _with_tty_stderr([*base, "read", "iot/s"], b"")
    assert b"\r\x1b[Kread " in tty and b"events/s" in tty
    assert out.count(b"\n") == 300_000 and b"\x1b" not in out  # no progress in the output
    piped = run(store, "read", "iot/s", "-c", "10")
    assert b"events/s" not in piped.stderr and b"\r" not in piped.stderr


def test_offset_end_waits_for_new_events(tmp_path):
    store = tmp_path / "s"
    make(store)
    owner = pe.open(store, "none")  # both commands are clients: the follower's exit ends no write
    follower = subprocess.Popen([*CMD, "--store", str(store), "--durability", "none", "read", "iot/s",
                                 "-o", "end", "-c", "2", "--show-cut", "-f", "%k %s\\n"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        # the first cut it prints is where it waits: the tail when it started
        started = follower.stderr.readline().decode().strip()
        assert started.startswith("pe1:iot/s:"), started
        run(store, "write", "iot/s", "-K", ":", stdin=b"a:new1\nb:new2\na:new3\n")
        out, _ = follower.communicate(timeout=120)
    finally:
        follower.kill()
        owner.close()
    assert follower.returncode == 0
    assert sorted(out.decode().splitlines()) in (["a new1", "b new2"], ["a new1", "a new3"])  # per-key order
