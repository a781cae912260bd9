"""examples/async_ingest.py: a FastAPI ingest app on ``pe.open_async``: POST answers once the
event is durable; GET answers a key's readings in write order; the store closes with the app."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fastapi.testclient import TestClient

import pravega_embedded as pe

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "async_ingest.py"


def _load():
    spec = importlib.util.spec_from_file_location("async_ingest", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["async_ingest"] = mod
    spec.loader.exec_module(mod)
    return mod


ex = _load()


def test_posted_events_are_durable_and_read_back_per_key_in_order(tmp_path):
    path = str(tmp_path / "data")
    with TestClient(ex.create_app(path, tier2=False)) as client:  # durability="fsync"
        answers = [client.post(f"/events/sensor-{i % 3}", content=b"reading %d" % i) for i in range(30)]
        assert all(a.status_code == 200 for a in answers)
        seqs = [a.json()["sequence"] for a in answers]
        assert seqs == list(range(30))
        assert all(a.json()["durable_sequence"] >= a.json()["sequence"] for a in answers)
        assert client.get("/events/sensor-1").json() == [f"reading {i}" for i in range(1, 30, 3)]
        assert client.get("/events/sensor-1", params={"limit": 2}).json() == ["reading 25", "reading 28"]
        assert client.get("/events/nobody").json() == []
    # the app's shutdown closed the store: the events are in the directory, once each
    with pe.open(path) as store:
        got = [ev.event for ev in store.read_slice(ex.SCOPE, ex.STREAM)]
        assert sorted(got) == sorted(b"reading %d" % i for i in range(30))


def test_concurrent_posts_share_the_writer_and_each_is_acknowledged_once(tmp_path):
    path = str(tmp_path / "data")
    with TestClient(ex.create_app(path, tier2=False)) as client:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: client.post("/events/k", content=b"%d" % i), range(64)))
        assert sorted(a.json()["sequence"] for a in answers) == list(range(64))
        got = client.get("/events/k", params={"limit": 1000}).json()
        assert sorted(got, key=int) == [str(i) for i in range(64)] and len(got) == 64


def test_the_script_runs_its_demo(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--store", str(tmp_path / "data")],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert 'GET  /events/sensor-7 -> [\'{"t": 21.5}\', \'{"t": 21.7}\', \'{"t": 22.0}\']' in out.stdout
