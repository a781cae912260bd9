"""examples/spark_sensor_bookmarks.py: the seed-001 sample on a real local Spark session: a
streaming query's micro-batches (StreamCut offsets) bookmark every episode below 0, the
exactly-once sink stores the slices once, and Spark batch reads between each slice's cuts
replay exactly what ``store.read_slice`` reads between them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

import pravega_embedded as pe

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "spark_sensor_bookmarks.py"


def _load():
    spec = importlib.util.spec_from_file_location("spark_sensor_bookmarks", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["spark_sensor_bookmarks"] = mod  # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


def test_bookmarks_made_by_a_streaming_query_replay_every_episode(spark, tmp_path):
    ex = _load()
    sb = ex.sb
    with pe.open(tmp_path / "data", tier2=False) as store:
        truth = sb.write_sensor_data(store)
        slices = ex.bookmark(spark, store, str(tmp_path / "ckpt"), checkpoint_every=400)
        assert slices, "no episode bookmarked"
        stored = ex.read_slices(spark, store)  # written by the sink: each once
        key = lambda sl: json.dumps(sl.to_json(), sort_keys=True)  # noqa: E731
        assert sorted(map(key, stored)) == sorted(map(key, slices))
        reports = ex.replay(spark, store)
        assert len(reports) == len(slices)
        for t in truth:  # every episode lies inside a slice of its sensor
            assert any(r["sensor"] == t["sensor"] and set(t["negative_seqs"]) <= set(r["negative_seqs"])
                       for r in reports), t
        total = sb.NUM_SENSORS * sb.READINGS_PER_SENSOR
        for sl, rep in zip(stored, reports):
            local = sb.replay_slice(store, sl)  # the same cuts read in process
            assert (rep["sensor_readings"], rep["slice_events"]) == \
                (local["sensor_readings"], local["slice_events"])
            assert rep["slice_events"] < total // 2  # a slice, not the stream
