"""The PySpark data source "pravega" (pyspark >= 4.2): ``import pravega_embedded.spark``.

Importing it registers the source with the active SparkSession, if there is one; otherwise
call ``register(spark)`` once the session exists. Then::

    spark.read.format("pravega").option("path", "./data").option("scope", "iot")
         .option("stream", "sensors").load()

reads a stream of a store directory (live, in any process: Spark's Python workers connect to
the process that has the store open) or of a tier-2 URL, between two StreamCuts, as about one
Spark partition per core of the session (``partitioning``; docs/spark.md).
"""

from __future__ import annotations

from .source import (PravegaBatchReader, PravegaDataSource, PravegaPushdownReader, PravegaPushdownSource,
                     RangePartition)

__all__ = ["PravegaDataSource", "PravegaPushdownSource", "PravegaBatchReader", "PravegaPushdownReader",
           "RangePartition", "register", "PUSHDOWN_CONF"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: "object | None" = None) -> None:
    """Register ``format("pravega")`` with ``spark`` (default: the active session). Batch reads
    take Spark's filters on segment_id, offset and write_time when the session has
    ``spark.sql.python.filterPushdown.enabled`` true now (option ``filter_pushdown`` decides
    per read), and are planned for the session's default parallelism now (register again
    once a cluster's executors are up, or set ``spark.default.parallelism``; docs/spark.md)."""
    from pyspark.sql import SparkSession

    session = spark if spark is not None else SparkSession.getActiveSession()
    if session is None:
        from ..errors import InvalidConfigurationError
        raise InvalidConfigurationError("no active SparkSession: create one, then call "
                                        "pravega_embedded.spark.register(spark)")
    on = str(session.conf.get(PUSHDOWN_CONF, "false")).strip().lower() == "true"  # type: ignore[attr-defined]
    base = PravegaPushdownSource if on else PravegaDataSource
    # a subclass made here is pickled to Spark's Python workers by value (cloudpickle), with
    # the session's parallelism that plans its reads (partitioning)
    source = type(base.__name__, (base,), {"parallelism": _parallelism(session),
                                            "__module__": base.__module__,
                                            "__qualname__": f"{base.__qualname__}.registered"})
    session.dataSource.register(source)  # type: ignore[attr-defined]


def _parallelism(session: object) -> int | None:
    """The session's default parallelism: ``spark.default.parallelism`` if set, else its
    SparkContext's (the cores: ``local[2]`` gives 2; on a cluster the executors' cores
    registered so far); None where a session does not say (Spark Connect without the
    setting: the planner then takes its own CPUs)."""
    raw = str(session.conf.get("spark.default.parallelism", "") or "").strip()  # type: ignore[attr-defined]
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    try:
        return max(1, int(session.sparkContext.defaultParallelism))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext: no number here
        return None


def _register_active() -> None:
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        register()


_register_active()
