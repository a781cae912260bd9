"""``pravega-embedded reader-group ...``: list, create, info (--json), checkpoint, reset, offline,
delete; errors and exit codes. Every command runs in a subprocess, as users run it. The readers
of a group live in other processes: small Python children that open the store, read as a group
reader and either close properly or vanish (``os._exit``) leaving a stale reader listed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pravega_embedded as pe

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))


def cli(store: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pravega_embedded", "--store", str(store), "--durability", "none", *args],
        input=stdin, capture_output=True, text=True, env=ENV, timeout=180)


def ok(store: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    out = cli(store, *args, stdin=stdin)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    return out


def rg(store: Path, *args: str) -> subprocess.CompletedProcess:
    return ok(store, "reader-group", *args)


def fails(store: Path, code: int, *args: str) -> str:
    out = cli(store, *args)
    assert out.returncode == code, (args, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    if code == 1:
        assert out.stderr.startswith("pravega-embedded: error:"), out.stderr
    else:
        assert out.stderr.startswith("pravega-embedded: error:") and "--help" in out.stderr, out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr  # one line, usage errors too
    return out.stderr


def info(store: Path, name: str) -> dict:
    return json.loads(rg(store, "info", name, "--json").stdout)


def tail(store: Path, stream: str) -> str:
    return json.loads(ok(store, "info", stream, "--json").stdout)["tail"]


def setup_streams(store: Path) -> None:
    """a/t: 2 segments, 3 keyed events of 9 framed bytes each (key 'k'); a/u: 1 segment, 1 event."""
    ok(store, "create-stream", "a/t", "--segments", "2")
    ok(store, "create-stream", "a/u")
    ok(store, "write", "a/t", "--key", "k", stdin="e0\ne1\ne2\n")
    ok(store, "write", "a/u", stdin="u0\n")


# A group reader in another process. "stale": read N events and vanish without closing (the
# group keeps listing the reader). "clean": read N events, checkpoint CP (the reader answers),
# then close the reader and the store properly.
CHILD = """
import os, sys, pravega_embedded as pe
path, group, reader, mode, n = sys.argv[1:6]
s = pe.open(path, durability="none")
g = s.get_reader_group(group)
r = g.create_reader(reader)
def next_event():
    ev = r.read_next_event(timeout=10)
    assert ev is not None and not ev.is_checkpoint and not ev.is_read_completed, ev
    return ev
for _ in range(int(n)):
    print(next_event().event.decode(), flush=True)
if mode == "stale":
    os._exit(0)
fut = g.initiate_checkpoint(sys.argv[6])
ev = r.read_next_event(timeout=10)
assert ev is not None and ev.is_checkpoint, ev
r.read_next_event(timeout=0)  # records the checkpoint (may return an event: not printed)
print(fut.result(10).stream_cuts, file=sys.stderr)
r.close()
s.close()
"""


def child(store: Path, group: str, reader: str, mode: str, n: int, checkpoint: str = "") -> list[str]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(store), group, reader, mode, str(n), checkpoint],
                         capture_output=True, text=True, env=ENV, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_create_list_info_and_delete(tmp_path):
    store = tmp_path / "s"
    setup_streams(store)
    assert rg(store, "list").stdout == ""
    rg(store, "create", "g1", "a/t", "a/u")
    rg(store, "create", "g0", "a/u", "--checkpoint-interval", "0", "--max-checkpoints", "5")
    assert rg(store, "list").stdout.splitlines() == ["g0", "g1"]

    d = info(store, "g1")
    assert d["name"] == "g1" and d["streams"] == ["a/t", "a/u"]
    assert d["start"] == {} and d["end"] == {}
    assert d["automatic_checkpoint_interval"] == 30.0 and d["max_outstanding_checkpoints"] == 3
    assert d["online_readers"] == []
    assert d["segments"] == {"readers": {}, "unassigned": ["a/t/0", "a/t/1", "a/u/0"]}
    assert d["unread_bytes"] == {"total": 35, "streams": {"a/t": 27, "a/u": 8}}
    assert d["unread_events"] == {"total": 4, "streams": {"a/t": 3, "a/u": 1}}
    assert d["stream_cuts"] == {"a/t": "pe1:a/t:0=0,1=0", "a/u": "pe1:a/u:0=0"}
    assert d["last_checkpoint"] is None and d["outstanding_checkpoints"] == []
    d0 = info(store, "g0")
    assert d0["automatic_checkpoint_interval"] is None and d0["max_outstanding_checkpoints"] == 5

    text = rg(store, "info", "g1").stdout
    assert text.startswith("reader group g1\n")
    for want in ("streams: a/t, a/u", "start a/t: head", "end a/u: unbounded", "online readers: -",
                 "(unassigned): a/t/0, a/t/1, a/u/0", "unread (lag): 4 events, 35 bytes", "a/t: 3 events, 27 bytes", "a/u: 1 events, 8 bytes",
                 "pe1:a/t:0=0,1=0", "last checkpoint: -", "outstanding checkpoints: -",
                 "automatic checkpoints: every 30s"):
        assert want in text, (want, text)
    assert "automatic checkpoints: off" in rg(store, "info", "g0").stdout

    rg(store, "delete", "g1")
    assert rg(store, "list").stdout.splitlines() == ["g0"]
    assert "g1" in fails(store, 1, "reader-group", "info", "g1")


def test_create_with_start_and_end_cuts(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t")
    ok(store, "create-stream", "a/u")
    ok(store, "write", "a/t", "--key", "k", stdin="e0\n")
    start = tail(store, "a/t")
    ok(store, "write", "a/t", "--key", "k", stdin="e1\ne2\n")
    end = tail(store, "a/t")
    ok(store, "write", "a/t", "--key", "k", stdin="e3\n")
    ok(store, "write", "a/u", "--key", "k", stdin="u0\n")
    rg(store, "create", "g", "a/t", "a/u", "--from", start, "--to", end)
    d = info(store, "g")
    assert d["start"] == {"a/t": start} and d["end"] == {"a/t": end}
    assert d["unread_bytes"]["streams"] == {"a/t": 18, "a/u": 9}  # e1, e2 of a/t; all of a/u
    assert d["stream_cuts"]["a/t"] == start
    text = rg(store, "info", "g").stdout
    assert f"start a/t: {start}" in text and f"end a/t: {end}" in text and "start a/u: head" in text
    # the group's readers read exactly the bounded range
    got = child(store, "g", "r1", "stale", 3)
    assert sorted(got) == ["e1", "e2", "u0"]


def test_checkpoint_with_no_readers_completes_at_once(tmp_path):
    store = tmp_path / "s"
    setup_streams(store)
    rg(store, "create", "g", "a/t", "a/u")
    out = rg(store, "checkpoint", "g", "cp1", "--timeout", "30")
    assert out.stdout.splitlines() == ["pe1:a/t:0=0,1=0", "pe1:a/u:0=0"]
    assert "cp1" in out.stderr and "completed" in out.stderr
    d = info(store, "g")
    assert d["last_checkpoint"] == {"name": "cp1", "stream_cuts": {"a/t": "pe1:a/t:0=0,1=0", "a/u": "pe1:a/u:0=0"}}
    assert d["outstanding_checkpoints"] == []
    text = rg(store, "info", "g").stdout
    assert "last checkpoint: cp1" in text
    # the printed cuts work with `read --from`
    assert ok(store, "read", "a/t", "--from", out.stdout.splitlines()[0]).stdout.splitlines() == ["e0", "e1", "e2"]


def test_stale_reader_blocks_a_checkpoint_until_put_offline(tmp_path):
    store = tmp_path / "s"
    setup_streams(store)
    rg(store, "create", "g", "a/t", "a/u", "--checkpoint-interval", "0")
    assert len(child(store, "g", "r1", "stale", 1)) == 1
    d = info(store, "g")
    assert d["online_readers"] == ["r1"]
    assert d["segments"] == {"readers": {"r1": ["a/t/0", "a/t/1", "a/u/0"]}, "unassigned": []}
    # the vanished reader's last checkpoint is where it joined: all is unread again
    assert d["unread_bytes"]["total"] == 35
    text = rg(store, "info", "g").stdout
    assert "online readers: r1" in text and "r1: a/t/0, a/t/1, a/u/0" in text

    err = fails(store, 1, "reader-group", "checkpoint", "g", "cp1", "--timeout", "0.3")
    assert "cp1" in err and "r1" in err and "offline" in err and "0.3s" in err
    d = info(store, "g")
    assert d["outstanding_checkpoints"] == ["cp1"] and d["last_checkpoint"] is None
    assert "outstanding checkpoints: cp1" in rg(store, "info", "g").stdout
    assert "already outstanding" in fails(store, 1, "reader-group", "checkpoint", "g", "cp1", "--timeout", "0")
    assert "cancel-checkpoints g" in err
    cancelled = rg(store, "cancel-checkpoints", "g")
    assert "cancelled 1 outstanding checkpoint" in cancelled.stderr
    assert info(store, "g")["outstanding_checkpoints"] == []
    fails(store, 1, "reader-group", "checkpoint", "g", "cp1", "--timeout", "0.1")  # r1 still listed

    rg(store, "offline", "g", "r1")
    d = info(store, "g")
    assert d["online_readers"] == [] and d["outstanding_checkpoints"] == []
    assert d["segments"]["unassigned"] == ["a/t/0", "a/t/1", "a/u/0"]
    assert d["last_checkpoint"]["name"] == "cp1"  # the offline reader's answer completed it
    out = rg(store, "checkpoint", "g", "cp2", "--timeout", "0")
    assert out.stdout.splitlines() == ["pe1:a/t:0=0,1=0", "pe1:a/u:0=0"]
    assert info(store, "g")["last_checkpoint"]["name"] == "cp2"
    assert "r1" in fails(store, 1, "reader-group", "offline", "g", "r1")


def test_too_many_outstanding_checkpoints(tmp_path):
    store = tmp_path / "s"
    setup_streams(store)
    rg(store, "create", "g", "a/u", "--checkpoint-interval", "0", "--max-checkpoints", "1")
    child(store, "g", "r1", "stale", 1)
    fails(store, 1, "reader-group", "checkpoint", "g", "cp1", "--timeout", "0")
    err = fails(store, 1, "reader-group", "checkpoint", "g", "cp2", "--timeout", "0")
    assert "max_outstanding_checkpoints" in err or "outstanding" in err


def test_reset_to_checkpoint_then_info_shows_the_start_cuts(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t")
    ok(store, "write", "a/t", "--key", "k", stdin="".join(f"e{i}\n" for i in range(10)))
    rg(store, "create", "g", "a/t", "--checkpoint-interval", "0")
    fails(store, 1, "reader-group", "reset", "g", "--to-checkpoint")  # no checkpoint yet
    # a reader in another process reads 3 events, checkpoints there, and closes
    assert child(store, "g", "r1", "clean", 3, "cp-a") == ["e0", "e1", "e2"]
    d = info(store, "g")
    cp_cut = "pe1:a/t:0=27"  # after 3 events of 9 framed bytes
    assert d["last_checkpoint"] == {"name": "cp-a", "stream_cuts": {"a/t": cp_cut}}
    assert d["online_readers"] == [] and d["unread_bytes"]["total"] < 63
    assert d["start"] == {}

    out = rg(store, "reset", "g", "--to-checkpoint")
    assert "cp-a" in out.stderr
    d = info(store, "g")
    assert d["start"] == {"a/t": cp_cut}
    assert d["unread_bytes"]["total"] == 63  # e3..e9 again
    assert d["segments"] == {"readers": {}, "unassigned": ["a/t/0"]}
    assert f"start a/t: {cp_cut}" in rg(store, "info", "g").stdout
    # a reset starts a new checkpoint history: the group's cuts are its new start
    assert d["stream_cuts"] == {"a/t": cp_cut} and d["last_checkpoint"] is None
    assert "no completed checkpoint" in fails(store, 1, "reader-group", "reset", "g", "--to-checkpoint")
    # the next reader of the group starts at the checkpoint
    assert child(store, "g", "r2", "stale", 1) == ["e3"]
    rg(store, "offline", "g", "r2")


def test_reset_from_cuts_and_plain_reset(tmp_path):
    store = tmp_path / "s"
    setup_streams(store)
    rg(store, "create", "g", "a/t", "a/u", "--checkpoint-interval", "0")
    end_t, end_u = tail(store, "a/t"), tail(store, "a/u")
    rg(store, "reset", "g", "--from", end_t, "--from", end_u)
    d = info(store, "g")
    assert d["start"] == {"a/t": end_t, "a/u": end_u}
    assert d["unread_bytes"] == {"total": 0, "streams": {"a/t": 0, "a/u": 0}}
    rg(store, "reset", "g", "--from", end_u)  # a/t is not given: it starts at its head
    d = info(store, "g")
    assert d["start"] == {"a/u": end_u} and d["unread_bytes"]["streams"] == {"a/t": 27, "a/u": 0}
    # plain reset: the group starts over from its (current) configured start
    child(store, "g", "r1", "stale", 1)
    assert info(store, "g")["online_readers"] == ["r1"]
    rg(store, "reset", "g")
    d = info(store, "g")
    assert d["online_readers"] == [] and d["start"] == {"a/u": end_u}
    assert d["unread_bytes"]["total"] == 27


def test_errors_exit_1_with_a_message(tmp_path):
    store = tmp_path / "s"
    setup_streams(store)
    rg(store, "create", "g", "a/t")
    for args, words in [
        (("info", "nope"), ["nope", "does not exist"]),
        (("info", "nope", "--json"), ["nope"]),
        (("checkpoint", "nope", "cp"), ["nope"]),
        (("reset", "nope"), ["nope"]),
        (("reset", "nope", "--to-checkpoint"), ["nope"]),
        (("offline", "nope", "r1"), ["nope"]),
        (("delete", "nope"), ["nope"]),
        (("create", "g", "a/u"), ["'g'", "already exists"]),
        (("create", "h", "a/missing"), ["a/missing"]),
        (("create", "h", "nope/t"), ["nope"]),
        (("create", "bad=name", "a/t"), ["bad=name"]),
        (("create", "h", "a/t", "a/t"), ["twice"]),
        (("create", "h", "a/t", "--from", "pe1:a/u:0=0"), ["a/u"]),
        (("create", "h", "a/t", "--from", "pe1:a/t:0=999999"), []),
        (("create", "h", "a/t", "--max-checkpoints", "0"), ["max_outstanding_checkpoints"]),
        (("create", "h", "a/t", "--checkpoint-interval", "-1"), ["--checkpoint-interval"]),
        (("offline", "g", "r9"), ["r9"]),
        (("reset", "g", "--to-checkpoint"), ["no completed checkpoint"]),
        (("reset", "g", "--from", "pe1:a/u:0=0"), ["a/u"]),
        (("checkpoint", "g", "_internal"), ["_internal"]),
    ]:
        err = fails(store, 1, "reader-group", *args)
        for word in words:
            assert word in err, (args, err)
    assert rg(store, "list").stdout.splitlines() == ["g"]  # nothing half-created


def test_bad_arguments_exit_2(tmp_path):
    store = tmp_path / "s"
    setup_streams(store)
    rg(store, "create", "g", "a/t")
    for args in (("reader-group",), ("reader-group", "bogus"), ("reader-group", "create", "h"),
                 ("reader-group", "create", "h", "no-slash"),
                 ("reader-group", "create", "h", "a/t", "--from", "garbage"),
                 ("reader-group", "create", "h", "a/t", "--to", "pe1:a/t:0="),
                 ("reader-group", "create", "h", "a/t", "--max-checkpoints", "many"),
                 ("reader-group", "reset", "g", "--from", "garbage"),
                 ("reader-group", "reset", "g", "--to-checkpoint", "--from", "pe1:a/t:0=0,1=0"),
                 ("reader-group", "checkpoint", "g"),
                 ("reader-group", "checkpoint", "g", "cp", "--timeout", "soon"),
                 ("reader-group", "offline", "g"),
                 ("reader-group", "info")):
        fails(store, 2, *args)
    assert "garbage" in fails(store, 2, "reader-group", "create", "h", "a/t", "--from", "garbage")
    assert rg(store, "list").stdout.splitlines() == ["g"]


def test_library_sees_what_the_cli_did(tmp_path):
    store = tmp_path / "s"
    setup_streams(store)
    start = tail(store, "a/t")
    rg(store, "create", "g", "a/t", "--from", start, "--checkpoint-interval", "5", "--max-checkpoints", "2")
    with pe.open(store, durability="none") as s:
        g = s.get_reader_group("g")
        assert g.config == pe.ReaderGroupConfig(streams=[("a", "t")], start=[pe.StreamCut.from_text(start)],
                                                automatic_checkpoint_interval=5.0, max_outstanding_checkpoints=2)
    rg(store, "delete", "g")
    with pe.open(store, durability="none") as s:
        assert s.list_reader_groups() == []
