"""The options of format("pravega"), checked where a query is planned: unknown names, missing
ones, bad sizes, cuts of another stream and a tier-2 URL for a stream read fail with the
library's InvalidConfigurationError naming the option (no Spark session needed)."""

from __future__ import annotations

import pytest

from pravega_embedded import errors
from pravega_embedded.spark.options import (DEFAULT_MAX_BYTES_PER_TRIGGER, DEFAULT_MAX_TRIGGER_DELAY,
                                            DEFAULT_TXN_LEASE, parse_duration, parse_read_options,
                                            parse_stream_options, parse_write_options)

BASE = {"path": "/data", "scope": "iot", "stream": "sensors"}


def test_defaults_and_case_insensitive_names():
    r = parse_read_options({**BASE, "MIN_PARTITIONS": "4"})
    assert (r.start, r.end, r.min_partitions, r.tier2) == (None, None, 4, None)
    plain = parse_read_options(BASE)  # the session's parallelism, Spark's 128 MiB per partition
    assert (plain.min_partitions, plain.max_partition_bytes) == (None, 128 << 20)
    assert parse_read_options({**BASE, "max_partition_bytes": "64m"}).max_partition_bytes == 64 << 20
    s = parse_stream_options({**BASE, "Max_Bytes_Per_Trigger": "64m", "max_events_per_trigger": "10"})
    assert (s.start, s.max_bytes, s.max_events) == ("latest", 64 << 20, 10)
    assert parse_stream_options(BASE).max_bytes == DEFAULT_MAX_BYTES_PER_TRIGGER
    assert parse_stream_options({**BASE, "start_stream_cut": "earliest"}).start is None
    assert parse_stream_options({**BASE, "tier2": "false"}).tier2 is False
    assert parse_stream_options({**BASE, "max_bytes_per_trigger": "512K"}).max_bytes == 512 << 10


@pytest.mark.parametrize("options, text", [
    ({"end_stream_cuts": "latest"}, "no option 'end_stream_cuts'"),
    ({"stream": ""}, "needs option 'stream'"),
    ({"start_stream_cut": "pe1:iot/other:0=0"}, "not of iot/sensors"),
    ({"start_stream_cut": "latest"}, "reads nothing"),
    ({"end_stream_cut": "earliest"}, "reads nothing"),
    ({"min_partitions": "x"}, "min_partitions"),
    ({"min_partitions": "0"}, "min_partitions"),
    ({"max_partition_bytes": "0"}, "max_partition_bytes"),
    ({"max_partition_bytes": "lots"}, "max_partition_bytes"),
    ({"storage_options": "[1]"}, "JSON object"),
    ({"scope": "../etc"}, "scope"),
    ({"ending_timestamp": "1764064800000", "end_stream_cut": "latest"}, "not both"),
    ({"starting_timestamp": "1764064800001", "ending_timestamp": "1764064800000"}, "before starting_timestamp"),
    ({"fail_on_data_loss": "false"}, "no option 'fail_on_data_loss'"),
])
def test_bad_read_options(options, text):
    with pytest.raises((errors.InvalidConfigurationError, errors.InvalidStreamCutError,
                        errors.InvalidNameError), match=text):
        parse_read_options({**BASE, **options})


@pytest.mark.parametrize("options, text", [
    ({"min_partitions": "2"}, "no option 'min_partitions'"),
    ({"max_bytes_per_trigger": "64x"}, "max_bytes_per_trigger"),
    ({"max_bytes_per_trigger": "0"}, "max_bytes_per_trigger"),
    ({"max_events_per_trigger": "-1"}, "max_events_per_trigger"),
    ({"path": "s3://bucket/t2"}, "not a tier-2 URL"),
    ({"max_trigger_delay": "5m"}, "give that too"),
    ({"min_events_per_trigger": "10", "max_trigger_delay": "soon"}, "max_trigger_delay"),
    ({"min_events_per_trigger": "10", "max_trigger_delay": "-5s"}, "max_trigger_delay"),
    ({"min_events_per_trigger": "0"}, "min_events_per_trigger"),
    ({"min_events_per_trigger": "10", "max_events_per_trigger": "5"}, "above max_events"),
    ({"fail_on_data_loss": "maybe"}, "fail_on_data_loss"),
    ({"starting_timestamp": "1", "start_stream_cut": "earliest"}, "not both"),
    ({"starting_timestamp": "2026-11-25T10:00:00"}, "no time zone"),
    ({"starting_timestamp": "last tuesday"}, "ISO-8601"),
    ({"starting_timestamp": "--5"}, "ISO-8601"),
    ({"starting_timestamp": "\u00b2"}, "ISO-8601"),
    ({"starting_timestamp": "1764064800"}, "seconds\\? multiply by 1000"),
    ({"starting_timestamp": "99999999999999999"}, "milliseconds since the epoch"),
    ({"starting_timestamp": "-99999999999999"}, "milliseconds since the epoch"),
])
def test_bad_stream_options(options, text):
    with pytest.raises(errors.InvalidConfigurationError, match=text):
        parse_stream_options({**BASE, **options})


def test_time_and_admission_options():
    r = parse_read_options({**BASE, "starting_timestamp": "1764064800000",
                            "ending_timestamp": "2026-11-25T10:00:00.5+01:00"})
    assert r.start_ns == 1764064800000 * 1_000_000  # ms since the epoch, as spark-sql-kafka
    assert parse_read_options({**BASE, "starting_timestamp": "+1764064800000",
                               "start_stream_cut": "  "}).start_ns == r.start_ns
    assert r.end_ns == 1795597200_500_000_000 and r.start is None  # 09:00:00.5Z
    s = parse_stream_options({**BASE, "starting_timestamp": "2026-11-25T10:00:00Z",
                              "min_events_per_trigger": "500", "max_trigger_delay": "90s",
                              "fail_on_data_loss": "False"})
    assert (s.start_ns, s.min_events, s.max_trigger_delay, s.fail_on_data_loss) == \
        (1795600800 * 10**9, 500, 90.0, False)
    assert s.read.fail_on_data_loss is False  # the workers' reads skip too
    d = parse_stream_options({**BASE, "min_events_per_trigger": "5"})
    assert (d.max_trigger_delay, d.fail_on_data_loss) == (DEFAULT_MAX_TRIGGER_DELAY, True)
    assert [parse_duration(t, "x") for t in ("15m", "500ms", "2h", "1d", "7", "0.5s")] == \
        [900.0, 0.5, 7200.0, 86400.0, 7.0, 0.5]


def test_write_options():
    w = parse_write_options({**BASE, "checkpointLocation": "/ckpt"})
    assert (w.exactly_once, w.writer_id, w.txn_lease) == (True, None, DEFAULT_TXN_LEASE)
    w = parse_write_options({**BASE, "Exactly_Once": "FALSE", "writer_id": "etl-1", "txn_lease": "90"})
    assert (w.exactly_once, w.writer_id, w.txn_lease) == (False, "etl-1", 90.0)
    assert w.store.path == "/data" and w.store.scope == "iot"


@pytest.mark.parametrize("options, text", [
    ({"exactly_once": "yes"}, "exactly_once"),
    ({"txn_lease": "0"}, "txn_lease"),
    ({"txn_lease": "1e-300"}, "txn_lease"),
    ({"txn_lease": "nan"}, "txn_lease"),
    ({"txn_lease": "86401"}, "txn_lease"),
    ({"txn_lease": "soon"}, "txn_lease"),
    ({"writer_id": "a/b"}, "writer"),
    ({"path": "s3://bucket/t2"}, "tier-2 URL"),
    ({"start_stream_cut": "earliest"}, "no option 'start_stream_cut'"),
])
def test_bad_write_options(options, text):
    with pytest.raises((errors.InvalidConfigurationError, errors.InvalidNameError), match=text):
        parse_write_options({**BASE, **options})
