"""``pravega-embedded tier2 status | flush``, the global ``--tier2`` / ``--tier2-option`` /
``--no-tier2`` options and the tiered bytes of ``info``, run the way users run them (a
subprocess each): the status of a fresh store, a flush that puts every event in Parquet files
(in the default folder or the one ``--tier2`` names), JSON that parses, a flush that times out
against a tier 2 that cannot take files, and ``--no-tier2`` failing with one clear line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

import pravega_embedded as pe
from pravega_embedded.cli import build_parser as _parser
from pravega_embedded.cli.tier2 import open_options

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


def fails(store: Path, code: int, *args: str) -> str:
    """The command exits ``code`` with one line on stderr (two for argparse's usage errors)."""
    out = cli(store, *args)
    assert out.returncode == code, (args, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    if code == 1:
        assert len(out.stderr.splitlines()) == 1, out.stderr
        assert out.stderr.startswith("pravega-embedded: error: ")
    return out.stderr


def status(store: Path, *options: str) -> dict:
    return json.loads(ok(store, *options, "tier2", "status", "--json").stdout)


def write(store: Path, n: int, start: int = 0, *options: str) -> None:
    lines = "".join(f"event-{i:05d}\n" for i in range(start, start + n))
    ok(store, *options, "write", "iot/sensors", "--key", "k", stdin=lines)


def parquet_rows(folder: Path) -> int:
    return sum(pq.read_metadata(f).num_rows for f in folder.rglob("*.parquet"))


def info(store: Path, *options: str) -> dict:
    return json.loads(ok(store, *options, "info", "iot/sensors", "--json").stdout)


def test_status_of_a_fresh_store(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-scope", "iot")
    text = ok(store, "tier2", "status").stdout
    assert text.splitlines()[0] == f"tier 2 {store / 'tier2'}: ok"
    assert "  tiered: 0 bytes in 0 files (0 bytes of Parquet)" in text
    assert "  untiered: 0 bytes, lag 0.0 s" in text
    assert "  last error: -" in text
    got = status(store)
    assert set(got) == {f.name for f in dataclasses.fields(pe.TieringStatus)}
    assert got["target"] == str(store / "tier2") and got["state"] == "ok"
    assert (got["tiered_bytes"], got["untiered_bytes"], got["files"], got["failures"]) == (0, 0, 0, 0)
    assert got["last_error"] is None and got["local_budget"] is None


def test_flush_puts_every_event_in_tier2_and_status_shows_it(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "iot/sensors", "--segments", "2")
    write(store, 500)
    before = status(store)
    assert before["files"] == 0 and before["untiered_bytes"] > 0  # nothing due yet (age, size)
    out = ok(store, "tier2", "flush", "--timeout", "60").stdout
    assert out.startswith("flushed to tier 2 in ") and f"{before['untiered_bytes']} bytes more" in out
    assert f"tier 2 {store / 'tier2'}: ok" in out and "  untiered: 0 bytes, lag 0.0 s" in out
    after = status(store)
    assert after["files"] > 0 and after["file_bytes"] > 0
    assert after["untiered_bytes"] == 0 and after["tiered_bytes"] == before["untiered_bytes"]
    assert parquet_rows(store / "tier2" / "scope=iot" / "stream=sensors") == 500
    again = ok(store, "tier2", "flush").stdout  # nothing new: no new files
    assert "0 bytes more in 0 more files" in again
    assert status(store)["files"] == after["files"]


def test_info_shows_the_tiered_bytes_past_the_head(tmp_path):
    store = tmp_path / "s"
    ok(store, "create-stream", "iot/sensors")
    write(store, 100)
    first = info(store)
    assert first["tiered_bytes"] == 0 and first["length"] > 0
    assert f"  tiered: 0 of {first['length']} bytes (head to tail) in tier 2" in \
        ok(store, "info", "iot/sensors").stdout
    ok(store, "tier2", "flush")
    flushed = info(store)
    assert flushed["tiered_bytes"] == flushed["length"] == first["length"]
    write(store, 50, 100)  # more data, not tiered yet
    grown = info(store)
    assert grown["tiered_bytes"] == first["length"] < grown["length"]
    text = ok(store, "info", "iot/sensors").stdout
    assert f"  tiered: {first['length']} of {grown['length']} bytes (head to tail) in tier 2" in text
    ok(store, "truncate", "iot/sensors", flushed["tail"])  # the tiered part is truncated away
    cut = info(store)
    assert cut["tiered_bytes"] == 0 and cut["length"] == grown["length"] - first["length"]


def test_tier2_names_another_target(tmp_path):
    store, elsewhere = tmp_path / "s", tmp_path / "lake"
    where = ("--tier2", str(elsewhere))
    ok(store, *where, "create-stream", "iot/sensors")
    write(store, 300, 0, *where)
    ok(store, *where, "tier2", "flush")
    got = status(store, *where)
    assert got["target"] == str(elsewhere) and got["untiered_bytes"] == 0 and got["files"] > 0
    assert parquet_rows(elsewhere) == 300
    assert not (store / "tier2").exists()
    assert info(store, *where)["tiered_bytes"] == got["tiered_bytes"] > 0


def test_flush_timeout_prints_one_line_and_exits_1(tmp_path):
    store, blocker = tmp_path / "s", tmp_path / "not-a-folder"
    blocker.write_text("a file where tier 2's parent folder belongs\n")
    where = ("--tier2", str(blocker / "tier2"))
    ok(store, *where, "create-stream", "iot/sensors")
    write(store, 20, 0, *where)
    untiered = status(store, *where)["untiered_bytes"]
    assert untiered > 0
    err = fails(store, 1, *where, "tier2", "flush", "--timeout", "0.2")
    assert f"tier2 flush: {untiered} bytes are still not in tier 2 ({blocker / 'tier2'}) after 0.2 s" in err
    assert "the last failure: " in err and "Not a directory" in err
    after = status(store, *where)
    assert after["untiered_bytes"] == untiered and after["files"] == 0
    fails(store, 2, "tier2", "flush", "--timeout", "-1")
    fails(store, 2, "tier2", "flush", "--timeout", "soon")


def test_no_tier2_is_a_clear_error(tmp_path):
    store = tmp_path / "s"
    ok(store, "--no-tier2", "create-stream", "iot/sensors")
    for cmd in (("status",), ("status", "--json"), ("flush",)):
        err = fails(store, 1, "--no-tier2", "tier2", *cmd)
        assert f"tier2 {cmd[0]}: --no-tier2 opens the store without tiering" in err
    assert "tier2=False" not in err  # the CLI's words, not the Python API's
    assert "--no-tier2" in fails(store, 1, "--no-tier2", "--tier2-option", "auto_mkdir=true", "list")
    fails(store, 2, "--no-tier2", "--tier2", str(tmp_path / "t2"), "list")
    assert not (store / "tier2").exists()
    assert info(store, "--no-tier2")["tiered_bytes"] == 0


def test_tier2_options_are_json_or_text():
    args = _parser().parse_args([
        "--tier2", "s3://bucket/prefix", "--tier2-option", "anon=true", "--tier2-option", "key=AKIA",
        "--tier2-option", 'client_kwargs={"endpoint_url": "http://127.0.0.1:9000"}',
        "--tier2-option", 'secret="123"', "list"])
    assert open_options(args) == {"tier2": "s3://bucket/prefix", "tier2_options": {
        "anon": True, "key": "AKIA", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"},
        "secret": "123"}}
    assert open_options(_parser().parse_args(["list"])) == {}
    assert open_options(_parser().parse_args(["--no-tier2", "list"])) == {"tier2": False}


def test_a_bad_tier2_option_is_a_usage_error(tmp_path):
    err = fails(tmp_path / "s", 2, "--tier2-option", "no-equals-sign", "list")
    assert "expected KEY=VALUE" in err
