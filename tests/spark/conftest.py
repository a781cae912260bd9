"""A local SparkSession for the Spark source's tests (one per module), with this interpreter
as Spark's Python (its workers import pravega_embedded), and moto's S3 server."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tiering"))

from s3helpers import moto_server  # noqa: E402


@pytest.fixture(scope="session")
def moto_endpoint():
    yield from moto_server()


@pytest.fixture(scope="module")
def spark(request):
    """The module's session: ``local[2]``, or the module's ``SPARK_MASTER`` (``local[2,3]``
    retries a failed task twice, as a cluster does)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        pytest.fail(f"pyspark is not installed ({exc}): pip install -e '.[test]' (pyspark>=4.2)",
                    pytrace=False)
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        pytest.fail("Spark needs Java 17 or later: no `java` on PATH and JAVA_HOME is not set",
                    pytrace=False)
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master(getattr(request.module, "SPARK_MASTER", "local[2]")).appName("pe-spark-source")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               # SparkSession.builder keeps the options of earlier sessions in this process
               # (tests/tiering's sets 1): the source plans by this one
               .config("spark.default.parallelism", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    import pravega_embedded.spark
    pravega_embedded.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
