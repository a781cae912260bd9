"""The pravega-embedded command line, run the way users run it (a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cli(store: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "pravega_embedded", "--store", str(store), *args],
                          input=stdin, capture_output=True, text=True, env=env, timeout=120)


def test_admin_write_read(tmp_path):
    store = tmp_path / "s"
    assert cli(store, "create-stream", "iot/sensors", "--segments", "3").returncode == 0
    assert cli(store, "list").stdout.split() == ["iot"]
    assert cli(store, "list", "iot").stdout.split() == ["sensors"]
    lines = [json.dumps({"sensor": f"s{i % 4}", "v": i}) for i in range(40)]
    w = cli(store, "write", "iot/sensors", "--key-field", "sensor", stdin="\n".join(lines) + "\n")
    assert w.returncode == 0, w.stderr
    assert "wrote 40 events" in w.stderr
    r = cli(store, "read", "iot/sensors", "--show-key")
    assert r.returncode == 0, r.stderr
    got: dict[str, list[int]] = {}
    for line in r.stdout.splitlines():
        key, event = line.split("\t", 1)
        obj = json.loads(event)
        assert obj["sensor"] == key
        got.setdefault(key, []).append(obj["v"])
    assert {k: v for k, v in got.items()} == {f"s{k}": list(range(k, 40, 4)) for k in range(4)}
    info = json.loads(cli(store, "info", "iot/sensors", "--json").stdout)
    assert len(info["segments"]) == 3 and info["tail"].startswith("pe1:iot/sensors:")
    text = cli(store, "info", "iot/sensors").stdout
    assert info["head"] in text and info["tail"] in text


def test_read_between_cuts_and_show_cut(tmp_path):
    store = tmp_path / "s"
    cli(store, "create-stream", "a/b")
    cli(store, "write", "a/b", "--key", "k", stdin="one\ntwo\n")
    first = cli(store, "read", "a/b", "--show-cut")
    assert first.stdout.splitlines() == ["one", "two"]
    cut = first.stderr.strip().splitlines()[-1]
    assert cut.startswith("pe1:a/b:")
    cli(store, "write", "a/b", "--key", "k", stdin="three\n")
    assert cli(store, "read", "a/b", "--from", cut).stdout.splitlines() == ["three"]
    assert cli(store, "read", "a/b", "--to", cut).stdout.splitlines() == ["one", "two"]
    assert cli(store, "truncate", "a/b", cut).returncode == 0
    assert cli(store, "read", "a/b").stdout.splitlines() == ["three"]


def test_errors_have_exit_codes_and_messages(tmp_path):
    store = tmp_path / "s"
    cli(store, "create-stream", "a/b")
    bad = cli(store, "read", "a/b", "--from", "garbage")
    assert bad.returncode == 2 and "not a StreamCut" in bad.stderr
    assert cli(store, "seal", "a/b").returncode == 0
    sealed = cli(store, "write", "a/b", stdin="x\n")
    assert sealed.returncode == 1 and "sealed" in sealed.stderr
    missing = cli(store, "info", "a/zzz")
    assert missing.returncode == 1 and "a/zzz" in missing.stderr
    badname = cli(store, "create-stream", "a/_x")
    assert badname.returncode == 1 and "invalid stream name" in badname.stderr
    assert cli(store, "delete", "a/b").returncode == 0
    assert cli(store, "list", "a").stdout == ""


def test_demo(tmp_path):
    out = cli(tmp_path / "demo", "demo", "--events", "2000")
    assert out.returncode == 0, out.stderr
    assert "wrote 2,000 events" in out.stdout and "Arrow table of 2,000 rows" in out.stdout
    assert "reader got 2,000 events over 64 routing keys" in out.stdout


def test_read_follow_sees_later_writes(tmp_path):
    store = tmp_path / "s"
    cli(store, "create-stream", "a/b")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # One process owns a store, so new events reach a follower from a writer in its own
    # process: a blocked reader wakes when a writer thread appends.
    follower = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, pravega_embedded as pe\n"
            f"s = pe.open({str(store)!r})\n"
            "r = s.create_reader('a', 'b')\n"
            "w = s.create_writer('a', 'b')\n"
            "import threading\n"
            "def later():\n"
            "    import time; time.sleep(0.3); w.write_event(b'late', routing_key='k'); w.flush()\n"
            "threading.Thread(target=later).start()\n"
            "ev = r.read_next_event(timeout=30)\n"
            "print(ev.event.decode()); s.close()\n")],
        env=env, stdout=subprocess.PIPE, text=True)
    out, _ = follower.communicate(timeout=60)
    assert out.strip() == "late"
    # and --follow itself: it keeps running until killed, printing what is there
    cli(store, "write", "a/b", "--key", "k", stdin="x\n")
    proc = subprocess.Popen([sys.executable, "-m", "pravega_embedded", "--store", str(store), "read", "a/b", "--follow"],
                            env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    lines = []
    while time.monotonic() < deadline and len(lines) < 2:
        line = proc.stdout.readline()
        if line:
            lines.append(line.strip())
    proc.kill()
    proc.wait()
    assert lines == ["late", "x"]
