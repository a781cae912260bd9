"""``python -m pravega_embedded``: admin, write from stdin, read (bounded, --show-cut, --follow),
errors and exit codes, and the demo. Every command runs in a subprocess, as users run it."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pravega_embedded as pe

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))


def cli(store: Path, *args: str, stdin: str | None = None, durability: str = "none") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pravega_embedded", "--store", str(store), "--durability", durability, *args],
        input=stdin, capture_output=True, text=True, env=ENV, timeout=180)


def ok(store: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    out = cli(store, *args, stdin=stdin)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out


def _lines(n: int, start: int = 0, keys: int = 4) -> list[str]:
    return [json.dumps({"sensor": f"s{i % keys}", "v": i}) for i in range(start, start + n)]


def _by_key(stdout: str) -> dict[str, list[int]]:
    got: dict[str, list[int]] = {}
    for line in stdout.splitlines():
        obj = json.loads(line)
        got.setdefault(obj["sensor"], []).append(obj["v"])
    return got


def test_create_list_and_info(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "iot/sensors", "--segments", "4")
    ok(store, "create-stream", "iot/sensors", "--segments", "4")  # again: exist_ok
    ok(store, "create-scope", "other")
    ok(store, "create-stream", "other/x")
    assert ok(store, "list").stdout.split() == ["iot", "other"]
    assert ok(store, "list", "iot").stdout.split() == ["sensors"]
    text = ok(store, "info", "iot/sensors").stdout
    assert "iot/sensors" in text and "head: pe1:iot/sensors:" in text and "tail: pe1:iot/sensors:" in text
    assert text.count("open") == 4
    info = json.loads(ok(store, "info", "iot/sensors", "--json").stdout)
    assert (info["scope"], info["stream"], info["sealed"]) == ("iot", "sensors", False)
    assert len(info["segments"]) == 4
    head, tail = pe.StreamCut.from_text(info["head"]), pe.StreamCut.from_text(info["tail"])
    assert head == tail and head.scope == "iot" and len(head.as_dict()) == 4
    lows = sorted(s["key_low"] for s in info["segments"])
    assert lows == [0.0, 0.25, 0.5, 0.75]
    assert all(s["length"] == 0 and not s["sealed"] for s in info["segments"])


def test_write_with_key_field_and_read_back_in_key_order(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "iot/sensors", "--segments", "3")
    lines = _lines(200)
    w = ok(store, "write", "iot/sensors", "--key-field", "sensor", stdin="\n".join(lines) + "\n")
    assert "wrote 200 events" in w.stderr
    r = ok(store, "read", "iot/sensors")
    assert sorted(r.stdout.splitlines()) == sorted(lines)
    assert _by_key(r.stdout) == {f"s{k}": list(range(k, 200, 4)) for k in range(4)}
    keyed = ok(store, "read", "iot/sensors", "--show-key").stdout.splitlines()
    assert all(json.loads(line.split("\t", 1)[1])["sensor"] == line.split("\t", 1)[0] for line in keyed)
    info = json.loads(ok(store, "info", "iot/sensors", "--json").stdout)
    assert sum(s["length"] for s in info["segments"]) > 0
    assert pe.StreamCut.from_text(info["tail"]) > pe.StreamCut.from_text(info["head"])


def test_write_with_fixed_key_and_plain_lines(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t", "--segments", "2")
    ok(store, "write", "a/t", "--key", "one-key", stdin="x1\nx2\nx3\n")
    ok(store, "write", "a/t", stdin="free\n")
    out = ok(store, "read", "a/t", "--show-key").stdout.splitlines()
    assert [line for line in out if line.startswith("one-key\t")] == ["one-key\tx1", "one-key\tx2", "one-key\tx3"]
    assert "\tfree" in out


def test_write_with_writer_id_resumes_sequences(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t")
    ok(store, "write", "a/t", "--writer-id", "gw-1", "--key", "k", stdin="a\nb\n")
    ok(store, "write", "a/t", "--writer-id", "gw-1", "--key", "k", stdin="c\n")
    with pe.open(store, durability="none") as s:
        assert s.create_writer("a", "t", writer_id="gw-1").last_sequence == 2


def test_read_between_cuts_and_show_cut(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "iot/sensors", "--segments", "2")
    ok(store, "write", "iot/sensors", "--key-field", "sensor", stdin="\n".join(_lines(30)) + "\n")
    a = json.loads(ok(store, "info", "iot/sensors", "--json").stdout)["tail"]
    ok(store, "write", "iot/sensors", "--key-field", "sensor", stdin="\n".join(_lines(50, 30)) + "\n")
    b = json.loads(ok(store, "info", "iot/sensors", "--json").stdout)["tail"]
    ok(store, "write", "iot/sensors", "--key-field", "sensor", stdin="\n".join(_lines(20, 80)) + "\n")
    mid = ok(store, "read", "iot/sensors", "--from", a, "--to", b).stdout
    assert sorted(json.loads(x)["v"] for x in mid.splitlines()) == list(range(30, 80))
    assert sorted(json.loads(x)["v"] for x in ok(store, "read", "iot/sensors", "--to", a).stdout.splitlines()) \
        == list(range(30))
    assert sorted(json.loads(x)["v"] for x in ok(store, "read", "iot/sensors", "--from", b).stdout.splitlines()) \
        == list(range(80, 100))
    # --show-cut prints (to stderr) the cut after the last event; it is usable with --from
    first = ok(store, "read", "iot/sensors", "--to", a, "--show-cut")
    cut_text = first.stderr.strip().splitlines()[-1]
    assert pe.StreamCut.from_text(cut_text) == pe.StreamCut.from_text(a)
    rest = ok(store, "read", "iot/sensors", "--from", cut_text).stdout
    assert sorted(json.loads(x)["v"] for x in rest.splitlines()) == list(range(30, 100))
    whole = ok(store, "read", "iot/sensors", "--show-cut")
    end = whole.stderr.strip().splitlines()[-1]
    assert ok(store, "read", "iot/sensors", "--from", end).stdout == ""


def test_truncate_from_the_command_line(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t", "--segments", "2")
    ok(store, "write", "a/t", "--key", "k", stdin="old1\nold2\n")
    cut = json.loads(ok(store, "info", "a/t", "--json").stdout)["tail"]
    ok(store, "write", "a/t", "--key", "k", stdin="new1\n")
    ok(store, "truncate", "a/t", cut)
    assert ok(store, "read", "a/t").stdout.splitlines() == ["new1"]
    assert json.loads(ok(store, "info", "a/t", "--json").stdout)["head"] == cut


def test_seal_then_write_fails_with_exit_1_and_a_message(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t")
    ok(store, "write", "a/t", "--key", "k", stdin="before\n")
    ok(store, "seal", "a/t")
    out = cli(store, "write", "a/t", "--key", "k", stdin="after\n")
    assert out.returncode == 1
    assert "sealed" in out.stderr and "a/t" in out.stderr and "Traceback" not in out.stderr
    assert json.loads(ok(store, "info", "a/t", "--json").stdout)["sealed"] is True
    assert "(sealed)" in ok(store, "info", "a/t").stdout
    assert ok(store, "read", "a/t").stdout.splitlines() == ["before"]  # ends: the stream is sealed


def test_errors_exit_1_with_a_message(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t")
    for args, words in [
        (("info", "a/missing"), ["a/missing"]),
        (("read", "a/missing"), ["a/missing"]),
        (("info", "nope/t"), ["nope"]),
        (("create-stream", "a/_bad"), ["_bad"]),
        (("read", "a/t", "--from", "pe1:other/t:0=0"), ["other/t"]),
        (("delete", "a/missing"), ["a/missing"]),
    ]:
        out = cli(store, *args)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert out.stderr.startswith("pravega-embedded: error:") and "Traceback" not in out.stderr
        for word in words:
            assert word in out.stderr, (args, out.stderr)
    bad = cli(store, "write", "a/t", "--key-field", "sensor", stdin="not json\n")
    assert bad.returncode == 1 and "sensor" in bad.stderr and "Traceback" not in bad.stderr


def test_bad_arguments_exit_2(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t")
    for args in (("read", "a/t", "--from", "garbage"), ("read", "a/t", "--to", "pe1:a/t:0="),
                 ("truncate", "a/t", "pe1:a/t:x=1"), ("read", "no-slash"), ("bogus-command",),
                 ("create-stream", "a/t", "--segments", "two"), ("create-stream", "a/t", "--segments", "0")):
        out = cli(store, *args)
        assert out.returncode == 2, (args, out.stderr)
        # one line: what is wrong, and where help is
        assert out.stderr.startswith("pravega-embedded: error:") and "--help" in out.stderr, out.stderr
        assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
    out = cli(store, "read", "a/t", "--from", "garbage")
    assert "garbage" in out.stderr


def test_commands_work_beside_a_process_that_has_the_store_open(tmp_path):
    """No lock waiting any more: a command run while another process owns the store goes
    through that process."""
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t")
    with pe.open(store, durability="none") as owner:
        assert isinstance(owner, pe.Store)
        assert cli(store, "list").stdout.split() == ["a"]
        ok(store, "write", "a/t", "--key", "k", stdin="one\ntwo\n")
        assert cli(store, "read", "a/t").stdout.split() == ["one", "two"]
        assert [ev.event for ev in owner.read_slice("a", "t")] == [b"one", b"two"]


def test_demo(tmp_path):
    out = cli(tmp_path / "d", "demo", "--events", "2000", durability="fsync")
    assert out.returncode == 0, out.stderr
    assert "wrote 2,000 events" in out.stdout
    assert "Arrow table of 2,000 rows" in out.stdout
    assert "reader got 2,000 events" in out.stdout
    with pe.open(tmp_path / "d", durability="none") as s:
        assert len(list(s.read_slice("iot", "sensors"))) == 2000
        assert s.create_writer("iot", "sensors", writer_id="demo-gateway").last_sequence == 1999


def _collect(proc, lines, want, deadline):
    seen = []
    while not want <= set(seen) and time.monotonic() < deadline:
        try:
            seen.append(lines.get(timeout=0.5))
        except queue.Empty:
            assert proc.poll() is None, f"read --follow exited: {proc.stderr.read()}"
    return seen


def test_read_follow_receives_lines_of_a_later_write(tmp_path):
    """The kcat-like use: `read --follow` in one terminal, `write` in another. The follower keeps
    printing what later writes add, through whichever of them owns the store."""
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t", "--segments", "2")
    ok(store, "write", "a/t", "--key", "k", stdin="early\n")
    follower = subprocess.Popen(
        [sys.executable, "-m", "pravega_embedded", "--store", str(store), "--durability", "none",
         "read", "a/t", "--follow"],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x.rstrip("\n")) for x in follower.stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        assert _collect(follower, lines, {"early"}, deadline) == ["early"]
        w = cli(store, "write", "a/t", "--key", "k", stdin="late-1\nlate-2\nlate-3\n")
        assert w.returncode == 0, f"write while a follower runs: {w.stderr.strip()}"
        seen = _collect(follower, lines, {"late-1", "late-2", "late-3"}, deadline)
        assert seen == ["late-1", "late-2", "late-3"]
        assert follower.poll() is None  # still following
    finally:
        follower.kill()
        follower.wait()


def test_read_follow_prints_what_is_there_and_keeps_running(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "a/t", "--segments", "2")
    ok(store, "write", "a/t", "--key", "k", stdin="one\ntwo\n")
    follower = subprocess.Popen(
        [sys.executable, "-m", "pravega_embedded", "--store", str(store), "--durability", "none",
         "read", "a/t", "--follow"],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x.rstrip("\n")) for x in follower.stdout], daemon=True).start()
    try:
        assert _collect(follower, lines, {"one", "two"}, time.monotonic() + 60) == ["one", "two"]
        time.sleep(1.0)  # not a timing assertion: give it a chance to exit wrongly
        assert follower.poll() is None
    finally:
        follower.kill()
        follower.wait()
